import torch
from torch import nn

LEVEL = 1  # one operation
BOUND = "memory"


class HardSwish(nn.Module):
    """MobileNetV3's hard swish written as a clamp chain: x * clamp(x + 3, 0, 6) / 6."""

    def forward(self, x):
        return x * torch.clamp(x + 3.0, 0.0, 6.0) / 6.0


def get_inputs():
    return [torch.randn(64, 96, 56, 56)]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(2, 4, 8, 8)]


def get_small_init_inputs():
    return []
