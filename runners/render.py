"""Reports for people: the terminal table and the markdown page (from ``templates/``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import jinja2

from runners.results import CandidateResult, ModuleReport, RunReport, Verdict, generator_outcomes

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def environment() -> jinja2.Environment:
    """The one template environment: a missing variable is an error, not an empty string."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ms"] = fmt_ms
    env.filters["x"] = fmt_speedup
    env.filters["err"] = fmt_err
    env.globals["outcomes"] = generator_outcomes  # per generator: won, or why it lost
    env.globals["training_figures"] = training_figures
    env.globals["training_line"] = training_line
    return env


def fmt_ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g}"


def fmt_speedup(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}x"


def fmt_err(v: float | None) -> str:
    return "—" if v is None else f"{v:.1e}"


def training_figures(c: CandidateResult) -> str:
    """A training step (forward and backward) against eager and torch.compile, and what that makes
    it ("1.52x eager, 0.90x torch.compile: slower than torch.compile"); or why it was not timed."""
    if c.training_median_ms is None:
        if c.training.startswith("original path"):
            return "original path, not timed"
        if c.training.startswith("Triton backward"):
            return "not timed"
        return "not checked" if c.training else "—"
    eager, compiled = c.training_speedup_vs_eager, c.training_speedup_vs_compile
    figures = f"{fmt_speedup(eager)} eager"
    if compiled is not None:
        figures += f", {fmt_speedup(compiled)} torch.compile"
    if c.training_verdict is Verdict.FASTER:
        verdict = "slower than torch.compile" if compiled is not None and compiled < 1 else "faster"
    else:
        verdict = "slower" if eager is not None and eager < 1 else "no faster"
    return f"{figures}: {verdict}"


def training_line(c: CandidateResult) -> str:
    """:func:`training_figures` as a sentence of a headline; empty when training was never checked."""
    if not c.training:
        return ""
    if c.training_median_ms is None:
        return f"training: {training_figures(c)}"
    return f"training (forward+backward): {training_figures(c)}"


def markdown(report: RunReport) -> str:
    return environment().get_template("reports/run.md.j2").render(report=report)


def _row(m: ModuleReport, c: CandidateResult | None) -> list[str]:
    if c is None:
        return [m.target, "—", "—", m.status, m.reason, "—", "—", "—", "—", "—", "—"]
    mark = " *" if c.id == m.best else ""
    status = "declined" if c.provenance.get("declined") else c.status.value
    return [
        m.target,
        c.id + mark,
        c.generator,
        status,
        c.reason or c.verdict.value,
        fmt_err(c.max_abs_error),
        fmt_ms(c.median_ms),
        fmt_ms(m.baselines.eager_ms),
        fmt_speedup(c.speedup_vs_eager),
        fmt_speedup(c.speedup_vs_compile),
        training_figures(c),
    ]


def text_table(report: RunReport, width: int = 60, columns: int | None = None) -> str:
    """The terminal's table: columns that say nothing in this run (every cell "—", as the timing
    columns on CPU) left out, and the reason clipped so a row fits ``columns`` characters (default:
    the terminal's width) where it can."""
    header = [
        "module",
        "candidate",
        "generator",
        "status",
        "reason",
        "max err",
        "ms",
        "eager ms",
        "vs eager",
        "vs compile",
        "training (fwd+bwd)",
    ]
    rows = []
    for m in report.modules:
        rows += [_row(m, c) for c in m.candidates] or [_row(m, None)]
    keep = [i for i, h in enumerate(header) if i < 5 or any(r[i] not in ("—", "") for r in rows)]
    header, rows = [header[i] for i in keep], [[r[i] for i in keep] for r in rows]
    total = columns or shutil.get_terminal_size((160, 24)).columns
    reason = header.index("reason")
    others = sum(
        min(width, max(len(h), *(len(r[i]) for r in rows))) + 2 for i, h in enumerate(header) if i != reason
    )
    fits = max(24, min(width, total - others))
    limits = [fits if i == reason else width for i in range(len(header))]
    clipped = [[c if len(c) <= n else c[: n - 1] + "…" for c, n in zip(r, limits, strict=True)] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in clipped)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [line(header), line(["-" * w for w in widths]), *map(line, clipped)]
    dev = report.device
    for m in report.modules:
        if m.status in ("skipped", "kernelized"):
            continue
        found = generator_outcomes(m, dev.kind == "cuda", report.min_speedup)
        name_width = max((len(o.generator) for o in found), default=0)
        out.append(f"\n{m.target}, by generator:")
        out += [f"  {o.generator.ljust(name_width)}  {o.why}" for o in found]
    timing = "timed on " + dev.name if dev.kind == "cuda" else "not timed (no GPU): Triton interpreter"
    best = "* best candidate · " if any(m.best for m in report.modules) else ""
    out.append(f"\n{best}{timing} · torch {dev.torch} · triton {dev.triton}")
    return "\n".join(out)
