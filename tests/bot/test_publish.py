"""bot.publish: diffs, anchors, fences and the rendered review, summary and check run (pure, no I/O)."""

from __future__ import annotations

import hashlib
import re

import pytest

from bot.publish import (
    CHECK_LIMIT,
    COMMENT_LIMIT,
    SUMMARY_MARKER,
    ModuleProgress,
    ReviewPlan,
    advance,
    check_run_output,
    check_run_progress,
    fence,
    held_suggestions,
    module_progress,
    parse_suggestion_marker,
    plan_review,
    right_hunks,
    suggestion_anchor,
    suggestion_marker,
    summary_comment,
)
from runners.results import (
    Baselines,
    CandidateResult,
    DeviceInfo,
    ModuleReport,
    RunReport,
    Status,
    Timing,
    Verdict,
)

HEAD = "0123456789abcdef0123456789abcdef01234567"
GPU = DeviceInfo(
    kind="cuda", name="NVIDIA H200", torch="2.5.1", triton="3.1.0", driver="550.54.15", cuda="12.4"
)
CPU = DeviceInfo(kind="cpu", name="cpu", torch="2.5.1", triton="3.1.0", interpreter=True)

# ---------------------------------------------------------------- diffs

# A modified file with three hunks: an added import, a changed class body, a deletion-only hunk.
MODIFIED = "\n".join(
    [
        "@@ -1,5 +1,6 @@",
        " import torch",
        " import torch.nn as nn",
        "+import triton",
        " ",
        " ",
        " class Scale(nn.Module):",
        "@@ -20,9 +21,15 @@ class Scale(nn.Module):",
        "     def __init__(self, factor):",
        "         super().__init__()",
        "         self.factor = factor",
        " ",
        "     def forward(self, x):",
        "-        return x * self.factor",
        "+        y = x * self.factor",
        "+        return y",
        "+",
        "+",
        "+class Shift(nn.Module):",
        "+    def forward(self, x):",
        "+        return x + 1",
        " ",
        " ",
        " def get_inputs():",
        "@@ -40,3 +47,0 @@ def get_inputs():",
        "-# old",
        "-# trailing",
        "-# lines",
        "",
    ]
)

ADDED = "@@ -0,0 +1,5 @@\n+import torch\n+\n+\n+class M(torch.nn.Module):\n+    pass\n"

NO_NEWLINE = """\
@@ -3,2 +3,3 @@ class M(nn.Module):
     def forward(self, x):
-        return x
\\ No newline at end of file
+        x = x + 1
+        return x
\\ No newline at end of file
"""


def test_right_hunks_of_a_modified_file_skip_deletion_only_hunks() -> None:
    assert right_hunks(MODIFIED) == [(1, 6), (21, 35)]


def test_right_hunks_of_an_added_file() -> None:
    assert right_hunks(ADDED) == [(1, 5)]


def test_no_newline_marker_counts_for_nothing() -> None:
    assert right_hunks(NO_NEWLINE) == [(3, 5)]


def test_context_line_with_its_space_stripped_still_counts() -> None:
    patch = "@@ -1,3 +1,4 @@\n a\n\n+b\n c\n"  # the blank context line lost its leading space
    assert right_hunks(patch) == [(1, 4)]


def test_hunk_header_without_lengths_and_a_git_preamble() -> None:
    patch = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert right_hunks(patch) == [(1, 1)]


def test_empty_patch_has_no_hunks() -> None:
    assert right_hunks("") == []


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (21, 35, (21, 35)),  # exactly one hunk
        (26, 30, (26, 30)),  # inside
        (5, 25, None),  # spans two hunks (and the gap between them)
        (10, 12, None),  # between hunks
        (30, 40, None),  # runs past the end of the hunk
        (6, 6, (6, 6)),  # one line, at the edge
    ],
)
def test_suggestion_anchor(start: int, end: int, expected: tuple[int, int] | None) -> None:
    assert suggestion_anchor(start, end, right_hunks(MODIFIED)) == expected


# ---------------------------------------------------------------- fences


def test_fence_plain_code_keeps_three_backticks_and_one_final_newline() -> None:
    assert fence("x = 1\ny = 2\n") == "```suggestion\nx = 1\ny = 2\n```"
    assert fence("x = 1") == "```suggestion\nx = 1\n```"


def test_fence_is_longer_than_any_backtick_run_in_the_code() -> None:
    three = 'DOC = """\n```python\nx\n```\n"""\n'
    four = 'DOC = """\n````\n```\n````\n"""\n'
    assert fence(three).startswith("````suggestion\n") and fence(three).endswith("\n````")
    assert fence(four).startswith("`````suggestion\n") and fence(four).endswith("\n`````")
    assert fence("s = '`a` ``b``'\n").startswith("```suggestion\n")


def test_fence_info_string() -> None:
    assert fence("x\n", "python") == "```python\nx\n```"


# ---------------------------------------------------------------- reports to plan


SCALE_CODE = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, out_ptr, factor, n, BLOCK: tl.constexpr):
    """Doc with ``` inside, to lengthen the fence."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


class Scale(torch.nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        out = torch.empty_like(x)
        _scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, self.factor, x.numel(), BLOCK=1024)
        return out
'''


def sha(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


def winner(code: str = SCALE_CODE, **kw: object) -> CandidateResult:
    fields: dict[str, object] = {
        "id": "kernelllm-2",
        "generator": "kernelllm",
        "status": Status.CORRECT,
        "source_sha256": sha(code),
        "max_abs_error": 1.2e-6,
        "max_rel_error": 3.0e-7,
        "median_ms": 0.05,
        "speedup_vs_eager": 2.4,
        "speedup_vs_compile": 1.9,
        "verdict": Verdict.FASTER,
        "notes": ["tl.dot ran in TF32"],
        "shapes_checked": [[[8, 64]], [[3, 17]], [[1, 1]]],
        "timings": {"candidate": Timing(0.05, 0.049, 0.052, 200)},
    }
    fields.update(kw)
    return CandidateResult(**fields)  # type: ignore[arg-type]


def loser(cid: str, status: Status, reason: str) -> CandidateResult:
    return CandidateResult(id=cid, generator="kernelllm", status=status, reason=reason)


def scale_report(best: CandidateResult | None = None, **kw: object) -> ModuleReport:
    best = best or winner()
    return ModuleReport(
        target="models/scale.py::Scale",
        file="models/scale.py",
        class_name="Scale",
        build_source="kernelbench",
        baselines=Baselines(eager_ms=0.12, compile_ms=0.095),
        candidates=[loser("kernelllm-1", Status.INCORRECT, "max abs err 0.31 at [0, 5]"), best],
        best=best.id,
        **kw,  # type: ignore[arg-type]
    )


SOURCES = {"models/scale.py": {"Scale": (21, 34)}}
PATCHES: dict[str, str | None] = {"models/scale.py": MODIFIED}


def plan_for(reports: list[ModuleReport], device: DeviceInfo = GPU, **kw: object) -> ReviewPlan:
    codes = {(m.target, c.id): SCALE_CODE for m in reports for c in m.candidates}
    codes.update(kw.pop("codes", {}))  # type: ignore[call-overload]
    return plan_review(
        reports,
        kw.pop("sources", SOURCES),  # type: ignore[arg-type]
        kw.pop("patches", PATCHES),  # type: ignore[arg-type]
        codes,
        HEAD,
        device=device,
        **kw,  # type: ignore[arg-type]
    )


def test_a_headline_says_when_torch_compile_is_faster() -> None:
    report = scale_report()
    best = next(c for c in report.candidates if c.id == report.best)
    best.speedup_vs_compile = 0.58
    body = plan_for([report]).comments[0].body
    headline = next(line for line in body.splitlines() if line.startswith("**Kernelize**"))
    assert "2.40x eager PyTorch but **slower than `torch.compile` (0.58x)**" in headline
    assert "if you compile the model, keep the original" in headline
    assert "faster than eager" not in headline


def _training_body(**training: object) -> str:
    report = scale_report(winner(training="Triton backward (gradients checked)", **training))
    report.baselines.training_eager_ms, report.baselines.training_compile_ms = 0.31, 0.2
    return plan_for([report]).comments[0].body


@pytest.mark.parametrize(
    ("figures", "says"),
    [
        ((0.16, 1.94, 1.25), "1.94x eager, 1.25x torch.compile: faster."),
        ((0.22, 1.41, 0.91), "1.41x eager, 0.91x torch.compile: slower than torch.compile."),
    ],
    ids=["faster", "slower-than-compile"],
)
def test_the_suggestion_says_which_it_is_fast_at(figures: tuple[float, float, float], says: str) -> None:
    median, eager, compiled = figures
    body = _training_body(
        training_median_ms=median,
        training_speedup_vs_eager=eager,
        training_speedup_vs_compile=compiled,
        training_verdict=Verdict.FASTER,
    )
    assert (
        "**2.40x faster than eager PyTorch**, 1.90x `torch.compile`, on NVIDIA H200.\n"
        f"That is for inference (forward); training (forward+backward): {says}"
    ) in body
    row = f"| 0.31 | 0.2 | {median} | {eager}x | {compiled}x |"
    assert f"| training (forward+backward): gradients checked | — {row}" in body
    if compiled < 1:
        assert f"{compiled}x torch.compile: faster" not in body  # the slower one is never praised


def test_the_suggestion_says_training_on_the_original_path_is_not_timed() -> None:
    report = scale_report(winner(training="original path (no backward kernel yet)"))
    body = plan_for([report]).comments[0].body
    assert "That is for inference (forward); training: original path, not timed." in body
    assert "| training: original path, not timed | — | — | — | — | — | — |" in body
    assert "training (forward+backward)" not in body


def suggested_code(body: str) -> str:
    found = re.search(r"^(`{3,})suggestion\n(.*?)\n\1$", body, re.S | re.M)
    assert found, body
    return found.group(2)


def test_a_faster_winner_becomes_one_anchored_suggestion_with_marker_and_table() -> None:
    plan = plan_for([scale_report()])
    assert len(plan.comments) == 1 and plan.summary_only == []
    c = plan.comments[0]
    assert (c.path, c.start_line, c.line) == ("models/scale.py", 21, 34)
    assert parse_suggestion_marker(c.body) == ("models/scale.py::Scale", HEAD, sha(SCALE_CODE))
    assert c.body.startswith(suggestion_marker("models/scale.py::Scale", HEAD, sha(SCALE_CODE)))
    assert suggested_code(c.body) == SCALE_CODE.removesuffix("\n")  # exactly as verified
    assert "````suggestion" in c.body  # the docstring's ``` lengthened the fence
    assert "**2.40x faster than eager PyTorch**, 1.90x `torch.compile`, on NVIDIA H200." in c.body
    assert "| passed on 3 input shapes | 1.2e-06 | 0.12 | 0.095 | 0.05 | 2.40x | 1.90x |" in c.body
    assert "NVIDIA H200 · driver 550.54.15 · CUDA 12.4 · torch 2.5.1 · triton 3.1.0" in c.body
    assert "tl.dot ran in TF32" in c.body
    s = plan.suggestions[0]
    assert (s.target, s.candidate_id, s.start_line, s.end_line) == (
        "models/scale.py::Scale",
        "kernelllm-2",
        21,
        34,
    )
    assert "models/scale.py::Scale" in plan.body and HEAD in plan.body


def test_a_one_line_class_gets_a_single_line_comment() -> None:
    plan = plan_for([scale_report()], sources={"models/scale.py": {"Scale": (30, 30)}})
    assert (plan.comments[0].start_line, plan.comments[0].line) == (None, 30)


def test_modules_without_a_winner_say_why_in_the_summary() -> None:
    none_passed = ModuleReport(
        target="models/a.py::A",
        file="models/a.py",
        class_name="A",
        candidates=[
            loser("k1", Status.INCORRECT, "max abs err 0.5 | shape <3, 17>"),
            loser("k2", Status.REJECTED, "check 5: no Triton kernel launched"),
            loser("k3", Status.CRASHED, "SIGSEGV"),
        ],
    )
    slow = CandidateResult(
        id="t1", generator="template", status=Status.CORRECT, median_ms=0.118, speedup_vs_eager=1.02
    )
    no_faster = ModuleReport(
        target="models/b.py::B",
        file="models/b.py",
        class_name="B",
        baselines=Baselines(0.12, None, "torch.compile raised"),
        candidates=[slow],
    )
    skipped = ModuleReport(
        target="models/c.py::C",
        file="models/c.py",
        class_name="C",
        status="skipped",
        reason="cannot build C: its forward takes (x, mask) and no get_inputs() says what they are",
        snippet="def get_inputs():\n    return [torch.randn(8, 64), torch.ones(8, 64, dtype=torch.bool)]\n",
    )
    reports = [none_passed, no_faster, skipped]
    run = RunReport(device=GPU, modules=reports)
    plan = plan_for(reports)
    assert plan.comments == [] and plan.summary_only == []
    text = summary_comment(run, reports, HEAD, plan)
    assert text.startswith(SUMMARY_MARKER)
    assert f"Updated for {HEAD}" in text
    assert "NVIDIA H200" in text and "550.54.15" in text and "torch 2.5.1" in text and "triton 3.1.0" in text
    assert "No candidate passed the checks (1 incorrect, 1 rejected, 1 crashed)" in text
    assert "max abs err 0.5 \\| shape &lt;3, 17&gt;" in text  # a reason cannot break out of the markdown
    assert "none faster than eager beyond the 1.05x noise floor" in text and "1.02x" in text
    assert (
        "| `models/b.py::B` | correct, no faster | t1 | template | — | 0.12 | failed | 0.118 | 1.02x | — |"
        in text
    )
    assert "<details><summary>What to add so Kernelize can build it</summary>" in text
    assert "torch.ones(8, 64, dtype=torch.bool)" in text


def test_a_class_spanning_two_hunks_goes_to_the_summary_in_details() -> None:
    reports = [scale_report()]
    plan = plan_for(reports, sources={"models/scale.py": {"Scale": (5, 34)}})
    assert plan.comments == [] and plan.summary_only == ["models/scale.py::Scale"]
    assert "not inside one hunk" in plan.held_back["models/scale.py::Scale"].reason
    text = summary_comment(RunReport(device=GPU, modules=reports), reports, HEAD, plan)
    assert "suggested in the summary" in text
    assert "<details><summary>Code to replace <code>Scale</code> with" in text
    assert "````python\n" + SCALE_CODE in text
    assert "comment `/kernelize apply models/scale.py::Scale` to have Kernelize commit this code" in text
    # What /kernelize apply can commit: the class's lines and the verified code's hash, no marker.
    targets = [{"path": "models/scale.py", "class_name": "Scale", "start": 5, "end": 34}]
    [held] = held_suggestions(plan, targets, reports)
    assert (held.target, held.start_line, held.end_line, held.marker) == ("models/scale.py::Scale", 5, 34, "")
    assert held.source_sha256 == hashlib.sha256(SCALE_CODE.encode()).hexdigest()
    out = check_run_output(RunReport(device=GPU, modules=reports), reports, plan)
    assert out.conclusion == "success"


def test_a_file_outside_the_diff_or_code_that_changed_is_not_suggested() -> None:
    plan = plan_for([scale_report()], patches={})
    assert "not part of this pull request's diff" in plan.held_back["models/scale.py::Scale"].reason
    tampered = plan_for(
        [scale_report()], codes={("models/scale.py::Scale", "kernelllm-2"): SCALE_CODE + "# x\n"}
    )
    held = tampered.held_back["models/scale.py::Scale"]
    assert tampered.comments == [] and "not the code that was verified" in held.reason and held.code is None
    targets = [{"path": "models/scale.py", "class_name": "Scale", "start": 21, "end": 34}]
    assert held_suggestions(tampered, targets, [scale_report()]) == []  # never code that was not verified


def test_a_repository_requiring_compile_gets_nothing_slower_than_compile() -> None:
    """``min_speedup_vs_compile``: a winner over eager that compile beats is reported, named as
    slower, and neither suggested nor left for ``/kernelize apply``; the check run is neutral."""
    slower = scale_report(winner(speedup_vs_compile=0.58))
    run = RunReport(device=GPU, modules=[slower], min_speedup_vs_compile=1.0)
    plan = plan_for([slower], min_speedup_vs_compile=1.0)
    assert plan.comments == [] and plan.suggestions == [] and plan.held_back == {}
    targets = [{"path": "models/scale.py", "class_name": "Scale", "start": 21, "end": 34}]
    assert held_suggestions(plan, targets, [slower]) == []
    text = summary_comment(run, [slower], HEAD, plan)
    row = next(line for line in text.splitlines() if line.startswith("| `models/scale.py::Scale`"))
    assert "| correct, held by `min_speedup_vs_compile` |" in row
    assert "2.40x eager, but 0.58x torch.compile" in text
    assert "runs at 1x torch.compile or more" in text and "compiling the model is the faster choice" in text
    out = check_run_output(run, [slower], plan)
    assert (out.conclusion, out.title) == ("neutral", "Nothing to suggest")
    assert "0.58x torch.compile" in out.text

    # Without the requirement the same winner is suggested, its headline saying compile is faster.
    assert len(plan_for([slower]).comments) == 1
    # Fast enough, or nothing to compile instead (compile fails on the original): suggested.
    fails_to_compile = scale_report(winner(speedup_vs_compile=None))
    fails_to_compile.baselines = Baselines(eager_ms=0.12, compile_error="E")
    for report in (scale_report(winner(speedup_vs_compile=1.02)), fails_to_compile):
        assert len(plan_for([report], min_speedup_vs_compile=1.0).comments) == 1
    # Not shown to beat compile (a CPU run, or compile not timed): not suggested.
    untimed = winner(median_ms=None, speedup_vs_eager=None, speedup_vs_compile=None)
    for report, why in (
        (scale_report(untimed), "not timed (no GPU)"),
        (scale_report(winner(speedup_vs_compile=None)), "torch.compile was not timed"),
    ):
        run = RunReport(device=GPU, modules=[report], min_speedup_vs_compile=1.0)
        plan = plan_for([report], min_speedup_vs_compile=1.0)
        assert plan.comments == [] and why in summary_comment(run, [report], HEAD, plan)


def test_cpu_runs_never_praise_speed() -> None:
    best = winner(
        median_ms=None, speedup_vs_eager=None, speedup_vs_compile=None, verdict=Verdict.NOT_MEASURED
    )
    reports = [scale_report(best)]
    run = RunReport(device=CPU, modules=reports)
    plan = plan_for(reports, device=CPU)
    body = plan.comments[0].body
    assert "not measured (no GPU)" in body and "faster" not in body.lower()
    assert "| passed on 3 input shapes | 1.2e-06 | 3.0e-07 | not measured (no GPU) |" in body
    text = summary_comment(run, reports, HEAD, plan)
    assert "not measured (no GPU)" in text and "faster" not in text.lower()
    out = check_run_output(run, reports, plan)
    assert "not measured (no GPU)" in out.summary and "faster" not in (out.summary + out.text).lower()


def test_a_long_candidate_gets_a_compact_table_and_a_huge_one_goes_to_the_summary() -> None:
    long_code = SCALE_CODE + "#" * (COMMENT_LIMIT - len(SCALE_CODE) - 700) + "\n"
    plan = plan_for(
        [scale_report(winner(long_code))], codes={("models/scale.py::Scale", "kernelllm-2"): long_code}
    )
    body = plan.comments[0].body
    assert len(body) <= COMMENT_LIMIT
    assert "| correctness |" not in body and "The summary comment has the details" in body
    assert suggested_code(body) == long_code.removesuffix("\n")

    huge_code = SCALE_CODE + "#" * COMMENT_LIMIT + "\n"
    reports = [scale_report(winner(huge_code))]
    plan = plan_for(reports, codes={("models/scale.py::Scale", "kernelllm-2"): huge_code})
    assert plan.comments == [] and "too long for a GitHub comment" in plan.held_back[reports[0].target].reason
    text = summary_comment(RunReport(device=GPU, modules=reports), reports, HEAD, plan)
    assert len(text) <= COMMENT_LIMIT
    assert "left out to keep this comment within GitHub's limit" in text


def test_a_summary_of_very_many_modules_stays_within_the_limit() -> None:
    reports = [
        ModuleReport(
            target=f"models/m{i}.py::M{i}",
            file=f"models/m{i}.py",
            class_name=f"M{i}",
            candidates=[loser(f"k{j}", Status.ERROR, "Traceback: " + "x" * 400) for j in range(10)],
        )
        for i in range(500)
    ]
    run = RunReport(device=GPU, modules=reports)
    text = summary_comment(run, reports, HEAD, plan_for(reports))
    assert len(text) <= COMMENT_LIMIT and text.startswith(SUMMARY_MARKER)
    assert re.search(r"… and \d+ more modules", text)


def test_check_run_conclusions() -> None:
    run = RunReport(device=GPU, modules=[])
    won = [scale_report()]
    assert check_run_output(run, won, plan_for(won)).conclusion == "success"
    assert check_run_output(run, won, plan_for(won)).title == "1 verified Triton suggestion"
    lost = [
        ModuleReport(
            target="a.py::A", file="a.py", class_name="A", candidates=[loser("k", Status.ERROR, "x")]
        )
    ]
    nothing = check_run_output(run, lost, plan_for(lost))
    assert (nothing.conclusion, nothing.title) == ("neutral", "Nothing to suggest")
    failed = check_run_output(
        run, [], None, error="`.github/kernelize.yml`: line 3: unknown key 'generatorz'"
    )
    assert failed.conclusion == "failure"
    assert "unknown key 'generatorz'" in failed.summary and "could not finish" in failed.summary
    assert failed.as_output() == {"title": failed.title, "summary": failed.summary, "text": failed.text}


def test_check_run_output_fits_the_byte_limit_with_multibyte_text() -> None:
    reason = "différence “non nulle” ≠ 0 — ✗ " * 8  # several bytes a character
    reports = [
        ModuleReport(
            target=f"models/m{i}.py::M{i}",
            file=f"models/m{i}.py",
            class_name=f"M{i}",
            candidates=[loser(f"k{j}", Status.INCORRECT, reason) for j in range(20)],
        )
        for i in range(100)
    ]
    out = check_run_output(RunReport(device=GPU, modules=reports), reports, plan_for(reports))
    for part in (out.summary, out.text):
        assert len(part.encode("utf-8")) <= CHECK_LIMIT and len(part) <= CHECK_LIMIT
    assert len(out.text) < CHECK_LIMIT  # the byte limit, not the character limit, was the one that bit
    assert out.text.endswith("truncated to fit GitHub's limit of 65,535 characters.")
    assert "≠" in out.text  # cut on a character boundary, not inside one


def test_marker_quotes_odd_targets_and_round_trips() -> None:
    marker = suggestion_marker("odd dir/x-->.py::M", HEAD, "ab" * 32)
    assert "odd dir" not in marker and marker.count("-->") == 1
    assert parse_suggestion_marker("text\n" + marker) == ("odd dir/x-->.py::M", HEAD, "ab" * 32)
    assert parse_suggestion_marker("no marker here") is None


def test_the_suggestion_and_the_summary_say_why_other_generators_lost() -> None:
    slower = CandidateResult(
        id="rms_fwd",
        generator="template",
        status=Status.CORRECT,
        median_ms=0.08,
        speedup_vs_eager=1.5,
        verdict=Verdict.FASTER,
    )
    report = scale_report(unavailable={"inductor": "needs a CUDA GPU: Inductor writes ..."})
    report.candidates.append(slower)
    plan = plan_for([report])
    body = plan.comments[0].body
    assert "<details><summary>Why kernelllm's kernel and not another generator's</summary>" in body
    assert "- **template**: verified and faster (1.50x eager), but slower than kernelllm-2 (2.40x)" in body
    assert "- **inductor**: unavailable: needs a CUDA GPU" in body
    nothing = ModuleReport(
        target="models/a.py::A",
        file="models/a.py",
        class_name="A",
        candidates=[
            CandidateResult("template", "template", Status.ERROR, "generator: template: unsupported op")
        ],
        unavailable={"kernelllm": "no weights"},
    )
    text = summary_comment(RunReport(device=GPU, modules=[nothing]), [nothing], HEAD, plan_for([nothing]))
    assert "- **template**: declined: template: unsupported op" in text
    assert "- **kernelllm**: unavailable: no weights" in text


def test_every_surface_ends_with_the_next_steps() -> None:
    reports = [scale_report()]
    plan = plan_for(reports)
    run = RunReport(device=GPU, modules=reports)
    page = "https://kernelize.example/repos/octo/models"
    summary = summary_comment(run, reports, HEAD, plan, page)
    check = check_run_output(run, reports, plan, dashboard=page)
    for text in (summary, check.summary, plan.body):
        assert "`/kernelize` runs again on the latest commit" in text and "`/kernelize cancel`" in text
        assert "`/kernelize help` lists every option" in text
    assert f"[dashboard]({page})" in summary and f"[dashboard]({page})" in check.summary
    assert "dashboard" not in summary_comment(run, reports, HEAD, plan)  # no public address: no link
    # The review's list names both baselines.
    c = reports[0].best_candidate()
    assert c is not None and c.speedup_vs_compile is not None
    assert f"{c.speedup_vs_eager:.2f}x eager, {c.speedup_vs_compile:.2f}x torch.compile" in plan.body


def test_the_evidence_comes_before_the_code() -> None:
    judged = {"families": ["normal", "transposed views", "large magnitudes and outliers"], "skipped": {}}
    best = winner(provenance={"judge": judged}, training="Triton backward (gradients checked)")
    reports = [scale_report(best)]
    body = plan_for(reports).comments[0].body
    table, checked = body.index("| correctness |"), body.index("**Checked:**")
    accepting, code = body.index("Accepting replaces `Scale`"), body.index("```suggestion")
    assert table < checked < accepting < code
    scope = body[checked : body.index("\n", checked)]
    assert "3 input shapes, 3 input families chosen by the judge (normal; transposed views;" in scope
    assert "inference and training (gradients of inputs and parameters), on NVIDIA H200" in scope


# ---------------------------------------------------------------- the check run while modules run


def rows(summary: str) -> dict[str, list[str]]:
    """The progress table: module (without its backticks) -> [state, result]."""
    out = {}
    for line in summary.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            out[cells[0].strip("`")] = cells[1:]
    return out


MIX = [
    ModuleProgress("models/a.py::A", "done", "verified", "", 1.523, 1.104),
    ModuleProgress("models/a.py::B", "running"),
    ModuleProgress("models/b.py::C"),
    ModuleProgress("models/b.py::D", "done", "none_passed", "2 incorrect, 1 error"),
    ModuleProgress("models/c.py::E", "error", note="TimeLimitExceeded: 600 s"),
    ModuleProgress("models/c.py::F", "done", "skipped", "NeedsConfig: add get_inputs() to the file"),
    ModuleProgress("models/c.py::G", "done", "verified"),  # on CPU: correct, not timed
    ModuleProgress("models/d.py::H", "done", "no_faster", "", 0.98, 0.7),
]


def test_progress_names_every_module_with_its_state_and_verdict_so_far() -> None:
    out = check_run_progress(MIX)
    assert out.conclusion is None and out.text == ""
    assert out.title == "Checking 8 modules: 5 done, 1 error, 1 running, 1 queued"
    assert rows(out.summary) == {
        "models/a.py::A": ["done", "verified: 1.52x eager, 1.10x torch.compile"],
        "models/a.py::B": ["running", "generating and verifying candidates"],
        "models/b.py::C": ["queued", "waiting for a GPU worker"],
        "models/b.py::D": ["done", "no correct candidate (2 incorrect, 1 error)"],
        "models/c.py::E": ["error", "TimeLimitExceeded: 600 s"],
        "models/c.py::F": ["done", "skipped: NeedsConfig: add get_inputs() to the file"],
        "models/c.py::G": ["done", "verified (correct; not timed)"],
        "models/d.py::H": ["done", "correct, no faster (0.98x eager)"],
    }
    assert "follow when every module is done" in out.summary
    assert "`/kernelize cancel`" in out.summary
    # Sized for a pull request's page: three short columns.
    assert "| module | state | result |" in out.summary


def test_progress_says_what_is_ahead_on_the_gpu_queue() -> None:
    queued = [ModuleProgress("m.py::A"), ModuleProgress("m.py::B", "running")]
    assert rows(check_run_progress(queued, ahead=(5, 2)).summary)["m.py::A"] == [
        "queued",
        "waiting for a GPU worker; 5 modules of 2 earlier jobs ahead",
    ]
    assert rows(check_run_progress(queued, ahead=(1, 1)).summary)["m.py::A"][1].endswith(
        "; 1 module of 1 earlier job ahead"
    )
    alone = check_run_progress(queued)
    assert rows(alone.summary)["m.py::A"] == ["queued", "waiting for a GPU worker"]
    assert alone.title == "Checking 2 modules: 1 running, 1 queued"


def test_progress_of_a_job_held_by_the_installation_limits() -> None:
    why = "2 Kernelize job(s) are running for this installation (limit 2); this one starts when one finishes"
    out = check_run_progress([ModuleProgress("m.py::A"), ModuleProgress("m.py::B")], waiting=why)
    assert out.title == "Queued: 2 modules, held by the installation's limits"
    assert f"**Queued:** {why}." in out.summary
    assert set(map(tuple, rows(out.summary).values())) == {("queued", "held by the installation's limits")}


def test_progress_of_a_failed_job_says_what_finished_and_what_did_not() -> None:
    error = "Kernelize could not finish: a module's GPU task failed (ChordError: ...)."
    out = check_run_progress([*MIX[:3], MIX[4]], error=error)
    assert (out.conclusion, out.title) == ("failure", "Kernelize failed")
    assert out.summary.startswith(error)
    assert rows(out.summary) == {
        "models/a.py::A": ["done", "verified: 1.52x eager, 1.10x torch.compile"],
        "models/a.py::B": ["stopped", "—"],
        "models/b.py::C": ["not run", "—"],
        "models/c.py::E": ["error", "TimeLimitExceeded: 600 s"],
    }
    assert "follow when every module is done" not in out.summary


def test_progress_cells_cannot_break_the_table_and_the_summary_fits() -> None:
    odd = ModuleProgress("x|y.py::A", "error", note="boom | <b>bold</b>\nsecond line")
    out = check_run_progress([odd])
    [line] = [row for row in out.summary.splitlines() if "y.py::A" in row]
    assert line == "| `x\\|y.py::A` | error | boom \\| &lt;b&gt;bold&lt;/b&gt; second line |"
    many = [
        ModuleProgress(f"models/m{i}.py::{'M' * 200}{i}", "done", "skipped", "r" * 500) for i in range(400)
    ]
    summary = check_run_progress(many).summary
    assert len(summary.encode()) <= CHECK_LIMIT and "truncated" in summary


def test_a_finished_module_is_classified_as_the_final_report_classifies_it() -> None:
    assert module_progress(scale_report()) == ModuleProgress(
        "models/scale.py::Scale", "done", "verified", "", 2.4, 1.9
    )
    lost = ModuleReport(
        target="a.py::A",
        file="a.py",
        class_name="A",
        candidates=[loser("k1", Status.INCORRECT, "x"), loser("k2", Status.INCORRECT, "y")],
    )
    assert module_progress(lost) == ModuleProgress("a.py::A", "done", "none_passed", "2 incorrect")
    skipped = ModuleReport("a.py::B", "a.py", "B", status="skipped", reason="NeedsConfig: no inputs")
    assert (
        module_progress(skipped).case == "skipped"
        and module_progress(skipped).note == "NeedsConfig: no inputs"
    )
    on_cpu = scale_report(
        winner(speedup_vs_eager=None, speedup_vs_compile=None, verdict=Verdict.NOT_MEASURED)
    )
    assert module_progress(on_cpu).case == "verified"
    assert rows(check_run_progress([module_progress(on_cpu)]).summary)["models/scale.py::Scale"] == [
        "done",
        "verified (correct; not timed)",
    ]


def test_progress_only_moves_forward() -> None:
    start = [ModuleProgress("a::A"), ModuleProgress("b::B"), ModuleProgress("c::C")]
    done = ModuleProgress("a::A", "done", "verified", "", 2.0, 1.5)
    now = advance(start, [ModuleProgress("b::B", "running"), done, ModuleProgress("z::Z", "running")])
    assert [p.target for p in now] == ["a::A", "b::B", "c::C"]  # the order kept, strangers ignored
    assert [p.state for p in now] == ["done", "running", "queued"]
    # A start notice after the result, a repeated task, an error after the result: nothing changes.
    late = advance(now, [ModuleProgress("a::A", "running"), ModuleProgress("a::A", "error", note="x")])
    assert late[0] == done
    assert advance(now, [ModuleProgress("b::B", "running")]) == now
