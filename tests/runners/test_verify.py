"""runners.verify, in-process: comparison, the static screen, op filtering, patch detection."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

from runners import verify
from runners.screen import screen_source
from runners.verify import Mismatch, compare, compute_ops


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def ref_and_native(shape=(8, 16), seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    ref64 = torch.randn(*shape, generator=gen(seed), dtype=torch.float64)
    return ref64, ref64.float()


# ---------------------------------------------------------------------------
# compare() / _compare_float


def test_exact_match_passes_with_zero_error():
    ref64, native = ref_and_native()
    errors = compare(native.clone(), ref64, native, "seed 0", False, "cpu")
    assert errors.max_abs < 1e-6  # only float32 rounding of the reference
    assert errors.max_rel < 1e-6


def test_exact_float64_match_has_no_error():
    ref64 = torch.randn(5, generator=gen(), dtype=torch.float64)
    errors = compare(ref64.clone(), ref64, ref64, "w", False, "cpu")
    assert (errors.max_abs, errors.max_rel) == (0.0, 0.0)


def test_error_of_1e_2_on_float32_is_a_mismatch():
    ref64, native = ref_and_native()
    with pytest.raises(Mismatch) as info:
        compare(native + 1e-2, ref64, native, "seed 0, shape [[8, 16]]", False, "cpu")
    msg = str(info.value)
    assert msg.startswith("seed 0, shape [[8, 16]]: output: max abs error 0.01 > tol 0.0001")
    assert "(float32)" in msg
    assert "128 of 128 elements off" in msg


def test_error_just_inside_tolerance_passes():
    ref64, native = ref_and_native()
    errors = compare(native + 5e-5, ref64, native, "w", False, "cpu")
    assert 4e-5 < errors.max_abs < 6e-5


def test_nan_where_reference_is_finite():
    ref64, native = ref_and_native()
    got = native.clone()
    got[3, 7] = float("nan")
    with pytest.raises(
        Mismatch, match=r"^w: output: NaN/Inf at index \(3, 7\) where the original is finite$"
    ):
        compare(got, ref64, native, "w", False, "cpu")


def test_inf_where_reference_is_finite():
    ref64, native = ref_and_native()
    got = native.clone()
    got[0, 1] = float("inf")
    with pytest.raises(Mismatch, match=r"NaN/Inf at index \(0, 1\)"):
        compare(got, ref64, native, "w", False, "cpu")


def test_matching_nan_pattern_passes_and_a_different_one_fails():
    ref64, native = ref_and_native()
    ref64[2, 2] = float("nan")
    native = ref64.float()
    compare(native.clone(), ref64, native, "w", False, "cpu")  # same NaN, same place
    got = native.clone()
    got[2, 2] = 0.0
    with pytest.raises(Mismatch, match="NaN/Inf pattern differs from the original"):
        compare(got, ref64, native, "w", False, "cpu")


def test_shape_mismatch():
    ref64, native = ref_and_native()
    with pytest.raises(Mismatch, match=r"^w: output shape \(8, 15\) != \(8, 16\)$"):
        compare(native[:, :15], ref64, native, "w", False, "cpu")


def test_dtype_mismatch():
    ref64, native = ref_and_native()
    with pytest.raises(Mismatch, match=r"^w: output dtype torch\.float64 != torch\.float32$"):
        compare(ref64.clone(), ref64, native, "w", False, "cpu")


def test_tensor_count_mismatch():
    ref64, native = ref_and_native()
    with pytest.raises(Mismatch, match=r"returned 2 tensor\(s\), the original returns 1"):
        compare((native, native), ref64, native, "w", False, "cpu")


def test_multiple_outputs_are_labelled():
    ref64, native = ref_and_native()
    with pytest.raises(Mismatch, match=r"^w: output 1: max abs error 1 > tol"):
        compare((native, native + 1), (ref64, ref64), (native, native), "w", False, "cpu")


def test_device_mismatch():
    ref64, native = ref_and_native()
    with pytest.raises(Mismatch, match=r"output is on cpu, expected meta"):
        compare(native, ref64, native, "w", False, "meta")


def test_integer_outputs_must_be_equal():
    ints = torch.arange(10)
    compare(ints.clone(), ints, ints, "w", False, "cpu")
    off = ints.clone()
    off[[1, 4]] += 1
    with pytest.raises(Mismatch, match=r"differs in 2 element\(s\)"):
        compare(off, ints, ints, "w", False, "cpu")


def test_near_zero_outputs_need_the_relative_l2_check():
    """Softmax over 32768 columns is ~3e-5 everywhere: all zeros is within atol, yet wrong."""
    x = 0.1 * torch.randn(2, 32768, generator=gen(), dtype=torch.float64)
    ref64, native = torch.softmax(x, -1), torch.softmax(x.float(), -1)
    atol = verify.TOLERANCES["float32"][0]
    assert float(ref64.max()) < atol  # the premise: every element is below atol
    with pytest.raises(Mismatch) as info:
        compare(torch.zeros_like(native), ref64, native, "w", False, "cpu")
    assert str(info.value) == "w: output: relative L2 error 1 > 0.0001 (float32)"
    compare(native.clone(), ref64, native, "w", False, "cpu")  # the real softmax passes


def test_own_error_of_the_original_is_allowed_twice():
    """The original in its own dtype may be off its float64 twin; a candidate, twice that."""
    ref64 = 1e-3 * torch.randn(64, generator=gen(), dtype=torch.float64)
    native = (ref64 + 0.03).half()  # say a float16 accumulation drifted by 0.03
    own = float((native.double() - ref64).abs().max())
    assert own > verify.TOLERANCES["float16"][0]  # more than the table's atol
    compare(native.clone(), ref64, native, "w", False, "cpu")  # as good as the original: passes
    compare((ref64 - 0.05).half(), ref64, native, "w", False, "cpu")  # within twice its error
    with pytest.raises(Mismatch, match=r"error 0\.1 > tol 0\.06\d* \+ 0\.01\*.*\(float16\)"):
        compare((ref64 + 0.1).half(), ref64, native, "w", False, "cpu")


def test_an_original_overflowing_in_its_own_dtype_lets_nothing_else_through():
    """Where the original overflows in its own dtype and float64 does not, that element says
    nothing of the original's rounding: the others' error still bounds the candidate's, so one
    element off by 1e-3 fails, as it does without the overflow."""
    ref64, native = ref_and_native()
    native[0, 0] = float("inf")
    got = native.clone()
    got[0, 0] = ref64[0, 0].float()  # exact where the original overflowed
    got[5, 5] += 1e-3
    with pytest.raises(Mismatch, match=r"max abs error 0\.001 > tol"):
        compare(got, ref64, native, "w", False, "cpu")


def test_a_candidate_overflowing_where_the_original_does_in_its_own_dtype_passes():
    """The same infinity as the original in its own dtype, where float64 stays finite, is what the
    user's module gives: an honest candidate. Another special value there, or one where the original
    is finite, still fails."""
    ref64, native = ref_and_native()
    native[1, 2] = float("inf")
    compare(native.clone(), ref64, native, "w", False, "cpu")
    got = native.clone()
    got[1, 2] = float("-inf")
    with pytest.raises(Mismatch, match=r"NaN/Inf at index \(1, 2\)"):
        compare(got, ref64, native, "w", False, "cpu")
    got = native.clone()
    got[2, 2] = float("inf")
    with pytest.raises(Mismatch, match=r"NaN/Inf at index \(2, 2\)"):
        compare(got, ref64, native, "w", False, "cpu")


def test_tolerance_key_uses_tf32_only_when_flagged():
    assert verify.tolerance_key(torch.float32, False) == "float32"
    assert verify.tolerance_key(torch.float32, True) == "float32 (tf32)"
    assert verify.tolerance_key(torch.float16, True) == "float16"
    assert verify.tolerance_key(torch.bfloat16, True) == "bfloat16"
    assert verify.tolerance_key(torch.float64, True) == "float64"


def test_tf32_tolerance_applies_only_when_flagged():
    ref64, native = ref_and_native((64, 64))
    got = native + 3e-3
    with pytest.raises(Mismatch, match=r"\(float32\);"):
        compare(got, ref64, native, "w", False, "cpu")
    errors = compare(got, ref64, native, "w", True, "cpu")  # within TF32's looser bound
    assert errors.max_abs == pytest.approx(3e-3, rel=1e-3)
    with pytest.raises(Mismatch, match=r"\(float32 \(tf32\)\)"):
        compare(native + 5e-2, ref64, native, "w", True, "cpu")


# ---------------------------------------------------------------------------
# screen_source

HEADER = (
    "import torch\n"
    "import torch.nn.functional as F\n"
    "import triton\n"
    "import triton.language as tl\n"
)  # the offending line below is line 5


def test_allowed_imports_pass():
    source = HEADER + (
        "import math\n"
        "from typing import Any\n"
        "from __future__ import annotations\n"
        "import functools, itertools, operator\n"
        "from torch import nn\n"
        "import numpy as np\n"
        "\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, dim):\n"
        "        super().__init__()\n"
        "        setattr(self, 'w', nn.Parameter(torch.ones(dim)))\n"
        "        self.cache: dict[str, Any] = {}\n"
        "    def forward(self, x):\n"
        "        y = torch.empty_like(x)\n"
        "        y[0] = 1\n"
        "        return y * math.sqrt(2)\n"
    )
    assert screen_source(source) is None


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("import os", "line 5: imports 'os', which a kernel does not need"),
        ("import os.path", "line 5: imports 'os.path', which a kernel does not need"),
        ("import subprocess", "line 5: imports 'subprocess', which a kernel does not need"),
        ("import threading", "line 5: imports 'threading', which a kernel does not need"),
        (
            "from threading import Thread",
            "line 5: imports 'threading', which a kernel does not need",
        ),
        ("import socket", "line 5: imports 'socket', which a kernel does not need"),
        ("import ctypes", "line 5: imports 'ctypes', which a kernel does not need"),
        ("from . import x", "line 5: relative import (a kernel must be standalone)"),
        ("from .kernels import k", "line 5: relative import (a kernel must be standalone)"),
        ("y = eval('1 + 1')", "line 5: calls eval()"),
        ("exec('pass')", "line 5: calls exec()"),
        ("f = open('/etc/passwd')", "line 5: calls open()"),
        ("m = __import__('os')", "line 5: calls __import__()"),
        ("setattr(torch, 'relu', abs)", "line 5: calls setattr()"),
        ("torch.relu = abs", "line 5: assigns into module 'torch' (monkey-patching)"),
        ("F.gelu = abs", "line 5: assigns into module 'F' (monkey-patching)"),
        ("torch.Tensor.add = abs", "line 5: assigns into module 'torch' (monkey-patching)"),
        ("tl.sum += 1", "line 5: assigns into module 'tl' (monkey-patching)"),
        ("s = torch.cuda.Stream()", "line 5: uses .Stream"),
        ("g = torch.cuda.CUDAGraph()", "line 5: uses .CUDAGraph"),
        ("e = torch.os.environ", "line 5: uses .environ"),
        ("torch.os.system('true')", "line 5: uses .system"),
        ("g = (lambda: 0).__globals__", "line 5: uses .__globals__"),
    ],
)
def test_screen_rejects_with_line_number(line, reason):
    assert screen_source(HEADER + line + "\n") == reason


def test_screen_finds_the_right_line_further_down():
    source = HEADER + "\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return eval('x')\n"
    assert screen_source(source) == "line 9: calls eval()"


def test_screen_alias_of_torch_is_a_module_too():
    assert screen_source("import torch as th\nth.relu = abs\n") == (
        "line 2: assigns into module 'th' (monkey-patching)"
    )


def test_screen_syntax_error():
    assert screen_source("import torch\ndef f(:\n") == "syntax error at line 2: invalid syntax"


# ---------------------------------------------------------------------------
# Op filtering


def test_compute_ops_drops_views_and_allocations():
    ops = [
        "add",
        "relu_",
        "empty_like",
        "view",
        "copy_",
        "add",
        "zero_",
        "mm",
        "t",
        "_to_copy",
        "sum",
        "reshape",
        "expand",
        "contiguous",
        "fill_",
        "permute",
        "detach",
    ]
    assert compute_ops(ops) == ["add", "mm", "relu", "sum"]
    assert compute_ops([]) == []
    assert compute_ops(["empty", "as_strided", "clone"]) == []


def test_recording_counts_the_ops_of_a_pytorch_forward():
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    with verify.recording(), torch.no_grad():
        torch.relu(x + y).reshape(16).clone()
    assert compute_ops(verify.PROBE.ops) == ["add", "relu"]
    assert verify.PROBE.launches == 0


# ---------------------------------------------------------------------------
# Runtime patch detection


def test_no_patch_no_report():
    assert verify.patched_since(verify.snapshot()) is None


def test_replacing_a_functional_is_detected():
    before = verify.snapshot()
    original = torch.nn.functional.relu
    try:
        torch.nn.functional.relu = lambda x, inplace=False: x
        assert verify.patched_since(before) == "torch.nn.functional.relu was replaced (monkey-patching)"
    finally:
        torch.nn.functional.relu = original
    assert F.relu is original
    assert verify.patched_since(before) is None


def test_replacing_the_timer_is_detected():
    before = verify.snapshot()
    original = time.perf_counter
    try:
        time.perf_counter = lambda: 0.0
        assert verify.patched_since(before) == "time.perf_counter was replaced (monkey-patching)"
    finally:
        time.perf_counter = original
    assert verify.patched_since(before) is None


def test_deleting_is_detected():
    before = verify.snapshot()
    original = torch.nn.functional.gelu
    try:
        del torch.nn.functional.gelu
        assert verify.patched_since(before) == "torch.nn.functional.gelu was deleted"
    finally:
        torch.nn.functional.gelu = original


def test_shadowing_an_inherited_tensor_method_is_detected():
    before = verify.snapshot()
    assert "abs" not in vars(torch.Tensor)  # abs lives on torch._C.TensorBase
    try:
        torch.Tensor.abs = lambda self: torch.zeros_like(self)  # type: ignore[method-assign]
        assert verify.patched_since(before) is not None
    finally:
        del torch.Tensor.abs
    assert torch.tensor([-2.0]).abs().item() == 2.0


def test_tamper_canary_passes_on_an_honest_checker():
    verify.comparison_still_works("cpu")  # must not raise


def test_tamper_canary_catches_a_blinded_comparison():
    try:
        torch.Tensor.abs = lambda self: torch.zeros_like(self)  # type: ignore[method-assign]
        with pytest.raises(verify.Reject, match="tampered"):
            verify.comparison_still_works("cpu")
    finally:
        del torch.Tensor.abs


def test_torch_compiles_own_patching_is_not_blamed_on_the_candidate():
    """torch.compile's first call wraps nn.Module.__init__; settling that before the snapshot keeps
    the compile baseline from reading as the candidate monkey-patching torch."""
    from torch._dynamo.mutation_guard import install_generation_tagging_init

    verify.settle_torch_patches()
    before = verify.snapshot()
    install_generation_tagging_init()  # what the compile baseline's first call does
    assert verify.patched_since(before) is None


# ---------------------------------------------------------------------------
# Streaming comparison: the same verdicts and evidence, chunk by chunk


@pytest.mark.parametrize("chunk", [7, 64, 1 << 22])
def test_chunked_comparison_gives_the_same_verdict_and_evidence(monkeypatch, chunk):
    monkeypatch.setattr(verify, "COMPARE_CHUNK", chunk)
    ref64, native = ref_and_native((12, 50), seed=3)
    ok = compare(native + 5e-5, ref64, native, "w", False, "cpu")
    assert 4e-5 < ok.max_abs < 6e-5
    bad = native.clone()
    bad[7, 3] += 0.5
    bad[2, 40] += 0.25
    with pytest.raises(Mismatch) as info:
        compare(bad, ref64, native, "w", False, "cpu")
    assert "2 of 600 elements off" in str(info.value)
    assert f"got {float(bad[7, 3]):.6g} expected {float(ref64[7, 3]):.6g}" in str(info.value)
    nan = native.clone()
    nan[11, 49] = float("nan")
    with pytest.raises(Mismatch, match=r"NaN/Inf at index \(11, 49\)"):
        compare(nan, ref64, native, "w", False, "cpu")


@pytest.mark.parametrize("chunk", [7, 64])
def test_chunks_compared_whole_and_masked_agree(monkeypatch, chunk):
    """A chunk finite everywhere is compared whole; one with a NaN or an infinity, element by element
    past them. One NaN where the reference has one changes nothing else."""
    monkeypatch.setattr(verify, "COMPARE_CHUNK", chunk)
    ref64, native = ref_and_native((12, 50), seed=4)
    got = native + 5e-5
    whole = compare(got, ref64, native, "w", False, "cpu")
    with_nan = [t.clone() for t in (got, ref64, native)]
    for t in with_nan:
        t[5, 5] = float("nan")
    masked = compare(*with_nan, "w", False, "cpu")
    assert masked.max_abs == pytest.approx(whole.max_abs, rel=1e-3)
    assert masked.max_rel == pytest.approx(whole.max_rel, rel=1e-3)
    bad = with_nan[0].clone()
    bad[11, 49] += 0.5  # in a chunk compared whole
    with pytest.raises(Mismatch, match="1 of 599 elements off"):
        compare(bad, *with_nan[1:], "w", False, "cpu")


@pytest.mark.parametrize("magnitude", [1.0, 1e200, 1e-200])
def test_references_whose_squares_leave_float64_are_still_held_to_the_bounds(monkeypatch, magnitude):
    """Past ~1e154 a reference's squares overflow float64 (a float64 module's exp, say): summed
    plainly, the RMS and the L2 norm were infinite and every element passed; below ~1e-154 they
    underflowed to 0."""
    monkeypatch.setattr(verify, "COMPARE_CHUNK", 64)
    ref64 = torch.linspace(0.5, 1.5, 300, dtype=torch.float64) * magnitude
    ref64[::7] *= 3.0  # chunks of different scales
    compare(ref64.clone(), ref64, ref64, "w", False, "cpu")
    bad = ref64.clone()
    bad[100] *= 1.01
    # Past 1e154 the bound catches it; near 1e-200, under the absolute tolerance, the L2 error does
    # (whose squares underflowed to a norm of 0, and the check was skipped).
    with pytest.raises(Mismatch, match=r"1 of 300 elements off|relative L2 error 0\.000317"):
        compare(bad, ref64, ref64, "w", False, "cpu")
    ok = compare(ref64 * (1 + 5e-8), ref64, ref64, "w", False, "cpu")  # inside float64's bounds
    assert ok.max_abs == pytest.approx(5e-8 * float(ref64.abs().max()), rel=1e-3)


def test_a_small_relative_l2_drift_is_caught_across_chunks(monkeypatch):
    monkeypatch.setattr(verify, "COMPARE_CHUNK", 100)
    ref64 = torch.full((1000,), 1.0, dtype=torch.float64)
    native = ref64.float()
    with pytest.raises(Mismatch, match="relative L2 error"):
        compare(native + 1.5e-4, ref64, native, "w", False, "cpu")  # every element inside atol+rtol


# ---------------------------------------------------------------------------
# Against the original in its own dtype: its own error, measured elsewhere


def test_the_originals_own_error_is_measured_against_its_float64_reference():
    ref64 = torch.linspace(-2.0, 2.0, 1000, dtype=torch.float64)
    native = (ref64 + 1e-3).float()
    native[10] = float("inf")  # overflowing in its own dtype: left out, not a ratio of infinity
    worst, l2 = verify.own_error(native, ref64)
    rms = float(ref64[torch.arange(1000) != 10].pow(2).mean().sqrt())
    assert worst == pytest.approx(1e-3 / rms, rel=1e-3)
    assert l2 == pytest.approx(1e-3 / rms, rel=1e-3)
    assert verify.own_error(ref64.float(), ref64)[0] < 1e-7  # float32's rounding alone
    assert verify.own_error(torch.zeros(5), torch.zeros(5, dtype=torch.float64)) == (0.0, 0.0)


def test_a_reference_in_its_own_dtype_allows_the_originals_own_error_and_no_more():
    """Above 2^31 elements the reference is the original in float32 (no float64 copy): two
    convolutions in TF32 by different cuDNN algorithms differ by ~5e-4 where each is within its own
    error of the truth. The candidate may differ by its allowance (twice the original's error, as
    measured on the normal family) plus the original's (once): three times; a bug still stands out."""
    torch.manual_seed(0)
    native = torch.randn(20000)
    own = (2e-4, 1.5e-4)  # (largest error / RMS, relative L2) on the normal family
    rms = float(native.pow(2).mean().sqrt())
    noise = torch.randn(20000)
    honest = native + noise / noise.abs().max() * 2.5 * own[0] * rms
    with pytest.raises(Mismatch, match="elements off"):
        compare(honest, native, native, "above", False, "cpu")
    compare(honest, native, native, "above", False, "cpu", own=[own])
    wrong = honest.clone()
    wrong[1234] += 0.05  # one element of a wrapped offset's garbage
    with pytest.raises(Mismatch, match="1 of 20000 elements off"):
        compare(wrong, native, native, "above", False, "cpu", own=[own])
    biased = native * (1 + 4 * own[1])  # every element a little off: the L2 bound
    with pytest.raises(Mismatch, match="relative L2 error"):
        compare(biased, native, native, "above", False, "cpu", own=[(1.0, own[1])])


@pytest.mark.parametrize(
    "exc",
    [
        MemoryError(),  # Python's own allocation (a list of hoarded tensors growing)
        RuntimeError("[enforce fail at alloc_cpu.cpp:121] DefaultCPUAllocator: can't allocate memory"),
    ],
)
def test_every_allocation_failing_under_the_limit_is_check_7s_memory_limit(monkeypatch, exc):
    """However the limit shows itself inside the runner, the reason names the check and the limit."""

    def hog(req, result):
        raise exc

    monkeypatch.setattr(verify, "_evaluate", hog)
    result = verify.evaluate({"device": "cpu"})
    assert result["status"] == "error"
    assert result["reason"].startswith("check 7: exceeded the memory limit"), result["reason"]
