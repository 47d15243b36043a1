"""The template generator: Triton for common patterns, checked by the real engine.

Every class in tests/problems/templates.py goes through ``kernelize run
--generator template`` on the CPU (Triton interpreter), so each generated
kernel is built, compared with a float64 reference on three seeds and on other
shapes, and screened like any other candidate. The CLI runs happen once, side
by side, in a module fixture (each sandbox starts a fresh Python, ~4 s):
float32 over every class of the file plus the README's RMSNorm, float16 and bfloat16
over a few classes (float16 with ``--kernel-only``, so the generated module is
also checked standalone, without the original file around it).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from runners import trace, verify
from runners.discover import find_modules
from runners.generators import AVAILABLE, make_generator
from runners.generators.base import Problem
from runners.generators.template import TemplateGenerator, Unsupported, render_module
from runners.judge import COMPILE_KERNELS, TRAINING_ORIGINAL, TRAINING_TRITON, TRAINING_UNCHECKED
from runners.pipeline import problems_for
from runners.source import class_parts

# The module fixture below runs the CLI over every class before the first test: more than
# pytest's default limit on a loaded two-core machine.
pytestmark = pytest.mark.timeout(1500)

ROOT = Path(__file__).resolve().parents[2]
FILE = "tests/problems/templates.py"
INTERPRET = {"TRITON_INTERPRET": "1"}

SUPPORTED = {
    # class: the kernel it gets
    "BiasGeluScale": "_add_gelu_mul_gelu_tanh_kernel",
    "ResidualRelu": "_add_relu_mul_sub_kernel",
    "Activations": "_silu_sigmoid_tanh_mul_kernel",
    "ClampWhere": "_gt_mul_where_le_kernel",
    "Casts": "_mul_sub_sigmoid_kernel",
    "LtMask": "_mul_lt_kernel",
    "ScaledSoftmax": "_softmax_fwd_kernel",
    "LogSoftmax": "_log_softmax_fwd_kernel",
    "HandSoftmax": "_max_sum_fwd_kernel",
    "ResidualLayerNorm": "_add_layer_norm_fwd_kernel",
    "FunctionalLayerNorm": "_layer_norm_fwd_kernel",
    "HandRMSNorm": "_rms_norm_fwd_kernel",
    "TorchRMSNorm": "_rms_norm_fwd_kernel",
    "MeanVarNorm": "_mean_var_fwd_kernel",
    "NormAct": "_layer_norm_fwd_kernel",
    "RowSum": "_sum_amax_amin_fwd_kernel",
    "ChunkSwiGLU": "_silu_mul_kernel",
    "SplitGeGLU": "_add_gelu_mul_kernel",
    "SliceGeGLU": "_gelu_tanh_mul_kernel",
    "TorchChunkSwiGLU": "_sigmoid_mul_kernel",
    "SeparateSwiGLU": "_silu_mul_kernel",
    "GatedRMSNorm": "_rms_norm_fwd_kernel",
    "SmoothActivations": "_erf_relu_square_mul_kernel",
    "ClippedGelu": "_gelu_tanh_clamp_kernel",
    "DtypeBranchNorm": "_rms_norm_fwd_kernel",
    "ColumnBias": "_relu_add_kernel",  # a (16, 1) buffer read through its broadcast strides
}
# Supported classes whose kernel gets no backward (a boolean output has no gradient): training keeps
# the original path. Every other one gets a fused Triton backward.
NO_BACKWARD = {"LtMask"}
# Matrix products (runners/generators/template/products.py): one GEMM kernel per product with what follows it
# fused; forward only, so training keeps the original path (tests/runners/test_gemm_template.py).
MATRIX = {"Linear", "MatMul"}

DECLINED = {
    # class: what the report says, in order
    "ColumnSum": ["generator: template: ", "unsupported sum over dim 0", "Tensor.sum, node 'sum_1'"],
    "DataDependent": ["generator: template: ", "torch.fx cannot trace forward", "control flow"],
    "ChunkDim0": ["generator: template: ", "unsupported chunk over dim 0", "Tensor.chunk, node 'chunk'"],
    "ChunkThree": ["generator: template: ", "unsupported chunk into 3 pieces", "Tensor.chunk, node 'chunk'"],
}
# The bfloat16 runs pass in the interpreter too (Triton emulates bf16 there).
HALF = {
    "float16": ["ResidualLayerNorm", "HandRMSNorm", "Casts", "ClampWhere", "ChunkSwiGLU", "SliceGeGLU"],
    "bfloat16": [
        "ScaledSoftmax",
        "BiasGeluScale",
        "TorchRMSNorm",
        "SplitGeGLU",
        "SeparateSwiGLU",
        "GatedRMSNorm",
    ],
}


def _run(cli: Any, out: Path, args: list[str]) -> dict[str, Any]:
    """``kernelize run ARGS --generator template`` on the CPU: the report's modules by target."""
    json_path = out / "report.json"
    options = ["--generator", "template", "--device", "cpu", "--json", str(json_path), "--quiet"]
    rc, _, stderr = cli(["run", *args, *options], env=INTERPRET)
    assert rc == 0, stderr
    assert "Traceback" not in stderr
    report = json.loads(json_path.read_text(encoding="utf-8"))
    return {m["target"].removeprefix("tests/problems/"): m for m in report["modules"]}


@pytest.fixture(scope="module")
def runs(cli, tmp_path_factory) -> dict[str, dict[str, Any]]:
    """dtype -> target (``templates.py::Casts``) -> the module's report.

    The float32 classes go in two runs side by side (one module at a time each): one run over the
    whole file held the fixture near nine minutes on two cores while the half-precision runs had
    long finished."""
    every = sorted(m.name for m in find_modules((ROOT / FILE).read_text(), FILE))
    jobs = {
        "float32-a": [*(f"{FILE}::{c}" for c in every[0::2]), "tests/problems/layers.py::RMSNorm"],
        "float32-b": [f"{FILE}::{c}" for c in every[1::2]],
        "float16": [*(f"{FILE}::{c}" for c in HALF["float16"]), "--dtype", "float16", "--kernel-only"],
        "bfloat16": [*(f"{FILE}::{c}" for c in HALF["bfloat16"]), "--dtype", "bfloat16"],
    }
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {k: pool.submit(_run, cli, tmp_path_factory.mktemp(k), args) for k, args in jobs.items()}
        done: dict[str, dict[str, Any]] = {}
        for k, f in futures.items():
            done.setdefault(k.split("-")[0], {}).update(f.result())
        return done


def _only_candidate(module: dict[str, Any]) -> dict[str, Any]:
    assert len(module["candidates"]) == 1, module["candidates"]
    cand: dict[str, Any] = module["candidates"][0]
    assert cand["generator"] == "template"
    return cand


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_supported_module_gets_a_correct_kernel(runs, name):
    module = runs["float32"][f"templates.py::{name}"]
    cand = _only_candidate(module)
    assert cand["status"] == "correct", cand["reason"]
    assert cand["id"] == SUPPORTED[name].strip("_")
    assert cand["provenance"]["kernel"] == SUPPORTED[name]
    assert cand["triton_launches"] == 1  # one fused kernel
    assert cand["torch_ops_kept"] == []  # nothing left to PyTorch
    assert len(cand["shapes_checked"]) > 3  # the example shape, then other batch and row sizes
    assert module["best"] == cand["id"]
    # The suggestion names its helpers for the class, so two suggestions for one file never clash.
    assert f"def {SUPPORTED[name]}_{name}(" in module["best_source"]
    # Compiled, the kernels stay: their launches are custom ops (the judge's compiled calls passed).
    assert cand["compiled"] == COMPILE_KERNELS, cand["compiled"]
    # Training: the kernels' autograd.Function, its gradients checked by the judge; or the original.
    if name in NO_BACKWARD:
        assert cand["training"] == TRAINING_ORIGINAL
        assert "backward" not in cand["provenance"]
    else:
        assert cand["training"] == TRAINING_TRITON, cand["training"]
        backward = cand["provenance"]["backward"]
        assert backward.endswith("_bwd_kernel")
        assert f"def {backward}_{name}(" in module["best_source"]


@pytest.mark.parametrize(
    ("dtype", "name"), [(dtype, name) for dtype, names in HALF.items() for name in names]
)
def test_half_precision(runs, dtype, name):
    cand = _only_candidate(runs[dtype][f"templates.py::{name}"])
    assert cand["status"] == "correct", cand["reason"]
    assert cand["max_abs_error"] is not None
    # float16 runs --kernel-only (no original path, no gradients checked); bfloat16 with both.
    assert cand["training"] == (TRAINING_UNCHECKED if dtype == "float16" else TRAINING_TRITON)


def test_readme_target(runs):
    """``kernelize run tests/problems/layers.py::RMSNorm --generator template``."""
    module = runs["float32"]["layers.py::RMSNorm"]
    cand = _only_candidate(module)
    assert cand["status"] == "correct", cand["reason"]
    assert cand["provenance"]["kernel"] == "_rms_norm_fwd_kernel"
    assert module["build_source"] == "guess"


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_declined_module_names_the_op(runs, name):
    module = runs["float32"][f"templates.py::{name}"]
    cand = _only_candidate(module)
    assert cand["status"] == "error"
    pos = 0
    for fragment in DECLINED[name]:
        found = cand["reason"].find(fragment, pos)
        assert found >= 0, f"{fragment!r} not in {cand['reason']!r}"
        pos = found
    assert module["best"] is None


@pytest.mark.parametrize("name", sorted(MATRIX))
def test_matrix_product_module_gets_a_correct_kernel(runs, name):
    cand = _only_candidate(runs["float32"][f"templates.py::{name}"])
    assert cand["status"] == "correct", cand["reason"]
    assert cand["training"].startswith("original path")


def test_every_class_in_the_file_is_covered(runs):
    classes = {m.name for m in find_modules((ROOT / FILE).read_text(), FILE)}
    assert classes == {*SUPPORTED, *DECLINED, *MATRIX}
    assert set(runs["float32"]) == {*(f"templates.py::{c}" for c in classes), "layers.py::RMSNorm"}


# ---------------------------------------------------------------------------
# In-process: determinism, and what the code is made of


def _prepared(file: str, class_name: str) -> Problem:
    (problem,), _ = problems_for(str(ROOT / file), str(ROOT), class_name)
    req = {
        "device": "cpu",
        "file": problem.file,
        "root": problem.root,
        "class_name": class_name,
        "dtype": None,
    }
    prep = verify.prepare(req)
    assert prep["ok"], prep
    problem.build = prep["build"]
    return problem


@pytest.fixture(scope="module")
def rms_norm_problem() -> Problem:
    return _prepared("tests/problems/layers.py", "RMSNorm")


@pytest.fixture(scope="module")
def swiglu_problem() -> Problem:
    return _prepared(FILE, "ChunkSwiGLU")


@pytest.mark.parametrize("fixture", ["rms_norm_problem", "swiglu_problem"])
def test_generating_twice_gives_the_same_code(fixture, request):
    problem = request.getfixturevalue(fixture)
    first = TemplateGenerator().generate(problem, 1)
    second = TemplateGenerator().generate(problem, 4)  # n means nothing to it
    assert len(first) == len(second) == 1
    assert first[0].source == second[0].source
    assert first[0].sha256 == second[0].sha256


def test_generated_code_reads_like_a_kernel_library(rms_norm_problem):
    (cand,) = TemplateGenerator().generate(rms_norm_problem, 1)
    source = cand.source
    ast.parse(source)
    assert verify.screen_source(source) is None
    for line in ("import torch", "import triton", "import triton.language as tl", "import torch.nn as tnn"):
        assert line in source.splitlines()
    assert "def _launch_config(n_rows, n_cols, on_cuda):" in source
    assert (
        "@triton.jit\ndef _rms_norm_fwd_kernel(x_ptr, weight_ptr, out_ptr, n_cols, eps, BLOCK_SIZE" in source
    )
    assert "tl.where(mask, pow_1, 0.0)" in source  # masked lanes are neutral for the sum
    assert ".to(out_ptr.dtype.element_ty)" in source
    # The constructor is the original's, verbatim; eps is read from the instance at call time.
    original = (ROOT / "tests/problems/layers.py").read_text()
    init = "    def __init__(self, dim: int, eps: float = 1e-6):"
    assert init in original and init in source
    assert "self.weight = tnn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))" in source
    # Each launch is a custom op with a fake (torch.compile calls it as one op, shapes from the fake).
    assert (
        "@_custom_op\ndef _rms_norm_fwd(x: torch.Tensor, weight: torch.Tensor, eps: torch.types.Number)"
        in source
    )
    assert "    kernel[grid](x_2d, weight, out, n_cols, eps, **config)" in source
    assert "@_rms_norm_fwd.register_fake\ndef _rms_norm_fwd_fake(x, weight, eps):" in source
    assert "@_rms_norm_bwd.register_fake" in source
    # Autograd takes the Function; inference (nothing requires grad) the forward op alone.
    assert (
        "        if torch.is_grad_enabled() and any(t.requires_grad for t in (x, self.weight)):\n"
        "            return _RmsNormFunction.apply(x, self.weight, self.eps)\n"
    ) in source
    assert "        return _rms_norm_fwd(x, self.weight, self.eps)\n" in source
    assert "1e-06" not in source
    # The backward beside it, as an autograd.Function (Liger-Kernel's layout).
    assert "class _RmsNormFunction(torch.autograd.Function):" in source
    assert (
        "def _rms_norm_bwd_kernel(" in source and "def _bwd_launch_config(n_rows, n_cols, device):" in source
    )
    assert "        ctx.save_for_backward(x, weight)" in source
    assert "d_weight.sum(0).to(weight.dtype).reshape(weight.shape)" in source
    assert cand.provenance["backward"] == "_rms_norm_bwd_kernel"
    # The same module without the backward, for when its gradients are wrong: the forward alone.
    assert cand.without_backward is not None and "backward" not in cand.without_backward
    assert "    kernel[grid](x_2d, weight, out, n_cols, eps, **config)" in cand.without_backward
    assert "        return _rms_norm_fwd(x, self.weight, self.eps)" in cand.without_backward


def test_split_halves_are_read_from_one_input(swiglu_problem):
    """``a, b = x.chunk(2, dim=-1)``: one pointer, the second half n_cols further along each row."""
    (cand,) = TemplateGenerator().generate(swiglu_problem, 1)
    source = cand.source
    assert verify.screen_source(source) is None
    kernel = next(f for f in ast.walk(ast.parse(source)) if getattr(f, "name", "") == "_silu_mul_kernel")
    assert isinstance(kernel, ast.FunctionDef)
    params = [a.arg for a in kernel.args.args]
    assert params == ["x_ptr", "out_ptr", "n_elements", "n_cols", "N_BUCKET", "BLOCK_SIZE", "NARROW"]
    # Each element's row is divided out of its offset in 32 bits where every offset fits (NARROW).
    assert "    index = offsets.to(tl.int32) if NARROW else offsets" in source
    assert "    split_offsets = offsets + (index // n_cols) * n_cols" in source
    assert "tl.load(x_ptr + split_offsets, mask=mask, other=0.0)" in source
    assert "tl.load(x_ptr + split_offsets + n_cols, mask=mask, other=0.0)" in source
    assert "        if x.shape[-1] % 2 != 0:" in source  # odd widths raise instead of misreading
    assert "    out = torch.empty((*x.shape[:-1], n_cols), dtype=x.dtype, device=x.device)" in source
    assert "    kernel[grid](x, out, n_elements, n_cols, **config)" in source


# The launch checks run in a fresh Python with TRITON_INTERPRET=1 set before Triton is imported (the
# interpreter only takes over kernels defined after that). The CUDA branch of ``_launch_config`` is taken
# by showing the generated module an interpreted kernel as its ``triton.JITFunction`` (Triton itself is
# left alone), and the autotuner times nothing: there are no GPU timers, so every config runs once and
# counts as equally fast.
_LAUNCH_CHECK = """
import json, sys, types
import torch
import triton

source, name, kind = sys.argv[1:]
ns = {}
exec(compile(open(source).read(), "generated.py", "exec"), ns)
if kind == "short rows":
    name += "_rows"
kernel, tuned, launch_config = ns[name], ns[name + "_autotuned"], ns["_launch_config"]
report = {"configs": [[c.kwargs, c.num_warps] for c in tuned.configs]}
torch.manual_seed(0)
if kind == "pointwise":  # ChunkSwiGLU on (3, 5, 98)
    x = torch.randn(3, 5, 98)
    a, b = x.chunk(2, dim=-1)
    expected, out = torch.nn.functional.silu(a) * b, torch.empty(3, 5, 49)
    size, args = (out.numel(),), (x, out, out.numel(), 49)
    report["forward_error"] = (ns["ChunkSwiGLU"]()(x) - expected).abs().max().item()
else:  # RMSNorm over 6 rows of 97 (short rows) or of 1500
    n_cols = 97 if kind == "short rows" else 1500
    x, weight, out = torch.randn(6, n_cols), torch.randn(n_cols), torch.empty(6, n_cols)
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
    size, args = (6, n_cols), (x, weight, out, n_cols, 1e-6)
report["autotuner_ran"] = bool(tuned.cache)
chosen, grid, config = launch_config(*size, True)
report["interpreted_launch"] = [chosen is kernel, grid, config]

compiled = types.ModuleType("triton")
compiled.__dict__.update(vars(triton))
compiled.JITFunction = type(kernel)
ns["triton"] = compiled
report["cpu_tensors_launch_plainly"] = launch_config(*size, False)[0] is kernel
chosen, grid, config = launch_config(*size, True)
report["compiled_launch"] = [chosen is tuned, config]
report["grid_for_512"] = grid({"BLOCK_SIZE": 512, "ROWS": 4}) if callable(grid) else grid
def bench(fn, quantiles):
    fn()
    return [1.0, 1.0, 1.0]
tuned._do_bench = bench
chosen[grid](*args, **config)
report["tuned_error"] = (out - expected).abs().max().item()
report["best_is_a_config"] = tuned.best_config in tuned.configs
print(json.dumps(report))
"""


def _check_launches(source: str, kernel: str, kind: str, tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "generated.py"
    path.write_text(source, encoding="utf-8")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    args = [sys.executable, "-c", _LAUNCH_CHECK, str(path), kernel, kind]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


def test_pointwise_launch_is_autotuned_on_cuda_and_plain_in_the_interpreter(swiglu_problem, tmp_path):
    (cand,) = TemplateGenerator().generate(swiglu_problem, 1)
    assert "_silu_mul_kernel_autotuned = triton.autotune(" in cand.source
    assert 'key=["N_BUCKET"]' in cand.source
    report = _check_launches(cand.source, "_silu_mul_kernel", "pointwise", tmp_path)
    tuned = [[{"BLOCK_SIZE": b}, w] for b in (512, 1024, 2048, 4096) for w in (4, 8)]
    assert report["configs"] == tuned
    # Through forward on CPU tensors, interpreted: right, and the plain launch (nothing was tuned).
    assert report["forward_error"] < 1e-5
    assert report["autotuner_ran"] is False
    plain = {"BLOCK_SIZE": 1024, "num_warps": 4, "N_BUCKET": 1024, "NARROW": True}
    assert report["interpreted_launch"] == [True, [1], plain]
    # Compiled for CUDA: the autotuned kernel, its grid reading the chosen BLOCK_SIZE (735 / 512).
    assert report["cpu_tensors_launch_plainly"] is True
    assert report["compiled_launch"] == [True, {"N_BUCKET": 1024, "NARROW": True}]  # 735 elements: 1024
    assert report["grid_for_512"] == [2]
    assert report["tuned_error"] < 1e-5
    assert report["best_is_a_config"] is True


def test_row_launch_is_autotuned_over_warps_on_cuda(rms_norm_problem, tmp_path):
    (cand,) = TemplateGenerator().generate(rms_norm_problem, 1)
    assert "_rms_norm_fwd_kernel_autotuned = triton.autotune(" in cand.source
    assert 'key=["n_cols"]' in cand.source
    report = _check_launches(cand.source, "_rms_norm_fwd_kernel", "row", tmp_path)
    assert report["configs"] == [[{}, w] for w in (4, 8, 16, 32)]
    assert report["interpreted_launch"] == [True, [6], {"BLOCK_SIZE": 2048, "num_warps": 8}]
    assert report["cpu_tensors_launch_plainly"] is True
    assert report["compiled_launch"] == [True, {"BLOCK_SIZE": 2048}]  # the whole row; the warps tuned
    assert report["grid_for_512"] == [6]
    assert report["tuned_error"] < 1e-5
    assert report["best_is_a_config"] is True


def test_short_rows_launch_several_rows_a_program_tuned_on_cuda(rms_norm_problem, tmp_path):
    """Rows of 97 (128 with the mask) go to the twin over ROWS rows a program: 4 under the
    interpreter (6 rows: two programs, the second's last two rows masked), tuned over ROWS and warps
    on CUDA, keyed on the row length and the rows' power of two."""
    (cand,) = TemplateGenerator().generate(rms_norm_problem, 1)
    assert "_rms_norm_fwd_kernel_rows_autotuned = triton.autotune(" in cand.source
    assert 'key=["n_cols", "ROWS_BUCKET"]' in cand.source
    report = _check_launches(cand.source, "_rms_norm_fwd_kernel", "short rows", tmp_path)
    assert report["configs"] == [[{"ROWS": r}, w] for r in (1, 2, 4, 8, 16, 32, 64) for w in (1, 2, 4, 8, 16)]
    settings = {"BLOCK_SIZE": 128, "n_rows": 6, "ROWS_BUCKET": 8, "ROWS_NARROW": True}
    assert report["interpreted_launch"] == [True, [2], {**settings, "ROWS": 4, "num_warps": 4}]
    assert report["cpu_tensors_launch_plainly"] is True
    assert report["compiled_launch"] == [True, settings]
    assert report["grid_for_512"] == [2]  # the grid reads the tuned ROWS
    assert report["tuned_error"] < 1e-5
    assert report["best_is_a_config"] is True


def test_trace_marks_numbers_read_from_the_module(rms_norm_problem):
    req = {"file": rms_norm_problem.file, "root": rms_norm_problem.root, "class_name": "RMSNorm"}
    graph = trace.trace({**req, "build": rms_norm_problem.build})
    assert graph["ok"], graph
    add = next(n for n in graph["nodes"] if n["name"] == "add")
    assert add["args"] == [{"node": "mean"}, {"attr": "eps", "value": 1e-06}]
    assert add["shape"] == [2, 16, 1]
    weight = next(n for n in graph["nodes"] if n["op"] == "get_attr")
    assert weight == {
        "name": "weight",
        "op": "get_attr",
        "target": "weight",
        "kind": "parameter",
        "shape": [64],
        "dtype": "float32",
    }


def test_trace_refuses_a_graph_that_depends_on_an_attribute(tmp_path):
    path = tmp_path / "gated.py"
    path.write_text(
        textwrap.dedent(
            """
            import torch

            class Gated(torch.nn.Module):
                def __init__(self, scale=2.0):
                    super().__init__()
                    self.scale = scale

                def forward(self, x):
                    return x * 3.0 if self.scale > 1.0 else x
            """
        )
    )
    spec = {"tensor": {"shape": [4, 8], "dtype": "float32", "dist": "normal"}}
    build = {"source": "guess", "init_args": [], "init_kwargs": {}, "inputs": [spec]}
    req = {"file": str(path), "root": str(tmp_path), "class_name": "Gated", "build": build}
    assert trace.trace(req) == {
        "ok": False,
        "reason": "forward's structure depends on self.scale (another value traces another graph)",
    }


def test_template_is_registered():
    assert "template" in AVAILABLE
    assert isinstance(make_generator("template", {}), TemplateGenerator)


# ---------------------------------------------------------------------------
# Pure parts, on plain values


def _problem(source: str, name: str) -> Problem:
    module = next(m for m in find_modules(source, "m.py") if m.name == name)
    return Problem("/x/m.py", "/x", "m.py", name, source, module, build={"inputs": []})


def _node(name: str, op: str, target: str, *args: Any, shape: list[int] | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {"name": name, "op": op, "target": target, "args": list(args), "kwargs": {}}
    if shape is not None:
        node.update(shape=shape, dtype="float32")
    return node


SOURCE = textwrap.dedent(
    """
    import torch
    import torch.nn as tnn
    from mypkg import make_weight

    SIZE = 4
    OFFSET = SIZE * 2

    def _ones(n):
        return torch.ones(n + OFFSET)

    class Shift(tnn.Module):
        scale = 2.0

        def __init__(self, dim):
            super().__init__()
            self.weight = tnn.Parameter(_ones(dim))

        def forward(self, x):
            return x + self.weight

    class Loaded(tnn.Module):
        def __init__(self, dim):
            super().__init__()
            self.weight = tnn.Parameter(make_weight(dim))

        def forward(self, x):
            return x
    """
)


def test_constructor_brings_what_it_needs_from_its_file():
    parts = class_parts(SOURCE, "Shift")
    assert parts.context == [
        "import torch",
        "import torch.nn as tnn",
        "SIZE = 4",
        "OFFSET = SIZE * 2",
        "def _ones(n):\n    return torch.ones(n + OFFSET)",
    ]
    assert parts.members[0] == "scale = 2.0"
    assert parts.members[1].startswith("def __init__(self, dim):\n    super().__init__()")
    assert parts.signature == "self, x"


def test_a_constructor_that_needs_another_package_uses_the_files_own_import():
    """``from mypkg import make_weight`` (transformers' ``from ..activations import ACT2FN``): the
    suggestion lives in that file and is checked in its namespace, so the name is the file's own,
    never imported again by the generated code (the import screen sees no new import)."""
    parts = class_parts(SOURCE, "Loaded")
    assert parts.context == ["import torch.nn as tnn"]
    assert "make_weight(dim)" in parts.members[0]


def test_unsupported_op_is_named_with_its_node():
    trace = {
        "ok": True,
        "direct_module": True,
        "nodes": [
            _node("x", "placeholder", "x", shape=[8, 32]),
            _node("mm", "call_function", "torch.mm", {"node": "x"}, {"node": "x"}, shape=[8, 8]),
            _node("output", "output", "output", {"node": "mm"}),
        ],
    }
    with pytest.raises(Unsupported, match=r"^unsupported op torch\.mm \(node 'mm'\)$"):
        render_module(_problem(SOURCE, "Shift"), trace)


def test_a_row_vector_broadcasts_and_anything_else_is_declined():
    def trace(bias_shape: list[int]) -> dict[str, Any]:
        return {
            "ok": True,
            "direct_module": True,
            "nodes": [
                _node("x", "placeholder", "x", shape=[8, 32]),
                {**_node("weight", "get_attr", "weight", shape=bias_shape), "kind": "parameter"},
                _node(
                    "add", "call_function", "operator.add", {"node": "x"}, {"node": "weight"}, shape=[8, 32]
                ),
                _node("output", "output", "output", {"node": "add"}),
            ],
        }

    source, kernel, _ = render_module(_problem(SOURCE, "Shift"), trace([32]))
    assert kernel == "_add_kernel"
    assert "cols = index % n_cols" in source  # index: the offsets, in 32 bits where they fit
    assert "weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)" in source
    source, kernel, _ = render_module(_problem(SOURCE, "Shift"), trace([8, 1]))  # read by its strides
    assert "coord_0 * weight_stride_0 + coord_1 * weight_stride_1" in source
    with pytest.raises(Unsupported, match=r"unsupported broadcast: weight has shape \[4, 32\]"):
        render_module(_problem(SOURCE, "Shift"), trace([4, 32]))


def _split_trace(*nodes: dict[str, Any]) -> dict[str, Any]:
    """x of shape [8, 32] taken apart into halves of [8, 16] by ``nodes``, which end in ``out``."""
    return {
        "ok": True,
        "direct_module": True,
        "nodes": [
            _node("x", "placeholder", "x", shape=[8, 32]),
            *nodes,
            _node("output", "output", "output", {"node": "out"}),
        ],
    }


def _index(*bounds: Any) -> list[dict[str, Any]]:
    """``x[..., start:stop]`` as the trace writes it."""
    return [{"ellipsis": True}, {"slice": list(bounds)}]


def test_split_input_used_whole_as_well_is_declined():
    trace = _split_trace(
        {**_node("chunk", "call_method", "Tensor.chunk", {"node": "x"}, 2, -1), "shapes": [[8, 16], [8, 16]]},
        _node("a", "call_function", "operator.getitem", {"node": "chunk"}, 0, shape=[8, 16]),
        _node("b", "call_function", "operator.getitem", {"node": "chunk"}, 1, shape=[8, 16]),
        _node("mul", "call_function", "operator.mul", {"node": "a"}, {"node": "b"}, shape=[8, 16]),
        _node("total", "call_method", "Tensor.sum", {"node": "x"}, -1, True, shape=[8, 1]),
        _node("out", "call_function", "operator.add", {"node": "mul"}, {"node": "total"}, shape=[8, 16]),
    )
    with pytest.raises(Unsupported, match=r"^unsupported use of x whole: .* \(Tensor\.sum, node 'total'\)$"):
        render_module(_problem(SOURCE, "Shift"), trace)


@pytest.mark.parametrize(
    ("index", "shape", "message"),
    [
        (
            _index(8, 24, None),
            [8, 16],
            r"unsupported slice \[8:24\] of the last dimension: only its two halves",
        ),
        (_index(None, 16, 2), [8, 8], r"unsupported slice step 2"),
        ([{"slice": [0, 4, None]}, {"slice": [16, None, None]}], [4, 16], r"unsupported slicing of dim 0"),
    ],
)
def test_slices_other_than_the_two_halves_are_declined(index, shape, message):
    trace = _split_trace(
        _node("a", "call_function", "operator.getitem", {"node": "x"}, _index(None, 16, None), shape=[8, 16]),
        _node("b", "call_function", "operator.getitem", {"node": "x"}, index, shape=shape),
        _node("out", "call_function", "operator.mul", {"node": "a"}, {"node": "b"}, shape=[8, 16]),
    )
    with pytest.raises(Unsupported, match=message + r".*\(operator\.getitem, node 'b'\)$"):
        render_module(_problem(SOURCE, "Shift"), trace)


def test_split_sizes_read_from_the_module_are_checked_at_call_time():
    """``x[..., :self.hidden]`` and ``x[..., self.hidden:]``: both halves; forward refuses other widths."""
    hidden = {"attr": "hidden", "value": 16}
    trace = _split_trace(
        _node(
            "a", "call_function", "operator.getitem", {"node": "x"}, _index(None, hidden, None), shape=[8, 16]
        ),
        _node(
            "b", "call_function", "operator.getitem", {"node": "x"}, _index(hidden, None, None), shape=[8, 16]
        ),
        _node("out", "call_function", "operator.mul", {"node": "a"}, {"node": "b"}, shape=[8, 16]),
    )
    source, kernel, _ = render_module(_problem(SOURCE, "Shift"), trace)
    assert kernel == "_mul_kernel"
    assert "        if x.shape[-1] != 2 * self.hidden:" in source
    assert "x_first_half * x_second_half" in source


def test_subclass_of_another_module_is_declined():
    trace = {"ok": True, "direct_module": False, "bases": ["m.Base"], "nodes": []}
    with pytest.raises(Unsupported, match=r"derives from m\.Base"):
        render_module(_problem(SOURCE, "Shift"), trace)


# ---------------------------------------------------------------------------
# The generated backward, numerically: every autograd.Function against the eager module's gradients

# Run in a fresh Python with TRITON_INTERPRET=1 (as the launch checks above). For each class: the
# template's module and the original with the same weights, on the judge's input families (the
# judge itself records gradients on two of them); the gradients of every floating input and
# parameter for one upstream gradient, compared with the original's float64 gradients under the
# judge's tolerance table, in the dtype the inputs are cast to. A family on which the original's
# float64 outputs or gradients are not finite is skipped, as the judge does.
# What both subprocess checks start from: one class of the file, built as the judge builds it, and the
# template's module for it.
_GENERATE = """
import copy, json, sys
import torch
from runners import trace, verify
from runners.generators.template import render_module_with_backward
from runners.pipeline import problems_for


def generate(root, file, name):
    \"\"\"(the original as the judge builds it, the template's source, its backward kernel or None).\"\"\"
    (problem,), _ = problems_for(f"{root}/{file}", root, name)
    req = {"device": "cpu", "file": problem.file, "root": root, "class_name": name, "dtype": None}
    problem.build = verify.prepare(req)["build"]
    source, _, _, backward = render_module_with_backward(
        problem, trace.trace({**req, "build": problem.build})
    )
    return verify.BuiltModule(req, problem.build), source, backward
"""
_GRADIENT_CHECK = (
    _GENERATE
    + """
from runners.judge import _large, _strided, _transposed, _zero_negative_rows

root, file, dtype_name, *classes = sys.argv[1:]
dtype = getattr(torch, dtype_name)
families = {
    "normal": lambda v: v,
    "large magnitudes": lambda v: _large(v, torch.Generator().manual_seed(1)),
    "zero and all-negative rows": _zero_negative_rows,
    "strided views": _strided,
    "transposed views": _transposed,
}
report = {}
for name in classes:
    ref, source, backward = generate(root, file, name)
    ns = {}
    exec(compile(source, f"{name}.py", "exec"), ns)
    cand = ns[name](*ref.init_args, **ref.init_kwargs).eval().to(dtype)
    cand.load_state_dict(ref.module.state_dict())
    original, original64 = copy.deepcopy(ref.module).to(dtype), copy.deepcopy(ref.module).double()
    results = report.setdefault(name, {"backward": backward})
    for family, make in families.items():
        args = [make(a.to(dtype)) if a.is_floating_point() else a for a in ref.example_inputs(11)]
        runs = []
        for module, cast in ((cand, None), (original, None), (original64, torch.float64)):
            leaves = [
                a.detach().to(cast or a.dtype).requires_grad_(True) if a.is_floating_point() else a
                for a in args
            ]
            out = module(*leaves)
            up = torch.randn(out.shape, generator=torch.Generator().manual_seed(7)).to(out.dtype)
            wrt = [a for a in leaves if a.requires_grad] + list(module.parameters())
            grads = torch.autograd.grad(out, wrt, up, allow_unused=True)
            runs.append([torch.zeros_like(w) if g is None else g for g, w in zip(grads, wrt)])
            if module is cand:
                fn = type(out.grad_fn).__name__ if out.grad_fn is not None else ""
                results.setdefault("history", fn.endswith("FunctionBackward"))
        got, native, ref64 = runs
        if not all(bool(torch.isfinite(g).all()) for g in ref64):
            results[family] = "skipped"
            continue
        try:
            verify.compare(got, ref64, native, family, False, "cpu")
            results[family] = "ok"
        except verify.Mismatch as exc:
            results[family] = str(exc)
print(json.dumps(report))
"""
)
GRADIENTS = {
    "float32": [*sorted(set(SUPPORTED) - NO_BACKWARD), "layers.py::RMSNorm"],
    "bfloat16": ["TorchRMSNorm", "ResidualLayerNorm", "ScaledSoftmax", "SplitGeGLU"],
}


@pytest.fixture(scope="module")
def gradients() -> dict[str, dict[str, dict[str, Any]]]:
    """dtype -> class -> family -> "ok", "skipped" or the mismatch."""
    env = {**os.environ, **INTERPRET}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for dtype, names in GRADIENTS.items():
        for file in (FILE, "tests/problems/layers.py"):
            chosen = [
                n.split("::")[-1] for n in names if (n.startswith("layers.py")) == file.endswith("layers.py")
            ]
            if not chosen:
                continue
            args = [sys.executable, "-c", _GRADIENT_CHECK, str(ROOT), file, dtype, *chosen]
            done = subprocess.run(
                args, env=env, capture_output=True, text=True, timeout=600, check=False, cwd=ROOT
            )
            assert done.returncode == 0, done.stderr[-3000:]
            out.setdefault(dtype, {}).update(json.loads(done.stdout.splitlines()[-1]))
    return out


@pytest.mark.parametrize(
    ("dtype", "name"), [(d, n.split("::")[-1]) for d, names in GRADIENTS.items() for n in names]
)
def test_generated_backward_matches_the_original_gradients(gradients, dtype, name):
    result = gradients[dtype][name]
    assert result.pop("backward", "").endswith("_bwd_kernel")
    assert result.pop("history") is True  # the output's grad_fn is the kernels' Function
    failed = {family: why for family, why in result.items() if why not in ("ok", "skipped")}
    assert not failed, failed
    assert result["normal"] == "ok" and result["strided views"] == "ok"


# ---------------------------------------------------------------------------
# torch.compile: a small model around each generated module, compiled with fullgraph=True (a graph
# break or a launch Dynamo cannot trace fails), against the eager original with the same weights:
# outputs without autograd, then outputs and the gradients of inputs and parameters with it.
_COMPILE_CHECK = (
    _GENERATE
    + """
import importlib, pathlib, tempfile

root, file, backend, *classes = sys.argv[1:]
out_dir = pathlib.Path(tempfile.mkdtemp())
sys.path.insert(0, str(out_dir))


class Model(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        args = [a * 1.5 if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
        out = self.inner(*args)
        return out * 2 if out.is_floating_point() else out


report = {}
for name in classes:
    ref, source, backward = generate(root, file, name)
    (out_dir / f"generated_{name}.py").write_text(source)  # imported, as the user's file would be
    generated = importlib.import_module(f"generated_{name}")
    cand = getattr(generated, name)(*ref.init_args, **ref.init_kwargs).eval()
    cand.load_state_dict(ref.module.state_dict())
    torch._dynamo.reset()  # a fresh cache per class: each is a model of its own
    compiled = torch.compile(Model(cand), fullgraph=True, backend=backend)
    original = Model(copy.deepcopy(ref.module).eval())
    results = report.setdefault(name, {})
    args = ref.example_inputs(3)
    try:
        with torch.no_grad():
            want = [original(*args)]
            verify.compare([compiled(*args)], want, want, "no grad", False, "cpu")
        results["inference"] = "ok"
        if backward is None:
            continue
        runs = []
        for model in (compiled, original):
            leaves = [a.detach().clone().requires_grad_(True) if a.is_floating_point() else a for a in args]
            out = model(*leaves)
            wrt = [a for a in leaves if a.requires_grad] + list(model.parameters())
            up = torch.randn(out.shape, generator=torch.Generator().manual_seed(5)).to(out.dtype)
            grads = torch.autograd.grad(out, wrt, up, allow_unused=True)
            runs.append([out, *(torch.zeros_like(w) if g is None else g for g, w in zip(grads, wrt))])
        verify.compare(runs[0], runs[1], runs[1], "training", False, "cpu")
        results["training"] = "ok"
    except Exception as exc:
        results["error"] = f"{type(exc).__name__}: {str(exc)[:2000]}"
print(json.dumps(report))
"""
)


@pytest.fixture(scope="module")
def compiled() -> dict[str, dict[str, str]]:
    """class -> "inference" / "training": "ok", or "error": what failed."""
    env = {**os.environ, **INTERPRET}
    args = [sys.executable, "-c", _COMPILE_CHECK, str(ROOT), FILE, "inductor", *SUPPORTED]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_a_model_using_the_generated_module_compiles_with_fullgraph(compiled, name):
    result = compiled[name]
    assert "error" not in result, result["error"]
    assert result["inference"] == "ok"
    assert result.get("training") == (None if name in NO_BACKWARD else "ok")


def test_trace_records_the_parameter_reads_a_branch_needs(tmp_path):
    """T5's LayerNorm branches on its weight's dtype: traced with the dtype as a value, and the read
    recorded, so the kernel refuses (and the suggestion sends to the original) other dtypes."""
    (problem,), _ = problems_for(str(ROOT / FILE), str(ROOT), "DtypeBranchNorm")
    req = {"device": "cpu", "file": problem.file, "root": str(ROOT), "class_name": "DtypeBranchNorm"}
    build = verify.prepare({**req, "dtype": None})["build"]
    graph = trace.trace({**req, "build": build})
    assert graph["ok"], graph
    assert graph["param_reads"] == [{"param": "weight", "what": "dtype", "value": "torch.float32"}]
    source, _, _ = render_module(problem, graph)
    assert "        if self.weight.dtype != torch.float32:\n            raise NotImplementedError(" in source
    # A module-level activation is traced through: gelu is an op of the graph, not a call of a module.
    (problem,), _ = problems_for(str(ROOT / FILE), str(ROOT), "ClippedGelu")
    req = {**req, "class_name": "ClippedGelu", "file": problem.file}
    graph = trace.trace({**req, "build": verify.prepare({**req, "dtype": None})["build"]})
    assert graph["ok"] and graph["param_reads"] == []
    assert [n["target"] for n in graph["nodes"] if n["op"] == "call_function"] == [
        "torch.nn.functional.gelu",
        "torch.clip",
    ]


TAMPERING = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Tampering(nn.Module):
        def __init__(self, dim: int):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            if self.weight.dtype == torch.float16:  # a branch: traced again with dtypes as values
                x = x.half()
            reads = getattr(getattr(self.weight, "tracer", None), "reads", None)
            if reads is not None:  # the module's own code writes what the trace says it read
                reads[("weight", "dtype")] = "torch.float32 or print('from the trace')"
            return x * self.weight
    """
)


def test_parameter_reads_a_module_forged_never_become_code(tmp_path):
    """The trace runs the module's code, which can write the reads it reports: a guard is made only
    of a parameter path, a dtype's name or sizes, never of text from the trace."""
    path = tmp_path / "tampering.py"
    path.write_text(TAMPERING, encoding="utf-8")
    (problem,), _ = problems_for(str(path), str(tmp_path), "Tampering")
    req = {"device": "cpu", "file": problem.file, "root": str(tmp_path), "class_name": "Tampering"}
    problem.build = verify.prepare({**req, "dtype": None})["build"]
    graph = trace.trace({**req, "build": problem.build})
    assert graph["ok"], graph
    forged = "torch.float32 or print('from the trace')"
    assert graph["param_reads"] == [{"param": "weight", "what": "dtype", "value": forged}]
    with pytest.raises(Unsupported, match=r"^the trace read 'dtype' of weight as \"torch\.float32 or print"):
        render_module(problem, graph)


_SIZES = """
import torch
import torch.nn as tnn


class Scale(tnn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = tnn.Parameter(torch.ones(dim))

    def forward(self, x):
        return torch.relu(x * self.weight)


class ReadsAValue(tnn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = tnn.Parameter(torch.ones(dim))
        self.offset = float(self.weight.sum().item()) / dim  # a value: the meta device has none

    def forward(self, x):
        return x * self.weight + self.offset
"""


def _sized(tmp_path: Path, name: str, n: int, rows: int) -> Problem:
    """``name`` from _SIZES as the build guesses it, then its build spec set to ``n`` and ``rows``."""
    (tmp_path / "sizes.py").write_text(_SIZES, encoding="utf-8")
    (problem,), _ = problems_for(str(tmp_path / "sizes.py"), str(tmp_path), name)
    req = {"device": "cpu", "file": problem.file, "root": problem.root, "class_name": name, "dtype": None}
    prep = verify.prepare(req)
    assert prep["ok"], prep
    build = prep["build"]
    if build["init_args"]:
        build["init_args"] = [{"value": n}]
    else:
        build["init_kwargs"] = {"dim": {"value": n}}
    build["inputs"][0]["tensor"]["shape"] = [rows, n]
    problem.build = build
    return problem


def test_a_module_larger_than_the_trace_sandbox_is_traced_on_the_meta_device(tmp_path: Path) -> None:
    """An input of 2**32 float32 elements (16 GiB) is more than the trace sandbox's memory allows;
    on the meta device it costs nothing, and the kernel comes out as for any size."""
    from runners.generators.template import TRACE_LIMITS

    problem = _sized(tmp_path, "Scale", 2**14, 2**18)
    assert TRACE_LIMITS.memory_mb * 2**20 < 2**32 * 4
    (cand,) = TemplateGenerator().generate(problem, 1)
    assert cand.provenance["pattern"] == "pointwise"
    assert "tl.maximum" in cand.source or "relu" in cand.source


def test_a_module_that_reads_values_is_traced_on_real_tensors(tmp_path: Path) -> None:
    problem = _sized(tmp_path, "ReadsAValue", 8, 4)
    req = {"device": "cpu", "file": problem.file, "root": problem.root, "class_name": "ReadsAValue"}
    described = trace.trace({**req, "build": problem.build})
    assert described["ok"], described
    (cand,) = TemplateGenerator().generate(problem, 1)
    assert cand.provenance["pattern"] == "pointwise"
