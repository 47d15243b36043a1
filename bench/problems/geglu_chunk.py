import torch
import torch.nn.functional as F
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


class GeGLUChunk(nn.Module):
    """Diffusers' GEGLU after its projection: the last dimension split into value and gate halves."""

    def forward(self, hidden_states):
        hidden_states, gate = hidden_states.chunk(2, dim=-1)
        return hidden_states * F.gelu(gate)


def get_inputs():
    return [torch.randn(4, 4096, 2 * 2560)]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(2, 8, 128)]


def get_small_init_inputs():
    return []
