import torch
import torch.nn.functional as F
from torch import nn

LEVEL = 1  # one operation
BOUND = "memory"


class MSELoss(nn.Module):
    """F.mse_loss, mean over every element (a regression or diffusion noise-prediction loss)."""

    def forward(self, prediction, target):
        return F.mse_loss(prediction, target)


def get_inputs():
    return [torch.randn(16, 4, 128, 128), torch.randn(16, 4, 128, 128)]


def get_init_inputs():
    return []


def get_small_inputs():
    return [torch.randn(2, 4, 8, 8), torch.randn(2, 4, 8, 8)]


def get_small_init_inputs():
    return []
