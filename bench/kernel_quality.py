"""Kernel quality: every example problem through the generator portfolio, as one table.

    python bench/kernel_quality.py [--problems DIR] [--generator NAME]... [--device auto|cpu|cuda]
                                   [--small] [--samples N] [--only PATTERN]... [--timeout S]
                                   [--min-speedup X] [--no-compile] [--peak-tbps X]
                                   [--markdown PATH] [--json PATH]
    python bench/kernel_quality.py --from-json RUN.json [RUN.json ...] [--markdown PATH]

Each problem (every ``nn.Module`` class in ``bench/problems/*.py``, built through its
``get_init_inputs()``/``get_inputs()``) goes through ``runners.pipeline.kernelize`` once with all
the generators: the engine keeps the best verified candidate, as it does for a pull request. The
table has one row per problem and generator (that generator's best candidate: the winner, else its
fastest verified one, else its first; or why it declined), then summary rows per generator and for
the portfolio (per problem, the engine's pick).

- ``--generator`` (repeatable): the generators to ask; default, the portfolio this machine can run
  (``runners.generators.default_portfolio``), the others listed with the reason in the header.
- ``--small``: every problem file also defines ``get_small_inputs()``/``get_small_init_inputs()``;
  the files are copied to a scratch folder with ``get_inputs``/``get_init_inputs`` bound to those,
  so the whole suite verifies on CPU through the Triton interpreter in minutes. Times are not
  measured on CPU, and the table says so.
- ``--only`` (repeatable, or comma-separated): shell patterns matched against the file name without
  ``.py``, the class name and ``file::Class`` (``--only 'rmsnorm*' --only 'softmax*'``).
- ``--json``: the engine's versioned run report plus a ``quality`` section (rows and summary).
  ``--from-json`` renders the table again from one or more such files: a long GPU run can be made
  in parts with ``--only`` and put together afterwards.

A second table has one row per problem: the engine's pick beside eager and torch.compile, the
engine's wall time on the module (building it, the generators, every candidate's checks and
timing), and for problems a file marks ``BOUND = "memory"`` the pick's achieved bandwidth: the
bytes the module must move at the least (its inputs, parameters and buffers read once, its outputs
written once: measured by running the module on the meta device) over the kernel's median time,
and that as a share of the device's peak (``--peak-tbps``; by default known for H200, H100 and
A100 by name). A file's ``LEVEL = 1`` (one operation) or ``LEVEL = 2`` (a chain of them: a
product or convolution with its epilogue, a norm after a product) gives the portfolio's summary
per level.

Summary rows: fractions are over all problems (declined, failed and unbuildable ones count as not
verified and not faster). "Faster than eager" is the engine's verdict: at least ``--min-speedup``
over eager with the candidate's 90th percentile below eager's 10th; "faster than torch.compile"
applies the same rule to the torch.compile timing; "as fast as torch.compile" counts the verified
rows whose median is torch.compile's or less (1.00x or more, no noise allowance either way), the
measure the goals use. Geometric means are over the rows that verified
and were timed (their number is given), so they describe the kernels that exist, not the suite.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import fnmatch
import json
import math
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runners.generators.base import Problem  # noqa: E402
from runners.render import fmt_err, fmt_ms, fmt_speedup  # noqa: E402
from runners.results import (  # noqa: E402
    DEFAULT_MIN_SPEEDUP,
    CandidateResult,
    ModuleReport,
    RunReport,
    Status,
    Timing,
    Verdict,
    is_generator_row,
    report_from_dict,
    to_dict,
)

NOT_MEASURED = "not measured"
SMALL_FUNCTIONS = ("get_small_inputs", "get_small_init_inputs")
# Appended to each file's copy under --small: the engine builds problems through the KernelBench names.
SMALL_BINDING = "\n\nget_inputs = get_small_inputs\nget_init_inputs = get_small_init_inputs\n"
NOTE_CHARS = 90
PORTFOLIO = "portfolio"  # the summary row for the engine's pick per problem


# ---------------------------------------------------------------------------
# Rows: what each generator did for each problem (pure functions of the reports)


@dataclass
class Row:
    problem: str  # file::Class
    inputs: str
    generator: str
    status: str  # a candidate Status, or "declined", "error", "skipped", "not asked"
    verdict: str = ""
    candidate: str = ""
    max_abs_error: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    kernel_ms: float | None = None
    vs_eager: float | None = None
    vs_compile: float | None = None
    faster_than_eager: bool = False
    faster_than_compile: bool = False
    note: str = ""

    @property
    def verified(self) -> bool:
        return self.status == Status.CORRECT.value


@dataclass
class Facts:
    """What a problem file says of itself (``LEVEL``, ``BOUND``) and the least bytes it moves."""

    level: int | None = None
    bound: str = ""  # "memory", "compute" or unsaid
    bytes_moved: int | None = None


# Peak memory bandwidth in TB/s by a substring of the device's name (the vendors' figures).
PEAK_TBPS = {
    "H200": 4.8,
    "H100 NVL": 3.9,
    "H100 PCIe": 2.0,
    "H100": 3.35,
    "A100-SXM4-80GB": 2.039,
    "A100": 1.555,
}


def peak_tbps(device_name: str) -> float | None:
    return next((tb for name, tb in PEAK_TBPS.items() if name in device_name), None)


@dataclass
class ProblemRow:
    """The engine's pick for one problem, with its cost and, for memory-bound ones, its bandwidth."""

    pick: Row
    generator: str  # the pick's generator
    level: int | None
    engine_s: float | None
    gb_per_s: float | None
    of_peak: float | None
    phases: dict[str, float] = field(default_factory=dict)  # where engine_s went (ModuleReport.phases)


@dataclass
class Summary:
    name: str  # a generator, or PORTFOLIO
    problems: int
    verified: int
    faster_than_eager: int
    faster_than_compile: int
    as_fast_as_compile: int  # verified, median at or below torch.compile's (>= 1.00x)
    geomean_vs_eager: float | None
    geomean_vs_eager_rows: int
    geomean_vs_compile: float | None
    geomean_vs_compile_rows: int


def shorten(text: str, limit: int = NOTE_CHARS) -> str:
    """The first line, without the engine's ``generator: name:`` prefixes, cut to ``limit``."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    for prefix in ("generator: ", "generator failed: "):
        first = first.removeprefix(prefix)
    return first if len(first) <= limit else first[: limit - 1] + "…"


def describe_inputs(m: ModuleReport) -> str:
    parts = []
    for t in m.inputs:
        shape = "×".join(str(s) for s in t.shape) or "scalar"
        parts.append(shape if t.dtype == "float32" else f"{shape} {t.dtype}")
    return ", ".join(parts) or "—"


def _pick(cands: list[CandidateResult], winner: CandidateResult | None) -> CandidateResult:
    """The winner when it is among ``cands``; else the fastest verified, the first verified, the first."""
    if winner is not None and any(c is winner for c in cands):
        return winner
    correct = [c for c in cands if c.status is Status.CORRECT]
    timed = [c for c in correct if c.median_ms is not None]
    if timed:
        return min(timed, key=lambda c: c.median_ms or math.inf)
    return correct[0] if correct else cands[0]


def _clears(baseline: Timing | None, cand: Timing | None, min_speedup: float) -> bool:
    """The engine's "faster" rule (runners/bench.py: clears_noise) against any baseline."""
    if baseline is None or cand is None or cand.median_ms <= 0:
        return False
    return baseline.median_ms / cand.median_ms >= min_speedup and cand.p90_ms < baseline.p10_ms


def candidate_row(
    m: ModuleReport, generator: str, c: CandidateResult, min_speedup: float, inputs: str
) -> Row:
    eager, comp = c.timings.get("eager"), c.timings.get("compile")
    cand = c.timings.get("candidate")
    note = c.reason if c.status is not Status.CORRECT else "; ".join(c.notes)
    if c.status is Status.CORRECT and m.baselines.compile_error and comp is None:
        note = "; ".join(filter(None, [note, f"torch.compile failed: {m.baselines.compile_error}"]))
    return Row(
        problem=m.target,
        inputs=inputs,
        generator=generator,
        status=c.status.value,
        verdict=c.verdict.value if c.status is Status.CORRECT else "",
        candidate=c.id,
        max_abs_error=c.max_abs_error,
        eager_ms=eager.median_ms if eager else m.baselines.eager_ms,
        compile_ms=comp.median_ms if comp else m.baselines.compile_ms,
        kernel_ms=c.median_ms,
        vs_eager=c.speedup_vs_eager,
        vs_compile=c.speedup_vs_compile,
        faster_than_eager=c.verdict is Verdict.FASTER,
        faster_than_compile=c.status is Status.CORRECT and _clears(comp, cand, min_speedup),
        note=shorten(note),
    )


def rows_for(m: ModuleReport, generators: list[str], min_speedup: float) -> list[Row]:
    """One row per generator asked, in ``generators`` order (then any others the report holds)."""
    inputs = describe_inputs(m)
    if m.status == "skipped":
        return [Row(m.target, inputs, "—", "skipped", note=shorten(m.reason))]
    winner = m.best_candidate()
    seen = list(dict.fromkeys([*generators, *(c.generator for c in m.candidates)]))
    rows = []
    for gen in seen:
        cands = [c for c in m.candidates if c.generator == gen]
        made = [c for c in cands if not is_generator_row(c)]
        if not cands:
            rows.append(Row(m.target, inputs, gen, "not asked"))
        elif not made:
            status = "error" if cands[0].reason.startswith("generator failed: ") else "declined"
            rows.append(
                Row(
                    m.target,
                    inputs,
                    gen,
                    status,
                    eager_ms=m.baselines.eager_ms,
                    compile_ms=m.baselines.compile_ms,
                    note=shorten(cands[0].reason.removeprefix("generator: ").removeprefix(f"{gen}: ")),
                )
            )
        else:
            rows.append(candidate_row(m, gen, _pick(made, winner), min_speedup, inputs))
    return rows


def portfolio_row(m: ModuleReport, min_speedup: float) -> Row:
    """The engine's pick for one problem: its best, else the fastest (or first) verified candidate."""
    inputs = describe_inputs(m)
    made = [c for c in m.candidates if not is_generator_row(c)]
    if m.status == "skipped" or not made:
        return Row(m.target, inputs, PORTFOLIO, m.status if m.status == "skipped" else "declined")
    c = _pick(made, m.best_candidate())
    return candidate_row(m, PORTFOLIO, c, min_speedup, inputs)


def geomean(values: Iterable[float]) -> float | None:
    logs = [math.log(v) for v in values if v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def summarize(name: str, rows: list[Row]) -> Summary:
    vs_eager = [r.vs_eager for r in rows if r.verified and r.vs_eager is not None]
    vs_compile = [r.vs_compile for r in rows if r.verified and r.vs_compile is not None]
    return Summary(
        name=name,
        problems=len(rows),
        verified=sum(r.verified for r in rows),
        faster_than_eager=sum(r.verified and r.faster_than_eager for r in rows),
        faster_than_compile=sum(r.verified and r.faster_than_compile for r in rows),
        as_fast_as_compile=sum(r.verified and r.vs_compile is not None and r.vs_compile >= 1.0 for r in rows),
        geomean_vs_eager=geomean(vs_eager),
        geomean_vs_eager_rows=len(vs_eager),
        geomean_vs_compile=geomean(vs_compile),
        geomean_vs_compile_rows=len(vs_compile),
    )


@dataclass
class Table:
    rows: list[Row]
    summaries: list[Summary]
    timed: bool
    problems: list[ProblemRow] = field(default_factory=list)


def problem_rows(report: RunReport, facts: dict[str, Facts], peak: float | None) -> list[ProblemRow]:
    out = []
    for m in report.modules:
        pick, f = portfolio_row(m, report.min_speedup), facts.get(m.target, Facts())
        gbps = None
        if f.bound == "memory" and f.bytes_moved and pick.verified and pick.kernel_ms:
            gbps = f.bytes_moved / (pick.kernel_ms * 1e-3) / 1e9
        of_peak = gbps / (peak * 1e3) if gbps is not None and peak else None
        generator = next((c.generator for c in m.candidates if c.id == pick.candidate), "")
        out.append(ProblemRow(pick, generator, f.level, m.wall_s, gbps, of_peak, dict(m.phases)))
    return out


def _phases(phases: dict[str, float]) -> str:
    """``build 21 · generate: inductor 35 · checks 9``: each phase's whole seconds, in order."""
    return " · ".join(f"{name} {sec:.0f}" for name, sec in phases.items()) or "—"


def build_table(
    report: RunReport, generators: list[str], facts: dict[str, Facts] | None = None, peak: float | None = None
) -> Table:
    rows = [r for m in report.modules for r in rows_for(m, generators, report.min_speedup)]
    names = list(dict.fromkeys([*generators, *(r.generator for r in rows if r.generator != "—")]))
    skipped = [r for r in rows if r.status == "skipped"]
    summaries = [
        summarize(g, [*(r for r in rows if r.generator == g), *skipped])
        for g in names
        if any(r.generator == g and r.status != "not asked" for r in rows)
    ]
    problems = problem_rows(report, facts or {}, peak)
    summaries.append(summarize(PORTFOLIO, [p.pick for p in problems]))
    for level in sorted({p.level for p in problems if p.level is not None}):
        summaries.append(
            summarize(f"{PORTFOLIO}, level {level}", [p.pick for p in problems if p.level == level])
        )
    return Table(rows, summaries, timed=report.device.kind == "cuda", problems=problems)


# ---------------------------------------------------------------------------
# Markdown


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _fraction(n: int, total: int) -> str:
    return f"{n}/{total} ({100 * n / total:.0f}%)" if total else "—"


def _mean(value: float | None, rows: int) -> str:
    return "—" if value is None else f"{value:.2f}x over {rows} row{'s' if rows != 1 else ''}"


def _number(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def markdown(
    report: RunReport,
    generators: list[str],
    unavailable: dict[str, str],
    header: list[str],
    facts: dict[str, Facts] | None = None,
    peak: float | None = None,
) -> str:
    """The whole page: ``header`` lines, the device, the per-generator and per-problem tables and the
    summary."""
    table = build_table(report, generators, facts, peak)
    dev = report.device
    if dev.kind == "cuda":
        device = f"{dev.name} (CUDA {dev.cuda}, driver {dev.driver}), torch {dev.torch}, triton {dev.triton}"
    else:
        device = (
            f"CPU ({dev.name}), torch {dev.torch}, triton {dev.triton}: kernels ran in the Triton "
            "interpreter, checked for correctness only; times are not measured"
        )
    problems = len(report.modules)
    lines = [
        f"# Kernel quality: {problems} problems",
        "",
        *(f"- {h}" for h in header),
        f"- Device: {device}.",
    ]
    lines.append(f"- Generators: {', '.join(generators) or 'none'}.")
    for name, why in unavailable.items():
        lines.append(f"- Unavailable: {name} ({why}).")
    lines += [
        "",
        "| problem | inputs | generator | status | verdict | max abs err | eager ms | compile ms "
        "| kernel ms | vs eager | vs compile | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table.rows:
        if table.timed:
            times = [fmt_ms(r.eager_ms), fmt_ms(r.compile_ms), fmt_ms(r.kernel_ms)]
            speedups = [fmt_speedup(r.vs_eager), fmt_speedup(r.vs_compile)]
        else:
            times, speedups = [NOT_MEASURED] * 3, [NOT_MEASURED] * 2
        cells = [
            r.problem,
            r.inputs,
            r.generator,
            r.status,
            r.verdict or "—",
            fmt_err(r.max_abs_error),
            *times,
            *speedups,
            r.note or "—",
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines += [
        "",
        "## Per problem: the engine's pick",
        "",
        f"Bandwidth: the least bytes a memory-bound problem moves over the pick's median time, against "
        f"{f'{peak:g} TB/s' if peak else 'no known peak'}. Engine: the wall time spent on the module, "
        "and where it went (seconds: the build with the original's outputs and times, each generator, "
        "the candidates' checks, the chosen one's last checks).",
        "",
        "| problem | level | eager ms | compile ms | pick | verdict | kernel ms | vs eager | vs compile "
        "| GB/s | of peak | engine s | spent on |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in table.problems:
        r = p.pick
        pick = f"{r.candidate} ({p.generator})" if r.candidate else r.status
        if table.timed:
            times = [fmt_ms(r.eager_ms), fmt_ms(r.compile_ms)]
            kernel = [fmt_ms(r.kernel_ms), fmt_speedup(r.vs_eager), fmt_speedup(r.vs_compile)]
            bandwidth = [_number(p.gb_per_s, 4), "—" if p.of_peak is None else f"{100 * p.of_peak:.0f}%"]
        else:
            times, kernel, bandwidth = [NOT_MEASURED] * 2, [NOT_MEASURED] * 3, [NOT_MEASURED] * 2
        level = "—" if p.level is None else str(p.level)
        cells = [
            r.problem,
            level,
            *times,
            pick,
            r.verdict or r.status,
            *kernel,
            *bandwidth,
            _number(p.engine_s),
            _phases(p.phases),
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines += [
        "",
        "## Summary",
        "",
        "| generator | problems | verified | faster than eager | faster than torch.compile "
        "| as fast as torch.compile | geomean vs eager | geomean vs torch.compile |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in table.summaries:
        name = "portfolio (the engine's pick per problem)" if s.name == PORTFOLIO else s.name
        name = name.replace(f"{PORTFOLIO}, level", "portfolio, level")
        if table.timed:
            timing = [
                _fraction(s.faster_than_eager, s.problems),
                _fraction(s.faster_than_compile, s.problems),
                _fraction(s.as_fast_as_compile, s.problems),
                _mean(s.geomean_vs_eager, s.geomean_vs_eager_rows),
                _mean(s.geomean_vs_compile, s.geomean_vs_compile_rows),
            ]
        else:
            timing = [NOT_MEASURED] * 5
        cells = [name, str(s.problems), _fraction(s.verified, s.problems), *timing]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines += [
        "",
        "Fractions are over all problems: declined, failed and unbuildable ones count as not verified "
        "and not faster. Faster means at least "
        f"{report.min_speedup:.2f}x with the candidate's 90th percentile below the baseline's 10th "
        "(the engine's rule, applied to eager and to torch.compile); as fast as torch.compile means a "
        "median at or below torch.compile's (1.00x or more). Geometric means are over the "
        "verified, timed rows only.",
        "",
    ]
    return "\n".join(lines)


def quality_section(
    report: RunReport,
    generators: list[str],
    unavailable: dict[str, str],
    facts: dict[str, Facts] | None = None,
    peak: float | None = None,
) -> dict[str, Any]:
    table = build_table(report, generators, facts, peak)
    return {
        "generators": generators,
        "unavailable": unavailable,
        "facts": {k: to_dict(v) for k, v in (facts or {}).items()},
        "peak_tbps": peak,
        "rows": [to_dict(r) for r in table.rows],
        "problems": [to_dict(p) for p in table.problems],
        "summary": [to_dict(s) for s in table.summaries],
    }


# ---------------------------------------------------------------------------
# Problems


def defines(path: Path) -> set[str]:
    """Top-level function names of a file, read without importing it."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def _constants(path: Path) -> dict[str, Any]:
    """The file's top-level ``NAME = literal`` assignments, read without importing it."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def problem_facts(problem: Problem) -> Facts:
    """``LEVEL`` and ``BOUND`` from the problem's file; for a memory-bound one, the bytes its inputs,
    parameters, buffers and outputs hold, from one run on the meta device (sizes only, no data).
    The problem files are this suite's own code: they are imported here."""
    import importlib.util

    import torch

    path = Path(problem.file)
    consts = _constants(path)
    level, bound = consts.get("LEVEL"), consts.get("BOUND", "")
    facts = Facts(level if isinstance(level, int) else None, bound if isinstance(bound, str) else "")
    if facts.bound != "memory":
        return facts
    spec = importlib.util.spec_from_file_location(f"kernel_quality_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        with torch.device("meta"), torch.no_grad():
            model = getattr(module, problem.class_name)(*module.get_init_inputs())
            args = module.get_inputs()
            out = model(*args)
    except Exception:  # a module the meta device cannot run: no bandwidth figure
        return facts
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    tensors += list(model.parameters()) + list(model.buffers())
    tensors += [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]
    facts.bytes_moved = sum(t.numel() * t.element_size() for t in tensors)
    return facts


def matches(problem: Problem, patterns: list[str]) -> bool:
    stem = Path(problem.rel_path).stem
    names = (stem, problem.class_name, f"{stem}::{problem.class_name}")
    return not patterns or any(fnmatch.fnmatchcase(n, p) for p in patterns for n in names)


def load_problems(directory: Path, patterns: list[str], small: bool, scratch: Path | None) -> list[Problem]:
    """Every module class in ``directory/*.py`` that ``patterns`` select, named relative to the
    repository; with ``small``, built from copies in ``scratch`` bound to the small inputs."""
    from runners.pipeline import problems_for

    directory = directory.resolve()
    root = ROOT if directory.is_relative_to(ROOT) else directory.parent
    problems: list[Problem] = []
    for path in sorted(directory.glob("*.py")):
        if path.name.startswith("_"):
            continue
        source_path, source_root = path, root
        if small:
            assert scratch is not None
            missing = [f for f in SMALL_FUNCTIONS if f not in defines(path)]
            if missing:
                raise SystemExit(f"{path}: --small needs {' and '.join(missing)}() in the file")
            source_path = scratch / path.relative_to(root)
            source_path.parent.mkdir(parents=True, exist_ok=True)
            source_path.write_text(path.read_text(encoding="utf-8") + SMALL_BINDING, encoding="utf-8")
            source_root = scratch
        found, _ = problems_for(str(source_path), str(source_root), None)
        problems += [p for p in found if matches(p, patterns)]
    return problems


# ---------------------------------------------------------------------------
# Running


@dataclass
class Run:
    report: RunReport
    generators: list[str]
    unavailable: dict[str, str] = field(default_factory=dict)
    facts: dict[str, Facts] = field(default_factory=dict)


def choose_generators(requested: list[str], device: str) -> tuple[list[str], dict[str, str]]:
    if requested:
        return requested, {}
    from runners import generators

    portfolio = getattr(generators, "default_portfolio", None)
    if portfolio is None:
        return ["template"], {}
    names, unavailable = portfolio(device)
    return list(names), dict(unavailable)


def run(args: argparse.Namespace, device: str, progress: Any) -> Run:
    from runners import pipeline
    from runners.generators import GeneratorError, make_generator

    names, unavailable = choose_generators(args.generators or [], device)
    try:
        gens = [make_generator(n, {"device": device, "timeout_s": args.timeout}) for n in names]
    except GeneratorError as exc:
        raise SystemExit(f"kernel_quality: {exc}") from None
    settings = pipeline.EngineSettings(
        device=device,
        timeout_s=args.timeout,
        min_speedup=args.min_speedup,
        samples=args.samples,
        compile_baseline=not args.no_compile,
    )
    report = RunReport(device=pipeline.describe_device(device), min_speedup=args.min_speedup)
    scratch = Path(tempfile.mkdtemp(prefix="kernel-quality-")) if args.small else None
    try:
        problems = load_problems(Path(args.problems), args.only, args.small, scratch)
        if not problems:
            raise SystemExit(f"kernel_quality: no problem in {args.problems} matches {args.only}")
        facts = {}
        for i, problem in enumerate(problems, 1):
            progress(f"[{i}/{len(problems)}] {problem.target}")
            facts[problem.target] = problem_facts(problem)
            m = pipeline.kernelize(problem, gens, settings, progress)
            m.unavailable = dict(unavailable)
            report.modules.append(m)
            for r in rows_for(m, names, args.min_speedup):
                said = ", ".join(filter(None, [r.status, r.verdict, r.note]))
                progress(f"{problem.target}: {r.generator}: {said}")
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return Run(report, names, unavailable, facts)


def load_runs(paths: list[str]) -> Run:
    """Earlier ``--json`` outputs as one run (same device; problems in file order)."""
    merged: Run | None = None
    for path in paths:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        report = report_from_dict(data)
        quality = data.get("quality", {})
        facts = {k: Facts(**v) for k, v in quality.get("facts", {}).items()}
        part = Run(report, list(quality.get("generators", [])), dict(quality.get("unavailable", {})), facts)
        if merged is None:
            merged = part
            continue
        if (report.device.kind, report.device.name) != (merged.report.device.kind, merged.report.device.name):
            raise SystemExit(f"{path}: ran on {report.device.name}, not {merged.report.device.name}")
        merged.report.modules += report.modules
        merged.generators = list(dict.fromkeys([*merged.generators, *part.generators]))
        merged.unavailable.update(part.unavailable)
        merged.facts.update(part.facts)
    assert merged is not None
    return merged


def _device(choice: str) -> str:
    import torch

    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise SystemExit("kernel_quality: --device cuda: no CUDA device is available")
    return choice


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--problems", default=str(ROOT / "bench" / "problems"), help="folder of problem files"
    )
    parser.add_argument("--generator", dest="generators", action="append", help="repeatable")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--small", action="store_true", help="build from get_small_inputs() (CPU runs)")
    parser.add_argument("--samples", type=int, default=4, help="candidates asked of each generator")
    parser.add_argument("--only", action="append", default=[], help="file or class patterns")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per candidate")
    parser.add_argument("--min-speedup", type=float, default=DEFAULT_MIN_SPEEDUP)
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    parser.add_argument(
        "--peak-tbps", type=float, help="the device's peak memory bandwidth (default: by name)"
    )
    parser.add_argument("--markdown", help="write the table here")
    parser.add_argument("--json", help="write the run report and the table's rows here")
    parser.add_argument("--from-json", nargs="+", metavar="RUN", help="render earlier --json outputs")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    args.only = [p.strip() for spec in args.only for p in spec.split(",") if p.strip()]
    if args.samples < 1:
        parser.error(f"--samples must be at least 1, got {args.samples}")
    if args.min_speedup <= 0 or args.timeout <= 0:
        parser.error("--min-speedup and --timeout must be positive")
    for out in (args.markdown, args.json):
        if out and not Path(out).resolve().parent.is_dir():
            parser.error(f"{out}: the folder does not exist")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python bench/kernel_quality.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    header = [f"Date: {datetime.date.today().isoformat()}.", f"Command: `{command.strip()}`."]
    if args.from_json:
        result = load_runs(args.from_json)
        header.append(f"Rendered from {', '.join(args.from_json)}.")
    else:
        started = time.monotonic()

        def progress(msg: str) -> None:  # seconds since start: where a module killed at its limit was
            if not args.quiet:
                spent = time.monotonic() - started
                print(f"kernel_quality: {spent:7.1f} s {msg}", file=sys.stderr, flush=True)

        result = run(args, _device(args.device), progress)
        sizes = "small (get_small_inputs)" if args.small else "as written (get_inputs)"
        folder = Path(args.problems).resolve()
        shown = folder.relative_to(ROOT).as_posix() if folder.is_relative_to(ROOT) else str(folder)
        header.append(
            f"Problems: {shown}/, sizes {sizes}; {args.samples} sample(s) per generator, "
            f"{args.timeout:g} s per candidate."
        )
    peak = args.peak_tbps or peak_tbps(result.report.device.name)
    if args.json and not args.from_json:
        data = to_dict(result.report)
        data["quality"] = quality_section(
            result.report, result.generators, result.unavailable, result.facts, peak
        )
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    page = markdown(result.report, result.generators, result.unavailable, header, result.facts, peak)
    if args.markdown:
        Path(args.markdown).write_text(page, encoding="utf-8")
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
