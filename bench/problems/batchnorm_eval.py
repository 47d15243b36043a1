import torch
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "memory"


class BatchNormReLU(nn.Module):
    """BatchNorm2d in eval (running statistics) followed by ReLU, the conv-net staple."""

    def __init__(self, channels: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        with torch.no_grad():  # running statistics and affine weights as a trained network has them
            self.bn.running_mean.copy_(0.1 * torch.randn(channels))
            self.bn.running_var.copy_(1.0 + 0.1 * torch.rand(channels))
            self.bn.weight.add_(0.1 * torch.randn(channels))
            self.bn.bias.add_(0.1 * torch.randn(channels))
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(x))


def get_inputs():
    return [torch.randn(32, 128, 56, 56)]


def get_init_inputs():
    return [128]


def get_small_inputs():
    return [torch.randn(2, 4, 8, 8)]


def get_small_init_inputs():
    return [4]
