import torch
from torch import nn

LEVEL = 1  # one operation
BOUND = "memory"


class AvgPool2d(nn.Module):
    """2x2 average pooling, stride 2 (DenseNet's transition layers, U-Net downsampling)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(32, 256, 56, 56)]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(2, 4, 8, 8)]


def get_small_init_inputs():
    return []
