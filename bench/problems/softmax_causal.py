import torch
import torch.nn.functional as F
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


class CausalSoftmax(nn.Module):
    """nanoGPT's causal masking: a lower-triangular buffer sliced to the sequence, -inf above it."""

    def __init__(self, block_size: int):
        super().__init__()
        self.register_buffer(
            "bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size)
        )

    def forward(self, att):
        T = att.size(-1)
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        return F.softmax(att, dim=-1)


def get_inputs():
    return [torch.randn(8, 12, 1024, 1024)]


def get_init_inputs():
    return [1024]


def get_small_inputs():
    return [torch.randn(2, 2, 16, 16)]


def get_small_init_inputs():
    return [16]
