import torch
import torch.nn.functional as F
from torch import nn

LEVEL = 1  # one operation
BOUND = "memory"


class DistillationKLDiv(nn.Module):
    """Knowledge-distillation loss: KL(teacher || student) on temperature-softened logits, batchmean,
    scaled by T^2 (Hinton et al.)."""

    def __init__(self, temperature: float = 2.0):
        super().__init__()
        self.temperature = temperature

    def forward(self, student_logits, teacher_logits):
        t = self.temperature
        log_p = F.log_softmax(student_logits / t, dim=-1)
        q = F.softmax(teacher_logits / t, dim=-1)
        return F.kl_div(log_p, q, reduction="batchmean") * (t * t)


def get_inputs():
    return [torch.randn(2048, 32000), torch.randn(2048, 32000)]


def get_init_inputs():
    return [2.0]


def get_small_inputs():
    return [torch.randn(16, 100), torch.randn(16, 100)]


def get_small_init_inputs():
    return [2.0]
