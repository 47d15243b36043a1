"""Reports for people: training figures (forward and backward) beside the forward ones, in words
that never call the slower one fast, in the terminal table, the markdown report and the JSON."""

from __future__ import annotations

import json

import pytest

from runners.render import markdown, text_table, training_figures, training_line
from runners.results import (
    Baselines,
    CandidateResult,
    DeviceInfo,
    ModuleReport,
    RunReport,
    Status,
    Timing,
    Verdict,
    report_from_dict,
    to_dict,
)

H200 = DeviceInfo("cuda", "NVIDIA H200", "2.11.0", "3.6.0", "570.86", "12.8")
TRITON = "Triton backward (gradients checked)"
ORIGINAL = "original path (no backward kernel yet)"


def _trained(eager: float | None, compiled: float | None, verdict: Verdict, **kw: object) -> CandidateResult:
    fields: dict[str, object] = {
        "id": "rms_norm_fwd_kernel",
        "generator": "template",
        "status": Status.CORRECT,
        "max_abs_error": 1e-6,
        "median_ms": 0.5,
        "speedup_vs_eager": 1.8,
        "speedup_vs_compile": 1.2,
        "verdict": Verdict.FASTER,
        "training": TRITON,
        "training_median_ms": 1.25,
        "training_speedup_vs_eager": eager,
        "training_speedup_vs_compile": compiled,
        "training_verdict": verdict,
        "timings": {"candidate": Timing(0.5, 0.49, 0.52, 300)},
        "training_timings": {"candidate": Timing(1.25, 1.2, 1.3, 120), "eager": Timing(1.9, 1.85, 2.0, 120)},
    }
    fields.update(kw)
    return CandidateResult(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("candidate", "figures"),
    [
        (_trained(1.52, 1.10, Verdict.FASTER), "1.52x eager, 1.10x torch.compile: faster"),
        (_trained(1.52, 0.90, Verdict.FASTER), "1.52x eager, 0.90x torch.compile: slower than torch.compile"),
        (_trained(0.85, 0.70, Verdict.NO_FASTER), "0.85x eager, 0.70x torch.compile: slower"),
        (_trained(1.02, None, Verdict.NO_FASTER), "1.02x eager: no faster"),
        (_trained(None, None, Verdict.NOT_MEASURED, training_median_ms=None), "not timed"),
        (
            _trained(None, None, Verdict.NOT_MEASURED, training=ORIGINAL, training_median_ms=None),
            "original path, not timed",
        ),
        (
            _trained(
                None,
                None,
                Verdict.NOT_MEASURED,
                training="original path (the Triton backward was wrong: training (...): ...)",
                training_median_ms=None,
            ),
            "original path, not timed",
        ),
        (_trained(None, None, Verdict.NOT_MEASURED, training="", training_median_ms=None), "—"),
    ],
    ids=[
        "faster",
        "slower-than-compile",
        "slower",
        "no-faster",
        "untimed",
        "original",
        "wrong-backward",
        "unchecked",
    ],
)
def test_training_figures_say_which_it_is_fast_at(candidate, figures):
    assert training_figures(candidate) == figures
    line = training_line(candidate)
    if candidate.training_median_ms is not None:
        assert line == f"training (forward+backward): {figures}"
    elif candidate.training:
        assert line == f"training: {figures}"
    else:
        assert line == ""
    if candidate.training_speedup_vs_compile is not None and candidate.training_speedup_vs_compile < 1:
        assert not line.endswith("faster")  # the slower one is never praised


def _report(*candidates: CandidateResult) -> RunReport:
    module = ModuleReport(
        target="models/norm.py::RMSNorm",
        file="models/norm.py",
        class_name="RMSNorm",
        build_source="kernelbench",
        baselines=Baselines(0.9, 0.6, None, training_eager_ms=1.9, training_compile_ms=1.4),
        candidates=list(candidates),
        best=candidates[0].id,
    )
    return RunReport(device=H200, modules=[module])


def test_the_terminal_table_has_a_training_column():
    other = _trained(None, None, Verdict.NOT_MEASURED, id="ok.py", training=ORIGINAL, training_median_ms=None)
    table = text_table(_report(_trained(1.52, 1.36, Verdict.FASTER), other))
    header, _, faster, original = table.splitlines()[:4]
    assert header.endswith("vs compile  training (fwd+bwd)")
    assert faster.endswith("1.52x eager, 1.36x torch.compile: faster")
    assert original.endswith("original path, not timed")


CPU = DeviceInfo("cpu", "cpu", "2.13.0+cpu", "3.9.0", None, None)


def _cpu_report(*candidates: CandidateResult, best: str | None = None) -> RunReport:
    module = ModuleReport(
        target="models/mlp.py::MLP",
        file="models/mlp.py",
        class_name="MLP",
        build_source="guess",
        baselines=Baselines(None, None, None),
        candidates=list(candidates),
        best=best,
    )
    return RunReport(device=CPU, modules=[module])


def test_the_terminal_table_drops_the_columns_a_cpu_run_leaves_empty():
    ok = CandidateResult("ok.py", "files", Status.CORRECT, "", max_abs_error=5e-7)
    bad = CandidateResult("bad.py", "files", Status.INCORRECT, "judge, normal: max abs error 2 > tol " * 5)
    table = text_table(_cpu_report(ok, bad, best="ok.py"), columns=100)
    header = table.splitlines()[0].split()
    assert header == ["module", "candidate", "generator", "status", "reason", "max", "err"]
    rows = table.splitlines()[2:4]
    assert all(len(r) <= 100 for r in rows), rows
    assert rows[1].rstrip().endswith("…") or "…" in rows[1]  # the long reason clipped to fit
    assert table.splitlines()[-1].startswith("* best candidate · not timed (no GPU)")


def test_a_generator_that_declined_reads_declined_and_no_best_is_claimed():
    row = CandidateResult(
        "template", "template", Status.ERROR, "generator: template: unsupported op nn.Linear (node 'fc')"
    )
    row.provenance = {"declined": True}
    table = text_table(_cpu_report(row))
    assert "  declined  generator: template: unsupported op nn.Linear" in table
    assert "best candidate" not in table
    assert table.splitlines()[-1].startswith("not timed (no GPU)")


def test_the_markdown_report_has_a_training_table():
    other = _trained(None, None, Verdict.NOT_MEASURED, id="ok.py", training=ORIGINAL, training_median_ms=None)
    md = markdown(_report(_trained(1.52, 0.90, Verdict.FASTER), other))
    assert (
        "Training (forward+backward), timed where the candidate trains through its own Triton backward; "
        "baselines: eager 1.9 ms, torch.compile 1.4 ms:"
    ) in md
    assert "| candidate | training (fwd+bwd) ms | vs eager | vs compile | training |" in md
    assert (
        "| **rms_norm_fwd_kernel** | 1.25 | 1.52x | 0.90x | 1.52x eager, 0.90x torch.compile: "
        "slower than torch.compile |"
    ) in md
    assert "| ok.py | — | — | — | original path, not timed |" in md


def test_training_figures_survive_the_json_report():
    run = _report(_trained(1.52, 0.90, Verdict.FASTER))
    again = report_from_dict(json.loads(json.dumps(to_dict(run))))
    assert again == run
    c = again.modules[0].candidates[0]
    assert c.training_verdict is Verdict.FASTER and c.training_timings["eager"] == Timing(1.9, 1.85, 2.0, 120)
    assert again.modules[0].baselines.training_compile_ms == 1.4
