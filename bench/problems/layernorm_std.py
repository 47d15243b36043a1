import torch
from torch import nn

LEVEL = 1  # one operation
BOUND = "memory"


class AnnotatedLayerNorm(nn.Module):
    """The Annotated Transformer's LayerNorm: divides by the (unbiased) standard deviation plus eps."""

    def __init__(self, features: int, eps: float = 1e-6):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features) + 0.1 * torch.randn(features))
        self.b_2 = nn.Parameter(0.1 * torch.randn(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


def get_inputs():
    return [torch.randn(32, 512, 512)]


def get_init_inputs():
    return [512]


def get_small_inputs():
    return [torch.randn(2, 8, 64)]


def get_small_init_inputs():
    return [64]
