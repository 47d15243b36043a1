"""The template's looped row kernel: rows longer than 65536 elements, which no thread block holds in
registers (and past 2^20 Triton has no block for at all), are walked in blocks, one pass per
reduction and one to write. Generated as the engine does and run in a fresh Python under Triton's
interpreter against PyTorch in float64 (``test_template_reductions``' helpers), with the launch
recorded to show the looped kernel ran; and compiled for an H100/H200 (``tests/cuda_compile.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from runners.fallback import with_original_path
from runners.generators.template import emit
from tests.cuda_compile import compile_for_cuda
from tests.runners.test_template_group_norm import GROUP_NORM
from tests.runners.test_template_reductions import (
    LOGSUMEXP,
    _compare,
    _generate,
    _through_function,
    fresh_python,
)

LONG = emit.LOOPED_ABOVE + 3  # a row one block past what the whole-row kernel takes

RESIDUAL_LAYER_NORM = """
class M(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(dim))
            self.norm.bias.add_(0.1 * torch.randn(dim))

    def forward(self, x, residual):
        return self.norm(x + residual)
"""
SOFTMAX = """
class M(nn.Module):
    def forward(self, x):
        return torch.softmax(x * 0.5, dim=-1)
"""
RMS_NORM = """
class M(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
"""
MSE = """
class M(nn.Module):
    def forward(self, x, y):
        return F.mse_loss(x, y)
"""
CENTERED_MAX = """
class M(nn.Module):
    def forward(self, x):
        return x - x.amax(dim=-1, keepdim=True) + x.amin(dim=-1, keepdim=True)
"""


def _outputs_match(ref: torch.nn.Module, new: torch.nn.Module, *xs: torch.Tensor, tol: float = 2e-5) -> None:
    """The outputs, without autograd, against PyTorch's in float64."""
    with torch.no_grad():
        want = ref.double()(*(x.double() for x in xs))
        ref.float()
        got = new(*xs)
    assert got.shape == want.shape and got.dtype == torch.float32
    scale = max(1.0, want.abs().max().item())
    assert (got.double() - want).abs().max().item() <= tol * scale


def _module(
    source: str, init: tuple[Any, ...], rows: int | None = None, wide: bool = False
) -> tuple[torch.nn.Module, torch.nn.Module, list[str]]:
    """(the original, the generated module, the name of each kernel its launches ran); with ``rows``,
    short rows are launched that many a program (the interpreter's plain launch takes 4); with
    ``wide``, their rows' coordinates are divided in 64 bits, as past 2^31 elements."""
    original: dict[str, Any] = {}
    exec(compile(source.split('\n\n\n"""')[0], "m.py", "exec"), original)
    generated: dict[str, Any] = {}
    exec(compile(source, "generated.py", "exec"), generated)
    launched: list[str] = []
    launch = generated["_launch_config"]

    def recording(*args: Any) -> Any:
        kernel, grid, config = launch(*args)
        if rows is not None and "ROWS" in config:
            config = {**config, "ROWS": rows}
            grid = (-(-config["n_rows"] // rows),)
        if wide and "ROWS_NARROW" in config:
            config = {**config, "ROWS_NARROW": False}
        launched.append(getattr(kernel, "fn", kernel).__name__)
        return kernel, grid, config

    generated["_launch_config"] = recording
    ref, new = original["M"](*init).eval(), generated["M"](*init).eval()
    new.load_state_dict(ref.state_dict())
    return ref, new, launched


POSITION_BIAS = """
class M(nn.Module):
    def forward(self, x):
        pos = torch.arange(x.shape[-1], device=x.device).to(x.dtype)
        return torch.softmax(x - 1e-4 * pos, dim=-1)
"""
GEGLU_NORM = """
class M(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, dim=-1)
        y = F.gelu(a) * b
        return y - y.mean(-1, keepdim=True)
"""


CASES = {
    "group_norm": (GROUP_NORM, "[torch.randn(2, 8, 4, 4)]", "[4, 8]", (4, 8), [(2, 8, 190, 190)]),
    "residual_layer_norm": (
        RESIDUAL_LAYER_NORM,
        "[torch.randn(2, 16), torch.randn(2, 16)]",
        "[16]",
        (LONG,),
        [(3, LONG), (3, LONG)],
    ),
    "softmax": (SOFTMAX, "[torch.randn(2, 16)]", "[]", (), [(2, LONG)]),
    "logsumexp": (LOGSUMEXP, "[torch.randn(2, 16)]", "[]", (), [(3, LONG)]),
    "rms_norm": (RMS_NORM, "[torch.randn(2, 16)]", "[16]", (LONG,), [(2, LONG)]),
    "mse_loss": (MSE, "[torch.randn(2, 16), torch.randn(2, 16)]", "[]", (), [(2, LONG), (2, LONG)]),
    "max_and_min": (CENTERED_MAX, "[torch.randn(2, 16)]", "[]", (), [(2, LONG)]),
    "position_bias": (POSITION_BIAS, "[torch.randn(2, 16)]", "[]", (), [(2, LONG)]),
    "gated_halves": (GEGLU_NORM, "[torch.randn(2, 16)]", "[]", (), [(2, 2 * LONG)]),
}


# Shorter rows for the cases whose weights do not fix the row's length.
SHORT = {
    "group_norm": [(2, 8, 3, 3)],
    "softmax": [(2, 8)],
    "logsumexp": [(3, 8)],
    "mse_loss": [(2, 8), (2, 8)],
    "max_and_min": [(2, 8)],
    "position_bias": [(2, 8)],
    "gated_halves": [(2, 8)],
}


@pytest.mark.parametrize("case", sorted(CASES))
@fresh_python
def test_long_rows_take_the_looped_kernel_and_match_torch(tmp_path, case):
    body, inputs, init_expr, init, shapes = CASES[case]
    source, name, _ = _generate(tmp_path, body, inputs, init_expr)
    assert f"def {name}_looped(" in source
    ref, new, launched = _module(source, init)
    torch.manual_seed(0)
    xs = [torch.randn(shape) * 3 + 0.5 for shape in shapes]
    _outputs_match(ref, new, *xs)
    assert launched == [f"{name}_looped"]
    # Recording autograd, long rows are the original computation's (the suggestion takes it there):
    # the backward kernel holds the whole row.
    with pytest.raises(NotImplementedError, match="rows longer than 65536 elements train eagerly"):
        new(*xs)
    if case in SHORT:  # the same module on short rows: the whole-row kernel
        launched.clear()
        _compare(ref, new, *(torch.randn(shape) for shape in SHORT[case]))
        assert launched and f"{name}_looped" not in launched


@fresh_python
def test_the_suggestion_trains_long_rows_eagerly_and_infers_with_the_looped_kernel(tmp_path):
    source, name, _ = _generate(tmp_path, GROUP_NORM, "[torch.randn(2, 8, 4, 4)]", "[4, 8]")
    original, generated = source.split('\n\n\n"""', 1)
    suggested = with_original_path('"""' + generated, original, "M")
    ref, new, launched = _module(original + "\n\n\n" + suggested, (4, 8))
    x = torch.randn(2, 8, 190, 190)
    leaf = x.clone().requires_grad_(True)
    got = new(leaf)  # recording autograd: the original computation, with its gradients
    assert launched == [] and not _through_function(got.grad_fn)
    up = torch.randn(got.shape)
    grads = torch.autograd.grad(got, [leaf, *new.parameters()], up)
    leaf64 = x.double().requires_grad_(True)
    want = torch.autograd.grad(ref.double()(leaf64), [leaf64, *ref.parameters()], up.double())
    ref.float()
    for g, w in zip(grads, want, strict=True):
        assert (g.double() - w).abs().max().item() <= 1e-4 * max(1.0, w.abs().max().item())
    _outputs_match(ref, new, x)
    assert launched == [f"{name}_looped"]


@fresh_python
def test_long_rows_of_infinities_are_torchs(tmp_path):
    source, name, _ = _generate(tmp_path, LOGSUMEXP, "[torch.randn(4, 100)]")
    ref, new, launched = _module(source, ())
    x = torch.randn(4, LONG)
    x[0] = -float("inf")
    x[1, 7] = float("inf")
    x[2, LONG - 1] = float("inf")
    with torch.no_grad():
        assert torch.equal(new(x), ref(x))
    assert launched == [f"{name}_looped"]


def test_the_looped_kernel_compiles_for_the_gpu(tmp_path):
    source, name, _ = _generate(tmp_path, GROUP_NORM, "[torch.randn(2, 8, 4, 4)]", "[4, 8]")
    path = tmp_path / "generated.py"
    path.write_text(source, encoding="utf-8")
    constexprs = {"BLOCK_SIZE": emit.LOOPED_BLOCK}
    compiled = compile_for_cuda(path, f"{name}_looped", constexprs, num_warps=8, floats=("norm_eps",))
    assert compiled["ok"], compiled
