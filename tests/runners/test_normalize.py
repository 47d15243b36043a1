"""runners.normalize: Inductor-style candidates made standalone (corpus in tests/normalize_corpus)."""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import sys
import tokenize
from pathlib import Path
from types import ModuleType

import pytest

from runners import normalize as normalize_module
from runners.normalize import normalize
from runners.screen import screen_source
from tests.cuda_compile import compile_for_cuda
from tests.runners.test_template_reductions import fresh_python

ROOT = Path(__file__).resolve().parents[2]


def _load_bench() -> ModuleType:
    """bench/normalize_corpus.py: the corpus format and the interpreter run harness."""
    spec = importlib.util.spec_from_file_location(
        "kernelize_bench_normalize", ROOT / "bench/normalize_corpus.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _load_bench()
SAMPLES = bench.samples()
BY_NAME = {s.name: s for s in SAMPLES}
CLEAN = [s for s in SAMPLES if s.name.startswith("clean_")]


def code_only(source: str) -> str:
    """The source without its comments (the corpus headers talk about torch._inductor)."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type != tokenize.COMMENT]
    return tokenize.untokenize(tokens)


def defines_class(source: str, name: str) -> bool:
    return any(isinstance(n, ast.ClassDef) and n.name == name for n in ast.parse(source).body)


def imported_modules(source: str) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.add(node.module or "")
    return out


# ---------------------------------------------------------------------------
# The corpus


def test_corpus_is_varied_enough():
    assert len(SAMPLES) >= 12
    assert len(CLEAN) >= 2
    assert sum(s.expect.startswith("rejected") for s in SAMPLES) >= 1
    for sample in SAMPLES:
        assert "class ModelNew" in sample.source, sample.name
        assert sample.original and defines_class(sample.original, sample.class_name), sample.name


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_sample_normalizes_as_its_header_says(sample):
    result = normalize(sample.source, sample.class_name)
    if sample.expect.startswith("rejected"):
        assert result.rejected is not None, result.source
        assert sample.expect.removeprefix("rejected:").strip() in result.rejected
        assert result.rejected.startswith("line "), result.rejected
        assert result.source == sample.source  # a rejected file is handed back as it was
        return
    assert sample.expect == "ok"
    assert result.rejected is None, result.rejected
    code = code_only(result.source)
    assert "torch._inductor" not in code and "torch._C._dynamo" not in code and "torch._dynamo" not in code
    assert "ModelNew" not in code
    assert {m.split(".")[0] for m in imported_modules(result.source)} <= {
        "torch",
        "triton",
        "math",
        "__future__",
    }
    assert defines_class(result.source, sample.class_name)
    compile(result.source, f"{sample.name}.py", "exec")
    assert screen_source(result.source) is None
    assert result.rewrites
    assert f"renamed ModelNew to {sample.class_name}" in result.rewrites


@pytest.mark.parametrize(
    "sample", [s for s in SAMPLES if not s.name.startswith("clean_")], ids=lambda s: s.name
)
def test_inductor_samples_report_their_rewrites(sample):
    result = normalize(sample.source, sample.class_name)
    if result.rejected:
        assert result.rewrites == []
        return
    text = "\n".join(result.rewrites)
    assert "removed imports of torch internals" in text
    assert "grid" in text
    assert len(result.rewrites) >= 4


@pytest.mark.parametrize("sample", CLEAN, ids=lambda s: s.name)
def test_clean_samples_only_get_renamed(sample):
    result = normalize(sample.source, sample.class_name)
    assert result.rejected is None
    assert result.rewrites == [f"renamed ModelNew to {sample.class_name}"]
    old, new = sample.source.splitlines(), result.source.splitlines()
    assert len(old) == len(new)
    changed = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
    assert changed  # the class line at least; comments mentioning ModelNew stay as they were
    for a, b in changed:
        assert not a.lstrip().startswith("#")
        assert b == a.replace("ModelNew", sample.class_name)


@pytest.mark.parametrize("sample", CLEAN, ids=lambda s: s.name)
def test_clean_sample_with_the_original_name_passes_through_unchanged(sample):
    source = sample.source.replace("ModelNew", sample.class_name)
    result = normalize(source, sample.class_name)
    assert result == normalize_module.Normalized(source, [], None)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_normalize_is_deterministic_and_idempotent(sample):
    first = normalize(sample.source, sample.class_name)
    assert normalize(sample.source, sample.class_name) == first
    if first.rejected is None:
        again = normalize(first.source, sample.class_name)
        assert again.rejected is None
        assert again.source == first.source
        assert again.rewrites == []


def test_pointwise_sample_rewrites_in_detail():
    result = normalize(BY_NAME["add_relu_poi"].source, "AddReLU")
    src = result.source
    assert "tl.maximum(tmp3, tmp2, propagate_nan=tl.PropagateNan.ALL)" in src
    assert "buf0 = torch.empty_strided((4, 4), (4, 1), dtype=torch.float32, device=_kz_device)" in src
    assert "def call(args):\n    _kz_device = _kz_device_of(args)\n    arg0_1, arg1_1 = args\n" in src
    # the with-block is unwrapped and its body dedented one level
    assert "\n    triton_poi_fused_add_relu_0[grid(16)](arg0_1, arg1_1, buf0, 16,\n" in src
    for gone in ("assert_size_stride", "_DeviceGuard", "set_device", "get_raw_stream"):
        assert gone not in src
    assert "super(AddReLU, self).__init__()" in src
    assert src.count("def grid(") == 1
    assert result.rewrites[-1] == "renamed ModelNew to AddReLU"
    assert "removed assert_size_stride calls (2)" in result.rewrites


def test_extern_kernels_stay_in_pytorch_and_say_so():
    mm = normalize(BY_NAME["linear_relu_mm"].source, "LinearReLU")
    assert (
        "torch.mm(primals_3, reinterpret_tensor(primals_1, (32, 16),\n        (1, 32), 0), out=buf0)"
        in mm.source
    )
    assert "extern_kernels.mm -> torch.mm (this part stays in PyTorch, not Triton)" in mm.rewrites
    addmm = normalize(BY_NAME["linear_tanh_addmm"].source, "LinearTanh")
    assert "torch.addmm(primals_2, primals_3" in addmm.source
    conv = normalize(BY_NAME["conv_relu_extern"].source, "ConvReLU")
    assert (
        "torch.nn.functional.conv2d(primals_3, primals_1, stride=(1,\n"
        "        1), padding=(0, 0), dilation=(1, 1), groups=1, bias=None)" in conv.source
    )
    assert any("torch.nn.functional.conv2d (this part stays in PyTorch" in r for r in conv.rewrites)


def test_tanh_becomes_a_portable_formula():
    result = normalize(BY_NAME["gelu_tanh_poi"].source, "GeluTanh")
    assert "tmp10 = _kz_tanh(tmp9)" in result.source
    assert "return 2 * tl.sigmoid(2 * x) - 1" in result.source
    assert "libdevice" not in code_only(result.source)
    assert "stream" not in code_only(result.source)
    assert "removed stream= launch arguments (kernels run on the current stream)" in result.rewrites


def test_old_style_device_objects_follow_the_inputs():
    result = normalize(BY_NAME["gelu_erf_poi"].source, "GeluErf")
    assert "device=_kz_device, dtype=torch.float32)" in result.source
    assert "from torch import device, empty_strided" in result.source  # torch's own names stay
    cuda_strings = [
        n.value
        for n in ast.walk(ast.parse(result.source))
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("cuda")
    ]
    assert cuda_strings == ["cuda"]  # only _kz_device_of's fallback when no tensor is at hand
    assert "device(type=" not in code_only(result.source)


def test_output_code_file_is_rejected_at_the_kernel_it_cannot_rebuild():
    result = normalize(BY_NAME["output_code_async_reject"].source, "Double")
    assert result.rejected is not None
    assert result.rejected.startswith("line 54: async_compile.triton(...)")


# ---------------------------------------------------------------------------
# Behaviour on small inputs

HEAD = """import torch
import triton
import triton.language as tl
from torch._inductor.runtime.triton_heuristics import grid
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
"""


def kernel_with(line: str) -> str:
    return (
        HEAD
        + f"""

@triton.jit
def k(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    x0 = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tmp0 = tl.load(in_ptr0 + x0)
    {line}
    tl.store(out_ptr0 + x0, tmp1)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        k[grid(x.numel())](x, out, x.numel(), XBLOCK=x.numel())
        return out
"""
    )


def test_syntax_error_is_rejected_with_its_line():
    result = normalize("import torch\n\nclass ModelNew(torch.nn.Module:\n    pass\n", "M")
    assert result.rejected is not None
    assert result.rejected.startswith("line 3: syntax error")


@pytest.mark.parametrize(
    ("source", "class_name"),
    [
        ("\x00", "M"),
        ("", "M"),
        ("x = 1", "M"),
        ("class ModelNew: pass", "not a name"),
        ("class ModelNew: pass", ""),
    ],
)
def test_bad_input_is_rejected_not_raised(source, class_name):
    result = normalize(source, class_name)
    assert result.rejected
    assert result.source == source


def test_kernelbook_new_suffix_is_renamed_with_its_references():
    source = (
        "import torch\n\n\nclass AdamOptNew(torch.nn.Module):\n    def __init__(self):\n"
        "        super(AdamOptNew, self).__init__()\n\n    def forward(self, x):\n        return x\n"
    )
    result = normalize(source, "AdamOpt")
    assert result.rewrites == ["renamed AdamOptNew to AdamOpt"]
    assert "class AdamOpt(torch.nn.Module):" in result.source
    assert "super(AdamOpt, self)" in result.source


def test_original_class_in_the_same_file_moves_out_of_the_way():
    source = (
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n\n"
        "class ModelNew(Net):\n    pass\n\n\nassert issubclass(ModelNew, Net)\n"
    )
    result = normalize(source, "Net")
    assert result.rejected is None
    assert "class _kz_original_Net(torch.nn.Module):" in result.source
    assert "class Net(_kz_original_Net):" in result.source
    assert "assert issubclass(Net, _kz_original_Net)" in result.source
    namespace: dict[str, object] = {}
    exec(compile(result.source, "<normalized>", "exec"), namespace)


def test_missing_class_is_rejected():
    result = normalize("import torch\n\n\nclass Other(torch.nn.Module):\n    pass\n", "Net")
    assert result.rejected == "defines neither ModelNew nor Net as a class at module level"


def test_names_used_without_their_import_are_recognised():
    source = kernel_with("tmp1 = tl_math.exp(tmp0)").replace(
        HEAD, "import torch\nimport triton\nimport triton.language as tl\n"
    )
    result = normalize(source, "M")
    assert result.rejected is None
    assert "tmp1 = tl.exp(tmp0)" in result.source
    assert "def grid(*numels):" in result.source


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("tmp1 = libdevice.sqrt(tmp0)", "tmp1 = _kz_sqrt_rn(tmp0)"),
        ("tmp1 = tl_math.sqrt(tmp0)", "tmp1 = tl.sqrt(tmp0)"),
        ("tmp1 = libdevice.rsqrt(tmp0)", "tmp1 = tl.rsqrt(tmp0)"),
        ("tmp1 = tl_math.abs(tmp0)", "tmp1 = tl.abs(tmp0)"),
        ("tmp1 = tl_math.log(tmp0)", "tmp1 = tl.log(tmp0)"),
        ("tmp1 = libdevice.erf(tmp0)", "tmp1 = tl.erf(tmp0)"),
        ("tmp1 = libdevice.log1p(tmp0)", "tmp1 = _kz_log1p(tmp0)"),
        (
            "tmp1 = triton_helpers.minimum(tmp0, 0.0)",
            "tmp1 = tl.minimum(tmp0, 0.0, propagate_nan=tl.PropagateNan.ALL)",
        ),
        ("tmp1 = triton_helpers.promote_to_tensor(tmp0 * 2)", "tmp1 = tmp0 * 2"),
        ("tmp1 = triton_helpers.exp(tmp0, True)", "tmp1 = tl.exp(tmp0)"),
        ("tmp1 = triton_helpers.div_floor_integer(tmp0, 3)", "tmp1 = _kz_div_floor_integer(tmp0, 3)"),
    ],
)
def test_kernel_helpers_map_to_triton_language(line, expected):
    result = normalize(kernel_with(line), "M")
    assert result.rejected is None, result.rejected
    assert expected in result.source
    assert screen_source(result.source) is None


# Inductor's generic graphs take square roots of sizes in float64 (``math.sqrt(q.size(-1))``), which
# tl.sqrt_rn refuses to compile for a GPU: only float32 is its.
SQRT_OF_A_SIZE = "tmp1 = libdevice.sqrt(tmp0) * libdevice.sqrt(xnumel.to(tl.float64)).to(tl.float32)"


def test_a_float64_square_root_compiles_for_the_gpu(tmp_path):
    result = normalize(kernel_with(SQRT_OF_A_SIZE), "M")
    assert result.rejected is None, result.rejected
    assert "def _kz_sqrt_rn(x):" in result.source
    path = tmp_path / "normalized.py"
    path.write_text(result.source, encoding="utf-8")
    compiled = compile_for_cuda(path, "k", {"XBLOCK": 64})
    assert compiled["ok"], compiled
    # tl.sqrt_rn in its place, as normalize wrote it before: the GPU compile fails (the check can).
    path.write_text(result.source.replace("_kz_sqrt_rn(xnumel", "tl.sqrt_rn(xnumel"), encoding="utf-8")
    refused = compile_for_cuda(path, "k", {"XBLOCK": 64})
    assert not refused["ok"] and "fp64" in refused["error"], refused


@fresh_python
def test_a_float64_square_root_computes_under_the_interpreter(tmp_path):
    import torch

    namespace: dict[str, object] = {}
    exec(compile(normalize(kernel_with(SQRT_OF_A_SIZE), "M").source, "normalized.py", "exec"), namespace)
    x = torch.rand(64) + 0.5
    got = namespace["M"]()(x)
    torch.testing.assert_close(got, torch.sqrt(x) * 8.0, rtol=1e-6, atol=0)


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("tmp1 = libdevice.pow(tmp0, 2.5)", "uses libdevice.pow"),
        ("tmp1 = libdevice.atan2(tmp0, tmp0)", "uses libdevice.atan2"),
        (
            "tmp1 = triton_helpers.bucketize_binary_search(tmp0)",
            "uses triton_helpers.bucketize_binary_search",
        ),
        (
            "tmp1 = tl.reduce(tmp0, 0, triton_helpers.maximum)",
            "uses torch._inductor.runtime.triton_helpers.maximum",
        ),
    ],
)
def test_unmapped_kernel_helpers_are_rejected_by_name(line, named):
    source = kernel_with(line)
    lineno = source.splitlines().index("    " + line) + 1
    result = normalize(source, "M")
    assert result.rejected is not None
    assert result.rejected.startswith(f"line {lineno}: {named}"), result.rejected


def test_unknown_extern_kernel_is_rejected():
    source = HEAD + (
        "from torch._inductor.select_algorithm import extern_kernels\n\n\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n"
        "        return extern_kernels._mm_plus_mm(a, b, a, b, out=a)\n"
    )
    result = normalize(source, "M")
    assert result.rejected == (
        "line 12: uses extern_kernels._mm_plus_mm, which has no standalone equivalent here"
    )


def test_inductor_decorators_are_removed_and_jit_kept_or_added():
    source = HEAD + (
        "\n\n@triton_heuristics.pointwise(\n    size_hints=[16], filename=__file__,\n"
        "    triton_meta={'signature': {0: '*fp32'}}, min_elem_per_thread=0\n)\n@triton.jit\n"
        "def a(x_ptr, XBLOCK: tl.constexpr):\n    pass\n\n\n"
        "@triton_heuristics.reduction(size_hints=[16, 16])\n"
        "def b(x_ptr, XBLOCK: tl.constexpr):\n    pass\n\n\n"
        "class ModelNew(torch.nn.Module):\n    pass\n"
    ).replace(
        "from torch._inductor.runtime import triton_helpers",
        "from torch._inductor.runtime import triton_heuristics",
    )
    result = normalize(source, "M")
    assert result.rejected is None, result.rejected
    assert "triton_heuristics" not in result.source
    assert "@triton.jit\ndef a(" in result.source
    assert "@triton.jit\ndef b(" in result.source
    assert "added @triton.jit to b" in result.rewrites


def test_hard_coded_cuda_devices_follow_the_inputs():
    source = (
        "import torch\n\nDEFAULT = torch.device('cuda:0')\n\n\nclass ModelNew(torch.nn.Module):\n"
        "    def forward(self, x):\n        scale = torch.ones(1, device='cuda').cuda()\n"
        "        return (x * scale).to('cuda:0')\n"
    )
    result = normalize(source, "M")
    assert result.rejected is None
    assert "DEFAULT = _kz_device_of()" in result.source
    assert "    def forward(self, x):\n        _kz_device = _kz_device_of(x, self)\n" in result.source
    assert "torch.ones(1, device=_kz_device).to(_kz_device)" in result.source
    assert "(x * scale).to(_kz_device)" in result.source
    namespace: dict[str, object] = {}
    exec(compile(result.source, "<normalized>", "exec"), namespace)
    torch = pytest.importorskip("torch")
    model = namespace["M"]()  # type: ignore[operator]
    out = model(torch.ones(3))
    assert out.device.type == "cpu"
    assert torch.equal(out, torch.ones(3))


def test_raw_stream_used_other_than_as_a_launch_argument_is_rejected():
    source = HEAD + (
        "from torch._C import _cuda_getCurrentRawStream as get_raw_stream\n\n\n"
        "def call(args):\n    stream0 = get_raw_stream(0)\n    print(stream0)\n\n\n"
        "class ModelNew(torch.nn.Module):\n    pass\n"
    )
    result = normalize(source, "M")
    assert result.rejected is not None
    assert result.rejected.startswith("line 12: uses stream0")


def test_unused_disallowed_imports_go_and_used_ones_are_rejected():
    unused = (
        "import os\nimport tempfile\nfrom ctypes import c_void_p\nimport torch\n\n\n"
        "class ModelNew(torch.nn.Module):\n    pass\n"
    )
    result = normalize(unused, "M")
    assert result.rejected is None
    assert imported_modules(result.source) == {"torch"}
    assert (
        "removed unused imports of modules a kernel may not import: os, tempfile, c_void_p" in result.rewrites
    )
    used = "import os\nimport torch\n\n\nclass ModelNew(torch.nn.Module):\n    path = os.sep\n"
    assert normalize(used, "M").rejected == "line 1: imports os, which a standalone kernel does not need"


def test_benchmark_harness_is_removed():
    sample = BY_NAME["output_code_async_reject"].source
    harness = sample[sample.index("def benchmark_compiled_module") : sample.index("class ModelNew")]
    source = "import torch\n\n\n" + harness + "class ModelNew(torch.nn.Module):\n    pass\n"
    result = normalize(source, "M")
    assert result.rejected is None
    assert "benchmark_compiled_module" not in result.source
    assert "__main__" not in result.source
    assert "removed Inductor's benchmark harness (2)" in result.rewrites


def test_a_removed_statement_sharing_its_line_leaves_pass():
    source = HEAD + (
        "assert_size_stride = torch._C._dynamo.guards.assert_size_stride\n\n\n"
        "def call(args):\n    x, = args; assert_size_stride(x, (4,), (1,))\n"
        "    if x is None: assert_size_stride(x, (4,), (1,))\n"
        "    return x\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n"
    )
    result = normalize(source, "M")
    assert result.rejected is None, result.rejected
    assert "    x, = args; pass\n    if x is None: pass\n" in result.source


def test_an_emptied_block_gets_pass():
    source = HEAD + (
        "assert_size_stride = torch._C._dynamo.guards.assert_size_stride\n\n\n"
        "def call(args):\n    for a in args:\n        assert_size_stride(a, (4,), (1,))\n"
        "    return args\n\n\n"
        "class ModelNew(torch.nn.Module):\n    pass\n"
    )
    result = normalize(source, "M")
    assert result.rejected is None, result.rejected
    assert "    for a in args:\n        pass\n    return args\n" in result.source


def test_missing_module_imports_are_added():
    source = re.sub(r"^import (torch|triton)\n", "", BY_NAME["add_relu_poi"].source, flags=re.MULTILINE)
    result = normalize(source, "AddReLU")
    assert result.rejected is None, result.rejected
    assert "added missing imports: triton, torch" in result.rewrites
    assert "\nimport torch\nimport triton\n" in result.source
    compile(result.source, "<normalized>", "exec")


def test_line_endings_and_non_ascii_text_are_kept():
    source = BY_NAME["add_relu_poi"].source.replace(
        "    tmp4 = triton_helpers.maximum(tmp3, tmp2)",
        "    s = 'ééé'; tmp4 = triton_helpers.maximum(tmp3, tmp2)  # ü \f",
    )
    plain = normalize(source, "AddReLU")
    assert (
        "    s = 'ééé'; tmp4 = tl.maximum(tmp3, tmp2, propagate_nan=tl.PropagateNan.ALL)  # ü \f\n"
        in plain.source
    )
    crlf = normalize(source.replace("\n", "\r\n"), "AddReLU")
    assert crlf.rejected is None
    assert crlf.source == plain.source.replace("\n", "\r\n")


def test_a_clash_with_the_names_normalize_adds_is_refused():
    source = BY_NAME["add_relu_poi"].source + "\n\ndef _kz_device_of():\n    pass\n"
    result = normalize(source, "AddReLU")
    assert result.rejected == "the source already defines _kz_device_of, a name normalize needs"


def test_normalize_does_not_import_torch():
    code = "import sys, runners.normalize; assert not {'torch', 'triton'} & set(sys.modules)"
    assert bench._child(code, [], env={"PYTHONPATH": str(ROOT)})[0]


# ---------------------------------------------------------------------------
# Running the normalized samples: CPU tensors, TRITON_INTERPRET=1, against the original module.

RUN = [s for s in SAMPLES if s.expect == "ok"]


@pytest.fixture(scope="module")
def run_results() -> dict[str, tuple[bool, str]]:
    jobs = [(s, normalize(s.source, s.class_name).source) for s in RUN]
    return {s.name: outcome for s, outcome in zip(RUN, bench.run_checks(jobs), strict=True)}


@pytest.mark.parametrize("sample", RUN, ids=lambda s: s.name)
def test_normalized_sample_computes_what_the_original_does(sample, run_results):
    ok, detail = run_results[sample.name]
    assert ok, detail


def test_run_harness_notices_a_wrong_kernel():
    """Guards the test above: a grid helper with x and y swapped must be caught."""
    sample = BY_NAME["transpose_scale_2d"]
    good = normalize(sample.source, sample.class_name).source
    bad = good.replace("xnumel = numels[-1]", "xnumel = numels[0]").replace(
        "ynumel = numels[-2] if", "ynumel = numels[1] if"
    )
    assert bad != good
    ok, detail = bench.run_check(sample, bad)
    assert not ok, detail
    assert "not close" in detail or "difference" in detail, detail


FORMULA_CHECK = """
import torch, triton
import triton.language as tl
{helpers}

@triton.jit
def apply(x_ptr, out_ptr, WHICH: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
{branches}
    tl.store(out_ptr + offs, y)

x = torch.cat([torch.linspace(-4, 4, 120), torch.tensor([0.0, 1e-7, -1e-7, 1e-3, -1e-3, 20.0, -20.0, 0.5])])
checks = {checks}
for i, (name, ref) in enumerate(checks):
    out = torch.empty_like(x)
    if name in ("isnan", "isinf"):
        x_in = x.clone(); x_in[:3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
        out = torch.empty_like(x_in, dtype=torch.int8)
        apply[(1,)](x_in, out, i, N=x.numel())
        torch.testing.assert_close(out.bool(), ref(x_in), msg=name)
        continue
    xx = x.clamp(min=-0.9) if name == "log1p" else x.abs() + 1e-3 if name == "log10" else x
    xx = xx.clamp(-1.4, 1.4) if name == "tan" else xx.abs() if name == "sqrt_rn" else xx
    apply[(1,)](xx, out, i, N=x.numel())
    torch.testing.assert_close(out, ref(xx), rtol=2e-5, atol=1e-6, msg=name)
print("formulas ok")
"""


def test_libdevice_formulas_match_torch_under_the_interpreter(tmp_path):
    names = list(normalize_module._FORMULAS)
    helpers = "\n\n\n".join(normalize_module._helper_source((f"_kz_{n}",), {}) for n in names)
    branches = "\n".join(
        f"    {'if' if i == 0 else 'elif'} WHICH == {i}:\n        y = _kz_{n}(x)" for i, n in enumerate(names)
    )
    refs = {
        "tanh": "torch.tanh",
        "log1p": "torch.log1p",
        "expm1": "torch.expm1",
        "sinh": "torch.sinh",
        "cosh": "torch.cosh",
        "tan": "torch.tan",
        "log10": "torch.log10",
        "isnan": "torch.isnan",
        "isinf": "torch.isinf",
        "trunc": "torch.trunc",
        "sqrt_rn": "torch.sqrt",
    }
    checks = "[" + ", ".join(f"({n!r}, {refs[n]})" for n in names) + "]"
    script = tmp_path / "formulas.py"  # @triton.jit reads its source: a file, not python -c
    script.write_text(FORMULA_CHECK.format(helpers=helpers, branches=branches, checks=checks))
    ok, detail = bench._child(
        "import runpy, sys; runpy.run_path(sys.argv[1])", [str(script)], {"TRITON_INTERPRET": "1"}
    )
    assert ok, detail


def test_every_helper_normalize_copies_is_real_code_it_names():
    """runners/normalize_sources.py holds exactly the functions normalize copies: each table entry's
    ``_kz_`` function, the device lookup, the grid and reinterpret_tensor; none left unused."""
    named = {f"_kz_{n}" for n in normalize_module._JIT_HELPERS}
    named |= {"_kz_device_of", "_kz_find_device", "_kz_grid", "_kz_reinterpret_tensor"}
    assert set(normalize_module._helper_sources()) == named
    renamed = normalize_module._helper_source(("_kz_isinf",), {"tl": "language"})
    assert renamed == '@triton.jit\ndef _kz_isinf(x):\n    return language.abs(x) == float("inf")'
