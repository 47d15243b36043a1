import torch
from torch import nn

LEVEL = 1  # one operation
BOUND = "memory"


class L1Loss(nn.Module):
    """nn.L1Loss: mean absolute error over every element."""

    def __init__(self):
        super().__init__()
        self.loss = nn.L1Loss()

    def forward(self, prediction, target):
        return self.loss(prediction, target)


def get_inputs():
    return [torch.randn(4096, 4096), torch.randn(4096, 4096)]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(16, 64), torch.randn(16, 64)]


def get_small_init_inputs():
    return []
