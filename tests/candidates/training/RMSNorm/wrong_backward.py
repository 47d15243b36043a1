# Right on every forward; its fused Triton backward drops the term that comes from the row's
# rstd depending on x (d_x = w * d_out * rstd only), so the input gradient is wrong while the
# weight gradient is right. Training with it would quietly mis-train everything before the layer.
import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_fwd_kernel(x_ptr, w_ptr, out_ptr, rstd_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(rstd_ptr + row, rstd)
    tl.store(out_ptr + row * n_cols + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_norm_bwd_kernel(x_ptr, w_ptr, rstd_ptr, d_out_ptr, d_x_ptr, d_w_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    d_out = tl.load(d_out_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    d_x = d_out * w * rstd  # missing: - x * rstd^3 * mean(d_out * w * x)
    tl.store(d_x_ptr + row * n_cols + cols, d_x.to(d_x_ptr.dtype.element_ty), mask=mask)
    tl.store(d_w_ptr + row * n_cols + cols, d_out * x * rstd, mask=mask)


class _RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        n_cols = x.shape[-1]
        x_2d = x.reshape(-1, n_cols).contiguous()
        out = torch.empty_like(x_2d)
        rstd = torch.empty(x_2d.shape[0], dtype=torch.float32, device=x.device)
        block = triton.next_power_of_2(n_cols)
        _rms_norm_fwd_kernel[(x_2d.shape[0],)](x_2d, weight, out, rstd, n_cols, eps, BLOCK_SIZE=block)
        ctx.save_for_backward(x_2d, weight, rstd)
        return out.reshape(x.shape)

    @staticmethod
    def backward(ctx, d_out):
        x_2d, weight, rstd = ctx.saved_tensors
        n_rows, n_cols = x_2d.shape
        d_out_2d = d_out.reshape(n_rows, n_cols).contiguous()
        d_x = torch.empty_like(x_2d)
        d_w = torch.empty((n_rows, n_cols), dtype=torch.float32, device=x_2d.device)
        block = triton.next_power_of_2(n_cols)
        _rms_norm_bwd_kernel[(n_rows,)](x_2d, weight, rstd, d_out_2d, d_x, d_w, n_cols, BLOCK_SIZE=block)
        return d_x.reshape(d_out.shape), d_w.sum(0).to(weight.dtype), None


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return _RMSNormFunction.apply(x, self.weight, self.eps)
