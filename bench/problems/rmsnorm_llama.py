import torch
from torch import nn

LEVEL = 1  # one operation
BOUND = "memory"


class LlamaRMSNorm(nn.Module):
    """Llama's RMSNorm: computed in float32 whatever the input dtype, cast back before the weight."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size) + 0.1 * torch.randn(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def get_inputs():
    return [torch.randn(8, 1024, 4096)]


def get_init_inputs():
    return [4096]


def get_small_inputs():
    return [torch.randn(2, 8, 64)]


def get_small_init_inputs():
    return [64]
