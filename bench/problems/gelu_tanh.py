import math

import torch
from torch import nn

LEVEL = 1  # one operation
BOUND = "memory"


class NewGELU(nn.Module):
    """GPT-2's GELU, the tanh approximation written out (as in nanoGPT and Hugging Face's NewGELU)."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def get_inputs():
    return [torch.randn(8, 1024, 3072)]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(2, 8, 64)]


def get_small_init_inputs():
    return []
