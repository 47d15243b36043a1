# Right on every forward; its own _shift carries a hand-written backward that doubles the
# gradient. Training with it would take steps twice too large for everything before the layer.
import torch
import triton
import triton.language as tl


@triton.jit
def _scaled_tanh_kernel(x_ptr, bias_ptr, out_ptr, n_cols, n, scale, limit, BLOCK: tl.constexpr, CLAMP: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    b = tl.load(bias_ptr + offs % n_cols, mask=mask)
    z = x + b + 0.5
    y = (2.0 * tl.sigmoid(2.0 * z) - 1.0) * scale
    if CLAMP:
        y = tl.minimum(tl.maximum(y, -limit), limit)
    tl.store(out_ptr + offs, y, mask=mask)


class _Shift(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, offset):
        return x + bias + offset

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad, grad.sum(0), None


class ModelNew(torch.nn.Module):
    def __init__(self, n_features, s=2.0):
        super().__init__()
        self.scale = s
        self.bias = torch.nn.Parameter(torch.linspace(-1, 1, n_features))

    def forward(self, x, *, clamp=True):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        _scaled_tanh_kernel[grid](x, self.bias, out, x.shape[-1], n, self.scale, 4.0, BLOCK=1024, CLAMP=clamp)
        return out

    def _shift(self, x):
        return _Shift.apply(x, self.bias, self.offset)
