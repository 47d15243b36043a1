import torch
import torch.nn.functional as F
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "compute"


class LlamaMLP(nn.Module):
    """Llama's gated MLP: down(silu(gate(x)) * up(x)), three bias-free Linear layers."""

    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def get_inputs():
    return [torch.randn(4, 512, 2048)]


def get_init_inputs():
    return [2048, 5632]


def get_small_inputs():
    return [torch.randn(2, 8, 32)]


def get_small_init_inputs():
    return [32, 64]
