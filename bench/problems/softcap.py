import torch
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


class LogitSoftCap(nn.Module):
    """Gemma 2's logit soft-capping: cap * tanh(logits / cap), bounding logits smoothly."""

    def __init__(self, cap: float = 30.0):
        super().__init__()
        self.cap = cap

    def forward(self, logits):
        return torch.tanh(logits / self.cap) * self.cap


def get_inputs():
    return [torch.randn(1024, 32000)]


def get_init_inputs():
    return [30.0]


def get_small_inputs():
    return [torch.randn(16, 100)]


def get_small_init_inputs():
    return [30.0]
