"""The template's reductions beyond one row's values: logsumexp, losses summed over every element
(``mse_loss``, ``l1_loss``, ``kl_div``), column sums and means (``x.sum(dim=0)``), batch norm in eval
mode, numbers computed from the module's attributes, and what it declines, by name.

Each module is traced and generated as the engine does (``problems_for``, ``verify.prepare``,
``trace.trace``), then run in a fresh Python under Triton's interpreter (``fresh_python``) against
PyTorch in float64, outputs and gradients, on shapes that are not powers of two, more elements than
one block of the interpreter's launch, and more than two dimensions.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from runners import trace, verify
from runners.generators.template import Unsupported, render_module_with_backward
from runners.generators.template.columns import _column_splits
from runners.pipeline import problems_for

ROOT = Path(__file__).resolve().parents[2]
_CASES = itertools.count()
HEADER = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n"


def _generate(tmp_path: Path, body: str, inputs: str, init: str = "[]") -> tuple[str, str, str | None]:
    """(source, kernel name, backward kernel name or None) for class ``M`` of ``body``."""
    text = (
        HEADER
        + textwrap.dedent(body)
        + (f"\n\ndef get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return {init}\n")
    )
    # A name of its own: the import is cached by name, and other files' tests count cases too.
    path = tmp_path / f"case_{next(_CASES)}_{uuid.uuid4().hex[:12]}.py"
    path.write_text(text, encoding="utf-8")
    (problem,), _ = problems_for(str(path), str(tmp_path), "M")
    req = {"device": "cpu", "file": problem.file, "root": str(tmp_path), "class_name": "M", "dtype": None}
    problem.build = verify.prepare(req)["build"]
    source, name, _, backward = render_module_with_backward(
        problem, trace.trace({**req, "build": problem.build})
    )
    return text + "\n\n" + source, name, backward


def assert_narrow_below_2_31(launch: Any) -> None:
    """An elementwise launch helper sets NARROW (32-bit offsets) where every offset and a block of
    8192 past them fit 32 bits, and only there."""
    assert launch(100, False)[2]["NARROW"] is True
    assert launch(2**31 - 8193, False)[2]["NARROW"] is True
    assert launch(2**31 - 8192, False)[2]["NARROW"] is False


def _modules(source: str, init: tuple[Any, ...] = ()) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(the original, the generated module) with the same state."""
    original: dict[str, Any] = {}
    exec(compile(source.split('\n\n\n"""')[0], "m.py", "exec"), original)
    generated: dict[str, Any] = {}
    exec(compile(source, "generated.py", "exec"), generated)
    ref, new = original["M"](*init).eval(), generated["M"](*init).eval()
    new.load_state_dict(ref.state_dict())
    return ref, new


def _compare(ref: torch.nn.Module, new: torch.nn.Module, *inputs: torch.Tensor, tol: float = 1e-5) -> None:
    """Outputs and the gradients of every input and parameter, against PyTorch's in float64."""
    leaves = [x.detach().double().requires_grad_(True) for x in inputs]
    want = ref.double()(*leaves)
    up = torch.randn(want.shape, dtype=torch.float64)
    want_grads = torch.autograd.grad(want, [*leaves, *ref.parameters()], up)
    ref.float()
    leaves = [x.detach().float().requires_grad_(True) for x in inputs]
    got = new(*leaves)
    assert _through_function(got.grad_fn)  # the gradients come from the generated backward kernel
    assert got.shape == want.shape and got.dtype == torch.float32
    got_grads = torch.autograd.grad(got, [*leaves, *new.parameters()], up.float())
    scale = max(1.0, want.abs().max().item())
    assert (got.double() - want).abs().max().item() <= tol * scale, (got, want)
    for g, w in zip(got_grads, want_grads, strict=True):
        assert (g.double() - w).abs().max().item() <= tol * max(1.0, w.abs().max().item())


def _through_function(fn: Any) -> bool:
    """Whether the autograd graph up to ``fn`` holds the kernels' autograd.Function (a loss's sum and
    scaling after it are torch's own ops)."""
    if fn is None:
        return False
    if type(fn).__name__.endswith("FunctionBackward"):
        return True
    return any(_through_function(f) for f, _ in fn.next_functions)


_RUN_IN_CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import importlib
tests = importlib.import_module(sys.argv[4])
kwargs = json.loads(sys.argv[3])
getattr(tests, sys.argv[2]).__wrapped__(Path(kwargs.pop("tmp_path")), **kwargs)
"""


def fresh_python(test: Callable[..., None]) -> Callable[..., None]:
    """Run the test in a fresh Python with TRITON_INTERPRET=1: Triton reads it when triton.language is
    first imported, which another test of the session may have done without it. The test's own file
    (this one, or another in this folder that imports it) is imported there by its name."""

    @functools.wraps(test)
    def run(tmp_path: Path, **kwargs: Any) -> None:
        here = str(Path(__file__).parent)
        args = [
            sys.executable,
            "-c",
            _RUN_IN_CHILD,
            here,
            test.__name__,
            json.dumps({"tmp_path": str(tmp_path), **kwargs}),
            test.__module__.rpartition(".")[2],  # the test's file, imported by its name in the child
        ]
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        done = subprocess.run(
            args, env=env, capture_output=True, text=True, timeout=300, check=False, cwd=ROOT
        )
        assert done.returncode == 0, done.stderr[-4000:]

    return run


# ---------------------------------------------------------------------------
# logsumexp: one value per row


LOGSUMEXP = """
class M(nn.Module):
    def forward(self, x):
        return torch.logsumexp(x, dim=-1)
"""


@fresh_python
def test_logsumexp_matches_torch_with_its_gradient(tmp_path):
    source, name, backward = _generate(tmp_path, LOGSUMEXP, "[torch.randn(4, 100)]")
    assert (name, backward) == ("_logsumexp_fwd_kernel", "_logsumexp_bwd_kernel")
    ref, new = _modules(source)
    for shape in [(3, 5), (7, 1500), (2, 3, 130), (1,)]:
        _compare(ref, new, torch.randn(shape) * 10)


@fresh_python
def test_logsumexp_of_infinite_rows_is_torchs(tmp_path):
    source, _, _ = _generate(tmp_path, LOGSUMEXP, "[torch.randn(4, 100)]")
    ref, new = _modules(source)
    inf = float("inf")
    x = torch.tensor([[-inf, -inf, -inf], [1.0, inf, 2.0], [-inf, 0.0, 1.0]])
    with torch.no_grad():
        assert torch.equal(new(x), ref(x))


@fresh_python
def test_logsumexp_keepdim_and_dim_read_from_the_module(tmp_path):
    body = """
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.dim = 1

        def forward(self, x):
            return x.logsumexp(self.dim, keepdim=True) * 0.5
    """
    source, name, _ = _generate(tmp_path, body, "[torch.randn(6, 33)]")
    assert name == "_logsumexp_fwd_kernel"
    ref, new = _modules(source)
    _compare(ref, new, torch.randn(5, 70))
    new.dim = 0
    with pytest.raises(NotImplementedError, match="dim == 1"):
        new(torch.randn(5, 70))


def test_logsumexp_over_another_dimension_is_declined(tmp_path):
    body = """
    class M(nn.Module):
        def forward(self, x):
            return torch.logsumexp(x, dim=0)
    """
    with pytest.raises(Unsupported, match=r"unsupported logsumexp over dim 0: only the last dimension"):
        _generate(tmp_path, body, "[torch.randn(6, 33)]")


# ---------------------------------------------------------------------------
# Numbers computed from the module's attributes

LEAKY_CLAMP = """
class M(nn.Module):
    def __init__(self, slope, bound):
        super().__init__()
        self.slope = slope
        self.bound = bound

    def forward(self, x):
        y = torch.where(x > 0, x, x * self.slope)
        return y.clamp(min=-self.bound, max=self.bound)
"""


@fresh_python
def test_a_number_computed_from_an_attribute_is_checked_at_call_time(tmp_path):
    source, name, backward = _generate(tmp_path, LEAKY_CLAMP, "[torch.randn(16, 64)]", "[0.1, 1.5]")
    assert (name, backward) == ("_gt_mul_where_clamp_kernel", "_gt_mul_where_clamp_bwd_kernel")
    assert "if self.bound != 1.5:" in source  # -self.bound is the traced -1.5
    ref, new = _modules(source, (0.1, 1.5))
    for shape in [(3, 5), (2, 1500), (2, 3, 7)]:
        _compare(ref, new, torch.randn(shape) * 3)
    new.slope = 0.3  # read at call time
    ref.slope = 0.3
    _compare(ref, new, torch.randn(4, 9) * 3)
    new.bound = 2.0
    with pytest.raises(NotImplementedError, match=r"specialised to bound == 1\.5"):
        new(torch.randn(4, 9))


def test_a_number_computed_from_an_attribute_forward_never_reads_is_declined(tmp_path):
    body = """
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.bound = 2.0

        def forward(self, x):
            return x.clamp(min=-self.bound)
    """
    message = r"a number computed from self\.bound in forward, whose own value the trace does not record"
    with pytest.raises(Unsupported, match=message):
        _generate(tmp_path, body, "[torch.randn(6, 33)]")


# ---------------------------------------------------------------------------
# Losses over every element: per-row sums in the kernel, added up in forward

SHAPES = [(3, 5), (3, 1500), (5, 7, 13), (2000,)]


@pytest.mark.parametrize(
    ("expr", "kernel"),
    [
        ("F.mse_loss(a, b)", "_mse_loss_fwd_kernel"),
        ("F.mse_loss(a, b, reduction='sum') * 0.5", "_mse_loss_fwd_kernel"),
        ("F.l1_loss(a, b, reduction='none')", "_l1_loss_kernel"),
        ("((a - b) ** 2).mean()", "_mean_fwd_kernel"),
        ("-torch.sum(torch.abs(a) * b) / 4 + 1", "_sum_fwd_kernel"),
    ],
)
@fresh_python
def test_losses_over_every_element_match_torch(tmp_path, expr, kernel):
    body = f"""
    class M(nn.Module):
        def forward(self, a, b):
            return {expr}
    """
    source, name, backward = _generate(tmp_path, body, "[torch.randn(4, 6), torch.randn(4, 6)]")
    assert name == kernel and backward == kernel.replace("_fwd_kernel", "_kernel").replace(
        "_kernel", "_bwd_kernel"
    )
    ref, new = _modules(source)
    for shape in SHAPES:
        _compare(ref, new, torch.randn(shape), torch.randn(shape))


@fresh_python
def test_a_loss_module_reads_its_reduction_at_call_time(tmp_path):
    body = """
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.loss = nn.L1Loss()

        def forward(self, a, b):
            return self.loss(a, b)
    """
    source, name, _ = _generate(tmp_path, body, "[torch.randn(4, 6), torch.randn(4, 6)]")
    assert name == "_l1_loss_fwd_kernel"
    ref, new = _modules(source)
    for reduction in ("mean", "sum"):
        ref.loss.reduction = new.loss.reduction = reduction
        for shape in SHAPES:
            _compare(ref, new, torch.randn(shape), torch.randn(shape))
    new.loss.reduction = "none"
    with pytest.raises(NotImplementedError, match="sums the loss over every element"):
        new(torch.randn(3, 5), torch.randn(3, 5))


KL_DIV = """
class M(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, student, teacher):
        t = self.temperature
        log_p = F.log_softmax(student / t, dim=-1)
        q = F.softmax(teacher / t, dim=-1)
        return F.kl_div(log_p, q, reduction="batchmean") * (t * t)
"""


@fresh_python
def test_distillation_kl_div_matches_torch(tmp_path):
    source, name, backward = _generate(tmp_path, KL_DIV, "[torch.randn(4, 6), torch.randn(4, 6)]", "[3.0]")
    assert (name, backward) == (
        "_log_softmax_softmax_kl_div_fwd_kernel",
        "_log_softmax_softmax_kl_div_bwd_kernel",
    )
    assert "if self.temperature != 3.0:" in source  # t * t is the traced 9.0
    ref, new = _modules(source, (3.0,))
    for shape in SHAPES:
        _compare(ref, new, torch.randn(shape) * 4, torch.randn(shape) * 4)
    x = torch.randn(3, 40)
    teacher = torch.full_like(x, -1e4).index_fill_(1, torch.tensor([0]), 1e4)  # q is 0 on most lanes
    with torch.no_grad():
        assert torch.allclose(new(x, teacher), ref(x, teacher), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("log_target", [False, True])
@fresh_python
def test_kl_div_of_given_distributions_matches_torch(tmp_path, log_target):
    body = f"""
    class M(nn.Module):
        def forward(self, log_p, q):
            return F.kl_div(log_p, q, reduction="mean", log_target={log_target})
    """
    source, name, _ = _generate(tmp_path, body, "[torch.randn(4, 6), torch.rand(4, 6)]")
    assert name == "_kl_div_fwd_kernel"
    ref, new = _modules(source)
    for shape in SHAPES:
        q = torch.randn(shape) if log_target else torch.rand(shape)
        _compare(ref, new, torch.randn(shape), q)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("F.mse_loss(a, b) + F.l1_loss(a, b)", r"unsupported second sum over every element"),
        ("torch.exp(F.mse_loss(a, b))", r"unsupported exp of a sum over every element"),
        ("F.mse_loss(a, b) * a", r"unsupported mul of a sum over every element"),
        ("a.amax(dim=0)", r"unsupported amax over dim 0: only the last dimension"),
    ],
)
def test_what_a_sum_over_every_element_cannot_take_is_declined(tmp_path, expr, message):
    body = f"""
    class M(nn.Module):
        def forward(self, a, b):
            return {expr}
    """
    with pytest.raises(Unsupported, match=message):
        _generate(tmp_path, body, "[torch.randn(4, 6), torch.randn(4, 6)]")


# ---------------------------------------------------------------------------
# Batch norm in eval mode: a per-channel affine map over dimension 1

BATCH_NORM = """
class M(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm{d}d(channels)
        with torch.no_grad():
            self.bn.running_mean.copy_(0.1 * torch.randn(channels))
            self.bn.running_var.copy_(1.0 + 0.1 * torch.rand(channels))
            self.bn.weight.add_(0.1 * torch.randn(channels))
            self.bn.bias.add_(0.1 * torch.randn(channels))

    def forward(self, x):
        return torch.relu(self.bn(x))
"""


@pytest.mark.parametrize(
    ("d", "shapes"),
    [(2, [(2, 4, 8, 8), (3, 4, 5, 7), (1, 4, 33, 40)]), (1, [(5, 4), (3, 4, 11), (2, 4, 1500)])],
)
@fresh_python
def test_batch_norm_in_eval_mode_matches_torch(tmp_path, d, shapes):
    example = "torch.randn(2, 4, 8, 8)" if d == 2 else "torch.randn(2, 4, 8)"
    source, name, backward = _generate(tmp_path, BATCH_NORM.format(d=d), f"[{example}]", "[4]")
    assert (name, backward) == ("_batch_norm_relu_kernel", "_batch_norm_relu_bwd_kernel")
    ref, new = _modules(source, (4,))
    assert "self.bn.running_mean" in source and "self.bn.eps" in source  # read at call time
    for shape in shapes:
        _compare(ref, new, torch.randn(shape))
    ref.bn.eps = new.bn.eps = 0.5
    _compare(ref, new, torch.randn(shapes[0]))


BIAS_GELU = """
class M(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return F.gelu(x + self.bias)
"""
CHUNK_SWIGLU = """
class M(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, dim=-1)
        return F.silu(a) * b
"""


@pytest.mark.parametrize(
    ("body", "inputs", "init", "floats"),
    [
        (BATCH_NORM.format(d=2), "[torch.randn(2, 4, 8, 8)]", "[4]", ("bn_eps",)),  # each element's channel
        (BIAS_GELU, "[torch.randn(4, 16)]", "[16]", ()),  # its column (the bias)
        (CHUNK_SWIGLU, "[torch.randn(4, 32)]", "[]", ()),  # its row (where its halves are)
    ],
    ids=["channels", "columns", "halves"],
)
def test_elementwise_kernels_divide_offsets_in_32_bits_where_every_offset_fits(
    tmp_path, body, inputs, init, floats
):
    """An elementwise kernel divides each element's offset for its channel, column or row: in 64 bits
    a subroutine call a division, for every element a thread holds. NARROW (set by the launch where
    every offset and a block past them fit 32 bits) divides in 32; past 2^31 elements the 64-bit code
    still runs. Both compile for an H100/H200, forward and backward."""
    from tests.cuda_compile import compile_for_cuda

    source, name, backward = _generate(tmp_path, body, inputs, init)
    assert backward is not None
    path = tmp_path / "generated.py"
    path.write_text(source, encoding="utf-8")
    namespace: dict[str, Any] = {}
    exec(compile(source, str(path), "exec"), namespace)
    assert_narrow_below_2_31(namespace["_launch_config"])
    assert namespace["_bwd_launch_config"](2**31)[1]["NARROW"] is False
    for kernel in (name, backward):
        narrow, wide = (
            compile_for_cuda(path, kernel, {"BLOCK_SIZE": 1024, "NARROW": flag}, floats=floats)
            for flag in (True, False)
        )
        assert narrow["ok"] and wide["ok"], (narrow, wide)
        assert narrow["calls"] == 0 < wide["calls"], (kernel, narrow, wide)
        assert narrow["instructions"] < wide["instructions"]


@fresh_python
def test_batch_norm_in_training_mode_is_refused(tmp_path):
    source, _, _ = _generate(tmp_path, BATCH_NORM.format(d=2), "[torch.randn(2, 4, 8, 8)]", "[4]")
    _, new = _modules(source, (4,))
    new.train()
    with pytest.raises(NotImplementedError, match="eval mode with running statistics only"):
        new(torch.randn(2, 4, 8, 8))
    body = """
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mean", torch.zeros(4))
            self.register_buffer("var", torch.ones(4))

        def forward(self, x):
            return F.batch_norm(x, self.mean, self.var, training=True)
    """
    with pytest.raises(
        Unsupported, match="unsupported batch_norm in training mode: it normalizes by the batch"
    ):
        _generate(tmp_path, body, "[torch.randn(2, 4, 8, 8)]")


# ---------------------------------------------------------------------------
# Column reductions: a sum over the first dimension of a 2-D input

COLUMN = """
class M(nn.Module):
    def forward(self, x):
        return {expr}
"""
_COLUMN_SHAPES = [(3, 5), (1500, 7), (37, 300), (1, 1)]


@fresh_python
def test_a_column_sum_matches_torch_with_its_gradient(tmp_path):
    source, name, backward = _generate(tmp_path, COLUMN.format(expr="x.sum(dim=0)"), "[torch.randn(48, 40)]")
    assert (name, backward) == ("_column_sum_fwd_kernel", "_column_sum_bwd_kernel")
    ref, new = _modules(source)
    for shape in _COLUMN_SHAPES:
        _compare(ref, new, torch.randn(shape))
    with torch.no_grad():
        x = torch.randn(70, 9)
        assert torch.equal(new(x), new(x))  # no atomics: the same bits every call
        assert new(x.half()).dtype == torch.float16
        assert torch.allclose(new(x.t()), ref(x.t()), atol=1e-5)  # a strided input
    with pytest.raises(NotImplementedError, match="2-D inputs only"):
        new(torch.randn(3, 4, 5))


def test_a_column_sums_backward_divides_in_32_bits_where_every_offset_fits(tmp_path):
    """Each gradient element's column is its offset modulo the columns: in 32 bits where every
    offset fits them (NARROW, set by the op), without the 64-bit modulo's subroutine call."""
    from tests.cuda_compile import compile_for_cuda

    source, _, backward = _generate(tmp_path, COLUMN.format(expr="x.sum(dim=0)"), "[torch.randn(48, 40)]")
    assert backward is not None
    assert "    narrow = n_elements + block_size < 2**31" in source and "NARROW=narrow" in source
    path = tmp_path / "generated.py"
    path.write_text(source, encoding="utf-8")
    narrow, wide = (
        compile_for_cuda(path, backward, {"BLOCK_SIZE": 1024, "NARROW": flag}) for flag in (True, False)
    )
    assert narrow["ok"] and wide["ok"], (narrow, wide)
    assert narrow["calls"] == 0 < wide["calls"], (narrow, wide)


_COLUMN_SPELLINGS = [
    ("x.sum(-2)", "_column_sum_fwd_kernel"),
    ("torch.sum(x, dim=[0], keepdim=True)", "_column_sum_fwd_kernel"),
    ("x.mean(dim=0)", "_column_mean_fwd_kernel"),
    ("torch.mean(x, 0, keepdim=True)", "_column_mean_fwd_kernel"),
]


@pytest.mark.parametrize(("expr", "kernel"), _COLUMN_SPELLINGS)
@fresh_python
def test_column_spellings_match_torch(tmp_path, expr, kernel):
    source, name, _ = _generate(tmp_path, COLUMN.format(expr=expr), "[torch.randn(48, 40)]")
    assert name == kernel
    ref, new = _modules(source)
    for shape in _COLUMN_SHAPES:
        _compare(ref, new, torch.randn(shape))


@pytest.mark.parametrize(
    ("n_rows", "n_cols", "multiprocessors", "want"),
    [
        (16384, 1024, 132, (32, 512)),  # the benchmark's size: 16 blocks of 64 columns x 32 splits
        (16384, 1024, 108, (26, 640)),  # fewer multiprocessors, fewer splits
        (600, 40, 132, (2, 320)),  # a ragged last split: 280 rows
        (512, 3, 132, (2, 256)),  # the shortest input that splits
        (511, 3, 132, (1, 511)),  # short: one split of all the rows
        (48, 40, 132, (1, 48)),
        (16384, 65536, 132, (1, 16384)),  # wide: the columns alone make enough programs
        (0, 5, 132, (1, 0)),
        (7, 0, 132, (1, 7)),
    ],
)
def test_column_splits_come_from_the_shape(n_rows, n_cols, multiprocessors, want):
    assert _column_splits(n_rows, n_cols, multiprocessors) == want


def test_column_splits_cover_the_rows_once_and_make_a_few_programs_per_multiprocessor():
    for n_rows, n_cols in itertools.product((300, 512, 1000, 4097, 16384, 100_000), (1, 40, 1024, 5000)):
        splits, rows = _column_splits(n_rows, n_cols, 132)
        assert (splits - 1) * rows < n_rows <= splits * rows  # every split holds rows; none is left out
        if splits > 1:
            assert rows % 64 == 0 and rows >= 256
            assert -(-n_cols // 64) * (splits - 1) < 4 * 132  # no more splits than ~4 programs per SM take


class _Launches:
    """A kernel standing in for the generated module's own, recording each launch's grid."""

    def __init__(self, kernel: Any) -> None:
        self.kernel, self.grids = kernel, []

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        self.grids.append(grid)
        return self.kernel[grid]


@pytest.mark.parametrize(("expr", "kernel"), _COLUMN_SPELLINGS)
@fresh_python
def test_a_column_reduction_split_over_the_rows_matches_torch(tmp_path, expr, kernel):
    source, _, _ = _generate(tmp_path, COLUMN.format(expr=expr), "[torch.randn(48, 40)]")
    assert "def _column_splits(" in source  # the split is chosen by the code tested above
    ref, new = _modules(source)
    generated = type(new).forward.__globals__
    launches = generated[kernel] = _Launches(generated[kernel])
    with torch.no_grad():
        new(torch.randn(48, 40))
    assert launches.grids == [(1, 1)]  # short: one launch, all the rows
    # Two splits, the second ragged (320 + 280 rows); 4 (320 x 3 + 140) over two blocks of columns;
    # two of exactly 256; 5 of 1500 rows of 7 columns.
    shapes = {(600, 40): (1, 2), (1100, 70): (2, 4), (512, 3): (1, 2), (1500, 7): (1, 5)}
    for shape, grid in shapes.items():
        launches.grids.clear()
        _compare(ref, new, torch.randn(shape))  # float32, and the gradient
        assert launches.grids == [grid, (grid[0], 1)]  # the splits' partial sums, then their sum
    with torch.no_grad():
        for shape in shapes:
            x = torch.randn(shape)
            assert torch.equal(new(x), new(x))  # no atomics: the same bits every call
            x = x.bfloat16()
            got = new(x)
            assert got.dtype == torch.bfloat16 and got.shape == ref(x).shape
            want = ref(x.float()).bfloat16()  # summed in float32, as the kernel does
            torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-4)
            assert torch.equal(got, new(x))


@pytest.mark.parametrize(
    ("expr", "inputs", "message"),
    [
        (
            "x.sum(dim=0)",
            "[torch.randn(4, 6, 5)]",
            r"unsupported sum over dim 0 of a 3-D input: columns of 2-D inputs only "
            r"\(Tensor.sum, node .sum_1.\)",
        ),
        ("x.amax(dim=0)", "[torch.randn(4, 6)]", r"unsupported amax over dim 0: only the last dimension"),
        ("x.var(dim=0)", "[torch.randn(4, 6)]", r"unsupported var over dim 0: only the last dimension"),
        (
            "(x * 2).sum(dim=0)",
            "[torch.randn(4, 6)]",
            r"of a computed value: a column reduction of an input only",
        ),
        ("x.sum(dim=0) * 2", "[torch.randn(4, 6)]", r"followed by other ops"),
        ("x.sum(dim=0, dtype=torch.float64)", "[torch.randn(4, 6)]", r"with dtype="),
    ],
)
def test_what_a_column_reduction_cannot_take_is_declined(tmp_path, expr, inputs, message):
    with pytest.raises(Unsupported, match=message):
        _generate(tmp_path, COLUMN.format(expr=expr), inputs)
