import torch
import torch.nn.functional as F
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


class SwiGLU(nn.Module):
    """SwiGLU on separate gate and up projections: silu(gate) * up (Llama's MLP between its matmuls)."""

    def forward(self, gate, up):
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(8, 1024, 11008), torch.randn(8, 1024, 11008)]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(2, 8, 64), torch.randn(2, 8, 64)]


def get_small_init_inputs():
    return []
