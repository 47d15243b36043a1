# A bug generated kernels really have: the store's mask is off by one (``<=``), so the last block
# writes one element past the end of the output, into the allocator's slack. Every element of the
# output itself is right.
import torch
import triton
import triton.language as tl


@triton.jit
def _add_relu_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = tl.load(y_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, tl.maximum(x + y, 0.0), mask=offsets <= n_elements)


def add_relu(x, y):
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = out.numel()
    _add_relu_kernel[(triton.cdiv(n + 1, 1024),)](x, y, out, n, BLOCK_SIZE=1024)
    return out


class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return add_relu(x, y)
