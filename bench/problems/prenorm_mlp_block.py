import torch
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "compute"


class PreNormMLPBlock(nn.Module):
    """The MLP half of a pre-norm transformer block: x + fc2(gelu(fc1(layer_norm(x))))."""

    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


def get_inputs():
    return [torch.randn(16, 197, 768)]


def get_init_inputs():
    return [768, 3072]


def get_small_inputs():
    return [torch.randn(2, 9, 32)]


def get_small_init_inputs():
    return [32, 64]
