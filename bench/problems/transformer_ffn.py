import torch
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "compute"


class TransformerFFN(nn.Module):
    """The classic transformer feed-forward block: Linear, GELU, Dropout, Linear, Dropout."""

    def __init__(self, dim: int, hidden_dim: int, dropout: float = 0.1):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, hidden_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, dim),
            nn.Dropout(dropout),
        )

    def forward(self, x):
        return self.net(x)


def get_inputs():
    return [torch.randn(8, 512, 768)]


def get_init_inputs():
    return [768, 3072]


def get_small_inputs():
    return [torch.randn(2, 8, 32)]


def get_small_init_inputs():
    return [32, 64]
