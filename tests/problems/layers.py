"""Model code as people write it: no get_inputs, constructor arguments by name."""

import torch
import torch.nn as tnn
from torch.nn import Module as Base


class RMSNorm(tnn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = tnn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class GatedMLP(Base):
    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.up = tnn.Linear(hidden_size, 2 * intermediate_size, bias=False)
        self.down = tnn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x):
        a, b = self.up(x).chunk(2, dim=-1)
        return self.down(torch.nn.functional.silu(a) * b)


class Block(GatedMLP):
    """A subclass of another module class in the same file."""


class NeedsConfig(tnn.Module):
    """Cannot be guessed: the constructor wants an object."""

    def __init__(self, config):
        super().__init__()
        self.proj = tnn.Linear(config.hidden, config.hidden)

    def forward(self, x):
        return self.proj(x)


def helper(x):
    return x
