"""runners.together: a file's suggestions, applied together, still verify, on the CPU (Triton interpreter).

tests/problems/together.py holds two classes, Scale (x * 2) and Shift (x + 1). Their candidates
(tests/candidates/together/) launch their kernels through custom ops. Each verifies on its own;
when both register their op under one name, the later registration replaces the earlier once both
suggestions are applied, and only the joint check sees it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from runners import pipeline, tasks, together
from runners.apply import ClassEdit, check_applied_together
from runners.bundle import pack
from runners.generators.base import Candidate, GeneratorError
from runners.generators.files import FilesGenerator
from runners.messages import GpuRequest, ModuleResult
from runners.results import CandidateResult, ModuleReport, Status, Verdict

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests/problems/together.py"
CANDIDATES = ROOT / "tests/candidates/together"


def candidates(folder: Path, scale_op: str = "kernelize::pointwise") -> Path:
    """A candidates folder (``files`` generator layout): Scale's candidate, its custom op named
    ``scale_op``, and Shift's, its op named kernelize::pointwise."""
    for cls, name in (("Scale", "scale_pointwise.py"), ("Shift", "shift_pointwise.py")):
        (folder / cls).mkdir(parents=True)
        source = (CANDIDATES / name).read_text()
        if cls == "Scale":
            source = source.replace('"kernelize::pointwise"', f'"{scale_op}"')
        (folder / cls / name).write_text(source)
    return folder


def test_a_suggestion_that_breaks_once_both_are_applied_is_not_suggested(tmp_path, monkeypatch):
    """Through the GPU worker's task, one per file (the bot's path): Scale's suggestion is withdrawn
    with the judge's finding, Shift's stays (it still verifies in the file with both applied)."""
    monkeypatch.setenv("KERNELIZE_CANDIDATES_DIR", str(candidates(tmp_path)))
    request = GpuRequest(
        bundle=pack({"models/together.py": PROBLEM.read_text()}),
        rel_path="models/together.py",
        class_names=["Scale", "Shift"],
        generators=["files"],
        device="cpu",
    )
    scale, shift = ModuleResult.from_dict(tasks.kernelize_file(request.to_dict())).modules
    assert (scale.target, shift.target) == ("models/together.py::Scale", "models/together.py::Shift")

    assert shift.best == "shift_pointwise.py" and shift.best_source
    assert shift.candidates[0].status is Status.CORRECT, shift.candidates[0].reason

    assert scale.best is None and scale.best_source is None
    [c] = scale.candidates
    assert c.status is Status.INCORRECT, c.reason
    assert c.reason.startswith(
        "applied together with the suggestion for Shift, this class no longer verifies: "
    )
    # Scale's op handle is stale once Shift's registration replaced it: calling it is undefined (it
    # ran Shift's code, or failed, or could crash), so the judge names the collision instead.
    assert (
        "the custom op kernelize::pointwise that `scale_Scale` registers is registered again "
        "(by `shift_Shift`)" in c.reason
    ), c.reason
    assert c.provenance["together"]["with"] == ["Shift"]
    assert c.provenance["together"]["alone"] == "correct"


def test_two_suggestions_that_compose_are_both_suggested(tmp_path):
    """The control: the same candidates, Scale's op under a name of its own. Both verify in the file
    with both applied."""
    problems, _ = pipeline.problems_for(str(PROBLEM), str(ROOT), None)
    files = FilesGenerator(candidates(tmp_path, scale_op="kernelize::scale"))
    reports = together.kernelize_file(problems, [files], pipeline.EngineSettings(device="cpu", timeout_s=300))
    by_class: dict[str, ModuleReport] = {r.class_name: r for r in reports}
    assert [r.best for r in reports] == ["scale_pointwise.py", "shift_pointwise.py"]
    for cls, other in (("Scale", "Shift"), ("Shift", "Scale")):
        best = by_class[cls].best_candidate()
        assert best is not None and best.status is Status.CORRECT, best
        assert best.provenance["together"] == {"with": [other], "status": "correct"}
    # What was checked is what is posted: the two suggestions apply to the file together.
    spans = {p.class_name: (p.module.lineno, p.module.end_lineno) for p in problems}
    posted = [ClassEdit(r.class_name, *spans[r.class_name], r.best_source or "") for r in reports]
    assert '"kernelize::scale"' in check_applied_together(PROBLEM.read_text(), posted)


def test_the_combined_file_runs_from_the_top_in_a_namespace_of_its_own(tmp_path):
    """A candidate runs in a copy of the original file's namespace; the combined file is the whole
    file, so it runs as importing it would: nothing of the original is there before it defines it."""
    import types

    from runners.verify import load_in_namespace

    original = types.ModuleType("models.layers")
    original.__package__, original.LATER = "models", 1  # type: ignore[attr-defined]
    path = tmp_path / "combined.py"
    path.write_text("SEEN = 'LATER' in globals()\nLATER = 2\n")
    assert load_in_namespace(str(path), original, "kernelize_test_candidate").SEEN is True
    whole = load_in_namespace(str(path), original, "kernelize_test_whole", whole_file=True)
    assert whole.SEEN is False and whole.LATER == 2 and whole.__package__ == "models"
    for name in ("kernelize_test_candidate", "kernelize_test_whole"):
        sys.modules.pop(name)


# ---------------------------------------------------------------------------
# The joint check's bookkeeping, its runs stubbed (no sandbox, no engine)

TWO_CLASSES = (
    "import torch\n\n\n"
    "class Scale(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n\n\n"
    "class Shift(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n"
)


def _suggested(cls: str, lines: tuple[int, int], code: str) -> tuple[ModuleReport, Any, Candidate]:
    """A class whose candidate verified alone and is suggested: its report, judged and candidate."""
    cand = Candidate(f"{cls.lower()}.py", "files", code)
    report = ModuleReport(
        f"m.py::{cls}",
        "m.py",
        cls,
        candidates=[CandidateResult(cand.id, "files", Status.CORRECT, verdict=Verdict.FASTER)],
        best=cand.id,
        best_source=code,
    )
    module = SimpleNamespace(lineno=lines[0], end_lineno=lines[1])
    problem = SimpleNamespace(class_name=cls, source=TWO_CLASSES, module=module)
    judged = SimpleNamespace(problem=problem, prep={}, env={}, judge=None)
    return report, judged, cand


SCALE = "class Scale(torch.nn.Module):\n    def forward(self, x):\n        return x + x\n"
SHIFT = "class Shift(torch.nn.Module):\n    def forward(self, x):\n        return x - -1\n"


def test_the_joint_check_withdraws_the_class_that_fails_with_the_others_applied(monkeypatch):
    ran: list[tuple[str, str, bool]] = []
    why = "judge, normal: max abs error 1"

    def evaluate(problem, cand, prep, settings, env, judge, whole_file=False):
        ran.append((problem.class_name, cand.source, whole_file))
        if problem.class_name == "Scale":
            return CandidateResult(cand.id, cand.generator, Status.INCORRECT, why)
        return CandidateResult(cand.id, cand.generator, Status.CORRECT)

    monkeypatch.setattr(pipeline, "evaluate_candidate", evaluate)
    scale, shift = _suggested("Scale", (4, 6), SCALE), _suggested("Shift", (9, 11), SHIFT)
    said: list[str] = []
    together.check_together([shift, scale], pipeline.EngineSettings(device="cpu"), said.append)

    # Scale (first in the file) ran once, as the whole file with both applied; it failed, so the
    # round ended there, and Shift, alone now, needs no joint check.
    [(cls, combined, whole_file)] = ran
    assert (cls, whole_file) == ("Scale", True)
    assert "return x + x" in combined and "return x - -1" in combined
    report = scale[0]
    assert report.best is None and report.best_source is None
    [c] = report.candidates
    assert (c.status, c.verdict) == (Status.INCORRECT, Verdict.NOT_MEASURED)
    assert c.reason == f"applied together with the suggestion for Shift, this class no longer verifies: {why}"
    assert c.provenance["together"] == {"with": ["Shift"], "alone": "correct", "reason": why}
    assert shift[0].best == "shift.py" and "together" not in shift[0].candidates[0].provenance
    assert said[0] == "m.py: checking the suggestions for Scale and Shift applied together"
    assert said[-1] == f"m.py::Scale: not suggested: {c.reason}"


def test_suggestions_that_verify_together_say_so(monkeypatch):
    monkeypatch.setattr(
        pipeline,
        "evaluate_candidate",
        lambda problem, cand, *a, **k: CandidateResult(cand.id, cand.generator, Status.CORRECT),
    )
    scale, shift = _suggested("Scale", (4, 6), SCALE), _suggested("Shift", (9, 11), SHIFT)
    together.check_together([scale, shift], pipeline.EngineSettings(device="cpu"), lambda _: None)
    assert scale[0].candidates[0].provenance["together"] == {"with": ["Shift"], "status": "correct"}
    assert shift[0].candidates[0].provenance["together"] == {"with": ["Scale"], "status": "correct"}
    assert [r.best for r in (scale[0], shift[0])] == ["scale.py", "shift.py"]


def test_suggestions_that_cannot_be_applied_together_leave_out_the_later_one(monkeypatch):
    """Both bind the same helper: check 1 fails on the text alone, nothing runs, and the later
    suggestion in the file is the one withdrawn."""
    monkeypatch.setattr(pipeline, "evaluate_candidate", lambda *a, **k: pytest.fail("nothing should run"))
    helper = "def _kernel(x):\n    return x\n\n\n"
    scale = _suggested("Scale", (4, 6), helper + SCALE)
    shift = _suggested("Shift", (9, 11), helper + SHIFT)
    together.check_together([scale, shift], pipeline.EngineSettings(device="cpu"), lambda _: None)
    assert scale[0].best == "scale.py"
    [c] = shift[0].candidates
    assert c.status is Status.REJECTED and shift[0].best is None
    assert c.reason.startswith(
        "applied together with the suggestion for Scale, this class no longer verifies: "
        "check 1 (the file after applying): the suggestion for Shift binds _kernel"
    ), c.reason


def test_the_files_generator_reads_the_class_folder_else_the_folder(tmp_path):
    (tmp_path / "Scale").mkdir()
    (tmp_path / "Scale" / "b.py").write_text("B = 1\n")
    (tmp_path / "Scale" / "a.py").write_text("A = 1\n")
    (tmp_path / "any.py").write_text("ANY = 1\n")
    (tmp_path / "bad.py").write_bytes(b"\xff\xfe not text")
    files = FilesGenerator(tmp_path)
    scale = SimpleNamespace(class_name="Scale")
    assert [(c.id, c.source, c.error) for c in files.generate(scale, 1)] == [
        ("a.py", "A = 1\n", None),
        ("b.py", "B = 1\n", None),
    ]
    shift = files.generate(SimpleNamespace(class_name="Shift"), 1)
    assert [(c.id, c.source) for c in shift] == [("any.py", "ANY = 1\n"), ("bad.py", "")]
    assert shift[1].error is not None and shift[1].error.startswith("cannot read: ")
    with pytest.raises(GeneratorError, match="no such directory"):
        FilesGenerator(tmp_path / "missing")
