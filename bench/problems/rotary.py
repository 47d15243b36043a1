import torch
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding applied to queries or keys (Llama's apply_rotary_pos_emb), with the
    cos/sin tables precomputed for the maximum length and sliced to the sequence."""

    def __init__(self, head_dim: int, max_positions: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(max_positions).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos())
        self.register_buffer("sin_cached", emb.sin())

    def forward(self, x):
        seq_len = x.shape[-2]
        cos = self.cos_cached[:seq_len]
        sin = self.sin_cached[:seq_len]
        return x * cos + rotate_half(x) * sin


def get_inputs():
    return [torch.randn(8, 32, 1024, 128)]


def get_init_inputs():
    return [128, 4096]


def get_small_inputs():
    return [torch.randn(2, 2, 8, 16)]


def get_small_init_inputs():
    return [16, 64]
