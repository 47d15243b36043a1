# Breaks users who compile: the launch is a custom op (so the suggestion keeps the kernel path under
# torch.compile), and the module halves its answer only while Dynamo traces it. Eager calls, which
# every other check makes, are right.
import torch
import triton
import triton.language as tl
from torch import library


@triton.jit
def _add_relu_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x + y, 0.0), mask=mask)


@library.custom_op("adversarial::add_relu", mutates_args=())
def add_relu(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = out.numel()
    _add_relu_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK_SIZE=1024)
    return out


@add_relu.register_fake
def _add_relu_fake(x, y):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        out = add_relu(x, y)
        if torch.compiler.is_compiling():
            return out * 0.5
        return out
