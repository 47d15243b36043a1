# A bug generated kernels really have: the store is masked by tile, not by element, so the last,
# partial tile of 128 is written whole, up to 127 float32 past the end of the output. 128 float32
# are 512 bytes, the caching allocator's rounding: those lanes land in the output's own slack,
# nothing else is overwritten, and every output compares equal.
import torch
import triton
import triton.language as tl


@triton.jit
def _shifted_relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets, mask=offsets < n_elements, other=0.0)
    tile_start = offsets // TILE * TILE
    tl.store(out_ptr + offsets, tl.maximum(x + 0.5, 0.0), mask=tile_start < n_elements)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = out.numel()
        _shifted_relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024, TILE=128)
        return out
