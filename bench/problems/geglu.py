import torch
import torch.nn.functional as F
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


class GeGLU(nn.Module):
    """GeGLU on separate gate and up projections, with the tanh GELU (Gemma's MLP)."""

    def forward(self, gate, up):
        return F.gelu(gate, approximate="tanh") * up


def get_inputs():
    return [torch.randn(8, 1024, 8192), torch.randn(8, 1024, 8192)]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(2, 8, 64), torch.randn(2, 8, 64)]


def get_small_init_inputs():
    return []
