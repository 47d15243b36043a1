"""The inductor generator: Inductor's Triton made standalone, checked by the real engine.

Inductor emits Triton only on a CUDA GPU, so its output for each class of
tests/problems/inductor.py was captured on a GPU (torch 2.11, triton 3.6;
``tests/fixtures/README.md`` says which; ``tests/fixtures/inductor/capture.py``
regenerates them) and the transform is tested here against those captures,
the generic graph and the one for the example's sizes: each rendered module goes
through ``runners.pipeline.kernelize`` on the CPU (Triton interpreter), so it
is built, compared with a float64 reference on three seeds and on other
shapes, and screened like any other candidate. Without CUDA the generator
declines, through ``make_generator`` and through ``kernelize run``. The tests
marked ``gpu`` compile live and time the result (skipped without CUDA).
"""

from __future__ import annotations

import ast
import copy
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from runners import pipeline
from runners.generators import AVAILABLE, GeneratorError, make_generator
from runners.generators.base import Candidate, Problem
from runners.generators.inductor import NEEDS_CUDA, candidate, render_module
from runners.results import ModuleReport, Status

ROOT = Path(__file__).resolve().parents[2]
FILE = ROOT / "tests" / "problems" / "inductor.py"
FIXTURES = ROOT / "tests" / "fixtures" / "inductor"
CLASSES = [
    "PointwiseChain",
    "Softmax",
    "RMSNorm",
    "LinearGelu",
    "ResidualLayerNorm",
    "ConvResidual",
    "ColumnStats",
]
# What stays in PyTorch, by class: the aten op the checker sees, and the report's note.
KEPT = {
    "LinearGelu": (["mm"], "extern_kernels.mm -> torch.mm (this part stays in PyTorch, not Triton)"),
    "ConvResidual": (
        ["convolution"],
        "extern_kernels.convolution -> torch.nn.functional.conv2d (this part stays in PyTorch, not Triton)",
    ),
}


def _capture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return data


def _problem(name: str) -> Problem:
    (problem,), _ = pipeline.problems_for(str(FILE), str(ROOT), name)
    return problem


class FixtureGenerator:
    """The inductor generator with the sandboxed compile replaced by a stored capture."""

    name = "inductor"
    samples = False

    def __init__(self, capture: dict[str, Any]) -> None:
        self.captured = capture

    def generate(self, problem: Problem, n: int) -> list[Candidate]:
        return [candidate(problem, self.captured)]


def _kernelize(name: str) -> ModuleReport:
    settings = pipeline.EngineSettings(device="cpu", timeout_s=300)
    return pipeline.kernelize(_problem(name), [FixtureGenerator(_capture(name))], settings)


@pytest.fixture(scope="module")
def reports() -> dict[str, ModuleReport]:
    with ThreadPoolExecutor(2) as pool:  # each sandbox starts a fresh Python (~4 s)
        return dict(zip(CLASSES, pool.map(_kernelize, CLASSES), strict=True))


# ---------------------------------------------------------------------------
# Through the engine, on the CPU


@pytest.mark.parametrize("name", CLASSES)
def test_captured_output_becomes_a_correct_standalone_module(reports, name):
    report = reports[name]
    (cand,) = report.candidates
    assert cand.status is Status.CORRECT, cand.reason
    assert cand.generator == "inductor"
    assert cand.triton_launches == 1  # Inductor fused each of these into one kernel
    assert len(cand.shapes_checked) > 3  # the example, then other batch and row sizes
    kept, note = KEPT.get(name, ([], None))
    assert cand.torch_ops_kept == kept
    if note:
        # Once in each graph where both are kept: the static one and the generic one.
        copies = 2 if "static" in _capture(name) else 1
        assert (note if copies == 1 else f"{note} (2)") in cand.notes
    assert report.best == cand.id


def test_other_sizes_than_the_example_are_checked(reports):
    shapes = reports["Softmax"].candidates[0].shapes_checked
    assert [[2, 16, 97]] in shapes  # a row length the capture never saw: the kernel is not specialised


# ---------------------------------------------------------------------------
# The rendered code


@pytest.fixture(scope="module")
def rms_norm() -> str:
    source, _ = render_module(_problem("RMSNorm"), _capture("RMSNorm"))
    return source


def test_rendered_module_is_standalone_and_readable(rms_norm):
    tree = ast.parse(rms_norm)
    for forbidden in ("torch._inductor", "async_compile", ".run(", "stream", "set_device", "_DeviceGuard"):
        assert forbidden not in rms_norm, forbidden
    imports = [ast.unparse(n) for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    assert imports == [
        "import torch",
        "import triton",
        "import triton.language as tl",
        "import torch.nn as nn",
    ]
    assert "@triton.jit\ndef triton_per_fused_add_mean_mul_pow_rsqrt_0(in_ptr0, in_ptr1, out_ptr1" in rms_norm
    assert "tl.rsqrt(tmp9)" in rms_norm  # libdevice.rsqrt, rewritten
    # The launch carries the autotuner's choice; the grid follows the rows at call time.
    assert (
        "triton_per_fused_add_mean_mul_pow_rsqrt_0[grid(triton_per_fused_add_mean_mul_pow_rsqrt_0_xnumel)]("
        in rms_norm
    )
    assert "XBLOCK=1, num_warps=2, num_stages=1)" in rms_norm


def test_rendered_class_keeps_the_constructor_and_feeds_the_graph(rms_norm):
    original = FILE.read_text(encoding="utf-8")
    init = "    def __init__(self, dim: int, eps: float = 1e-6):"
    assert init in original and init in rms_norm
    assert "        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))" in rms_norm
    assert "    def forward(self, x):" in rms_norm
    # Sizes first, then the input and the parameter, as Inductor's call(args) unpacks them.
    assert "outputs = _call_compiled([x.size(0), x.size(1), x, self.weight])" in rms_norm
    # What the graph was compiled for is checked, not silently assumed.
    assert "if self.eps != 1e-06:" in rms_norm
    assert "if x.dtype != torch.float32:" in rms_norm


def _generic_part(source: str) -> str:
    """The module without its docstring, the static graph's kernels and wrapper, and the line that
    chooses between the graphs: what serves every other size."""
    tree = ast.parse(source)
    kept = []
    for node in tree.body[1:]:  # the docstring first
        if isinstance(node, ast.FunctionDef) and node.name.endswith("_static"):
            continue  # the static graph's kernels and its wrapper, _call_static
        kept.append(ast.unparse(node))
    lines = "\n".join(kept).splitlines()
    return "\n".join(line for line in lines if "_call_static" not in line and ".shape == (" not in line)


def test_no_example_size_is_hard_coded_in_the_generic_graph():
    for name in CLASSES:
        capture = _capture(name)
        source, _ = render_module(_problem(name), capture)
        generic = _generic_part(source)
        assert "_static" not in generic.replace("_call_static", "")
        for shape in capture["example_shapes"]:
            assert str(tuple(shape)) not in generic, name


def test_the_static_graph_serves_the_example_sizes_only():
    capture = _capture("ConvResidual")
    cand = candidate(_problem("ConvResidual"), capture)
    assert cand.provenance["static_graph"].startswith(
        "used at [2, 64, 16, 16]: triton_poi_fused_convolution_0_static"
    )
    # Its kernels and launch settings are reported beside the generic graph's.
    assert "triton_poi_fused_convolution_0_static" in cand.provenance["launch_configs"]
    assert set(capture["kernels"]) <= set(cand.provenance["launch_configs"])
    source = cand.source
    assert (
        "if self.conv.weight.shape == (64, 64, 3, 3) and self.conv.bias.shape == (64,) "
        "and x.shape == (2, 64, 16, 16):"
    ) in source
    assert "outputs = _call_static([self.conv.weight, self.conv.bias, x])" in source
    # With static sizes Inductor lays the convolution out channels-last (the weight converted per call).
    assert "(576, 1, 192, 64)" in source
    assert "For inputs of shape [2, 64, 16, 16] exactly, forward takes the graph compiled" in source


def test_rendering_is_deterministic():
    first, _ = render_module(_problem("ColumnStats"), _capture("ColumnStats"))
    second, _ = render_module(_problem("ColumnStats"), _capture("ColumnStats"))
    assert first == second
    assert "return tuple(outputs)" in first  # forward returns (sum, amax), as the original


def test_library_calls_stay_in_pytorch_and_say_so():
    cand = candidate(_problem("ConvResidual"), _capture("ConvResidual"))
    assert "torch.nn.functional.conv2d(" in cand.source
    assert any("stays in PyTorch" in r for r in cand.provenance["rewrites"])
    assert cand.provenance["launch_configs"]["triton_poi_fused_add_convolution_relu_0"]["num_warps"] == 4


# ---------------------------------------------------------------------------
# Declining


def _declined(name: str, change: Any) -> str:
    capture = copy.deepcopy(_capture(name))
    change(capture)
    with pytest.raises(GeneratorError) as info:
        candidate(_problem(name), capture)
    text = str(info.value)
    assert text.startswith("inductor: ")
    assert "\n" not in text
    return text


def test_declines_a_grid_it_does_not_know():
    def cooperative(c: dict[str, Any]) -> None:
        c["kernels"]["triton_red_fused__softmax_exp_prepare_softmax_online_sub_0"]["grid_type"] = (
            "CooperativeReductionGrid"
        )

    assert "CooperativeReductionGrid launch grid" in _declined("Softmax", cooperative)


def test_declines_when_inputs_do_not_match_the_call():
    assert "takes 4 arguments, the graph has 3 inputs" in _declined(
        "Softmax", lambda c: c["placeholders"].pop(0)
    )


def test_declines_an_input_it_cannot_name():
    def anonymous(c: dict[str, Any]) -> None:
        del c["placeholders"][3]["from"]

    assert "neither an argument, a parameter nor a buffer" in _declined("RMSNorm", anonymous)


def test_declines_a_size_no_input_has():
    def unknown(c: dict[str, Any]) -> None:
        c["placeholders"][0]["expr"] = "s999"

    assert "(s999) is not a size of any input" in _declined("RMSNorm", unknown)


def test_declines_a_launch_setting_the_kernel_does_not_take():
    def rsplit(c: dict[str, Any]) -> None:
        c["kernels"]["triton_red_fused_abs_amax_sum_0"]["config"]["kwargs"]["RSPLIT"] = 4

    assert "launch setting RSPLIT=4" in _declined("ColumnStats", rsplit)


def test_declines_when_nothing_runs_in_triton():
    def library_only(c: dict[str, Any]) -> None:
        code = c["code"]
        start = code.index("            triton_poi_fused_addmm_gelu_view_0.run(")
        c["code"] = code[:start] + code[code.index("\n", start) + 1 :]

    assert "no Triton kernel launches" in _declined("LinearGelu", library_only)


def test_declines_a_wrapper_helper_without_standalone_form():
    def pool(c: dict[str, Any]) -> None:
        c["code"] = c["code"].replace("buf1 = empty_strided_cuda(", "buf1 = alloc_from_pool(", 1)

    assert "uses alloc_from_pool" in _declined("RMSNorm", pool)


# ---------------------------------------------------------------------------
# The graph for the example's sizes: an optimisation, never needed


def test_a_failed_static_compile_leaves_the_generic_graph_for_every_size():
    capture = _capture("RMSNorm") | {"static": {"ok": False, "reason": "torch.compile failed: boom"}}
    cand = candidate(_problem("RMSNorm"), capture)
    assert cand.provenance["static_graph"] == "not used: torch.compile failed: boom"
    assert "_call_static" not in cand.source
    assert "outputs = _call_compiled([x.size(0), x.size(1), x, self.weight])" in cand.source


def test_a_static_graph_with_symbolic_sizes_is_not_used():
    capture = _capture("RMSNorm")
    static = copy.deepcopy({k: capture[k] for k in ("code", "placeholders", "kernels")}) | {"ok": True}
    cand = candidate(_problem("RMSNorm"), capture | {"static": static})
    assert cand.provenance["static_graph"].startswith("not used: cannot make it standalone: ")
    assert "symbolic size" in cand.provenance["static_graph"]
    assert "_static" not in cand.source
    assert list(cand.provenance["launch_configs"]) == list(capture["kernels"])


def test_a_capture_without_a_static_graph_says_so():
    cand = candidate(_problem("Softmax"), {k: v for k, v in _capture("Softmax").items() if k != "static"})
    assert cand.provenance["static_graph"] == "not used: not captured"


# ---------------------------------------------------------------------------
# Without CUDA


def test_registered():
    assert "inductor" in AVAILABLE


def test_declines_without_cuda_through_make_generator():
    gen = make_generator("inductor", {"device": "cpu"})
    assert gen.name == "inductor"
    with pytest.raises(GeneratorError) as info:
        gen.generate(_problem("Softmax"), 1)
    assert str(info.value) == NEEDS_CUDA
    assert "needs a CUDA GPU" in NEEDS_CUDA


def test_capture_declines_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    from runners.inductor_capture import capture

    assert capture({}) == {"ok": False, "reason": NEEDS_CUDA}


def test_cli_reports_the_decline(cli, tmp_path):
    out = tmp_path / "report.json"
    args = ["run", "tests/problems/inductor.py::Softmax", "--generator", "inductor", "--device", "cpu"]
    rc, stdout, stderr = cli([*args, "--json", str(out), "--quiet"])
    assert rc == 2  # every generator declined: a setup problem, said once
    assert "needs a CUDA GPU" in stderr
    assert "Traceback" not in stderr
    assert "inductor" in stdout  # the report's table still shows the error row
    (module,) = json.loads(out.read_text(encoding="utf-8"))["modules"]
    (row,) = module["candidates"]
    assert (row["generator"], row["status"]) == ("inductor", "error")
    assert row["reason"] == f"generator: {NEEDS_CUDA}"


# ---------------------------------------------------------------------------
# On a GPU: compiled live, verified and timed


@pytest.fixture(scope="module")
def gpu_reports() -> dict[str, ModuleReport]:
    settings = pipeline.EngineSettings(device="cuda", timeout_s=300, memory_mb=16384)
    gen = make_generator("inductor", {"device": "cuda"})
    return {name: pipeline.kernelize(_problem(name), [gen], settings) for name in ("Softmax", "LinearGelu")}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["Softmax", "LinearGelu"])
def test_live_capture_is_correct_and_timed_on_gpu(gpu_reports, name):
    (cand,) = gpu_reports[name].candidates
    assert cand.status is Status.CORRECT, cand.reason
    assert cand.triton_launches == 1
    assert {"eager", "compile", "candidate"} <= set(cand.timings)
    assert cand.median_ms is not None and cand.median_ms > 0
    assert cand.provenance["compiled_with"].startswith("torch ")


def test_the_generic_graph_is_compiled_to_index_in_64_bits():
    """Inductor's 32-bit indexing for symbolic sizes rests on a guard the standalone module does not
    have: while the generic graph compiles, no kernel may choose it; afterwards Inductor is as it was."""
    import sympy
    from torch._inductor.codegen.simd import SIMDScheduling
    from torch._inductor.codegen.triton import TritonScheduling

    from runners.inductor_capture import _index_in_64_bits

    original = SIMDScheduling.__dict__["can_use_32bit_indexing"]
    with _index_in_64_bits() as patched:
        assert patched
        assert not TritonScheduling.can_use_32bit_indexing(sympy.Integer(1024), [])
    assert SIMDScheduling.__dict__["can_use_32bit_indexing"] is original


def test_the_settings_a_graph_was_compiled_for_are_checked_and_never_become_other_code():
    """A flag or string the module holds chose a branch or an argument when Dynamo traced it: forward
    checks it first. The values come from the sandbox that ran the module's code, so each is code
    only as a literal, and the message a JSON string (a quote in a string attribute stays text)."""
    from types import SimpleNamespace

    from runners.generators.inductor import NotStandaloneCapture, _checks

    forged = 'a"); import os; ("'
    capture = {
        "placeholders": [],
        "settings": [
            {"path": "mode", "value": forged},
            {"path": "causal", "value": True},
            {"path": "eps", "value": 1e-6},
            {"path": "blocks.0.scale", "value": 2.0},  # inside a container: through get_submodule
            {"path": "table", "value": ["__import__('os')"]},  # not a plain value: no check, no code
        ],
    }
    lines = _checks(capture)
    code = "def check(self):\n" + "\n".join(f"    {line}" for line in lines) + "\n    return 'ran'"
    assert not any(isinstance(node, ast.Import) for node in ast.walk(ast.parse(code)))
    assert len([line for line in lines if line.startswith("if ")]) == 4
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    blocks = {"blocks.0": SimpleNamespace(scale=2.0)}
    module = SimpleNamespace(mode=forged, causal=True, eps=1e-6, get_submodule=blocks.__getitem__)
    assert namespace["check"](module) == "ran"
    module.causal = False
    with pytest.raises(ValueError, match=r"^compiled for self\.causal == True; run kernelize again"):
        namespace["check"](module)
    module.causal, blocks["blocks.0"].scale = True, 0.5
    with pytest.raises(ValueError, match=r"^compiled for self\.blocks\.0\.scale == 2\.0; run kernelize"):
        namespace["check"](module)
    for path in ("x; import os", "blocks.0", 'a").b'):  # not an attribute path: no candidate at all
        with pytest.raises(NotStandaloneCapture, match="not an attribute path"):
            _checks({"placeholders": [], "settings": [{"path": path, "value": 1}]})
    with pytest.raises(ValueError, match=r"^compiled for self\.mode == 'a\"\); import os; \(\"'"):
        namespace["check"](SimpleNamespace(mode="other", causal=True, eps=1e-6))


def test_settings_held_by_the_class_and_inside_containers_are_captured():
    """A flag in the class body (``is_causal = True``, as many attention classes hold it) is compiled
    in like one set in ``__init__``; so are the settings of blocks in a ``ModuleList``. Each is
    captured, so forward checks it (an instance that sets it otherwise gets the original)."""
    from runners.inductor_capture import _settings

    class Block(torch.nn.Module):
        is_causal = True
        eps = 1e-6

        def __init__(self) -> None:
            super().__init__()
            self.scale = 2.0

    class Causal(Block):
        eps = 1e-5  # a subclass's value over its base's

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block(), Causal()])
            self.blocks[1].is_causal = False  # the instance's over its class's

    got = {s["path"]: s["value"] for s in _settings(Model())}
    assert got == {
        "blocks.0.is_causal": True,
        "blocks.0.eps": 1e-6,
        "blocks.0.scale": 2.0,
        "blocks.1.is_causal": False,
        "blocks.1.eps": 1e-5,
        "blocks.1.scale": 2.0,
    }
