import torch
import torch.nn.functional as F
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


class SwiGLUChunk(nn.Module):
    """SwiGLU on a fused gate/up projection split in two halves along the last dimension."""

    def forward(self, x):
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(8, 1024, 2 * 5632)]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(2, 8, 128)]


def get_small_init_inputs():
    return []
