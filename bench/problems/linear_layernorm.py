import torch
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "compute"


class LinearLayerNorm(nn.Module):
    """A projection followed by LayerNorm (a norm after a GEMM, as BERT's output layers do)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.dense = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features)

    def forward(self, x):
        return self.norm(self.dense(x))


def get_inputs():
    return [torch.randn(8, 1024, 1024)]


def get_init_inputs():
    return [1024, 1024]


def get_small_inputs():
    return [torch.randn(2, 8, 32)]


def get_small_init_inputs():
    return [32, 32]
