"""``F.scaled_dot_product_attention`` of three inputs: one kernel, the scores never stored
(``runners/generators/template/sdpa.py``), against PyTorch in float64, and what it declines, by name.

Each module is generated as the engine does and run in a fresh Python under Triton's interpreter
(``fresh_python``): causal and not, lengths that are not powers of two, more queries than keys and
fewer, more keys than one block (the walk over the keys), value heads of another size, 3-D and 4-D
inputs, views that are not contiguous, half precision. Then end to end, as a user runs it: the CLI
verifies KernelBench-style causal attention on the CPU.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
import torch.nn.functional as F

from runners.generators.template import Unsupported
from tests.cuda_compile import compile_each_config
from tests.runners.template_cli import verify_one_kernel
from tests.runners.test_template_reductions import _generate, _modules, fresh_python

CAUSAL = """
class M(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
"""
SETTINGS = """
class M(nn.Module):
    def __init__(self, causal=False, scale=0.3):
        super().__init__()
        self.causal = causal
        self.scale = scale

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, None, 0.0, self.causal, scale=self.scale)
"""
INPUTS = "[torch.randn(2, 2, 8, 16)] * 3"


def _check(new: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **how: object) -> None:
    """The kernel's output against PyTorch's in float64, to float32's accuracy (or half's)."""
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **how)  # type: ignore[arg-type]
    with torch.no_grad():
        got = new(q, k, v)
    assert got.shape == want.shape and got.dtype == q.dtype
    tol = 1e-5 if q.dtype == torch.float32 else 2e-2
    assert (got.double() - want).abs().max().item() <= tol, (got, want)


@fresh_python
def test_causal_attention_matches_torch(tmp_path):
    source, name, backward = _generate(tmp_path, CAUSAL, INPUTS)
    assert (name, backward) == ("_sdpa_fwd_kernel", None)
    assert "return _sdpa_fwd(q, k, v, 1.0 / math.sqrt(q.shape[-1]), True)" in source
    _, new = _modules(source)
    for q_shape, k_shape, v_dim in [
        ((2, 3, 10, 16), (2, 3, 10, 16), 16),  # lengths that are not powers of two
        ((1, 2, 7, 64), (1, 2, 33, 64), 64),  # fewer queries than keys: the mask from the top left
        ((2, 1, 150, 16), (2, 1, 150, 16), 16),  # more rows and keys than one block each
        ((1, 2, 90, 16), (1, 2, 20, 16), 24),  # more queries than keys, value heads of another size
        ((3, 12, 16), (3, 12, 16), 8),  # 3-D
    ]:
        q, k = torch.randn(q_shape) * 2, torch.randn(k_shape) * 2
        _check(new, q, k, torch.randn(*k_shape[:-1], v_dim), is_causal=True)
    q = torch.randn(2, 37, 3, 32).transpose(1, 2)  # [B, S, H, D] read as [B, H, S, D]
    k, v = torch.randn(2, 37, 3, 32).transpose(1, 2), torch.randn(2, 37, 3, 32).transpose(1, 2)
    assert not q.is_contiguous()
    _check(new, q, k, v, is_causal=True)
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = (torch.randn(1, 2, 40, 32, dtype=dtype) for _ in range(3))
        _check(new, q, k, v, is_causal=True)


@fresh_python
def test_a_scale_read_at_call_time_and_a_flag_the_kernel_is_specialised_to(tmp_path):
    """A number the module holds is read at call time; a flag is traced as it was, and forward
    refuses another value (the suggestion then runs the original computation: runners/fallback.py).
    Without that refusal, setting ``causal`` after the trace would run the kernel unmasked."""
    source, _, _ = _generate(tmp_path, SETTINGS, INPUTS)
    assert "float(self.scale)" in source
    _, new = _modules(source)
    q, k, v = torch.randn(1, 2, 70, 16), torch.randn(1, 2, 50, 16), torch.randn(1, 2, 50, 16)
    _check(new, q, k, v, scale=0.3)
    new.scale = 0.125
    _check(new, q, k, v, scale=0.125)
    new.causal = True
    with pytest.raises(NotImplementedError, match=r"specialised to self\.causal == False"):
        new(q, k, v)


@fresh_python
def test_forward_refuses_what_the_kernel_does_not_take(tmp_path):
    source, _, _ = _generate(tmp_path, CAUSAL, INPUTS)
    _, new = _modules(source)
    x = torch.randn(2, 2, 8, 16)
    with pytest.raises(NotImplementedError, match="same leading dimensions"):
        new(x, torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16))  # broadcast over the batch
    with pytest.raises(NotImplementedError, match="same leading dimensions"):
        new(x, x, torch.randn(2, 2, 9, 16))  # as many values as keys
    with pytest.raises(NotImplementedError, match="at most 256"):
        new(*(torch.randn(1, 1, 4, 272) for _ in range(3)))
    with pytest.raises(NotImplementedError, match="at least one key"):
        new(x, torch.randn(2, 2, 0, 16), torch.randn(2, 2, 0, 16))
    with pytest.raises(NotImplementedError, match="one dtype"):
        new(x, x, x.half())
    with pytest.raises(NotImplementedError, match="3-D or 4-D"):
        new(*(torch.randn(4, 16) for _ in range(3)))


@fresh_python
def test_forward_arguments_may_be_named_like_the_ops_own(tmp_path):
    """The op's parameters are its own: forward's arguments may be called scale or causal. Only an
    argument named math would hide the module the default scale is computed with."""
    named = CAUSAL.replace("q, k, v", "scale, causal, value")
    source, _, _ = _generate(tmp_path, named, INPUTS)
    _, new = _modules(source)
    q, k, v = (torch.randn(1, 2, 19, 16) for _ in range(3))
    _check(new, q, k, v, is_causal=True)
    with pytest.raises(Unsupported, match=r"^forward takes an argument named 'math'"):
        _generate(tmp_path, CAUSAL.replace("q, k, v", "math, k, v"), INPUTS)


NEAR_MISS = """
class M(nn.Module):
    def forward(self, q, k, v):
        return {}
"""


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ("F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)", r"unsupported dropout_p 0\.1: only 0"),
        ("F.scaled_dot_product_attention(q, k, v, attn_mask=v)", r"unsupported attn_mask: only none"),
        ("F.scaled_dot_product_attention(q, k, v, enable_gqa=True)", r"unsupported enable_gqa: only False"),
        ("F.scaled_dot_product_attention(q * 2.0, k, v)", r"unsupported operator\.mul in scaled dot-product"),
        ("F.scaled_dot_product_attention(q, k, v) + 1.0", r"unsupported operator\.add"),
    ],
)
def test_near_misses_are_declined_by_name(tmp_path, result, message):
    square = "[torch.randn(2, 2, 8, 8)] * 3"  # E = S: the values serve as a mask too
    with pytest.raises(Unsupported, match=message):
        _generate(tmp_path, NEAR_MISS.format(result), square)


def test_every_autotuned_config_compiles_for_an_h100_without_heavy_spills(tmp_path):
    """Each config the launch autotunes over, compiled for sm_90 at E = Ev = 64 (float32 tiles: three
    TF32 products), causal: it fits a program's shared memory (227 KiB on an H100 or H200) and
    spills few registers to local memory (0 to 20 with Triton 3.9's ptxas; blocks of 64 rows and 64
    keys spilled 60 to 134). Every runner that checks the kernel compiles them all."""
    source, name, _ = _generate(tmp_path, CAUSAL, INPUTS)
    settings = {"BLOCK_D": 64, "BLOCK_DV": 64, "CAUSAL": True, "DOT_FP32": False}
    compiled = compile_each_config(source, tmp_path / "sdpa_kernel.py", name, settings, floats=("scale",))
    assert len(compiled) == 4
    for config, got in compiled:
        assert got["ok"], (config, got)
        assert got["shared_bytes"] <= 227 * 1024, (config, got)
        assert got["spills"] <= 30, (config, got)


E2E = textwrap.dedent(
    """
    import torch
    import torch.nn.functional as F
    from torch import nn


    class CausalAttention(nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)


    def get_inputs():
        return [torch.randn(2, 3, 37, 16), torch.randn(2, 3, 37, 16), torch.randn(2, 3, 37, 16)]


    def get_init_inputs():
        return []
    """
)


def test_cli_verifies_causal_attention_on_cpu(cli, tmp_path):
    verify_one_kernel(cli, tmp_path, E2E, "CausalAttention", "_sdpa_fwd_kernel")
