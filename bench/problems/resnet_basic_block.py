import torch
from torch import nn

LEVEL = 2  # a chain of operations
BOUND = "compute"


class BasicBlock(nn.Module):
    """ResNet's basic block (torchvision): two 3x3 conv + BatchNorm, ReLU, identity shortcut."""

    def __init__(self, planes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(planes, planes, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + x)


def get_inputs():
    return [torch.randn(32, 64, 56, 56)]


def get_init_inputs():
    return [64]


def get_small_inputs():
    return [torch.randn(2, 4, 8, 8)]


def get_small_init_inputs():
    return [4]
