import torch
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


class LeakyReLUClamp(nn.Module):
    """A where/clamp chain: leaky ReLU written with torch.where, then bounded (quantization-friendly)."""

    def __init__(self, negative_slope: float = 0.01, bound: float = 6.0):
        super().__init__()
        self.negative_slope = negative_slope
        self.bound = bound

    def forward(self, x):
        y = torch.where(x > 0, x, x * self.negative_slope)
        return y.clamp(min=-self.bound, max=self.bound)


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return [0.01, 2.0]


def get_small_inputs():
    return [torch.randn(16, 64)]


def get_small_init_inputs():
    return [0.01, 2.0]
