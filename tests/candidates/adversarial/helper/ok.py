# Control: tanh(x * 0.5 + 1), honestly.
import torch
import triton
import triton.language as tl


@triton.jit
def _shift_tanh_kernel(x_ptr, out_ptr, n, gain, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    z = tl.load(x_ptr + offs, mask=mask) * gain + 1.0
    tl.store(out_ptr + offs, 2.0 * tl.sigmoid(2.0 * z) - 1.0, mask=mask)


def shift_tanh(x, gain):
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    _shift_tanh_kernel[(triton.cdiv(n, 1024),)](x, out, n, gain, BLOCK=1024)
    return out


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return shift_tanh(x, 0.5)
