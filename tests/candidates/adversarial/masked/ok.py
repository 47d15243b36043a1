# Control: the same -inf pattern as the original, so it is compared on every family, not skipped.
import torch
import triton
import triton.language as tl


@triton.jit
def _mask_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = offs < n
    x = tl.load(x_ptr + offs, mask=valid)
    tl.store(out_ptr + offs, tl.where(x < 0, float("-inf"), x), mask=valid)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _mask_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
