"""The records that cross process and queue boundaries.

Everything here is plain data: JSON-serialisable through :func:`to_dict` and back
through :func:`from_plain`, which reads strictly (a field it does not know, a
missing one or a value of another type is a :class:`MessageError` naming it).
``REPORT_VERSION`` (a report file) changes whenever a field changes meaning or
disappears; new optional fields do not bump it. The queue's messages
(``runners/messages.py``) carry these records too, under versions of their own.

The engine's defaults live here, one home each: the GPU request, the engine's
settings, the command line, the server's settings and the repository config all
take them from here.
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

REPORT_VERSION = 1
# A candidate counts as faster only at this speedup over eager PyTorch or more (and beyond the noise).
DEFAULT_MIN_SPEEDUP = 1.05
DEFAULT_SAMPLES = 4  # candidates asked of each sampling generator
DEFAULT_TIMEOUT_S = 300.0  # wall time per candidate

T = TypeVar("T")


class MessageError(ValueError):
    """A record or message this side cannot read as it stands: its version, a field missing, one it
    does not know, or a value of another type. The message is one line that says which and why."""


class Status(StrEnum):
    """The verdict on one candidate."""

    CORRECT = "correct"  # passed every check
    INCORRECT = "incorrect"  # computes something else
    REJECTED = "rejected"  # may compute the right numbers, but breaks an honesty rule
    ERROR = "error"  # raised, failed to import or build, or broke a limit it could report
    TIMEOUT = "timeout"  # killed at the wall-time limit
    CRASHED = "crashed"  # the process died (signal, abort, CUDA fault, memory watchdog)


class Verdict(StrEnum):
    """What timing says about a correct candidate."""

    FASTER = "faster"  # clears the minimum speedup and the noise
    NO_FASTER = "no faster"
    NOT_MEASURED = "not measured"


@dataclass
class DeviceInfo:
    kind: str  # "cuda" or "cpu"
    name: str
    torch: str
    triton: str
    driver: str | None = None
    cuda: str | None = None
    interpreter: bool = False  # Triton kernels ran through TRITON_INTERPRET=1


@dataclass
class TensorInfo:
    shape: list[int]
    dtype: str


@dataclass
class Timing:
    """One measured callable: median and the 10th/90th percentiles, in ms (CUDA events around each
    call, the L2 flushed before it); ``wall_ms``: the judge's clock per call with the calls back to
    back on one input, what a loop over batches of this shape sees (None where not measured)."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    runs: int
    wall_ms: float | None = None


@dataclass
class Baselines:
    eager_ms: float | None = None
    compile_ms: float | None = None
    compile_error: str | None = None
    # A training step (forward and backward) of the original, eager and under torch.compile.
    training_eager_ms: float | None = None
    training_compile_ms: float | None = None


@dataclass
class CandidateResult:
    id: str
    generator: str
    status: Status
    reason: str = ""
    source_sha256: str = ""
    source_path: str | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    median_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    verdict: Verdict = Verdict.NOT_MEASURED
    torch_ops_kept: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # caveats a reviewer should read (TF32, clocked)
    triton_launches: int | None = None
    shapes_checked: list[list[list[int]]] = field(default_factory=list)
    # What runs when autograd records, as checked (gradients against the original's):
    # "original path (no backward kernel yet)"; empty when never checked.
    training: str = ""
    # What runs under torch.compile(fullgraph=True), as checked by the judge's compiled calls:
    # COMPILE_KERNELS or COMPILE_ORIGINAL (runners/judge.py); empty when never checked.
    compiled: str = ""
    timings: dict[str, Timing] = field(default_factory=dict)
    # A training step (forward and backward), timed where the training path is the candidate's own
    # Triton backward (``training`` is TRAINING_TRITON): the same figures as for the forward.
    training_median_ms: float | None = None
    training_speedup_vs_eager: float | None = None
    training_speedup_vs_compile: float | None = None
    training_verdict: Verdict = Verdict.NOT_MEASURED
    training_timings: dict[str, Timing] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    stdout_tail: str = ""
    wall_s: float | None = None
    # Where the check's seconds went, for the log: the runner's parts by the marks it sent (its own
    # word, never a verdict) and the judge's comparison.
    phases: dict[str, float] = field(default_factory=dict)


@dataclass
class ModuleReport:
    target: str
    file: str
    class_name: str
    # "ok"; "skipped" when the module could not be built; "kernelized" when it already has
    # Kernelize's kernel path (nothing run: the reason says why)
    status: str = "ok"
    reason: str = ""
    build_source: str | None = None  # "kernelbench", "config" or "guess"
    init_args: list[Any] = field(default_factory=list)
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    inputs: list[TensorInfo] = field(default_factory=list)
    baselines: Baselines = field(default_factory=Baselines)
    candidates: list[CandidateResult] = field(default_factory=list)
    best: str | None = None
    best_source: str | None = None  # the winning candidate's code, exactly as verified
    snippet: str | None = None  # how to make an unbuildable module buildable
    unavailable: dict[str, str] = field(default_factory=dict)  # generators not run here -> why
    wall_s: float | None = None  # the engine's time on the module, the build to the last verdict
    # Where that time went, in seconds, in the order spent: "build" (the module, its inputs, the
    # original's outputs and times), "generate: NAME" per generator, "checks" (every candidate's
    # runner and the judge), "last checks" (the chosen candidate's memory check and large family).
    phases: dict[str, float] = field(default_factory=dict)

    def best_candidate(self) -> CandidateResult | None:
        return next((c for c in self.candidates if c.id == self.best), None)


@dataclass
class GeneratorOutcome:
    """What one generator did for one module, and why it won or lost."""

    generator: str
    candidates: int  # candidates it produced (0 when it declined or was unavailable)
    best: str | None  # its best candidate: the winner, its fastest correct one, or its first
    won: bool
    why: str


def seconds_text(parts: dict[str, float]) -> str:
    """``loading 2.0 s, own checks 3.5 s``: where some time went, for a log line."""
    return ", ".join(f"{name} {sec:.1f} s" for name, sec in parts.items())


def generator_outcomes(m: ModuleReport, timed: bool, min_speedup: float) -> list[GeneratorOutcome]:
    """One line per generator asked (in the order they answered), then the unavailable ones."""
    winner = m.best_candidate()
    out: list[GeneratorOutcome] = []
    for gen in dict.fromkeys(c.generator for c in m.candidates):
        cands = [c for c in m.candidates if c.generator == gen]
        out.append(_outcome(gen, cands, winner, timed, min_speedup))
    out += [GeneratorOutcome(g, 0, None, False, f"unavailable: {why}") for g, why in m.unavailable.items()]
    return out


def _outcome(
    gen: str, cands: list[CandidateResult], winner: CandidateResult | None, timed: bool, min_speedup: float
) -> GeneratorOutcome:
    made = [c for c in cands if not is_generator_row(c)]
    if not made:  # the generator itself failed or declined: one row named after it
        reason = cands[0].reason.removeprefix("generator: ")
        return GeneratorOutcome(gen, 0, None, False, f"declined: {reason}")
    correct = [c for c in made if c.status is Status.CORRECT]
    if winner is not None and winner in made:
        if timed:
            why = (
                f"won: the fastest verified candidate, {_x(winner.speedup_vs_eager)} eager, "
                f"{_x(winner.speedup_vs_compile)} torch.compile"
            )
        else:
            why = "won: the first verified candidate (times are not measured on CPU)"
        return GeneratorOutcome(gen, len(made), winner.id, True, why)
    if not correct:
        counts: dict[str, int] = {}
        for c in made:
            counts[c.status.value] = counts.get(c.status.value, 0) + 1
        detail = ", ".join(f"{n} {s}" for s, n in counts.items())
        first = made[0].reason
        tail = f"; first: {first}" if first else ""
        return GeneratorOutcome(gen, len(made), made[0].id, False, f"none verified ({detail}){tail}")
    measured = [c for c in correct if c.median_ms is not None]
    own = min(measured, key=lambda c: c.median_ms or 0.0) if measured else correct[0]
    if not timed or own.median_ms is None:
        why = f"verified, but {winner.id} came first" if winner else "verified, not timed"
    elif own.verdict is Verdict.FASTER and winner is not None:
        why = (
            f"verified and faster ({_x(own.speedup_vs_eager)} eager), but slower than "
            f"{winner.id} ({_x(winner.speedup_vs_eager)})"
        )
    else:
        why = (
            f"verified, but {_x(own.speedup_vs_eager)} eager does not clear the "
            f"{min_speedup:.2f}x minimum and the timing noise"
        )
    return GeneratorOutcome(gen, len(made), own.id, False, why)


def is_generator_row(c: CandidateResult) -> bool:
    """The row the engine writes when a generator itself fails or declines: one ERROR named after it."""
    return (
        c.id == c.generator
        and c.status is Status.ERROR
        and c.reason.startswith(("generator: ", "generator failed: "))
    )


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}x"


@dataclass
class RunReport:
    device: DeviceInfo
    modules: list[ModuleReport] = field(default_factory=list)
    min_speedup: float = DEFAULT_MIN_SPEEDUP
    version: int = REPORT_VERSION
    # A repository's requirement: suggest only what runs at this speedup over torch.compile or more.
    min_speedup_vs_compile: float | None = None


def held_for_compile(m: ModuleReport, minimum: float | None) -> str | None:
    """Why ``m``'s winner is not suggested under a repository's ``min_speedup_vs_compile``, or None.

    The winner already beats eager; it must also run at ``minimum`` times torch.compile's speed or
    more (by median). Where torch.compile fails on the original there is nothing to compile instead,
    so the winner stands. Where compile or the winner went untimed (a CPU run, the baseline switched
    off), the requirement cannot be shown to hold, so nothing is suggested."""
    best = m.best_candidate()
    if minimum is None or best is None:
        return None
    rule = (
        f"this repository suggests only what runs at {minimum:g}x torch.compile or more "
        "(`min_speedup_vs_compile`)"
    )
    if best.median_ms is None:
        return f"not timed (no GPU), and {rule}"
    if m.baselines.compile_error:
        return None
    if best.speedup_vs_compile is None:
        return f"torch.compile was not timed, and {rule}"
    if best.speedup_vs_compile < minimum:
        return (
            f"{_x(best.speedup_vs_eager)} eager, but {_x(best.speedup_vs_compile)} torch.compile, "
            f"and {rule}: compiling the model is the faster choice"
        )
    return None


def to_dict(obj: Any) -> Any:
    """A JSON-ready copy of any record above (enums become their values)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, StrEnum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    return obj


def from_plain(cls: type[T], data: Any, where: str) -> T:
    """``cls`` (a dataclass above, or a message) rebuilt from :func:`to_dict`'s output, strictly: a
    field without a default must be there, a field ``cls`` lacks is refused, and every value must be
    of its declared type (an integer stands for a float; an enum by its value). ``where`` names the
    record in the :class:`MessageError` (``"the module result"``), followed by the field's path."""
    return _Reader(where).record(cls, data, "")


class _Reader:
    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, path: str, problem: str) -> MessageError:
        return MessageError(f"{self.where}: {path} {problem}" if path else f"{self.where} {problem}")

    def record(self, cls: type[T], data: Any, path: str) -> T:
        if not isinstance(data, dict):
            raise self.fail(path, f"is {kind_of(data)}, not an object")
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(str(k) for k in data if k not in fields)
        if unknown:
            fields_ = "a field" if len(unknown) == 1 else "fields"
            raise self.fail(path, f"has {fields_} this release does not know: {', '.join(unknown)}")
        hints = _HINTS.get(cls) or _HINTS.setdefault(cls, get_type_hints(cls))
        values = {}
        for name, f in fields.items():
            where = f"{path}.{name}" if path else name
            if name in data:
                values[name] = self.value(hints[name], data[name], where)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise self.fail("", f"lacks the required field {where}")
        return cls(**values)

    def value(self, tp: Any, v: Any, path: str) -> Any:
        origin, args = get_origin(tp), get_args(tp)
        if tp is Any:
            return v
        if origin in (Union, types.UnionType):
            if v is None and type(None) in args:
                return None
            (inner,) = (a for a in args if a is not type(None))
            return self.value(inner, v, path)
        if origin is list:
            if not isinstance(v, list):
                raise self.fail(path, f"is {kind_of(v)}, not a list")
            return [self.value(args[0], x, f"{path}[{i}]") for i, x in enumerate(v)]
        if origin is dict:
            if not isinstance(v, dict):
                raise self.fail(path, f"is {kind_of(v)}, not an object")
            return {
                self.value(args[0], k, path): self.value(args[1], x, f"{path}[{k!r}]") for k, x in v.items()
            }
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            return self.record(tp, v, path)
        if isinstance(tp, type) and issubclass(tp, Enum):
            try:
                return tp(v)
            except ValueError:
                allowed = ", ".join(str(e.value) for e in tp)
                raise self.fail(path, f"is {v!r}, not one of {allowed}") from None
        if tp is float and isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
        if tp in (str, int, bool) and isinstance(v, tp) and (tp is bool or not isinstance(v, bool)):
            return v
        if tp in (str, int, bool, float):
            raise self.fail(path, f"is {kind_of(v)}, not {_KINDS[tp]}")
        raise TypeError(f"no reader for {tp!r}")  # a record declared with a type this module cannot read


_KINDS: dict[Any, str] = {
    bool: "true or false",
    str: "a string",
    int: "an integer",
    float: "a number",
    list: "a list",
    dict: "an object",
    type(None): "null",
}


_HINTS: dict[Any, dict[str, Any]] = {}  # each record's field types, resolved once


def kind_of(v: Any) -> str:
    """A JSON value's kind, as a reason names it (``a string``, ``null``)."""
    return _KINDS.get(type(v), type(v).__name__)


def module_from_dict(d: dict[str, Any]) -> ModuleReport:
    return from_plain(ModuleReport, d, "a module report")


def report_from_dict(d: dict[str, Any]) -> RunReport:
    """A report file's run. The file may carry more beside it (``bench/kernel_quality.py`` adds its
    ``quality``), so its top level is read for the run's fields only; what they hold, strictly."""
    if not isinstance(d, dict) or d.get("version") != REPORT_VERSION:
        version = d.get("version") if isinstance(d, dict) else None
        raise MessageError(f"report version {version!r} is not {REPORT_VERSION}")
    run = {f.name: d[f.name] for f in dataclasses.fields(RunReport) if f.name in d}
    return from_plain(RunReport, run, "the report")
