import torch
from torch import nn

LEVEL = 1  # one operation
BOUND = "memory"


class BertLayerNorm(nn.Module):
    """LayerNorm written out, TensorFlow style (epsilon inside the square root), as early BERT ports do."""

    def __init__(self, hidden_size: int, eps: float = 1e-12):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size) + 0.1 * torch.randn(hidden_size))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.variance_epsilon)
        return self.weight * x + self.bias


def get_inputs():
    return [torch.randn(16, 512, 1024)]


def get_init_inputs():
    return [1024]


def get_small_inputs():
    return [torch.randn(2, 8, 64)]


def get_small_init_inputs():
    return [64]
