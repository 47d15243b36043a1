import torch
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


class PostNormResidual(nn.Module):
    """BERT's post-norm residual: LayerNorm(residual + dropout(x)); dropout is the identity in eval."""

    def __init__(self, hidden_size: int, dropout: float = 0.1, eps: float = 1e-12):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=eps)
        with torch.no_grad():
            self.LayerNorm.weight.add_(0.1 * torch.randn(hidden_size))
            self.LayerNorm.bias.add_(0.1 * torch.randn(hidden_size))

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(hidden_states) + input_tensor)


def get_inputs():
    return [torch.randn(32, 512, 1024), torch.randn(32, 512, 1024)]


def get_init_inputs():
    return [1024]


def get_small_inputs():
    return [torch.randn(2, 8, 64), torch.randn(2, 8, 64)]


def get_small_init_inputs():
    return [64]
