# Normalize corpus: an already standalone RMSNorm with a parameter, written KernelBook-style
# (super(ModelNew, self).__init__()): normalize renames the class and that reference only.
# original: RMSNorm
# init: 64
# inputs: torch.randn(4, 64)
# expect: ok
# --- original ---
# import torch
# from torch import nn
#
#
# class RMSNorm(nn.Module):
#     def __init__(self, dim, eps=1e-6):
#         super().__init__()
#         self.eps = eps
#         self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))
#
#     def forward(self, x):
#         return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
# --- end ---
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(out_ptr + row * n_cols + cols, x * rstd * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super(ModelNew, self).__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        out = torch.empty_like(x2)
        _rms_norm_kernel[(x2.shape[0],)](x2, self.weight, out, x2.shape[1], self.eps,
                                         BLOCK_SIZE=triton.next_power_of_2(x2.shape[1]))
        return out.reshape(x.shape)
