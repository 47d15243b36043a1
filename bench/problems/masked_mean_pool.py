import torch
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


class MaskedMeanPool(nn.Module):
    """Sentence-transformers' mean pooling: token embeddings averaged over the attention mask."""

    def forward(self, token_embeddings, attention_mask):
        mask = attention_mask.unsqueeze(-1).expand(token_embeddings.size()).float()
        summed = torch.sum(token_embeddings * mask, 1)
        counts = torch.clamp(mask.sum(1), min=1e-9)
        return summed / counts


def get_inputs():
    return [torch.randn(256, 512, 768), torch.randint(0, 2, (256, 512))]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(2, 8, 32), torch.randint(0, 2, (2, 8))]


def get_small_init_inputs():
    return []
