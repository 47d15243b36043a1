"""A module whose forward leans on a helper method, a class attribute and a name of its own file."""

import torch
import torch.nn as nn

LIMIT = 4.0


class ScaledTanh(nn.Module):
    offset = 0.5

    def __init__(self, features: int, scale: float = 2.0):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.linspace(-1, 1, features))

    def _shift(self, x):
        return x + self.bias + self.offset

    def forward(self, x, *, clamp: bool = True):
        y = torch.tanh(self._shift(x)) * self.scale
        return y.clamp(-LIMIT, LIMIT) if clamp else y


def get_init_inputs():
    return [96, 1.5]


def get_inputs():
    return [torch.randn(8, 96)]
