"""runners.together: a file's suggestions, applied together, still verify, on the CPU (Triton interpreter).

tests/problems/together.py holds two classes, Scale (x * 2) and Shift (x + 1). Their candidates
(tests/candidates/together/) launch their kernels through custom ops. Each verifies on its own;
when both register their op under one name, the later registration replaces the earlier once both
suggestions are applied, and only the joint check sees it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from runners import pipeline, tasks, together
from runners.apply import Suggestion, check_applied_together
from runners.bundle import pack
from runners.generators.files import FilesGenerator
from runners.messages import GpuRequest, ModuleResult
from runners.results import ModuleReport, Status

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
    reports = together.kernelize_file(problems, [files], pipeline.Settings(device="cpu", timeout_s=300))
    by_class: dict[str, ModuleReport] = {r.class_name: r for r in reports}
    assert [r.best for r in reports] == ["scale_pointwise.py", "shift_pointwise.py"]
    for cls, other in (("Scale", "Shift"), ("Shift", "Scale")):
        best = by_class[cls].best_candidate()
        assert best is not None and best.status is Status.CORRECT, best
        assert best.provenance["together"] == {"with": [other], "status": "correct"}
    # What was checked is what is posted: the two suggestions apply to the file together.
    spans = {p.class_name: (p.module.lineno, p.module.end_lineno) for p in problems}
    posted = [Suggestion(r.class_name, *spans[r.class_name], r.best_source or "") for r in reports]
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
