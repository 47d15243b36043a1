import torch
import torch.nn as nn


class Model(nn.Module):
    """relu(x + 0.5) at odd sizes: every kernel has a tail. 64 MiB of input a call, under the judge's
    256 MiB, so it plans every family; bandwidth-bound, so one fused kernel beats eager's two."""

    def forward(self, x):
        return torch.relu(x + 0.5)


def get_inputs():
    return [torch.randn(4099, 4097)]


def get_init_inputs():
    return []
