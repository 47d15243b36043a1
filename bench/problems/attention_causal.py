import torch
import torch.nn.functional as F
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "compute"


class CausalAttention(nn.Module):
    """The attention core of a decoder layer: causal scaled_dot_product_attention over q, k, v."""

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    return [torch.randn(4, 16, 1024, 64), torch.randn(4, 16, 1024, 64), torch.randn(4, 16, 1024, 64)]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16)]


def get_small_init_inputs():
    return []
