# Normalize corpus: Linear + tanh: the affine part through extern_kernels.addmm (bias folded in,
# weight as a reinterpret_tensor view), then an in-place Triton tanh (libdevice.tanh).
# original: LinearTanh
# init: 32, 16
# inputs: torch.randn(4, 32)
# expect: ok
# --- original ---
# import torch
# from torch import nn
#
#
# class LinearTanh(nn.Module):
#     def __init__(self, in_features, out_features):
#         super().__init__()
#         self.fc = nn.Linear(in_features, out_features)
#
#     def forward(self, x):
#         return torch.tanh(self.fc(x))
# --- end ---
import torch
from torch._inductor.select_algorithm import extern_kernels
import triton
import triton.language as tl
from torch._inductor.runtime.triton_heuristics import grid
from torch._C import _cuda_getCurrentRawStream as get_raw_stream
from torch._inductor.runtime.triton_helpers import libdevice
import torch.nn as nn
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor


@triton.jit
def triton_poi_fused_tanh_0(in_out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xnumel = 64
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex
    tmp0 = tl.load(in_out_ptr0 + x0, xmask)
    tmp1 = libdevice.tanh(tmp0)
    tl.store(in_out_ptr0 + x0, tmp1, xmask)


def call(args):
    primals_1, primals_2, primals_3 = args
    args.clear()
    assert_size_stride(primals_1, (16, 32), (32, 1))
    assert_size_stride(primals_2, (16,), (1,))
    assert_size_stride(primals_3, (4, 32), (32, 1))
    with torch.cuda._DeviceGuard(0):
        torch.cuda.set_device(0)
        buf0 = empty_strided_cuda((4, 16), (16, 1), torch.float32)
        extern_kernels.addmm(primals_2, primals_3, reinterpret_tensor(
            primals_1, (32, 16), (1, 32), 0), alpha=1, beta=1, out=buf0)
        del primals_1
        del primals_2
        buf1 = buf0
        del buf0
        get_raw_stream(0)
        triton_poi_fused_tanh_0[grid(64)](buf1, 64, XBLOCK=64, num_warps=1,
            num_stages=1)
    return buf1, primals_3


class ModelNew(nn.Module):

    def __init__(self, in_features, out_features):
        super(ModelNew, self).__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, input_0):
        primals_1 = self.fc.weight
        primals_2 = self.fc.bias
        primals_3 = input_0
        output = call([primals_1, primals_2, primals_3])
        return output[0]
