import torch
import torch.nn.functional as F
from torch import nn

LEVEL = 1  # one operation
BOUND = "memory"


class Mish(nn.Module):
    """Mish, as YOLOv4-era code writes it: x * tanh(softplus(x))."""

    def forward(self, x):
        return x * torch.tanh(F.softplus(x))


def get_inputs():
    return [torch.randn(16, 256, 64, 64)]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(2, 4, 8, 8)]


def get_small_init_inputs():
    return []
