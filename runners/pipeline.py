"""``kernelize(problem, ...) -> ModuleReport``: plain Python, no Celery.

Prepare the reference once (in a sandbox: building it runs the module's own
code), ask each generator for candidates, evaluate each candidate in its own
sandbox, and pick the best. The CLI and the queue tasks call it one file at a
time, through ``runners/together.py``, which checks the file's suggestions
applied together.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runners import bench, sandbox
from runners.apply import ApplyError, check_applied, unique_helpers
from runners.chosen import check_chosen
from runners.discover import ModuleClass, Resolver, find_modules
from runners.fallback import (
    KERNELIZED,
    FallbackError,
    drop_backward,
    has_backward,
    is_kernelized,
    registers_ops,
    with_original_path,
)
from runners.generators.base import Candidate, Generator, GeneratorDeclined, GeneratorError, Problem
from runners.inputs import ModuleEntry, config_class_names, snippet
from runners.judge import (
    CANDIDATE_OUTPUTS,
    COMPILE_KERNELS,
    COMPILE_ORIGINAL,
    REFERENCE_OUTPUTS,
    TRAINING_BACKWARD_WRONG,
    TRAINING_ORIGINAL,
    TRAINING_TRITON,
    TRAINING_UNCHECKED,
    Judge,
    Timed,
    judging,
)
from runners.normalize import normalize
from runners.results import (
    DEFAULT_MIN_SPEEDUP,
    DEFAULT_SAMPLES,
    DEFAULT_TIMEOUT_S,
    Baselines,
    CandidateResult,
    DeviceInfo,
    ModuleReport,
    Status,
    TensorInfo,
    Timing,
    Verdict,
    seconds_text,
)

Progress = Callable[[str], None]


@dataclass
class EngineSettings:
    """How the engine checks and times one run's candidates (from the command line, or from a GPU
    request); not the App's environment settings (``bot.settings.Settings``)."""

    device: str = "cpu"  # "cpu" (Triton interpreter, untimed) or "cuda"
    timeout_s: float = DEFAULT_TIMEOUT_S  # per candidate
    memory_mb: int = 8192
    min_speedup: float = DEFAULT_MIN_SPEEDUP
    samples: int = DEFAULT_SAMPLES
    compile_baseline: bool = True
    python: str | None = None  # interpreter for sandboxes (default: this one)
    # Suggest (and so verify) each candidate with the original path: the original computation kept for
    # non-CUDA inputs, run in the original file's namespace, as it will live there once applied.
    original_path: bool = True
    dtype: str | None = None  # check in this dtype (floating parameters and inputs cast), else as built
    tolerance: dict[str, list[float]] | None = None  # tighter bounds by dtype key (never looser)
    seed: int | None = None  # the judge's input seed; None: drawn afresh for every run
    # Time on the CPU too (the interpreter: the figures mean nothing). Only for tests of the timing
    # protocol, which on a GPU runs as it does here.
    time_on_cpu: bool = False
    # Also time training steps (forward and backward) where the suggestion trains through its own
    # Triton backward: the reference times eager (and torch.compile) training once per module.
    time_training: bool = True


def _quiet(_: str) -> None:
    pass


def describe_device(device: str) -> DeviceInfo:
    """What runs the evaluations, asked of a sandbox so it reflects the child's view."""
    import torch
    import triton

    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        driver = None
        with contextlib.suppress(OSError, IndexError):
            import subprocess

            driver = (
                subprocess.run(
                    ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                    capture_output=True,
                    text=True,
                    timeout=20,
                    check=False,
                )
                .stdout.strip()
                .splitlines()[0]
            )
        return DeviceInfo(
            "cuda", props.name, torch.__version__, triton.__version__, driver, torch.version.cuda
        )
    import platform

    return DeviceInfo(
        "cpu",
        platform.processor() or platform.machine(),
        torch.__version__,
        triton.__version__,
        interpreter=True,
    )


@contextlib.contextmanager
def _cache_dirs(device: str) -> Iterator[dict[str, str]]:
    """The sandboxes' environment for ``device``. No compiler cache is shared: each runner's Triton
    and Inductor caches are its own, in its sandbox (runners/sandbox.py), so a cache poisoned by
    one candidate never reaches the next."""
    env: dict[str, str] = {}
    if device == "cpu":
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    yield env


def _share(inputs: Path, folder: Path) -> Path:
    """The judge's inputs file, also in ``folder`` (a link: same bytes, no copy)."""
    shared = folder / inputs.name
    try:
        os.link(inputs, shared)
    except OSError:
        shutil.copyfile(inputs, shared)
        shared.chmod(0o444)
    return shared


@dataclass
class Judged:
    """What checking a class's suggestion once more takes (runners/together.py): its judge, still
    holding the original's answers, and the candidates as they were evaluated."""

    problem: Problem
    candidates: list[Candidate]
    prep: dict[str, Any]
    env: dict[str, str]
    judge: Judge


def kernelize(
    problem: Problem,
    generators: list[Generator],
    settings: EngineSettings,
    progress: Progress = _quiet,
) -> ModuleReport:
    with contextlib.ExitStack() as held:
        return kernelize_judged(problem, generators, settings, held, progress)[0]


def kernelize_judged(
    problem: Problem,
    generators: list[Generator],
    settings: EngineSettings,
    held: contextlib.ExitStack,
    progress: Progress = _quiet,
) -> tuple[ModuleReport, Judged | None]:
    """:func:`kernelize`, and (None when nothing was evaluated) what checking its suggestion once
    more takes: its judge and the sandboxes' folders stay open until ``held`` closes. The report's
    ``wall_s`` is the engine's time on the module, from the build to the last candidate's verdict."""
    start = time.monotonic()
    report, judged = _kernelize_judged(problem, generators, settings, held, progress)
    report.wall_s = round(time.monotonic() - start, 3)
    return report, judged


def _kernelize_judged(
    problem: Problem,
    generators: list[Generator],
    settings: EngineSettings,
    held: contextlib.ExitStack,
    progress: Progress,
) -> tuple[ModuleReport, Judged | None]:
    report = ModuleReport(target=problem.target, file=problem.rel_path, class_name=problem.class_name)
    if is_kernelized(problem.source, problem.class_name):
        report.status, report.reason = "kernelized", KERNELIZED
        progress(f"{problem.target}: {KERNELIZED}")
        return report, None
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(_cache_dirs(settings.device))
        progress(f"{problem.target}: building the module and its inputs")
        early = _Early(problem, generators, settings.samples, report)
        stack.callback(early.close)
        with _phase(report, "build"):
            prep, judge = _prepare(problem, settings, env, stack, early.start, progress)
        if not prep.get("ok") or judge is None:
            report.status = "skipped"
            report.reason = str(prep.get("reason", "could not build the module"))
            report.snippet = snippet(
                problem.class_name,
                problem.rel_path,
                problem.module.init_params,
                problem.module.forward_params,
                config_class_names(problem.source),
                len(find_modules(problem.source, problem.file)),
            )
            progress(f"{problem.target}: skipped: {report.reason}")
            return report, None
        build = prep["build"]
        report.build_source = build["source"]
        report.init_args = [_shown(s) for s in build["init_args"]]
        report.init_kwargs = {k: _shown(s) for k, s in build["init_kwargs"].items()}
        report.inputs = [
            TensorInfo(list(s["tensor"]["shape"]), _checked_dtype(s["tensor"]["dtype"], settings.dtype))
            for s in build["inputs"]
            if "tensor" in s
        ]

        problem.build = build
        # The first candidate's runner imports while the generators work; each next one while the
        # one before it runs.
        ahead = _Ahead(lambda: start_runner(problem, settings, env, judge), runs_ahead(settings))
        stack.callback(ahead.close)
        ahead.prepare()
        candidates = _collect(problem, generators, settings, report, progress, early)
        rejected = [_normalize(c, problem, settings.original_path) for c in candidates]
        checks = time.monotonic()
        left = sum(why is None for why in rejected)
        for i, (cand, why) in enumerate(zip(candidates, rejected, strict=True), 1):
            if why is not None:
                report.candidates.append(why)
                progress(
                    f"{problem.target}: [{i}/{len(candidates)}] {cand.generator}:{cand.id}: {why.reason}"
                )
                continue
            left -= 1
            progress(f"{problem.target}: [{i}/{len(candidates)}] {cand.generator}:{cand.id} ...")
            runner = ahead.take(more=left > 0)
            result = evaluate_candidate(problem, cand, prep, settings, env, judge, runner=runner)
            result = _without_wrong_backward(problem, cand, result, prep, settings, env, judge)
            report.candidates.append(result)
            extra = f" ({result.reason})" if result.reason else ""
            split = seconds_text(result.phases)
            progress(
                f"{problem.target}: [{i}/{len(candidates)}] {cand.generator}:{cand.id}: "
                f"{result.status.value}{extra}" + (f"; {split}" if split else "")
            )
        # The choice, checked further before it is suggested (memory accesses, above 2^31 elements).
        ahead.close()
        report.phases["checks"] = round(time.monotonic() - checks, 3)
        with _phase(report, "last checks"):
            check_chosen(
                problem,
                candidates,
                settings,
                env,
                judge,
                report,
                lambda: choose_best(report, settings),
                progress,
            )
        judged = Judged(problem, candidates, prep, env, judge)
        held.enter_context(stack.pop_all())
    # After evaluating: a candidate whose backward was wrong is suggested without it.
    sources = {(c.generator, c.id): c.source for c in candidates}
    choose_best(report, settings)
    best = report.best_candidate()
    if best is not None:
        report.best_source = sources.get((best.generator, best.id))
    return report, judged


@contextlib.contextmanager
def _phase(report: ModuleReport, name: str) -> Iterator[None]:
    """Adds the time spent in the block to ``report.phases[name]``, also when it raises."""
    start = time.monotonic()
    try:
        yield
    finally:
        report.phases[name] = round(report.phases.get(name, 0.0) + time.monotonic() - start, 3)


def _checked_dtype(built: str, wanted: str | None) -> str:
    return wanted if wanted and built.startswith(("float", "bfloat")) else built


def _prepare(
    problem: Problem,
    settings: EngineSettings,
    env: dict[str, str],
    stack: contextlib.ExitStack,
    built: Callable[[dict[str, Any]], None] = lambda build: None,
    progress: Progress = _quiet,
) -> tuple[dict[str, Any], Judge | None]:
    """One reference runner: it resolves how to build the module, the judge plans its calls from
    that, and the same runner runs the original on them. (prep, the judge holding the answers).
    ``built`` is told the build as soon as it is resolved, while the original still runs."""
    entry = problem.config_entry
    req = {
        "device": settings.device,
        "file": problem.file,
        "root": problem.root,
        "class_name": problem.class_name,
        "config_entry": entry.__dict__ if isinstance(entry, ModuleEntry) else None,
        "dtype": settings.dtype,
    }
    held: dict[str, Any] = {}
    clock = {"start": time.monotonic()}
    held_path = (
        Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kernelize-ref-"))) / REFERENCE_OUTPUTS
    )
    # The judge writes its inputs once the runner is up: into a folder the sandbox can already read.
    shared = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kernelize-inputs-")))

    def plan(prep: Any) -> dict[str, Any] | None:
        clock["prepared"] = time.monotonic()
        if not isinstance(prep, dict) or not prep.get("ok"):
            held["prep"] = prep if isinstance(prep, dict) else {}
            return None
        held["prep"] = prep
        built(prep["build"])
        judge = stack.enter_context(
            judging(
                device=settings.device,
                file=problem.file,
                root=problem.root,
                class_name=problem.class_name,
                build=prep["build"],
                variants=prep["variants"],
                dtype=settings.dtype,
                grad=settings.original_path,
                compiled=settings.original_path,
                tolerance=settings.tolerance,
                seed=settings.seed,
                timing=settings.device == "cuda" or settings.time_on_cpu,
                compile_baseline=settings.compile_baseline and settings.device == "cuda",
                time_training=settings.time_training,
            )
        )
        held["judge"] = judge
        request = judge.request("reference", REFERENCE_OUTPUTS).to_dict()
        request["inputs_path"] = str(_share(judge.inputs_path, shared))
        clock["planned"] = time.monotonic()
        return request

    res = sandbox.run(
        "runners.runner:prepare_and_reference",
        req,
        sandbox.Limits(settings.timeout_s, settings.memory_mb),
        env=env,
        python=settings.python,
        collect=REFERENCE_OUTPUTS,
        follow_up=plan,
        collect_to=held_path,
        readable=[*sandbox.problem_paths(problem.file, problem.root), shared],
    )
    prep = held.get("prep")
    if prep is None:
        if res.reason.startswith(sandbox.ISOLATION_UNAVAILABLE):  # nothing of the module ran
            return {"ok": False, "reason": res.reason}, None
        return {"ok": False, "reason": f"the module itself failed: {res.reason}"}, None
    if not prep.get("ok"):
        return prep, None
    judge = held["judge"]
    clock["end"] = time.monotonic()
    progress(f"{problem.target}: build: {build_split(clock, res.marks)}")
    failed = judge.accept_reference(res)
    if failed:
        return {"ok": False, "reason": failed}, None
    return prep, judge


CHECK_MARKS = ("candidate loaded", "own checks done", "judge's calls done")


def check_split(marks: list[tuple[str, float]], wall_s: float) -> dict[str, float]:
    """Where a candidate's runner spent its seconds, by the marks it sent (``runners/verify.py``):
    loading the candidate (its import, after the runner's start), its own checks, the judge's
    calls, and the rest (its timing); empty when it sent none of them."""
    at = dict(marks)
    names = ["loading", "own checks", "the judge's calls"]
    out: dict[str, float] = {}
    last = 0.0
    for name, mark in zip(names, CHECK_MARKS, strict=True):
        if mark not in at or at[mark] < last:
            return out
        out[name] = round(at[mark] - last, 3)
        last = at[mark]
    out["timing and the rest"] = round(max(0.0, wall_s - last), 3)
    return out


def build_split(clock: dict[str, float], marks: list[tuple[str, float]]) -> str:
    """Where the build's seconds went, for the log: the runner's start and the module's build, the
    judge's inputs, the original's calls, torch.compile's baseline and the timing (the last two
    from the marks the runner sent, by the judge's clock)."""
    at = dict(marks)

    def span(first: str, last: str) -> float:
        return at[last] - at[first] if first in at and last in at else 0.0

    compiled = span("baseline compile start", "baseline compile end") + span(
        "training baseline compile start", "training baseline compile end"
    )
    timed = sum(
        span(name, name.replace(" start", " end"))
        for name in at
        if name.endswith(" start") and "baseline compile" not in name
    )
    prepared = clock.get("prepared", clock["end"])
    planned = clock.get("planned", prepared)
    parts = {
        "start and build": prepared - clock["start"],
        "inputs": planned - prepared,
        "original's calls": max(0.0, clock["end"] - planned - compiled - timed),
        "compile baseline": compiled,
        "timing": timed,
    }
    return seconds_text(parts)


class _Early:
    """Generators that work on the CPU alone (``runs_beside_reference``: the template generator's
    trace), started as soon as the build is resolved, so they run while the reference runner runs
    the original and times it; the others wait for :func:`_collect`, in order. A generator that
    uses the GPU never runs beside the reference: it would slow the timed calls down."""

    def __init__(
        self, problem: Problem, generators: list[Generator], samples: int, report: ModuleReport
    ) -> None:
        self.problem, self.samples, self.report = problem, samples, report
        self.gens = [g for g in generators if getattr(g, "runs_beside_reference", False)]
        self.pool: ThreadPoolExecutor | None = None
        self.futures: dict[int, Future[list[Candidate]]] = {}
        self.seconds: dict[int, float] = {}

    def start(self, build: dict[str, Any]) -> None:
        if not self.gens:
            return
        self.problem.build = build
        self.pool = ThreadPoolExecutor(len(self.gens), thread_name_prefix="kernelize-early")
        for gen in self.gens:
            self.futures[id(gen)] = self.pool.submit(self._generate, gen)

    def _generate(self, gen: Generator) -> list[Candidate]:
        start = time.monotonic()
        try:
            return gen.generate(self.problem, self.samples)
        finally:
            self.seconds[id(gen)] = time.monotonic() - start

    def result(self, gen: Generator) -> list[Candidate] | None:
        """``gen``'s candidates (raising what it raised) if it was started early, else None. Its
        time lands in the report's phases here, on the engine's thread, in the portfolio's order."""
        future = self.futures.get(id(gen))
        if future is None:
            return None
        try:
            return future.result()
        finally:
            key = f"generate: {gen.name}"
            self.report.phases[key] = round(self.report.phases.get(key, 0.0) + self.seconds[id(gen)], 3)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)  # each generator's sandbox has its own time limit


def _collect(
    problem: Problem,
    generators: list[Generator],
    settings: EngineSettings,
    report: ModuleReport,
    progress: Progress,
    early: _Early | None = None,
) -> list[Candidate]:
    out: list[Candidate] = []
    for gen in generators:
        progress(f"{problem.target}: asking {gen.name} for candidates")
        try:
            started = early.result(gen) if early is not None else None
            if started is not None:
                got = started
            else:
                with _phase(report, f"generate: {gen.name}"):
                    got = gen.generate(problem, settings.samples)
        except GeneratorError as exc:
            row = CandidateResult(gen.name, gen.name, Status.ERROR, f"generator: {exc}")
            if isinstance(exc, GeneratorDeclined):
                row.provenance = {"declined": True}
            report.candidates.append(row)
            continue
        except Exception as exc:  # a model that fails (OOM, bad weights) costs its candidates, not the run
            first = str(exc).splitlines()[0] if str(exc) else ""
            reason = f"generator failed: {type(exc).__name__}: {first}"[:500]
            report.candidates.append(CandidateResult(gen.name, gen.name, Status.ERROR, reason))
            continue
        progress(f"{problem.target}: {gen.name} gave {len(got)} candidate(s)")
        out.extend(got)
    return out


def _normalize(cand: Candidate, problem: Problem, original_path: bool) -> CandidateResult | None:
    """Make ``cand`` the code to suggest, in place: standalone (no torch._inductor, the original class
    name) and, with ``original_path``, keeping the original computation for non-CUDA inputs (the original
    path); or say why not."""
    if cand.error or not cand.source:
        return None
    norm = normalize(cand.source, problem.class_name)
    why = f"not standalone: {norm.rejected}" if norm.rejected else ""
    generated = source = norm.source
    if not why and original_path:
        try:
            # Helpers named for the class (two suggestions for one file never share one), then the
            # original computation kept, then the file as it will be once applied, checked.
            generated = unique_helpers(norm.source, problem.class_name, problem.source)
            source = with_original_path(generated, problem.source, problem.class_name)
            check_applied(
                problem.source, problem.module.lineno, problem.module.end_lineno, source, problem.class_name
            )
        except FallbackError as exc:
            why = f"cannot keep the original path: {exc}"
        except (ApplyError, SyntaxError) as exc:
            why = f"check 1 (the file after applying): {exc}"
    if why:
        return CandidateResult(
            cand.id,
            cand.generator,
            Status.REJECTED,
            why,
            source_sha256=cand.sha256,
            provenance=cand.provenance,
        )
    cand.generated = generated
    cand.source = source
    if norm.rewrites:
        cand.provenance = {**cand.provenance, "rewrites": norm.rewrites}
    return None


def _own_backward(problem: Problem, cand: Candidate, settings: EngineSettings) -> bool:
    """Whether the suggestion trains through the candidate's own backward."""
    return settings.original_path and has_backward(cand.generated or cand.source, problem.class_name)


def _training(problem: Problem, cand: Candidate, settings: EngineSettings, checked: bool) -> str:
    """What the suggestion does when autograd records, once the judge has compared its gradients."""
    if not checked:
        return TRAINING_UNCHECKED
    if _own_backward(problem, cand, settings):
        return TRAINING_TRITON  # the dispatch takes the kernels, and so their backward, under training
    return TRAINING_ORIGINAL


def _compiled(cand: Candidate, settings: EngineSettings) -> str:
    """What the suggestion runs under torch.compile, once the judge's compiled calls passed: the
    dispatch (runners/fallback.py) keeps the kernels only when their launches are custom ops. The
    kernel alone (``original_path`` off) is checked like a benchmark answer: eagerly, for inference."""
    if not settings.original_path:
        return ""
    return COMPILE_KERNELS if registers_ops(cand.generated or cand.source) else COMPILE_ORIGINAL


def _backward_failed(result: CandidateResult) -> bool:
    """Whether the judge found the candidate wrong on a call with autograd recording: its gradients
    (``training (...)``) or the call itself (``judge, <family>, autograd recording, ...``)."""
    if result.status is not Status.INCORRECT:
        return False
    reason = result.reason or ""
    return reason.startswith("training (") or (
        reason.startswith("judge, ") and "autograd recording" in reason.split(":", 1)[0]
    )


def _without_wrong_backward(
    problem: Problem,
    cand: Candidate,
    result: CandidateResult,
    prep: dict[str, Any],
    settings: EngineSettings,
    env: dict[str, str],
    judge: Judge,
) -> CandidateResult:
    """``result``, or, when only the candidate's own backward failed the judge, the verdict on the same
    candidate without it (the original path under training). A wrong backward is never suggested: if
    the candidate passes without it, ``cand`` becomes that code, and the report says why."""
    generated = cand.generated
    if not (settings.original_path and generated and _backward_failed(result)):
        return result
    if not has_backward(generated, problem.class_name):
        return result
    if cand.without_backward:  # the generator's own code without the backward
        plain = Candidate(cand.id, cand.generator, cand.without_backward, dict(cand.provenance))
        if _normalize(plain, problem, True) is not None or plain.generated is None:
            return result
    else:  # the backward and what only it uses removed; the original path for training
        plain = dataclasses.replace(cand, without_backward=None)
        try:
            plain.generated = drop_backward(generated, problem.class_name)
            plain.source = with_original_path(
                plain.generated, problem.source, problem.class_name, backward=False
            )
            check_applied(
                problem.source,
                problem.module.lineno,
                problem.module.end_lineno,
                plain.source,
                problem.class_name,
            )
        except (FallbackError, ApplyError, SyntaxError):
            return result
    if has_backward(plain.generated or "", problem.class_name):
        return result
    again = evaluate_candidate(problem, plain, prep, settings, env, judge)
    if again.status is not Status.CORRECT:
        return result
    why = (result.reason or "").split("\n")[0]
    again.training = TRAINING_BACKWARD_WRONG.format(reason=why if len(why) <= 160 else why[:157] + "...")
    again.provenance = {**again.provenance, "backward_rejected": result.reason}
    cand.source, cand.generated, cand.without_backward = plain.source, plain.generated, None
    return again


AHEAD_MIN_CORES = 4  # where runs are timed: an importing runner takes a core of its own


def runs_ahead(settings: EngineSettings) -> bool:
    """Whether the next candidate's runner may start while one runs: always when nothing is timed,
    else only with cores to spare, so that its imports never share a core with a timed run."""
    timed = settings.device == "cuda" or settings.time_on_cpu
    return not timed or len(os.sched_getaffinity(0)) >= AHEAD_MIN_CORES


@dataclass
class Runner:
    """A candidate's sandbox, started ahead: ``folder`` (read-only inside) takes its file when it runs."""

    sandbox: sandbox.Started
    folder: Path

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sandbox.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_runner(problem: Problem, settings: EngineSettings, env: dict[str, str], judge: Judge) -> Runner:
    """Start a candidate's sandbox: its Python imports the checks (torch, Triton) and waits for the
    request; nothing of the candidate is in it until then."""
    folder = Path(tempfile.mkdtemp(prefix="kernelize-cand-"))
    started = sandbox.start(
        "runners.verify:evaluate",
        device=settings.device,
        env=env,
        python=settings.python,
        readable=[*sandbox.problem_paths(problem.file, problem.root), folder, judge.inputs_path],
    )
    return Runner(started, folder)


class _Ahead:
    """Hands out candidate runners, the next one started while the current one runs (``enabled``)."""

    def __init__(self, start: Callable[[], Runner], enabled: bool) -> None:
        self._start, self._enabled = start, enabled
        self._next: Runner | None = None

    def prepare(self) -> None:
        if self._enabled and self._next is None:
            self._next = self._start()

    def take(self, more: bool) -> Runner:
        runner, self._next = self._next or self._start(), None
        if more:
            self.prepare()
        return runner

    def close(self) -> None:
        if self._next is not None:
            self._next.close()
            self._next = None


def evaluate_candidate(
    problem: Problem,
    cand: Candidate,
    prep: dict[str, Any],
    settings: EngineSettings,
    env: dict[str, str],
    judge: Judge,
    whole_file: bool = False,
    runner: Runner | None = None,
) -> CandidateResult:
    """The candidate's runner (its own sandbox) runs the checks it can run on itself and the judge's
    calls; the verdict is the judge's, from the outputs it reads back (``runners/judge.py``).
    ``whole_file``: ``cand.source`` is the whole file as it will be (runners/together.py).
    ``runner``: a sandbox :func:`start_runner` started ahead for it (else one starts now)."""
    result = CandidateResult(
        cand.id,
        cand.generator,
        Status.ERROR,
        source_sha256=cand.sha256,
        source_path=cand.provenance.get("path"),
        provenance=cand.provenance,
    )
    if cand.error:
        if runner is not None:
            runner.close()
        result.reason = cand.error
        return result
    with runner or start_runner(problem, settings, env, judge) as started:
        path = started.folder / "candidate.py"
        path.write_text(cand.source, encoding="utf-8")
        path.chmod(0o444)
        req = {
            "device": settings.device,
            "file": problem.file,
            "root": problem.root,
            "class_name": problem.class_name,
            "candidate": str(path),
            "build": prep["build"],
            "variants": prep["variants"],
            "reference_ops": prep["reference_ops"],
            "returns_input": prep["returns_input"],
            "compile": settings.compile_baseline,
            "original_path": settings.original_path,
            "whole_file": whole_file,
            "generated": cand.generated,
            "dtype": settings.dtype,
            "tolerance": settings.tolerance,
            "judge": judge.request(
                "candidate",
                CANDIDATE_OUTPUTS,
                training=settings.time_training and _own_backward(problem, cand, settings),
            ).to_dict(),
        }
        res = started.sandbox.run(
            req,
            sandbox.Limits(settings.timeout_s, settings.memory_mb),
            collect=CANDIDATE_OUTPUTS,
            collect_to=judge.candidate_path(),
            asker=judge.asker(),
        )
    result.wall_s = round(res.wall_s, 3)
    result.stdout_tail = res.stdout_tail[-2000:]
    if res.outcome == "timeout":
        result.status, result.reason = Status.TIMEOUT, "check 7: " + res.reason
        return result
    if res.outcome == "crashed":
        result.status, result.reason = Status.CRASHED, "check 7: " + res.reason
        return result
    if res.outcome == "error" or res.payload is None:
        result.status, result.reason = Status.ERROR, res.reason
        return result
    p = res.payload
    try:
        result.status = Status(str(p.get("status")))
    except ValueError:
        result.status, result.reason = Status.REJECTED, "judge: the candidate's runner answered no status"
        return result
    result.reason = sandbox.untrusted_text(p.get("reason", ""))
    judged = None
    result.phases = check_split(res.marks, res.wall_s)
    if result.status is Status.CORRECT:
        # The runner's "correct" is a claim; the judge's comparison is the verdict.
        begun = time.monotonic()
        verdict = judge.check_file(
            p.get("judge_reply"), res.blob_path, cand.generated or cand.source, res.marks
        )
        result.phases["judge's comparison"] = round(time.monotonic() - begun, 3)
        if verdict.status != "correct":
            result.status, result.reason = Status(verdict.status), verdict.reason
            return result
        judged = verdict
        result.training = _training(problem, cand, settings, verdict.training_checked)
        result.compiled = _compiled(cand, settings)
        # The errors shown are the judge's, not what the runner said of itself.
        result.max_abs_error, result.max_rel_error = verdict.errors.max_abs, verdict.errors.max_rel
        training_clock = verdict.training_timing.clock
        result.provenance = {
            **result.provenance,
            "judge": {
                "seed": judge.seed,
                "families": verdict.families,
                "skipped": verdict.skipped,
                "max_abs_error": verdict.errors.max_abs,
                "max_rel_error": verdict.errors.max_rel,
                # Which family the largest came from: one where the original itself is least exact
                # (large magnitudes, say) tells a reader something else than the normal family.
                "max_abs_error_by_family": verdict.family_errors,
                **({"clock": verdict.clock} if verdict.clock else {}),
                **({"training_clock": training_clock} if training_clock else {}),
            },
        }
    if result.status is not Status.CORRECT:  # a failure the runner reported about itself
        result.max_abs_error = p.get("max_abs_error")
        result.max_rel_error = p.get("max_rel_error")
    result.triton_launches = p.get("triton_launches")
    result.torch_ops_kept = p.get("torch_ops_kept", [])
    result.shapes_checked = p.get("shapes_checked", [])
    kept = [r for r in cand.provenance.get("rewrites", []) if "PyTorch" in r]
    notes = p.get("notes")
    notes = notes if isinstance(notes, list) else []
    result.notes = [*(sandbox.untrusted_text(n, 500) for n in notes[:20]), *kept]
    result.provenance = {**result.provenance, "sandbox": res.isolation}
    # Times only from the judge: eager and torch.compile from the reference runner, the candidate's
    # once its timed outputs and its clock were checked.
    timings: dict[str, Any] = judged.timings if judged is not None else {}
    result.timings = _timings(timings)
    if judged is not None and judged.untimed:
        result.notes.append(judged.untimed)
    if judged is not None and judged.clocked:
        result.notes.append(judged.clocked)
    if judged is not None and judged.compile_error:
        result.provenance = {**result.provenance, "compile_error": judged.compile_error}
    _score(result, timings, settings.min_speedup)
    if judged is not None:
        _score_training(result, judged.training_timing, settings.min_speedup)
    return result


def _shown(spec: dict[str, Any]) -> Any:
    """A constructor argument as the report shows it: the value, the tensor spec, or a config
    object's recipe (``{"class": ..., "kwargs": {...}}`` with plain values)."""
    if "object" in spec:
        obj = spec["object"]
        return {"class": obj["class"], "kwargs": {k: _shown(v) for k, v in obj.get("kwargs", {}).items()}}
    return spec.get("value", spec.get("tensor"))


def _timings(timings: dict[str, Any]) -> dict[str, Timing]:
    return {
        k: Timing(v["median_ms"], v["p10_ms"], v["p90_ms"], int(v["runs"]), v.get("wall_ms"))
        for k, v in timings.items()
    }


def _figures(
    timings: dict[str, Any], min_speedup: float
) -> tuple[float | None, float | None, float | None, Verdict]:
    """(median ms, speedup vs eager, vs torch.compile, verdict) of the candidate in ``timings``."""
    cand = timings.get("candidate")
    if cand is None:
        return None, None, None, Verdict.NOT_MEASURED
    clears = bench.clears_noise(timings["eager"], cand, min_speedup)
    faster = clears and not bench.slower_back_to_back(timings)
    return (
        cand["median_ms"],
        bench.speedup(timings.get("eager"), cand),
        bench.speedup(timings.get("compile"), cand),
        Verdict.FASTER if faster else Verdict.NO_FASTER,
    )


def _score(result: CandidateResult, timings: dict[str, Any], min_speedup: float) -> None:
    if result.status is not Status.CORRECT:
        result.verdict = Verdict.NOT_MEASURED
        return
    result.median_ms, result.speedup_vs_eager, result.speedup_vs_compile, result.verdict = _figures(
        timings, min_speedup
    )
    slower = bench.slower_back_to_back(timings)
    if slower and bench.clears_noise(timings["eager"], timings["candidate"], min_speedup):
        result.notes.append(slower)  # faster by the GPU's events, slower in a loop: no faster


def _score_training(result: CandidateResult, timed: Timed, min_speedup: float) -> None:
    """Training figures, for a correct candidate whose training path is its own (checked) backward."""
    if result.status is not Status.CORRECT or result.training != TRAINING_TRITON:
        return
    if timed.untimed:
        result.notes.append(timed.untimed)
    if timed.clocked:
        result.notes.append(timed.clocked)
    if timed.compile_error:
        result.provenance = {**result.provenance, "training_compile_error": timed.compile_error}
    result.training_timings = _timings(timed.timings)
    (
        result.training_median_ms,
        result.training_speedup_vs_eager,
        result.training_speedup_vs_compile,
        result.training_verdict,
    ) = _figures(timed.timings, min_speedup)


def choose_best(report: ModuleReport, settings: EngineSettings) -> None:
    """The fastest correct candidate that clears the minimum speedup; on CPU the first correct one."""
    correct = [c for c in report.candidates if c.status is Status.CORRECT]
    timed = [c for c in correct if c.median_ms is not None]
    if settings.device == "cuda":
        faster = [c for c in timed if c.verdict is Verdict.FASTER]
        best = min(faster, key=lambda c: c.median_ms or float("inf")) if faster else None
    else:
        best = correct[0] if correct else None
    report.best = best.id if best else None
    source = best if best and best.timings else (timed[0] if timed else None)
    if source:
        eager, comp = source.timings.get("eager"), source.timings.get("compile")
        train_eager, train_comp = (source.training_timings.get(k) for k in ("eager", "compile"))
        report.baselines = Baselines(
            eager.median_ms if eager else None,
            comp.median_ms if comp else None,
            source.provenance.get("compile_error"),
            train_eager.median_ms if train_eager else None,
            train_comp.median_ms if train_comp else None,
        )


def file_resolver(file: Path, root: Path) -> Resolver:
    """How discovery reads the files ``file`` imports from (relative imports from its package,
    absolute ones under the folder its package hangs from or ``root``), without importing them."""
    from runners.sandbox import package_root

    def resolve(module: str, level: int) -> tuple[str, Resolver] | None:
        if level:
            base = file.parent
            for _ in range(level - 1):
                base = base.parent
            bases = [base]
        else:
            package = package_root(str(file))
            bases = [Path(package)] if package else []
            bases.append(root)
        parts = [p for p in module.split(".") if p]
        for base in bases:
            for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
                if parts and candidate.is_file():
                    try:
                        return candidate.read_text(encoding="utf-8"), file_resolver(candidate, root)
                    except (OSError, UnicodeDecodeError):
                        return None
        return None

    return resolve


def problems_for(
    path: str, root: str, class_name: str | None, entries: dict[str, ModuleEntry] | None = None
) -> tuple[list[Problem], list[ModuleClass]]:
    """Problems for one target file (all its module classes, or the one named)."""
    from runners.inputs import match_entry

    file = Path(path).resolve()
    source = file.read_text(encoding="utf-8")
    modules = find_modules(source, str(path), file_resolver(file, Path(root).resolve()))
    try:
        rel = file.relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        rel = Path(path).as_posix()
    chosen = [m for m in modules if class_name in (None, m.name)]
    problems = [
        Problem(
            str(file),
            str(Path(root).resolve()),
            rel,
            m.name,
            source,
            m,
            match_entry(entries or {}, rel, m.name),
        )
        for m in chosen
    ]
    return problems, modules
