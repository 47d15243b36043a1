# Scale (x * 2), registered as the custom op kernelize::pointwise: right on its own; beside a
# suggestion that registers the same op name, the later registration replaces the earlier.
import torch
import triton
import triton.language as tl
from torch import library


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * 2.0, mask=mask)


@library.custom_op("kernelize::pointwise", mutates_args=())
def scale(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    _scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out


@scale.register_fake
def _scale_fake(x):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return scale(x)
