import torch
from torch import nn

LEVEL = 1  # one operation
BOUND = "memory"


class MaxPoolStem(nn.Module):
    """ResNet's stem pooling: 3x3 max pooling, stride 2, padding 1."""

    def __init__(self):
        super().__init__()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        return self.maxpool(x)


def get_inputs():
    return [torch.randn(32, 64, 112, 112)]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(2, 4, 8, 8)]


def get_small_init_inputs():
    return []
