"""The example suite (bench/problems) and its quality table (bench/kernel_quality.py).

Every problem file must build and run at its small size on CPU, and describe a consistent full-size
problem (checked on the meta device: shapes only, no memory). The table writer is checked on
synthetic reports; one end-to-end run on CPU checks the script writes the rows it should.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from runners.discover import find_modules
from runners.results import (
    CandidateResult,
    DeviceInfo,
    ModuleReport,
    RunReport,
    Status,
    TensorInfo,
    Timing,
    Verdict,
    to_dict,
)
from tests.bench_scripts import load

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = ROOT / "bench" / "problems"
SCRIPT = ROOT / "bench" / "kernel_quality.py"
FILES = sorted(PROBLEMS.glob("*.py"))


kq = load(SCRIPT, "kernel_quality")


def module_class(module: ModuleType) -> type[torch.nn.Module]:
    classes = [
        c
        for c in vars(module).values()
        if inspect.isclass(c) and issubclass(c, torch.nn.Module) and c.__module__ == module.__name__
    ]
    assert len(classes) == 1, f"{module.__name__}: expected one nn.Module class, found {classes}"
    return classes[0]


def outputs(out: object) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    assert isinstance(out, tuple | list), f"forward returned {type(out).__name__}"
    return [t for o in out for t in outputs(o)]


# ---------------------------------------------------------------------------
# The problem files


def test_the_suite_is_large_enough() -> None:
    assert len(FILES) >= 34  # 30 examples of model-repository modules plus the 4 original problems


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_problem_builds_and_runs_small_on_cpu(path: Path) -> None:
    module = load(path, f"bench_problem_{path.stem}")
    for name in ("get_inputs", "get_init_inputs", "get_small_inputs", "get_small_init_inputs"):
        assert callable(getattr(module, name, None)), f"{path.name} lacks {name}()"
    cls = module_class(module)
    assert [m.name for m in find_modules(path.read_text(encoding="utf-8"), str(path))] == [cls.__name__]
    torch.manual_seed(0)
    model = cls(*module.get_small_init_inputs()).eval()
    args = module.get_small_inputs()
    assert all(a.numel() <= 1 << 16 for a in args if isinstance(a, torch.Tensor)), "small inputs too large"
    with torch.no_grad():
        got = outputs(model(*args))
    assert got and all(bool(torch.isfinite(t).all()) for t in got if t.is_floating_point())


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_problem_full_size_is_consistent(path: Path) -> None:
    """The GPU-sized problem builds and runs on the meta device: shapes agree, nothing is allocated."""
    module = load(path, f"bench_problem_meta_{path.stem}")
    cls = module_class(module)
    with torch.device("meta"):
        model = cls(*module.get_init_inputs()).eval()
        args = module.get_inputs()
        with torch.no_grad():
            got = outputs(model(*args))
    assert got
    elements = sum(a.numel() for a in args if isinstance(a, torch.Tensor))
    assert elements >= 1 << 21, f"{path.name}: {elements} input elements is too small to time on a GPU"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_problem_says_its_level_and_what_bounds_it(path: Path) -> None:
    consts = kq._constants(path)
    assert consts.get("LEVEL") in (1, 2), f"{path.name}: LEVEL = 1 (one operation) or 2 (a chain)"
    assert consts.get("BOUND") in ("memory", "compute"), f"{path.name}: BOUND = 'memory' or 'compute'"


def test_the_suite_covers_both_levels_and_the_kinds_benchmarks_use() -> None:
    levels = [kq._constants(p)["LEVEL"] for p in FILES]
    assert levels.count(1) >= 20 and levels.count(2) >= 20
    for kind in (
        "column_sum",
        "elementwise_chain",
        "linear_layernorm",
        "conv_bias_relu",
        "avg_pool",
        "max_pool",
    ):
        assert PROBLEMS / f"{kind}.py" in FILES


def test_facts_give_the_least_bytes_a_memory_bound_problem_moves() -> None:
    from runners.pipeline import problems_for

    def facts(name: str) -> object:
        (problem,), _ = problems_for(str(PROBLEMS / f"{name}.py"), str(ROOT), None)
        return kq.problem_facts(problem)

    softmax = facts("softmax")  # 8192 x 4096 float32 in, the same out
    assert (softmax.level, softmax.bound, softmax.bytes_moved) == (1, "memory", 2 * 8192 * 4096 * 4)
    chain = facts("elementwise_chain")  # two inputs, one output of 8 x 1024 x 4096
    assert chain.bytes_moved == 3 * 8 * 1024 * 4096 * 4
    rms = facts("rmsnorm")  # the weight is read too
    assert rms.bytes_moved is not None and rms.bytes_moved % 4 == 0 and rms.level == 1
    assert facts("matmul").bytes_moved is None  # compute-bound: no bandwidth figure


# ---------------------------------------------------------------------------
# The table writer, on synthetic reports

CUDA = DeviceInfo("cuda", "NVIDIA H200", "2.11.0", "3.6.0", "580.0", "13.0")
CPU = DeviceInfo("cpu", "x86_64", "2.13.0", "3.9.0", interpreter=True)


def timing(ms: float, spread: float = 0.01) -> Timing:
    return Timing(ms, ms * (1 - spread), ms * (1 + spread), 100)


def correct(
    cid: str, gen: str, eager: float | None, comp: float | None, ms: float | None, min_speedup: float = 1.05
) -> CandidateResult:
    c = CandidateResult(cid, gen, Status.CORRECT, max_abs_error=1e-6)
    if ms is None or eager is None:
        return c
    c.timings = {"eager": timing(eager), "candidate": timing(ms)}
    if comp is not None:
        c.timings["compile"] = timing(comp)
        c.speedup_vs_compile = comp / ms
    c.median_ms, c.speedup_vs_eager = ms, eager / ms
    c.verdict = Verdict.FASTER if eager / ms >= min_speedup else Verdict.NO_FASTER
    return c


def declined(gen: str, why: str) -> CandidateResult:
    return CandidateResult(gen, gen, Status.ERROR, f"generator: {gen}: {why}")


def module(name: str, *cands: CandidateResult, best: str | None = None) -> ModuleReport:
    return ModuleReport(
        f"bench/problems/{name}.py::{name}",
        f"bench/problems/{name}.py",
        name,
        inputs=[TensorInfo([8, 1024, 4096], "float32")],
        candidates=list(cands),
        best=best,
    )


def suite(device: DeviceInfo = CUDA) -> RunReport:
    fast = correct("norm_kernel", "template", eager=2.0, comp=0.5, ms=1.0)  # 2x eager, 0.5x compile
    even = correct("act_kernel", "template", eager=1.0, comp=1.0, ms=1.0)  # no faster than either
    files_win = correct("ok.py", "files", eager=4.0, comp=2.0, ms=1.0)  # 4x eager, 2x compile
    skipped = module("Broken")
    skipped.status, skipped.reason = "skipped", "could not build the module: get_inputs() raised"
    return RunReport(
        device,
        [
            module(
                "Norm", fast, CandidateResult("bad.py", "files", Status.INCORRECT, "seed 0"), best=fast.id
            ),
            module("Act", even),
            module(
                "Matmul",
                declined("template", "unsupported op torch.matmul (node 'matmul')"),
                files_win,
                best=files_win.id,
            ),
            skipped,
        ],
    )


def by_name(table: object) -> dict[str, object]:
    return {s.name: s for s in table.summaries}  # type: ignore[attr-defined]


def test_rows_one_per_problem_and_generator() -> None:
    table = kq.build_table(suite(), ["template", "files"])
    got = [(r.problem.split("::")[1], r.generator, r.status) for r in table.rows]
    assert got == [
        ("Norm", "template", "correct"),
        ("Norm", "files", "incorrect"),
        ("Act", "template", "correct"),
        ("Act", "files", "not asked"),
        ("Matmul", "template", "declined"),
        ("Matmul", "files", "correct"),
        ("Broken", "—", "skipped"),
    ]
    matmul = table.rows[4]
    assert matmul.note == "unsupported op torch.matmul (node 'matmul')"
    assert matmul.kernel_ms is None


def test_summary_arithmetic() -> None:
    summaries = by_name(kq.build_table(suite(), ["template", "files"]))
    template = summaries["template"]
    assert (template.problems, template.verified) == (4, 2)  # Norm, Act, Matmul (declined), Broken
    assert (template.faster_than_eager, template.faster_than_compile) == (1, 0)
    assert template.as_fast_as_compile == 1  # Act at 1.00x counts; Norm at 0.50x does not
    assert template.geomean_vs_eager == pytest.approx(math.sqrt(2.0 * 1.0))
    assert template.geomean_vs_eager_rows == 2
    assert template.geomean_vs_compile == pytest.approx(math.sqrt(0.5 * 1.0))
    files = summaries["files"]
    assert (files.verified, files.faster_than_eager, files.faster_than_compile) == (1, 1, 1)
    portfolio = summaries[kq.PORTFOLIO]  # Norm: template, Act: template (no winner), Matmul: files
    assert (portfolio.problems, portfolio.verified) == (4, 3)
    assert (portfolio.faster_than_eager, portfolio.faster_than_compile) == (2, 1)
    assert portfolio.as_fast_as_compile == 2  # Act (1.00x) and Matmul (2x)
    assert portfolio.geomean_vs_eager == pytest.approx((2.0 * 1.0 * 4.0) ** (1 / 3))
    assert portfolio.geomean_vs_eager_rows == 3


def test_per_problem_rows_give_bandwidth_engine_time_and_levels() -> None:
    report = suite()
    report.modules[0].wall_s = 41.5
    report.modules[0].phases = {"build": 20.4, "generate: template": 3.2, "checks": 17.9}
    facts = {
        report.modules[0].target: kq.Facts(1, "memory", 2_400_000_000),  # Norm: 1 ms for 2.4 GB
        report.modules[1].target: kq.Facts(1, "memory", 1_000_000),
        report.modules[2].target: kq.Facts(2, "compute", None),
    }
    table = kq.build_table(report, ["template", "files"], facts, peak=4.8)
    norm, act, matmul, broken = table.problems
    assert norm.gb_per_s == pytest.approx(2400.0) and norm.of_peak == pytest.approx(0.5)
    assert norm.engine_s == 41.5 and norm.level == 1
    assert act.gb_per_s == pytest.approx(1.0)  # a verified pick, even when no faster
    assert matmul.gb_per_s is None and broken.gb_per_s is None
    summaries = by_name(table)
    assert (summaries["portfolio, level 1"].problems, summaries["portfolio, level 1"].verified) == (2, 2)
    assert summaries["portfolio, level 2"].faster_than_compile == 1
    page = kq.markdown(report, ["template", "files"], {}, [], facts, 4.8)
    row = next(line for line in page.splitlines() if line.startswith("| bench/problems/Norm.py::Norm | 1 |"))
    assert row.endswith("| 2400 | 50% | 41.5 | build 20 · generate: template 3 · checks 18 |")
    assert "against 4.8 TB/s" in page and "| portfolio, level 2 | 1 |" in page
    assert kq.peak_tbps("NVIDIA H200") == 4.8 and kq.peak_tbps("NVIDIA H100 80GB HBM3") == 3.35


def test_faster_than_compile_needs_the_noise_rule() -> None:
    c = correct("k", "template", eager=2.0, comp=1.04, ms=1.0)  # 1.04x: under the 1.05x minimum
    table = kq.build_table(RunReport(CUDA, [module("M", c, best="k")]), ["template"])
    assert not table.rows[0].faster_than_compile
    assert by_name(table)[kq.PORTFOLIO].as_fast_as_compile == 1  # but as fast as compile
    slower = correct("k", "template", eager=2.0, comp=0.99, ms=1.0)
    table = kq.build_table(RunReport(CUDA, [module("M", slower, best="k")]), ["template"])
    assert by_name(table)[kq.PORTFOLIO].as_fast_as_compile == 0
    c = correct("k", "template", eager=2.0, comp=1.2, ms=1.0)
    c.timings["candidate"] = Timing(1.0, 0.5, 1.5, 100)  # spreads overlap
    assert (
        not kq.build_table(RunReport(CUDA, [module("M", c, best="k")]), ["template"])
        .rows[0]
        .faster_than_compile
    )


def test_markdown_on_cuda_has_times_and_summary() -> None:
    page = kq.markdown(suite(), ["template", "files"], {"kernelllm": "no weights"}, ["Date: today."])
    assert "- Unavailable: kernelllm (no weights)." in page
    norm = next(
        line
        for line in page.splitlines()
        if line.startswith("| bench/problems/Norm.py::Norm | 8×1024×4096 | template")
    )
    assert "| correct | faster | 1.0e-06 | 2 | 0.5 | 1 | 2.00x | 0.50x |" in norm
    assert (
        "| template | 4 | 2/4 (50%) | 1/4 (25%) | 0/4 (0%) | 1/4 (25%) | 1.41x over 2 rows "
        "| 0.71x over 2 rows |" in page
    )
    assert (
        "| portfolio (the engine's pick per problem) | 4 | 3/4 (75%) | 2/4 (50%) | 1/4 (25%) | 2/4 (50%) |"
        in page
    )
    assert "not measured" not in page


def test_markdown_on_cpu_says_not_measured_instead_of_zeros() -> None:
    report = RunReport(CPU, [module("Norm", correct("k", "template", None, None, None), best="k")])
    page = kq.markdown(report, ["template"], {}, [])
    row = next(line for line in page.splitlines() if "Norm.py::Norm" in line)
    assert row.count("not measured") == 6  # verdict, three times, two speedups
    assert "| template | 1 | 1/1 (100%) | not measured | not measured | not measured | not measured |" in page
    assert "Triton interpreter" in page
    assert " 0.00" not in page and "| 0 |" not in page


def test_note_is_one_short_line_and_pipes_are_escaped() -> None:
    long = "check 2: " + "x" * 200 + "\nTraceback ..."
    bad = CandidateResult("k", "template", Status.INCORRECT, long)
    report = RunReport(CPU, [module("M", bad), module("P", declined("template", "unsupported op a|b"))])
    page = kq.markdown(report, ["template"], {}, [])
    assert "Traceback" not in page and "x" * 100 not in page
    assert "unsupported op a\\|b" in page


def test_a_candidate_named_after_its_generator_is_not_a_decline() -> None:
    """The inductor generator names its one candidate "inductor": only the engine's "generator: ..."
    record means the generator itself declined."""
    failed = CandidateResult("inductor", "inductor", Status.ERROR, "check 1: cannot be built")
    gave_up = declined("inductor", "graph breaks")
    report = RunReport(CUDA, [module("A", failed), module("B", gave_up)])
    rows = kq.build_table(report, ["inductor"]).rows
    assert [(r.status, r.candidate, r.note) for r in rows] == [
        ("error", "inductor", "check 1: cannot be built"),
        ("declined", "", "graph breaks"),
    ]


def test_geomean() -> None:
    assert kq.geomean([]) is None
    assert kq.geomean([4.0, 1.0]) == pytest.approx(2.0)


def test_json_parts_render_together(tmp_path: Path) -> None:
    full = suite()
    paths = []
    for i, part in enumerate((full.modules[:2], full.modules[2:])):
        report = RunReport(CUDA, part)
        data = to_dict(report)
        facts = {m.target: kq.Facts(i + 1, "memory", 10) for m in part}
        data["quality"] = kq.quality_section(
            report, ["template", "files"], {"kernelllm": "no weights"}, facts
        )
        paths.append(tmp_path / f"part{i}.json")
        paths[-1].write_text(json.dumps(data), encoding="utf-8")
    merged = kq.load_runs([str(p) for p in paths])
    assert [m.class_name for m in merged.report.modules] == ["Norm", "Act", "Matmul", "Broken"]
    assert [f.level for f in merged.facts.values()] == [1, 1, 2, 2]
    assert merged.generators == ["template", "files"]
    assert merged.unavailable == {"kernelllm": "no weights"}


# ---------------------------------------------------------------------------
# End to end, on CPU


def test_script_on_cpu_writes_the_table(tmp_path: Path) -> None:
    out = tmp_path / "quality.md"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--small",
            "--device",
            "cpu",
            "--generator",
            "template",
            "--only",
            "rmsnorm_llama,conv_bias_relu",
            "--markdown",
            str(out),
            "--quiet",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in out.read_text(encoding="utf-8").splitlines() if line.startswith("| bench/")]
    assert len(rows) == 4  # one per problem and generator, then one per problem
    conv, norm, conv_pick, norm_pick = rows
    assert conv_pick.startswith(
        "| bench/problems/conv_bias_relu.py::ConvBiasReLU | 2 | not measured | not measured | declined |"
    )
    assert norm_pick.startswith("| bench/problems/rmsnorm_llama.py::LlamaRMSNorm | 1 |")
    assert "(portfolio)" not in norm_pick and "(template)" in norm_pick
    engine_s, spent_on = norm_pick.rstrip(" |").split(" | ")[-2:]
    assert float(engine_s) > 0  # the engine's seconds on the module, and where they went
    assert re.fullmatch(r"build \d+ · generate: template \d+ · checks \d+ · last checks \d+", spent_on)
    assert conv.startswith(
        "| bench/problems/conv_bias_relu.py::ConvBiasReLU | 2×4×8×8 | template | declined |"
    )
    assert "unsupported op nn.Conv2d (node 'conv')" in conv
    assert norm.startswith("| bench/problems/rmsnorm_llama.py::LlamaRMSNorm | 2×8×64 | template | correct |")
    assert norm.count("not measured") == 6
    page = out.read_text(encoding="utf-8")
    assert "| template | 2 | 1/2 (50%) | not measured |" in page
    assert "sizes small (get_small_inputs)" in page
