import torch
import torch.nn.functional as F
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "compute"


class LinearGELU(nn.Module):
    """A Linear layer with its bias and GELU epilogue (the first half of a ViT/BERT MLP)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.gelu(self.fc(x))


def get_inputs():
    return [torch.randn(8, 1024, 1024)]


def get_init_inputs():
    return [1024, 4096]


def get_small_inputs():
    return [torch.randn(2, 8, 32)]


def get_small_init_inputs():
    return [32, 64]
