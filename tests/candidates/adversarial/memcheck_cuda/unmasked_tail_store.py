# A bug generated kernels really have: the load is masked, the store is not. The last block's extra
# lanes (up to 1023 float32) land past the output: in the caching allocator's slack (a 64 MiB output
# rounds up to its 2 MiB segment) or in free memory beside it. Every output compares equal.
import torch
import triton
import triton.language as tl


@triton.jit
def _shifted_relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets, mask=offsets < n_elements, other=0.0)
    tl.store(out_ptr + offsets, tl.maximum(x + 0.5, 0.0))


class ModelNew(torch.nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = out.numel()
        _shifted_relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
        return out
