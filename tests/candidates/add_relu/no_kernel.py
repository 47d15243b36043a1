import torch


class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return torch.clamp(x + y, min=0)
