"""Modules in the patterns the template generator covers, and a few it must decline.

No ``get_inputs`` here (it would apply to every class in the file): each
constructor is guessable from its argument names (``dim``, ``hidden_size``,
``in_features``) or takes nothing, and every input is drawn at the guessed
shape ``[2, 16, 64]``.
"""

import torch
import torch.nn.functional as F
from torch import nn

LIMIT = 3.0

# A module instance at module level, called in forward (transformers' ``gelu = get_activation("gelu")``):
# it is not a submodule of the classes that call it, so the trace steps through its forward.
_gelu_tanh = nn.GELU(approximate="tanh")


# ---------------------------------------------------------------------------
# Pointwise chains


class BiasGeluScale(nn.Module):
    """A bias row, both GELU forms, scalars on either side."""

    def __init__(self, dim: int, scale: float = 1.5):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.linspace(-1.0, 1.0, dim))

    def forward(self, x):
        y = F.gelu(x + self.bias) * self.scale
        return 0.5 * y + F.gelu(x, approximate="tanh") / 2.0 - 1.0


class ResidualRelu(nn.Module):
    """Two inputs of the same shape (a residual)."""

    def forward(self, x, y):
        return torch.relu(x + y) - y * 0.5


class Activations(nn.Module):
    """Every activation, as modules, functions and methods."""

    def __init__(self, dim: int):
        super().__init__()
        self.act = nn.SiLU()
        self.gate = nn.Sigmoid()
        self.squash = nn.Tanh()
        self.relu = nn.ReLU()
        self.gelu = nn.GELU(approximate="tanh")
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        a = self.act(x) + self.gate(x) * self.squash(x)
        b = self.relu(x).sqrt() + F.silu(x) - torch.tanh(x).neg()
        c = x.sigmoid() * torch.exp(-x.abs()) + torch.log(x.abs() + 1.0) * torch.rsqrt(x * x + 1.0)
        return self.drop(a + b + c + self.gelu(x) + x.relu())


class ClampWhere(nn.Module):
    """Comparisons, where, clamps, maximum/minimum and pow with scalar exponents."""

    def forward(self, x, y):
        big = x > 0.5
        z = torch.where(big, x, y * 2.0) + torch.where(x <= y, 1.0, 0.0)
        z = torch.maximum(z, y).clamp(-LIMIT, LIMIT) + torch.minimum(x, y).clamp_min(-1.0)
        w = x.pow(2) + y.abs().pow(0.5) + x.pow(3) - torch.clamp(x, max=0.0) * (x != y).float()
        return z + w / (1.0 + (y >= 0).float()) + (x.abs() + 1.0).pow(1.5)


class Casts(nn.Module):
    """Compute in float32, hand back the input's dtype."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        dtype = x.dtype
        h = x.float() * 3.0
        h = h.to(torch.float32) - self.weight.float()
        return torch.sigmoid(h).to(dtype)


class LtMask(nn.Module):
    """A boolean output."""

    def forward(self, x, y):
        return (x * 2.0) < y


# ---------------------------------------------------------------------------
# Row reductions over the last dimension


class ScaledSoftmax(nn.Module):
    def __init__(self, scale: float = 0.5):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.softmax(x * self.scale, dim=-1)


class LogSoftmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.log_softmax = nn.LogSoftmax(dim=-1)

    def forward(self, x):
        return self.log_softmax(x) + F.log_softmax(2.0 * x, dim=-1)


class HandSoftmax(nn.Module):
    """Softmax written out: max, exp, sum."""

    def forward(self, x):
        m = x.max(dim=-1, keepdim=True).values
        e = torch.exp(x - m)
        return e / e.sum(-1, keepdim=True)


class ResidualLayerNorm(nn.Module):
    """Residual add and LayerNorm in one kernel."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=eps)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(dim))
            self.norm.bias.add_(0.1 * torch.randn(dim))

    def forward(self, x, residual):
        return self.norm(x + residual)


class FunctionalLayerNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x):
        return F.layer_norm(x, (self.dim,), self.weight, self.bias, 1e-6)


class HandRMSNorm(nn.Module):
    """The form common in model code (Llama): float32 inside, the input's dtype out."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size) + 0.1 * torch.randn(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class TorchRMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.RMSNorm(dim)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(dim))

    def forward(self, x):
        return self.norm(x)


class MeanVarNorm(nn.Module):
    """Standardization written out with mean and var (both corrections)."""

    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        spread = torch.var(x, -1, keepdim=True) - var
        return (x - mean) / torch.sqrt(var + self.eps) + spread


class NormAct(nn.Module):
    """Leaf modules inside a container: LayerNorm, GELU and dropout in one kernel."""

    def __init__(self, dim: int):
        super().__init__()
        self.block = nn.Sequential(nn.LayerNorm(dim), nn.GELU(), nn.Dropout(0.1))

    def forward(self, x):
        return self.block(x) * 2.0


class RowSum(nn.Module):
    """A reduction as the output: sums and extremes per row (no keepdim)."""

    def forward(self, x):
        return x.sum(-1) + torch.amax(torch.relu(x), dim=-1) - x.amin(-1) * 0.5


# ---------------------------------------------------------------------------
# Gated activations (SwiGLU, GeGLU): the input's last dimension holds both halves


class ChunkSwiGLU(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, dim=-1)
        return F.silu(a) * b


class SplitGeGLU(nn.Module):
    """Halves of a size read from the module; a bias row over one half."""

    def __init__(self, dim: int):
        super().__init__()
        self.hidden = dim // 2
        self.bias = nn.Parameter(torch.linspace(-1.0, 1.0, dim // 2))

    def forward(self, x):
        gate, up = x.split(self.hidden, dim=-1)
        return F.gelu(gate + self.bias) * up


class SliceGeGLU(nn.Module):
    """Slicing at a size computed from the shape, tanh GELU."""

    def forward(self, x):
        d = x.shape[-1] // 2
        return F.gelu(x[..., :d], approximate="tanh") * x[..., d:]


class TorchChunkSwiGLU(nn.Module):
    """torch.chunk, the halves the other way round, written out."""

    def forward(self, x):
        up, gate = torch.chunk(x, 2, -1)
        return up * (gate * torch.sigmoid(gate))


class SeparateSwiGLU(nn.Module):
    """Gate and up projections as two inputs."""

    def forward(self, gate, up):
        return F.silu(gate) * up


class SmoothActivations(nn.Module):
    """The activations transformers ships beyond GELU: erf, square, softplus and mish."""

    def forward(self, x):
        return torch.erf(x) + torch.square(F.relu(x)) * 0.5 + F.softplus(x) - F.mish(x)


class GatedRMSNorm(nn.Module):
    """SwiGLU on split halves, then an RMSNorm of the result: one row kernel."""

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        a, b = x.chunk(2, dim=-1)
        h = F.silu(a) * b
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)


class ClippedGelu(nn.Module):
    """transformers' ClippedGELUActivation: a module-level activation, clipped to the module's bounds."""

    def __init__(self, min: float = -0.5, max: float = 1.5):
        super().__init__()
        self.min = min
        self.max = max

    def forward(self, x):
        return torch.clip(_gelu_tanh(x), self.min, self.max)


class DtypeBranchNorm(nn.Module):
    """T5's LayerNorm: forward's Python branches on the weight's dtype (the graph holds for float32 weights;
    the suggestion gives any other dtype the original computation)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size) + 0.1 * torch.randn(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


# ---------------------------------------------------------------------------
# Declined


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.proj(x))


class MatMul(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim, dim))

    def forward(self, x):
        return torch.matmul(x, self.weight) + 1.0


class ColumnSum(nn.Module):
    """A reduction over the first dimension."""

    def forward(self, x):
        return x - x.sum(dim=0, keepdim=True)


class ColumnBias(nn.Module):
    """Broadcasting other than a row vector: a (16, 1) buffer against (2, 16, 64) inputs."""

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("shift", torch.linspace(0.0, 1.0, 16).reshape(16, 1))

    def forward(self, x):
        return torch.relu(x) + self.shift


class DataDependent(nn.Module):
    """Control flow on values: torch.fx cannot trace it."""

    def forward(self, x):
        out = x
        for _ in range(3):
            if out.sum() > 0:
                out = out - 1.0
        return out


class ChunkDim0(nn.Module):
    """Halves of the first dimension."""

    def forward(self, x):
        a, b = x.chunk(2, dim=0)
        return F.silu(a) * b


class ChunkThree(nn.Module):
    """Three pieces of the last dimension."""

    def forward(self, x):
        a, b, _ = x.chunk(3, dim=-1)
        return F.silu(a) * b
