# Normalize corpus: older (torch 2.1-style) Inductor output for exact GELU (libdevice.erf):
# `from torch import device, empty_strided`, `device(type='cuda', index=0)` buffers and the
# old `torch._inductor.triton_heuristics` module path.
# original: GeluErf
# inputs: torch.randn(4, 32)
# expect: ok
# --- original ---
# import torch
# from torch import nn
#
#
# class GeluErf(nn.Module):
#     def forward(self, x):
#         return nn.functional.gelu(x)
# --- end ---
import torch
from torch import device, empty_strided
from torch._inductor.triton_heuristics import grid
from torch._inductor.runtime.triton_helpers import libdevice
import triton
import triton.language as tl
from torch import nn


@triton.jit
def triton_poi_fused_gelu_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xnumel = 128
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0), xmask)
    tmp1 = 0.5
    tmp2 = tmp0 * tmp1
    tmp3 = 0.7071067811865476
    tmp4 = tmp0 * tmp3
    tmp5 = libdevice.erf(tmp4)
    tmp6 = 1.0
    tmp7 = tmp5 + tmp6
    tmp8 = tmp2 * tmp7
    tl.store(out_ptr0 + (x0), tmp8, xmask)


def call(args):
    arg0_1, = args
    args.clear()
    buf0 = empty_strided((4, 32), (32, 1), device=device(type='cuda', index=0), dtype=torch.float32)
    triton_poi_fused_gelu_0[grid(128)](arg0_1, buf0, 128, XBLOCK=64, num_warps=2, num_stages=1)
    del arg0_1
    return (buf0, )


class ModelNew(nn.Module):
    def forward(self, input_0):
        output = call([input_0])
        return output[0]
