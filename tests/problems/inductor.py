"""Modules whose Inductor output is kept under tests/fixtures/inductor (one of each kind of kernel)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class PointwiseChain(nn.Module):
    """Two inputs, one fused elementwise kernel."""

    def forward(self, x, y):
        return torch.relu(x + y) * 0.5 - torch.sigmoid(x)


class Softmax(nn.Module):
    """A row reduction over a dynamic row length."""

    def forward(self, x):
        return torch.softmax(x, dim=-1)


class RMSNorm(nn.Module):
    """A row reduction whose length is fixed by the weight."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LinearGelu(nn.Module):
    """cuBLAS for the product (kept in PyTorch), Triton for the bias and GELU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.gelu(self.proj(x))


class ResidualLayerNorm(nn.Module):
    """x + LayerNorm(x + residual): a Welford reduction and a residual add."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, residual):
        h = x + residual
        return h + self.norm(h)


class ConvResidual(nn.Module):
    """cuDNN for the convolution (kept in PyTorch), Triton for the residual and ReLU."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return torch.relu(x + self.conv(x))


class ColumnStats(nn.Module):
    """Reductions over the first dimension, and two outputs."""

    def forward(self, x):
        return x.sum(dim=0), x.abs().amax(dim=0)
