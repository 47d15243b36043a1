import torch
import torch.nn as nn

LEVEL = 1  # one operation
BOUND = "memory"


class RMSNorm(nn.Module):
    """RMSNorm over the hidden size of a (batch, seq, hidden) activation."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def get_inputs():
    return [torch.randn(16, 2048, 4096)]


def get_init_inputs():
    return [4096]


def get_small_inputs():
    return [torch.randn(2, 8, 64)]


def get_small_init_inputs():
    return [64]
