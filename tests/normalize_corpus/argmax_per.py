# Normalize corpus: a persistent argmax reduction with triton_helpers.max_with_index
# (becomes a local @triton.jit copy of Inductor's helper); the output buffer is int64.
# original: RowArgmax
# inputs: torch.randn(8, 16)
# expect: ok
# --- original ---
# import torch
# from torch import nn
#
#
# class RowArgmax(nn.Module):
#     def forward(self, x):
#         return torch.argmax(x, dim=-1)
# --- end ---
import torch
import triton
import triton.language as tl
from torch._inductor.runtime.triton_heuristics import grid
from torch._C import _cuda_getCurrentRawStream as get_raw_stream
from torch._inductor.runtime import triton_helpers
import torch.nn as nn
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda


@triton.jit
def triton_per_fused_argmax_0(in_ptr0, out_ptr0, xnumel, rnumel, XBLOCK: tl.constexpr):
    xnumel = 8
    RBLOCK: tl.constexpr = 16
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    rindex = tl.arange(0, RBLOCK)[None, :]
    tl.full([XBLOCK, RBLOCK], True, tl.int1)
    r1 = rindex
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r1 + 16 * x0), xmask, other=0.0)
    tmp1 = tl.broadcast_to(tmp0, [XBLOCK, RBLOCK])
    tmp3 = tl.where(xmask, tmp1, float('-inf'))
    tmp4 = tl.broadcast_to(rindex, tmp3.shape)
    tmp2_val, tmp2_idx = triton_helpers.max_with_index(tmp3, tmp4, 1)
    tmp2 = tmp2_idx[:, None]
    tl.store(out_ptr0 + x0, tmp2, xmask)


def call(args):
    arg0_1, = args
    args.clear()
    assert_size_stride(arg0_1, (8, 16), (16, 1))
    with torch.cuda._DeviceGuard(0):
        torch.cuda.set_device(0)
        buf0 = empty_strided_cuda((8,), (1,), torch.int64)
        get_raw_stream(0)
        triton_per_fused_argmax_0[grid(8)](arg0_1, buf0, 8, 16, XBLOCK=2,
            num_warps=2, num_stages=1)
        del arg0_1
    return buf0,


class ModelNew(nn.Module):

    def forward(self, input_0):
        arg0_1 = input_0
        output = call([arg0_1])
        return output[0]
