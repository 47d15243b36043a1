import torch
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "compute"


class ConvBiasReLU(nn.Module):
    """A 3x3 convolution, a per-channel bias added after it, then ReLU (a conv with its epilogue)."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)

    def forward(self, x):
        return torch.relu(self.conv(x) + self.bias)


def get_inputs():
    return [torch.randn(32, 64, 64, 64)]


def get_init_inputs():
    return [64, 128]


def get_small_inputs():
    return [torch.randn(2, 4, 8, 8)]


def get_small_init_inputs():
    return [4, 8]
