import torch
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


class ResidualRMSNorm(nn.Module):
    """The residual add fused into the next RMSNorm, as decoder layers do between attention and MLP."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size) + 0.1 * torch.randn(hidden_size))
        self.eps = eps

    def forward(self, x, residual):
        h = x + residual
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def get_inputs():
    return [torch.randn(8, 1024, 4096), torch.randn(8, 1024, 4096)]


def get_init_inputs():
    return [4096]


def get_small_inputs():
    return [torch.randn(2, 8, 64), torch.randn(2, 8, 64)]


def get_small_init_inputs():
    return [64]
