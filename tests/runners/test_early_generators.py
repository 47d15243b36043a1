"""Generators that work on the CPU alone start once the build is resolved, beside the reference.

The template generator's trace never touches the GPU, so the engine starts it as soon as the
reference runner has said how to build the module, while that runner still runs the original on
the judge's inputs (and, on a GPU, times it). Its candidates, or its decline, then reach the report
as if it had been asked after the build. A generator without the mark is asked after the build, in
order, on the engine's own thread.
"""

from __future__ import annotations

import threading
from pathlib import Path

from runners import pipeline
from runners.generators.base import Candidate, GeneratorDeclined, Problem
from runners.generators.template import TemplateGenerator
from runners.results import Status

ROOT = Path(__file__).resolve().parents[2]
FILE = ROOT / "tests" / "problems" / "layers.py"


class Recording:
    """A real generator (the template's), recording on which thread and with which build it ran."""

    def __init__(self, name: str, beside: bool, decline: bool = False) -> None:
        self.name, self.samples, self.runs_beside_reference = name, False, beside
        self.decline = decline
        self.thread = ""
        self.build: dict | None = None

    def generate(self, problem: Problem, n: int) -> list[Candidate]:
        self.thread = threading.current_thread().name
        self.build = problem.build
        if self.decline:
            raise GeneratorDeclined(f"{self.name}: not this one")
        (cand,) = TemplateGenerator().generate(problem, n)
        cand.id, cand.generator = f"{self.name}-{cand.id}", self.name
        return [cand]


def _kernelize(*gens: Recording):
    (problem,), _ = pipeline.problems_for(str(FILE), str(ROOT), "RMSNorm")
    settings = pipeline.EngineSettings(device="cpu", timeout_s=120)
    messages: list[str] = []
    report = pipeline.kernelize(problem, list(gens), settings, progress=messages.append)
    return report, messages


def test_the_template_generator_runs_beside_the_reference():
    assert TemplateGenerator.runs_beside_reference is True


def test_an_early_generator_runs_on_its_own_thread_with_the_build_and_its_candidate_is_judged():
    early, late = Recording("early", beside=True), Recording("late", beside=False)
    report, messages = _kernelize(early, late)
    assert early.thread.startswith("kernelize-early"), early.thread
    assert late.thread == threading.main_thread().name
    assert early.build is not None and early.build == late.build
    by_generator = {c.generator: c for c in report.candidates}
    assert by_generator["early"].status is Status.CORRECT, by_generator["early"].reason
    assert by_generator["late"].status is Status.CORRECT, by_generator["late"].reason
    # Its time is reported in the portfolio's order after the build, however the threads ran.
    assert list(report.phases)[:3] == ["build", "generate: early", "generate: late"]
    # The report's order is the portfolio's, not the order the generators finished in.
    assert [c.generator for c in report.candidates] == ["early", "late"]
    asked = [m.split(": ", 1)[1] for m in messages if m.endswith("for candidates")]
    assert asked == ["asking early for candidates", "asking late for candidates"]
    # Where each candidate's check went, by its runner's marks, and the judge's comparison.
    for row in report.candidates:
        assert list(row.phases) == [
            "loading",
            "own checks",
            "the judge's calls",
            "timing and the rest",
            "judge's comparison",
        ], row.phases
    assert any("; loading " in m and "judge's comparison" in m for m in messages)
    # Where the build's time went is logged (the CPU has no timing and no compile baseline).
    (split,) = [m for m in messages if ": build: " in m]
    assert split.endswith("compile baseline 0.0 s, timing 0.0 s"), split
    assert "start and build" in split and "inputs" in split and "original's calls" in split


def test_a_check_is_split_by_the_runners_marks_in_order():
    marks = [
        ("candidate loaded", 2.0),
        ("own checks done", 5.5),
        ("judge's calls done", 9.0),
        ("timing start", 9.1),
    ]
    assert pipeline.check_split(marks, 12.0) == {
        "loading": 2.0,
        "own checks": 3.5,
        "the judge's calls": 3.5,
        "timing and the rest": 3.0,
    }
    # Marks missing or out of order (a runner that failed, or one that lies): as far as they hold.
    assert pipeline.check_split(marks[:1], 12.0) == {"loading": 2.0}
    assert pipeline.check_split([("candidate loaded", 4.0), ("own checks done", 1.0)], 9.0) == {
        "loading": 4.0
    }
    assert pipeline.check_split([], 3.0) == {}


def test_the_build_is_split_by_the_runners_marks():
    clock = {"start": 0.0, "prepared": 10.0, "planned": 12.5, "end": 60.0}
    marks = [
        ("baseline compile start", 20.0),
        ("baseline compile end", 35.0),
        ("timing start", 35.5),
        ("timing end", 45.5),
        ("back-to-back eager start", 45.5),
        ("back-to-back eager end", 46.0),
        ("back-to-back compile start", 46.0),
        ("back-to-back compile end", 46.5),
    ]
    assert pipeline.build_split(clock, marks) == (
        "start and build 10.0 s, inputs 2.5 s, original's calls 21.5 s, "
        "compile baseline 15.0 s, timing 11.0 s"
    )
    # A runner that never got as far as the judge's plan.
    early = pipeline.build_split({"start": 0.0, "end": 4.0}, [])
    assert early.startswith("start and build 4.0 s, inputs 0.0 s")


def test_an_early_generators_decline_is_reported_as_a_decline():
    report, _ = _kernelize(Recording("early", beside=True, decline=True))
    (row,) = report.candidates
    assert row.status is Status.ERROR
    assert row.reason == "generator: early: not this one"
    assert row.provenance == {"declined": True}
