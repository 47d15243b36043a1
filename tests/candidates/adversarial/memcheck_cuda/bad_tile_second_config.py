# tail_store_by_tile.py's bug in one of two autotuned configs, not the first: the tile of 128 writes
# up to 127 float32 past the output (into its own slack: every output compares equal), the tile of 1
# writes nothing past it. The memory check sees each config once, while Triton's autotuner tries them
# all (runners/tuning.py), so it catches the bad one whichever config the autotuner keeps.
import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"TILE": 1}), triton.Config({"TILE": 128})],
    key=["n_elements"],
)
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
        _shifted_relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
        return out
