# Normalize corpus: a persistent-reduction LayerNorm with weight and bias (tl.sum mean and
# variance, libdevice.rsqrt); the rstd buffer is a reinterpret_tensor view, as Inductor writes it.
# original: LayerNorm
# init: 32
# inputs: torch.randn(4, 32)
# expect: ok
# --- original ---
# import torch
# from torch import nn
#
#
# class LayerNorm(nn.Module):
#     def __init__(self, dim, eps=1e-5):
#         super().__init__()
#         self.eps = eps
#         self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))
#         self.bias = nn.Parameter(0.1 * torch.randn(dim))
#
#     def forward(self, x):
#         return nn.functional.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
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
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor


@triton.jit
def triton_per_fused_native_layer_norm_0(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, out_ptr0,
    out_ptr1, xnumel, rnumel, XBLOCK: tl.constexpr):
    xnumel = 4
    RBLOCK: tl.constexpr = 32
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    rindex = tl.arange(0, RBLOCK)[None, :]
    tl.full([XBLOCK, RBLOCK], True, tl.int1)
    r1 = rindex
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r1 + 32 * x0), xmask, other=0.0)
    tmp24 = tl.load(in_ptr1 + r1, None, eviction_policy='evict_last')
    tmp26 = tl.load(in_ptr2 + r1, None, eviction_policy='evict_last')
    tmp1 = tl.broadcast_to(tmp0, [XBLOCK, RBLOCK])
    tmp4 = tl.broadcast_to(tmp1, [XBLOCK, RBLOCK])
    tmp6 = tl.where(xmask, tmp4, 0)
    tmp7 = tl.sum(tmp6, 1)[:, None]
    tmp8 = tl.full([XBLOCK, 1], 32, tl.int32)
    tmp9 = tmp8.to(tl.float32)
    tmp10 = tmp7 / tmp9
    tmp11 = tmp1 - tmp10
    tmp12 = tmp11 * tmp11
    tmp13 = tl.broadcast_to(tmp12, [XBLOCK, RBLOCK])
    tmp15 = tl.where(xmask, tmp13, 0)
    tmp16 = tl.sum(tmp15, 1)[:, None]
    tmp17 = tmp0 - tmp10
    tmp18 = 32.0
    tmp19 = tmp16 / tmp18
    tmp20 = 1e-05
    tmp21 = tmp19 + tmp20
    tmp22 = libdevice.rsqrt(tmp21)
    tmp23 = tmp17 * tmp22
    tmp25 = tmp23 * tmp24
    tmp27 = tmp25 + tmp26
    tl.debug_barrier()
    tl.store(in_out_ptr0 + x0, tmp22, xmask)
    tl.store(out_ptr1 + (r1 + 32 * x0), tmp27, xmask)
    tl.store(out_ptr0 + x0, tmp10, xmask)


def call(args):
    primals_1, primals_2, primals_3 = args
    args.clear()
    assert_size_stride(primals_1, (32,), (1,))
    assert_size_stride(primals_2, (32,), (1,))
    assert_size_stride(primals_3, (4, 32), (32, 1))
    with torch.cuda._DeviceGuard(0):
        torch.cuda.set_device(0)
        buf0 = empty_strided_cuda((4, 1), (1, 1), torch.float32)
        buf1 = empty_strided_cuda((4, 1), (1, 4), torch.float32)
        buf3 = reinterpret_tensor(buf1, (4, 1), (1, 1), 0)
        del buf1
        buf4 = empty_strided_cuda((4, 32), (32, 1), torch.float32)
        get_raw_stream(0)
        triton_per_fused_native_layer_norm_0[grid(4)](buf3, primals_3,
            primals_1, primals_2, buf0, buf4, 4, 32, XBLOCK=1, num_warps=2,
            num_stages=1)
        del primals_1
        del primals_2
    return buf4, primals_3, buf0, buf3


class ModelNew(nn.Module):

    def __init__(self, dim, eps=1e-5):
        super(ModelNew, self).__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, input_0):
        primals_1 = self.weight
        primals_2 = self.bias
        primals_3 = input_0
        output = call([primals_1, primals_2, primals_3])
        return output[0]
