import torch
from torch import nn

LEVEL = 1  # one operation
BOUND = "memory"


class GemmaRMSNorm(nn.Module):
    """Gemma's RMSNorm: the weight is stored as an offset from one, so it scales by (1 + weight)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x):
        output = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


def get_inputs():
    return [torch.randn(8, 1024, 3072)]


def get_init_inputs():
    return [3072]


def get_small_inputs():
    return [torch.randn(2, 8, 64)]


def get_small_init_inputs():
    return [64]
