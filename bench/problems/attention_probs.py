import math

import torch
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "compute"


class AttentionProbs(nn.Module):
    """Scaled dot-product attention weights: softmax(q k^T / sqrt(d))."""

    def forward(self, q, k):
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        return torch.softmax(scores, dim=-1)


def get_inputs():
    return [torch.randn(4, 16, 1024, 64), torch.randn(4, 16, 1024, 64)]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16)]


def get_small_init_inputs():
    return []
