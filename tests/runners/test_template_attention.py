"""Attention probabilities, ``softmax(q @ k^T * scale, dim=-1)``: one kernel writing the probabilities
once (``runners/generators/template/attention.py``), against PyTorch in float64, and what it declines,
by name.

Each module is generated as the engine does and run in a fresh Python under Triton's interpreter
(``fresh_python``), on sequence lengths that are not powers of two, query and key lengths that
differ, more keys than one block of the interpreter's launch (the two walks over the keys), 3-D and
4-D inputs and views that are not contiguous.
"""

from __future__ import annotations

import pytest
import torch

from runners.generators.template import Unsupported
from tests.cuda_compile import compile_each_config
from tests.runners.test_template_reductions import _generate, _modules, fresh_python

HEADER = "import math\n"
SQRT = """
class M(nn.Module):
    def forward(self, q, k):
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        return torch.softmax(scores, dim=-1)
"""
LITERAL = """
class M(nn.Module):
    def forward(self, q, k):
        return F.softmax(q @ k.mT * 0.125, -1)
"""
ATTRIBUTE = """
class M(nn.Module):
    def __init__(self, scale=4.0):
        super().__init__()
        self.scale = scale

    def forward(self, q, k):
        return (q.matmul(k.transpose(2, 3)) / self.scale).softmax(dim=3)
"""


def _check(ref: torch.nn.Module, new: torch.nn.Module, q: torch.Tensor, k: torch.Tensor) -> None:
    """The kernel's probabilities (float32 inputs) against PyTorch's in float64."""
    want = ref.double()(q.double(), k.double())
    ref.float()
    with torch.no_grad():
        got = new(q, k)
    assert got.shape == want.shape and got.dtype == q.dtype
    assert (got.double() - want).abs().max().item() <= 1e-5, (got, want)


@fresh_python
def test_scaled_by_the_square_root_of_d_matches_torch(tmp_path):
    source, name, backward = _generate(tmp_path, HEADER + SQRT, "[torch.randn(2, 2, 8, 16)] * 2")
    assert (name, backward) == ("_attention_probs_fwd_kernel", None)
    assert "scale = float(1.0 / math.sqrt(q.size(-1)))" in source
    ref, new = _modules(source)
    for q_shape, k_shape in [
        ((2, 3, 10, 16), (2, 3, 10, 16)),  # lengths that are not powers of two
        ((1, 2, 7, 64), (1, 2, 33, 64)),  # fewer queries than keys
        ((2, 1, 70, 16), (2, 1, 5, 16)),  # more queries than one block of rows
        ((1, 1, 9, 16), (1, 1, 300, 16)),  # more keys than one block: the two walks
        ((3, 12, 16), (3, 20, 16)),  # 3-D
    ]:
        _check(ref, new, torch.randn(q_shape) * 2, torch.randn(k_shape) * 2)


@fresh_python
def test_a_literal_scale_and_views_that_are_not_contiguous(tmp_path):
    source, _, _ = _generate(tmp_path, LITERAL, "[torch.randn(2, 2, 8, 16)] * 2")
    assert "scale = float(1.0 * 0.125)" in source
    ref, new = _modules(source)
    q = torch.randn(2, 11, 3, 64).transpose(1, 2)  # [B, S, H, D] read as [B, H, S, D]
    k = torch.randn(2, 3, 64, 13).transpose(-2, -1)
    assert not q.is_contiguous() and not k.is_contiguous()
    _check(ref, new, q, k)
    _check(ref, new, torch.randn(4, 6, 16)[::2], torch.randn(2, 19, 16))


@fresh_python
def test_a_scale_read_from_the_module_at_call_time(tmp_path):
    source, _, _ = _generate(tmp_path, ATTRIBUTE, "[torch.randn(2, 2, 8, 16)] * 2")
    ref, new = _modules(source)
    _check(ref, new, torch.randn(1, 2, 6, 16), torch.randn(1, 2, 6, 16))
    ref.scale = new.scale = 0.5
    _check(ref, new, torch.randn(1, 2, 6, 16), torch.randn(1, 2, 6, 16))


@fresh_python
def test_forward_refuses_what_the_kernel_does_not_take(tmp_path):
    source, _, _ = _generate(tmp_path, HEADER + SQRT, "[torch.randn(2, 2, 8, 16)] * 2")
    _, new = _modules(source)
    with pytest.raises(NotImplementedError, match="same leading dimensions"):
        new(torch.randn(2, 2, 8, 16), torch.randn(1, 2, 8, 16))
    with pytest.raises(NotImplementedError, match="at most 256"):
        new(torch.randn(1, 1, 4, 272), torch.randn(1, 1, 4, 272))
    with pytest.raises(NotImplementedError, match="one dtype"):
        new(torch.randn(1, 1, 4, 16), torch.randn(1, 1, 4, 16).half())
    with pytest.raises(NotImplementedError, match="3-D or 4-D"):
        new(torch.randn(4, 16), torch.randn(4, 16))


NEAR_MISS = """
class M(nn.Module):
    def forward(self, q, k):
        return {}
"""


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (
            "torch.softmax(q @ k.transpose(-2, -1) * 0.125, dim=-2)",
            r"unsupported softmax over dim -2: only the last dimension",
        ),
        (
            "torch.softmax(q @ k.transpose(1, 3) * 0.125, dim=-1)",
            r"unsupported transpose of dims \(1, 3\): only the last two",
        ),
        (
            "torch.softmax(torch.tanh(q @ k.transpose(-2, -1)), dim=-1)",
            r"unsupported torch\.tanh between the product and the softmax",
        ),
        ("torch.softmax(q @ k.transpose(-2, -1) + q.sum(), dim=-1)", r"unsupported Tensor\.sum"),
        (
            "torch.softmax(q @ k.transpose(-2, -1), dim=-1) * 2.0",
            r"unsupported operator\.mul after the softmax",
        ),
    ],
)
def test_near_misses_are_declined_by_name(tmp_path, result, message):
    inputs = "[torch.randn(4, 4, 4, 4)] * 2"  # square: every near miss traces
    with pytest.raises(Unsupported, match=message):
        _generate(tmp_path, NEAR_MISS.format(result), inputs)


def test_every_autotuned_config_compiles_for_an_h100_without_heavy_spills(tmp_path):
    """Each config the launch autotunes over, compiled for sm_90 at D = 64 (float32 tiles: three TF32
    products): it fits a program's shared memory (227 KiB on an H100 or H200) and spills few
    registers. Every runner that checks the kernel compiles them all, so the list stays short; the
    configs left out spilled 80 to 2,927 registers (these 0 to 26, Triton 3.9's ptxas)."""
    source, name, _ = _generate(tmp_path, HEADER + SQRT, "[torch.randn(2, 2, 8, 16)] * 2")
    settings = {"BLOCK_D": 64, "DOT_FP32": False}
    compiled = compile_each_config(
        source, tmp_path / "attention_kernel.py", name, settings, floats=("scale",)
    )
    assert len(compiled) == 4
    for config, got in compiled:
        assert got["ok"], (config, got)
        assert got["shared_bytes"] <= 227 * 1024, (config, got)
        assert got["spills"] <= 30, (config, got)
