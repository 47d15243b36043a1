# Normalize corpus: torch.pow with a tensor exponent compiles to libdevice.pow, which
# triton.language lacks (tl.extra.cuda.libdevice.pow would not run on the CPU interpreter
# nor on non-NVIDIA GPUs), so normalize rejects it, naming the function and line.
# original: PowTensor
# inputs: torch.rand(4, 4) + 0.5, torch.randn(4, 4)
# expect: rejected: libdevice.pow
# --- original ---
# import torch
# from torch import nn
#
#
# class PowTensor(nn.Module):
#     def forward(self, x, y):
#         return torch.pow(x, y)
# --- end ---
import torch
import triton
import triton.language as tl
from torch._inductor.runtime.triton_heuristics import grid
from torch._C import _cuda_getCurrentRawStream as get_raw_stream
from torch._inductor.runtime.triton_helpers import libdevice
import torch.nn as nn
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda


@triton.jit
def triton_poi_fused_pow_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xnumel = 16
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + x0, xmask)
    tmp1 = tl.load(in_ptr1 + x0, xmask)
    tmp2 = libdevice.pow(tmp0, tmp1)
    tl.store(out_ptr0 + x0, tmp2, xmask)


def call(args):
    arg0_1, arg1_1 = args
    args.clear()
    assert_size_stride(arg0_1, (4, 4), (4, 1))
    assert_size_stride(arg1_1, (4, 4), (4, 1))
    with torch.cuda._DeviceGuard(0):
        torch.cuda.set_device(0)
        buf0 = empty_strided_cuda((4, 4), (4, 1), torch.float32)
        get_raw_stream(0)
        triton_poi_fused_pow_0[grid(16)](arg0_1, arg1_1, buf0, 16, XBLOCK=16,
            num_warps=1, num_stages=1)
        del arg0_1
        del arg1_1
    return buf0,


class ModelNew(nn.Module):

    def forward(self, input_0, input_1):
        output = call([input_0, input_1])
        return output[0]
