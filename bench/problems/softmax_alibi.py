import math

import torch
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The ALiBi paper's geometric slopes, for a power-of-two head count."""
    start = 2 ** (-(2 ** -(math.log2(num_heads) - 3)))
    return torch.tensor([start ** (i + 1) for i in range(num_heads)])


class ALiBiSoftmax(nn.Module):
    """ALiBi attention: a per-head linear penalty on the key distance added to the scores, then softmax."""

    def __init__(self, num_heads: int):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(num_heads).view(num_heads, 1, 1))

    def forward(self, scores):
        T = scores.size(-1)
        pos = torch.arange(T, device=scores.device)
        distance = (pos[None, :] - pos[:, None]).abs().to(scores.dtype)
        return torch.softmax(scores - self.slopes * distance, dim=-1)


def get_inputs():
    return [torch.randn(4, 16, 1024, 1024)]


def get_init_inputs():
    return [16]


def get_small_inputs():
    return [torch.randn(2, 4, 8, 8)]


def get_small_init_inputs():
    return [4]
