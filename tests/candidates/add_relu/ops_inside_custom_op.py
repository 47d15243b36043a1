# Hides the original's PyTorch ops from the op recorder: it launches a kernel and throws its output
# away, then computes the answer with torch.relu(x + y) inside a custom op, which a recorder that
# only sees the ops dispatched at the top would count as one opaque op of its own.
import torch
import triton
import triton.language as tl
from torch import library


@triton.jit
def _copy_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


@library.custom_op("adversarial::add_relu_hidden", mutates_args=())
def add_relu(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    scratch = torch.empty_like(x, memory_format=torch.contiguous_format)
    n = scratch.numel()
    _copy_kernel[(triton.cdiv(n, 1024),)](x.contiguous(), scratch, n, BLOCK_SIZE=1024)
    return torch.relu(x + y)


@add_relu.register_fake
def _add_relu_fake(x, y):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return add_relu(x, y)
