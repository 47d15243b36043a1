import torch
import torch.nn as nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


class Model(nn.Module):
    """relu(x + y): a pointwise chain."""

    def forward(self, x, y):
        return torch.relu(x + y)


def get_inputs():
    return [torch.randn(8192, 8192), torch.randn(8192, 8192)]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(16, 64), torch.randn(16, 64)]


def get_small_init_inputs():
    return []
