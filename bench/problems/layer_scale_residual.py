import torch
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


class LayerScaleResidual(nn.Module):
    """ConvNeXt/CaiT LayerScale on a residual branch: x + gamma * branch, gamma a learned vector."""

    def __init__(self, dim: int, init_value: float = 1e-1):
        super().__init__()
        self.gamma = nn.Parameter(init_value * torch.ones(dim) + 0.01 * torch.randn(dim))

    def forward(self, x, branch):
        return x + self.gamma * branch


def get_inputs():
    return [torch.randn(64, 197, 768), torch.randn(64, 197, 768)]


def get_init_inputs():
    return [768]


def get_small_inputs():
    return [torch.randn(2, 9, 64), torch.randn(2, 9, 64)]


def get_small_init_inputs():
    return [64]
