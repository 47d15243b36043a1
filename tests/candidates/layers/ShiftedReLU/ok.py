import torch
import triton
import triton.language as tl


@triton.jit
def _shifted_relu_kernel(x_ptr, shift_ptr, out_ptr, n_elements, n_cols, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    shift = tl.load(shift_ptr + offsets % n_cols, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x + shift, 0.0), mask=mask)


class ShiftedReLU(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.shift = torch.nn.Parameter(torch.linspace(-0.5, 0.5, dim))

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _shifted_relu_kernel[(triton.cdiv(n, 1024),)](x, self.shift, out, n, x.shape[-1], BLOCK_SIZE=1024)
        return out
