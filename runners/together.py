"""Every suggestion for one file, applied together, must still verify.

Each class of a file is kernelized and verified on its own (``runners/pipeline.py``): its
suggestion applied to the original file. A reviewer may accept all of a file's suggestions, and two
that each verify alone can break each other once both are applied: two custom ops registered
under one name (the later registration then serves both classes), a name one of them binds that
the other uses too, line ranges that overlap, a file that no longer imports. So once every class
of the file is done, while each class's judge still holds its original's answers:

1. the suggestions are applied to the file at once and checked as text
   (:func:`runners.apply.check_applied_together`);
2. each suggested class is verified once more by its own judge, on the same inputs, with the
   combined file as its candidate: the whole file, run from the top in the candidate's sandbox,
   its class built from there.

A suggestion that fails either is not posted: its candidate's status and reason say why
("applied together with the suggestion for X, this class no longer verifies: ..."), and the
others are checked again without it. That costs one more candidate run per suggested class and
round; a file with one suggestion needs none (its own check ran it in the file's namespace, as
applied).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from runners import pipeline
from runners.apply import ApplyError, ClassEdit, check_applied_together
from runners.generators.base import Candidate, Generator, Problem
from runners.pipeline import EngineSettings, Judged, Progress
from runners.results import ModuleReport, Status, Verdict

# A suggested class and what checking it again takes.
Suggested = tuple[ModuleReport, Judged, Candidate]


def kernelize_file(
    problems: Sequence[Problem],
    generators: list[Generator],
    settings: EngineSettings,
    progress: Progress = lambda _: None,
) -> list[ModuleReport]:
    """The reports of ``problems`` (classes of one file), their suggestions checked applied together."""
    if len({p.file for p in problems}) > 1:
        raise ValueError("kernelize_file takes the classes of one file")
    suggested: list[Suggested] = []
    reports: list[ModuleReport] = []
    with contextlib.ExitStack() as held:
        for problem in problems:
            own = held.enter_context(contextlib.ExitStack())
            report, judged = pipeline.kernelize_judged(
                problem, generators, settings, held=own, progress=progress
            )
            reports.append(report)
            cand = _suggestion(report, judged)
            if judged is None or cand is None or not settings.original_path:
                own.close()  # nothing is suggested in the file's form: its judge can go now
                continue
            suggested.append((report, judged, cand))
        check_together(suggested, settings, progress)
    return reports


def _suggestion(report: ModuleReport, judged: Judged | None) -> Candidate | None:
    """The candidate suggested for the class, as it was evaluated."""
    best = report.best_candidate()
    if judged is None or best is None or report.best_source is None:
        return None
    return next((c for c in judged.candidates if (c.generator, c.id) == (best.generator, best.id)), None)


def check_together(suggested: Sequence[Suggested], settings: EngineSettings, progress: Progress) -> None:
    """Withdraw, one at a time, each suggestion that does not verify with the others applied,
    until those left verify together."""
    left = sorted(suggested, key=lambda s: s[1].problem.module.lineno)
    while len(left) > 1:
        names = [report.class_name for report, _, _ in left]
        file = left[0][0].file
        progress(f"{file}: checking the suggestions for {_and(names)} applied together")
        try:
            combined = check_applied_together(
                left[0][1].problem.source,
                [
                    ClassEdit(r.class_name, j.problem.module.lineno, j.problem.module.end_lineno, c.source)
                    for r, j, c in left
                ],
            )
        except ApplyError as exc:
            at_fault = exc.classes or tuple(names)
            out = next(s for s in left if s[0].class_name == at_fault[-1])
            others = list(at_fault[:-1]) or [n for n in names if n != at_fault[-1]]
            _withdraw(out[0], others, Status.REJECTED, f"check 1 (the file after applying): {exc}", progress)
            left.remove(out)
            continue
        failed = None
        for s in left:
            report, judged, cand = s
            others = [n for n in names if n != report.class_name]
            progress(f"{report.target}: {cand.generator}:{cand.id} again, with {_and(others)}'s applied too")
            whole = Candidate(
                cand.id, cand.generator, combined, dict(cand.provenance), generated=cand.generated
            )
            again = pipeline.evaluate_candidate(
                judged.problem, whole, judged.prep, settings, judged.env, judged.judge, whole_file=True
            )
            if again.status is not Status.CORRECT:
                _withdraw(report, others, again.status, again.reason or again.status.value, progress)
                failed = s
                break
        if failed is None:
            for report, _, _ in left:
                best = report.best_candidate()
                if best is not None:
                    together = {"with": [n for n in names if n != report.class_name], "status": "correct"}
                    best.provenance = {**best.provenance, "together": together}
            return
        left.remove(failed)


def _withdraw(report: ModuleReport, others: list[str], status: Status, why: str, progress: Progress) -> None:
    """The class's suggestion is not posted; its candidate says why."""
    best = report.best_candidate()
    assert best is not None
    s = "s" if len(others) > 1 else ""
    best.provenance = {
        **best.provenance,
        "together": {"with": others, "alone": best.status.value, "reason": why},
    }
    best.status, best.verdict = status, Verdict.NOT_MEASURED
    best.reason = (
        f"applied together with the suggestion{s} for {_and(others)}, this class no longer verifies: {why}"
    )
    report.best = report.best_source = None
    progress(f"{report.target}: not suggested: {best.reason}")


def _and(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
