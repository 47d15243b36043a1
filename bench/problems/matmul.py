import torch
import torch.nn as nn

LEVEL = 1  # one operation
BOUND = "compute"


class Model(nn.Module):
    """A plain matrix product."""

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(4096, 4096), torch.randn(4096, 4096)]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(32, 32), torch.randn(32, 32)]


def get_small_init_inputs():
    return []
