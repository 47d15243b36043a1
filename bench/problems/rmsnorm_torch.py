import torch
from torch import nn

LEVEL = 1  # one operation
BOUND = "memory"


class TorchRMSNorm(nn.Module):
    """nn.RMSNorm (PyTorch 2.4+) over the hidden size."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.norm = nn.RMSNorm(hidden_size, eps=eps)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(hidden_size))

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(8, 1024, 4096)]


def get_init_inputs():
    return [4096]


def get_small_inputs():
    return [torch.randn(2, 8, 64)]


def get_small_init_inputs():
    return [64]
