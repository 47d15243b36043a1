"""The last checks of the candidate about to be suggested, once the others have chosen it.

Two checks need runs of their own, too costly for every candidate, so only the one that would be
suggested gets them; one that fails is marked and the next choice is checked in turn:

- its memory accesses: on CUDA the judge's calls once more under compute-sanitizer
  (``runners/memcheck.py``); on CPU the Triton interpreter already checked every load and store
  of every candidate (``runners/bounds.py``);
- on CUDA, the judge's family above 2^31 elements (``runners/above_int32.py``); on CPU it is not
  run.

On CUDA both run at once, each in runners of its own; the family's outcome counts only when the
memory check passes.

What they found lands in the candidate's report: a failure becomes its status and reason; the
memory check's result becomes a note (``memory check: ...``) and ``provenance.memory_check``; the
family is listed with the judge's families, or with its skipped families and why.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runners import above_int32, bounds, memcheck, sandbox
from runners.generators.base import Candidate, Problem
from runners.judge import Judge
from runners.memcheck import Outcome
from runners.results import CandidateResult, ModuleReport, Status, Verdict, seconds_text
from runners.verify import uses_tf32_dot

if TYPE_CHECKING:
    from runners.pipeline import EngineSettings

CPU_MEMORY_CHECK = f"memory check: {bounds.KIND} on every load and store (in the candidate's process)"


def check_chosen(
    problem: Problem,
    candidates: list[Candidate],
    settings: EngineSettings,
    env: dict[str, str],
    judge: Judge,
    report: ModuleReport,
    choose: Callable[[], None],
    progress: Callable[[str], None],
) -> None:
    """Choose (``choose`` sets ``report.best``), check the choice, and again while it fails."""
    sources = {(c.generator, c.id): c for c in candidates}
    cuda = settings.device == "cuda"
    family = above_int32.Family(judge, settings.timeout_s, settings.memory_mb, env, settings.python)
    try:
        while True:
            choose()
            best = report.best_candidate()
            cand = sources.get((best.generator, best.id)) if best is not None else None
            if best is None or cand is None or "memory_check" in best.provenance:
                return
            if not cuda:
                _record(best, Outcome("passed", CPU_MEMORY_CHECK), Outcome("skipped", above_int32.NOT_ON_CPU))
                return
            progress(f"{problem.target}: {best.id}: memory check and {above_int32.FAMILY}, side by side")
            memory, offsets, seconds = _run(problem, cand, settings, env, judge, family)
            if family.spent:
                progress(f"{problem.target}: {best.id}: {above_int32.FAMILY}: {seconds_text(family.spent)}")
            for part, spent in seconds.items():  # where the last checks' time goes, by check
                key = f"last checks: {part}"
                report.phases[key] = round(report.phases.get(key, 0.0) + spent, 3)
            _record(best, memory, offsets)
            if best.status is Status.CORRECT:
                return
    finally:
        family.close()


def _run(
    problem: Problem,
    cand: Candidate,
    settings: EngineSettings,
    env: dict[str, str],
    judge: Judge,
    family: above_int32.Family,
) -> tuple[Outcome, Outcome | None, dict[str, float]]:
    """(the memory check, the family above 2^31 elements unless the memory check failed, the
    seconds each took)."""
    with tempfile.TemporaryDirectory(prefix="kernelize-chosen-") as tmp:
        path = Path(tmp) / "candidate.py"
        path.write_text(cand.source, encoding="utf-8")
        req: dict[str, Any] = {
            "device": settings.device,
            "file": problem.file,
            "root": problem.root,
            "class_name": problem.class_name,
            "candidate": str(path),
            "build": problem.build,
            "dtype": settings.dtype,
            "original_path": settings.original_path,
        }
        readable = [*sandbox.problem_paths(problem.file, problem.root), str(path)]
        calls = judge.request("candidate", memcheck.LOG)  # the inputs file restored, too
        tf32 = uses_tf32_dot(cand.generated or cand.source)
        seconds: dict[str, float] = {}

        def offsets() -> Outcome:
            begun = time.monotonic()
            try:
                return family.check(req, readable, tf32)
            finally:
                seconds["above 2^31"] = time.monotonic() - begun

        # Both checks run at once, each in runners of its own: the family's outcome counts only when
        # the memory check passes (a failed one is the verdict, and the family's work is dropped).
        with ThreadPoolExecutor(1, thread_name_prefix="kernelize-family") as pool:
            family_done = pool.submit(offsets)
            start = time.monotonic()
            memory = memcheck.check(
                {**req, "judge": calls.to_dict()},
                [*readable, str(judge.inputs_path)],
                sandbox.Limits(settings.timeout_s, settings.memory_mb),
                env,
                settings.python,
                len(calls.calls),
            )
            seconds["memory"] = time.monotonic() - start
            got = family_done.result()
        if memory.status not in ("passed", "skipped"):
            return memory, None, seconds
        return memory, got, seconds


def _record(best: CandidateResult, memory: Outcome, offsets: Outcome | None) -> None:
    best.provenance = {**best.provenance, "memory_check": memory.text}
    for outcome in (memory, offsets):
        if outcome is not None and outcome.status not in ("passed", "skipped"):
            best.status, best.reason = Status(outcome.status), outcome.text
            best.verdict = Verdict.NOT_MEASURED
            best.median_ms = best.speedup_vs_eager = best.speedup_vs_compile = None
            return
    best.notes.append(memory.text)
    judged = best.provenance.get("judge")
    if offsets is None or not isinstance(judged, dict):
        return
    if offsets.status == "passed":
        judged = {**judged, "families": [*judged.get("families", []), above_int32.FAMILY]}
    else:
        judged = {**judged, "skipped": {**judged.get("skipped", {}), above_int32.FAMILY: offsets.text}}
    best.provenance = {**best.provenance, "judge": judged}
