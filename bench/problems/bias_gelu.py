import torch
import torch.nn.functional as F
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


class BiasGELU(nn.Module):
    """The bias add split off a Linear (Megatron's bias_gelu), fused with the tanh GELU after it."""

    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(0.1 * torch.randn(features))

    def forward(self, x):
        return F.gelu(x + self.bias, approximate="tanh")


def get_inputs():
    return [torch.randn(8, 1024, 4096)]


def get_init_inputs():
    return [4096]


def get_small_inputs():
    return [torch.randn(2, 8, 64)]


def get_small_init_inputs():
    return [64]
