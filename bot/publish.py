"""From engine results to what is posted on a pull request: suggestions, the summary, the check run
(and, while the GPU tasks run, the check run's per-module progress).

Pure functions, no I/O: reports, line ranges and patches in; text and plain
records out. ``bot/flows/publish.py`` hands the results to ``bot/github.py``.

GitHub's limits shape the output (see PITFALLS.md): a comment body holds at
most 65,536 characters, a check run's summary and text 65,535 characters
*and* bytes, and a suggestion can only replace lines inside one diff hunk.
Whatever does not fit a suggestion goes into the summary comment instead.
"""

from __future__ import annotations

import functools
import hashlib
import re
import urllib.parse
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jinja2

from runners.render import environment
from runners.results import (
    DEFAULT_MIN_SPEEDUP,
    CandidateResult,
    DeviceInfo,
    ModuleReport,
    RunReport,
    Status,
    held_for_compile,
)

COMMENT_LIMIT = 65_536  # characters in an issue, review or review-comment body
CHECK_LIMIT = 65_535  # characters and bytes in a check run's output.summary / output.text
SUMMARY_MARKER = "<!-- kernelize:summary -->"
_MARKER_RE = re.compile(
    r"<!-- kernelize:suggestion target=(\S+) sha=([0-9a-fA-F]+) candidate=([0-9a-f]+) -->"
)
_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")

Sources = Mapping[str, Mapping[str, tuple[int, int]]]  # path -> class name -> (first line, last line)


@dataclass(frozen=True)
class ReviewComment:
    """One line comment of a review, on the RIGHT (new) side of the diff."""

    path: str
    line: int  # last line the comment covers
    start_line: int | None  # first line, strictly before ``line``; None for a one-line comment
    body: str


@dataclass(frozen=True)
class SuggestedChange:
    """The change one suggestion proposes: a candidate's verified code for these lines of a file.
    A suggestion comment carries it (``marker`` finds the comment), or the summary shows it (held
    back from the review: no marker). What is stored of it is a ``bot.models.Suggestion`` row."""

    target: str
    path: str
    start_line: int
    end_line: int
    candidate_id: str
    generator: str
    source_sha256: str
    marker: str


@dataclass(frozen=True)
class HeldBack:
    """A winning candidate that could not be a suggestion: why, and its code for the summary."""

    reason: str
    code: str | None


@dataclass
class ReviewPlan:
    """One review: its body and one suggestion comment per winning module (``suggestions[i]`` is
    ``comments[i]``). ``summary_only`` lists the winners shown in the summary comment instead, with
    ``held_back[target]`` saying why. Post no review when ``comments`` is empty."""

    body: str
    comments: list[ReviewComment]
    summary_only: list[str]
    suggestions: list[SuggestedChange] = field(default_factory=list)
    held_back: dict[str, HeldBack] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckOutput:
    """A check run's ``output`` object as GitHub takes it, and its ``conclusion``."""

    title: str
    summary: str
    text: str  # empty while modules still run: the full report comes with the conclusion
    conclusion: str | None  # "success", "neutral" or "failure"; None while in progress

    def as_output(self) -> dict[str, str]:
        return {"title": self.title, "summary": self.summary, "text": self.text}


@dataclass(frozen=True)
class ModuleProgress:
    """One module of a running job, as its check run shows it meanwhile. Plain values: the job
    keeps them in the database (``Job.progress``) between the updates of its GPU tasks."""

    target: str
    state: str = "queued"  # queued | running | done | error
    # done: verified | no_faster | none_passed | no_candidates | not_timed | skipped | kernelized
    case: str = ""
    note: str = ""  # error: what went wrong; done: the candidates' counts, or why it was skipped
    speedup_eager: float | None = None  # done: the winner's, else the fastest correct candidate's
    speedup_compile: float | None = None


# How far along a module is: news that is not further along (a start notice that arrives after the
# result, a task delivered again) changes nothing. Done and error are both the end.
PROGRESS_RANK = {"queued": 0, "running": 1, "done": 2, "error": 2}


# ---------------------------------------------------------------- diffs, anchors, fences


def right_hunks(patch: str) -> list[tuple[int, int]]:
    """The new-file line range (first, last) each hunk of a unified diff covers: context and added lines.

    A hunk that only deletes covers no new-file line and is left out. Lines are counted with the
    hunk header's lengths, so a context line whose leading space was stripped still counts, and
    ``\\ No newline at end of file`` counts for nothing.
    """
    ranges: list[tuple[int, int]] = []
    old_left = new_left = 0
    line = first = last = 0

    def close() -> None:
        if last >= first > 0:
            ranges.append((first, last))

    for text in patch.splitlines():
        header = _HUNK_RE.match(text)
        if header is not None:
            close()
            old_left = int(header.group(2) or "1")
            new_left = int(header.group(4) or "1")
            line = int(header.group(3))
            first, last = line, line - 1
            continue
        if old_left <= 0 and new_left <= 0:
            continue  # outside a hunk (a "diff --git" preamble, trailing text)
        if text.startswith("\\"):
            continue
        if text.startswith("-"):
            old_left -= 1
        elif text.startswith("+"):
            new_left -= 1
            last = line
            line += 1
        else:  # context, possibly with its leading space stripped
            old_left -= 1
            new_left -= 1
            last = line
            line += 1
    close()
    return ranges


def suggestion_anchor(
    class_start: int, class_end: int, hunks: Sequence[tuple[int, int]]
) -> tuple[int, int] | None:
    """``(class_start, class_end)`` when the class lies wholly inside one hunk, else None.

    GitHub anchors a multi-line comment only on lines of one hunk ("must be part of the diff"), and a
    suggestion replaces exactly the lines it is anchored on.
    """
    if class_start > class_end:
        return None
    for first, last in hunks:
        if first <= class_start and class_end <= last:
            return (class_start, class_end)
    return None


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


def fence(code: str, info: str = "suggestion") -> str:
    """``code`` in a fenced block (```` ```suggestion ```` by default), the fence one backtick longer
    than the longest backtick run in the code (at least three), so the code cannot close it.

    One trailing newline belongs to the last line, not to the content: it is not repeated.
    """
    ticks = "`" * max(3, _longest_backtick_run(code) + 1)
    body = code[:-1] if code.endswith("\n") else code
    return f"{ticks}{info}\n{body}\n{ticks}"


def suggestion_marker(target: str, head_sha: str, source_sha256: str) -> str:
    """The hidden fingerprint on each suggestion comment: re-runs find what they already posted."""
    return (
        f"<!-- kernelize:suggestion target={urllib.parse.quote(target, safe='/:')} "
        f"sha={head_sha} candidate={source_sha256} -->"
    )


def parse_suggestion_marker(body: str) -> tuple[str, str, str] | None:
    """(target, head sha, candidate sha256) from a comment body carrying a suggestion marker."""
    found = _MARKER_RE.search(body)
    if found is None:
        return None
    return urllib.parse.unquote(found.group(1)), found.group(2), found.group(3)


# ---------------------------------------------------------------- rendering helpers


def _cell(value: object, limit: int = 300) -> str:
    """Text made safe for one markdown table cell: one line, no pipes, no HTML, bounded length."""
    text = " ".join(str(value).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _code(text: str) -> str:
    """Inline code that survives backticks in ``text``."""
    ticks = "`" * (_longest_backtick_run(text) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


@functools.cache
def _env() -> jinja2.Environment:
    env = environment()
    env.filters["cell"] = _cell
    env.filters["code"] = _code
    env.filters["fence"] = fence
    env.filters["plural"] = _plural
    return env


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _render(name: str, **context: object) -> str:
    return _env().get_template(name).render(**context).strip() + "\n"


def _tidy_render(name: str, **context: object) -> str:
    return _tidy(_render(name, **context))


_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _tidy(markdown: str) -> str:
    """Runs of blank lines squeezed to one, outside fenced code only: code keeps every line it has."""
    out: list[str] = []
    closing: str | None = None  # the fence that closes the open code block
    for line in markdown.split("\n"):
        found = _FENCE_RE.match(line)
        if closing is None:
            if found:
                closing = found.group(1)
            elif not line.strip() and out and not out[-1].strip():
                continue
        elif found and len(found.group(1)) >= len(closing) and not line.strip().strip(closing[0]):
            closing = None  # only the same character, at least as many, and nothing else closes it
        out.append(line)
    return "\n".join(out)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _clip(text: str, limit: int, what: str) -> str:
    """``text`` cut at a line boundary to at most ``limit`` characters and UTF-8 bytes, with a note."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    note = f"\n\n… {what} truncated to fit GitHub's limit of {limit:,} characters."
    room = limit - len(note.encode("utf-8"))
    head = data[:room].decode("utf-8", errors="ignore")
    cut = head.rfind("\n")
    return (head[:cut] if cut > 0 else head) + note


# ---------------------------------------------------------------- the review


def plan_review(
    reports: Sequence[ModuleReport],
    sources: Sources,
    patches: Mapping[str, str | None],
    candidate_sources: Mapping[tuple[str, str], str],
    head_sha: str,
    *,
    device: DeviceInfo,
    min_speedup: float = DEFAULT_MIN_SPEEDUP,
    summary_only: bool = False,
    min_speedup_vs_compile: float | None = None,
) -> ReviewPlan:
    """One suggestion comment per module with a best candidate, replacing the class's lines at
    ``head_sha`` with the candidate's code exactly as verified.

    ``sources[path][class_name]`` is the class's (first, last) line at the head; ``patches[path]`` the
    file's diff in the pull request (None when GitHub shows none); ``candidate_sources[(target, id)]``
    the verified code. A winner that cannot be a suggestion (class outside one hunk, file not in the
    diff, code that no longer matches its checksum, a body over GitHub's limit) is ``summary_only``.
    One slower than the repository's ``min_speedup_vs_compile`` asks is neither: the summary says
    torch.compile is the faster choice, and ``/kernelize apply`` finds nothing to apply.
    """
    comments: list[ReviewComment] = []
    suggestions: list[SuggestedChange] = []
    held: dict[str, HeldBack] = {}
    for m in reports:
        best = m.best_candidate()
        if best is None or held_for_compile(m, min_speedup_vs_compile) is not None:
            continue
        code = candidate_sources.get((m.target, best.id))
        if code is None:
            held[m.target] = HeldBack(f"the code of candidate `{best.id}` was not available to post", None)
            continue
        digest = _sha256(code)
        if best.source_sha256 and best.source_sha256 != digest:
            held[m.target] = HeldBack(
                f"the code on hand (sha256 {digest[:12]}) is not the code that was verified "
                f"(sha256 {best.source_sha256[:12]}), so it is not offered",
                None,
            )
            continue
        if summary_only:
            held[m.target] = HeldBack(
                "the repository asks for summaries only (`comment.mode: summary-only`)", code
            )
            continue
        lines = sources.get(m.file, {}).get(m.class_name)
        patch = patches.get(m.file)
        if lines is None:
            held[m.target] = HeldBack(
                f"`{m.class_name}` was not found in `{m.file}` at {head_sha[:12]}", code
            )
            continue
        if not patch:  # GitHub gives no patch for binary and very large diffs
            why = (
                "is not part of this pull request's diff"
                if m.file not in patches
                else "has no diff GitHub shows (too large)"
            )
            held[m.target] = HeldBack(f"`{m.file}` {why}, so no line can carry a suggestion", code)
            continue
        anchor = suggestion_anchor(lines[0], lines[1], right_hunks(patch))
        if anchor is None:
            held[m.target] = HeldBack(
                f"`{m.class_name}` (lines {lines[0]}–{lines[1]}) is not inside one hunk of the diff, "
                "and GitHub only takes a suggestion on lines of one hunk",
                code,
            )
            continue
        marker = suggestion_marker(m.target, head_sha, digest)
        body = _suggestion_body(m, best, code, marker, device, min_speedup)
        if body is None:
            held[m.target] = HeldBack(
                f"the code ({len(code):,} characters) is too long for a GitHub comment "
                f"({COMMENT_LIMIT:,} characters at most)",
                code,
            )
            continue
        start, end = anchor
        comments.append(ReviewComment(m.file, end, start if start < end else None, body))
        suggestions.append(
            SuggestedChange(m.target, m.file, start, end, best.id, best.generator, digest, marker)
        )
    review_body = _tidy_render(
        "comments/review.md.j2",
        suggestions=suggestions,
        reports={m.target: m for m in reports},
        held_back=held,
        head_sha=head_sha,
        cpu=device.kind != "cuda",
    )
    return ReviewPlan(
        body=_clip(review_body, COMMENT_LIMIT, "review"),
        comments=comments,
        summary_only=list(held),
        suggestions=suggestions,
        held_back=held,
    )


def held_suggestions(
    plan: ReviewPlan, targets: Sequence[Mapping[str, Any]], reports: Sequence[ModuleReport]
) -> list[SuggestedChange]:
    """The winners held back from the review whose verified code the summary shows, as suggestions of
    their class's lines (``targets``: the planned classes with their first and last line): what
    ``/kernelize apply`` can commit. No marker: no review comment carries them."""
    lines = {f"{t['path']}::{t['class_name']}": (t["start"], t["end"]) for t in targets}
    out = []
    for m in reports:
        held, best = plan.held_back.get(m.target), m.best_candidate()
        if held is None or held.code is None or best is None or m.target not in lines:
            continue
        start, end = lines[m.target]
        digest = _sha256(held.code)
        out.append(SuggestedChange(m.target, m.file, start, end, best.id, best.generator, digest, ""))
    return out


def _suggestion_body(
    m: ModuleReport,
    best: CandidateResult,
    code: str,
    marker: str,
    device: DeviceInfo,
    min_speedup: float,
) -> str | None:
    """The full comment, or a compact one (the table reduced to a line) when that is too long, or None."""
    for compact in (False, True):
        body = _render(
            "comments/suggestion.md.j2",
            marker=marker,
            m=m,
            c=best,
            suggestion=fence(code),
            device=device,
            cpu=device.kind != "cuda",
            min_speedup=min_speedup,
            compact=compact,
        )
        if len(body) <= COMMENT_LIMIT:
            return body
    return None


# ---------------------------------------------------------------- the summary and the check run


@dataclass(frozen=True)
class _ModuleView:
    """A module as the summary and the check run describe it."""

    m: ModuleReport
    # suggested | summary_only | compile_faster | skipped | kernelized | no_candidates | none_passed |
    # no_faster | not_timed
    case: str
    shown: CandidateResult | None  # the best, or the fastest correct candidate when none won
    counts: str  # "2 incorrect, 1 crashed"
    held: HeldBack | None


def _views(
    reports: Sequence[ModuleReport], plan: ReviewPlan | None, min_speedup_vs_compile: float | None = None
) -> list[_ModuleView]:
    posted = {s.target for s in plan.suggestions} if plan else set()
    held_back = plan.held_back if plan else {}
    views = []
    for m in reports:
        correct = [c for c in m.candidates if c.status is Status.CORRECT]
        timed = sorted((c for c in correct if c.median_ms is not None), key=lambda c: c.median_ms or 0.0)
        best = m.best_candidate()
        shown = best or (timed[0] if timed else (correct[0] if correct else None))
        counts = ", ".join(
            f"{n} {status.value}" for status, n in Counter(c.status for c in m.candidates).items()
        )
        held = held_back.get(m.target)
        slower = held_for_compile(m, min_speedup_vs_compile)
        if m.status in ("skipped", "kernelized"):
            case = m.status
        elif slower is not None:
            case, held = "compile_faster", HeldBack(slower, None)
        elif m.target in posted:
            case = "suggested"
        elif best is not None:
            case = "summary_only"
            held = held or HeldBack("it was not part of this review", None)
        elif not m.candidates:
            case = "no_candidates"
        elif not correct:
            case = "none_passed"
        elif timed:
            case = "no_faster"
        else:
            case = "not_timed"
        views.append(_ModuleView(m, case, shown, counts, held))
    return views


def summary_comment(
    run: RunReport,
    reports: Sequence[ModuleReport],
    head_sha: str,
    plan: ReviewPlan | None,
    dashboard: str | None = None,
) -> str:
    """The sticky summary comment (find it again by ``SUMMARY_MARKER``), at most 65,536 characters.

    When everything does not fit, detail goes first (candidate lists, then code, then snippets), then
    modules are left out of the table with a count, and the check run keeps the rest.
    """
    views = _views(reports, plan, run.min_speedup_vs_compile)
    levels = [  # from everything to the least detail
        _Detail(max_candidates=20, reason_chars=300, show_code=True, show_snippets=True),
        _Detail(max_candidates=3, reason_chars=120, show_code=True, show_snippets=True),
        _Detail(max_candidates=3, reason_chars=120, show_code=False, show_snippets=True),
        _Detail(max_candidates=0, reason_chars=80, show_code=False, show_snippets=False),
    ]
    body = ""
    for level in levels:
        body = _summary(run, views, head_sha, plan, len(views), level, dashboard)
        if len(body) <= COMMENT_LIMIT:
            return body
    shown = len(views)
    while shown > 1 and len(body) > COMMENT_LIMIT:
        shown //= 2
        body = _summary(run, views, head_sha, plan, shown, levels[-1], dashboard)
    return _clip(body, COMMENT_LIMIT, "summary")


class _Detail(NamedTuple):
    """How much the summary shows of each module."""

    max_candidates: int
    reason_chars: int
    show_code: bool
    show_snippets: bool


def _summary(
    run: RunReport,
    views: list[_ModuleView],
    head_sha: str,
    plan: ReviewPlan | None,
    max_modules: int,
    detail: _Detail,
    dashboard: str | None,
) -> str:
    return _tidy_render(
        "comments/summary.md.j2",
        marker=SUMMARY_MARKER,
        head_sha=head_sha,
        device=run.device,
        cpu=run.device.kind != "cuda",
        min_speedup=run.min_speedup,
        views=views[:max_modules],
        total=len(views),
        left_out=len(views) - min(max_modules, len(views)),
        posted=len(plan.comments) if plan else 0,
        in_summary=len(plan.summary_only) if plan else 0,
        dashboard=dashboard,
        **detail._asdict(),
    )


def check_run_output(
    run: RunReport,
    reports: Sequence[ModuleReport],
    plan: ReviewPlan | None,
    error: str | None = None,
    dashboard: str | None = None,
) -> CheckOutput:
    """The completed check run.

    ``conclusion``: "failure" when ``error`` (a configuration or infrastructure problem, shown
    first) is given; "success" when at least one suggestion was posted (as a review comment or in
    the summary comment); "neutral" when there is nothing to suggest, which is not a failure of the
    pull request. ``summary`` and ``text`` fit GitHub's 65,535 characters and bytes.
    """
    views = _views(reports, plan, run.min_speedup_vs_compile)
    suggested = (len(plan.comments) + len(plan.summary_only)) if plan else 0
    if error is not None:
        conclusion, title = "failure", "Kernelize could not finish"
    elif suggested:
        conclusion = "success"
        title = f"{suggested} verified Triton suggestion" + ("" if suggested == 1 else "s")
    else:
        conclusion, title = "neutral", "Nothing to suggest"
    context = {
        "error": error,
        "device": run.device,
        "cpu": run.device.kind != "cuda",
        "min_speedup": run.min_speedup,
        "views": views,
        "posted": len(plan.comments) if plan else 0,
        "in_summary": len(plan.summary_only) if plan else 0,
        "reason_chars": 300,
        "dashboard": dashboard,
    }
    summary = _tidy_render("checks/output.md.j2", part="summary", **context)
    text = _tidy_render("checks/output.md.j2", part="text", **context)
    return CheckOutput(
        title=title,
        summary=_clip(summary, CHECK_LIMIT, "summary"),
        text=_clip(text, CHECK_LIMIT, "report"),
        conclusion=conclusion,
    )


# ---------------------------------------------------------------- the check run while modules run


def module_progress(m: ModuleReport) -> ModuleProgress:
    """A finished module, classified as the final report will classify it (before any review: a
    winner is "verified")."""
    [v] = _views([m], None)
    case = "verified" if v.case == "summary_only" else v.case
    note = v.counts if case == "none_passed" else m.reason if case in ("skipped", "no_candidates") else ""
    c = v.shown
    return ModuleProgress(
        m.target,
        "done",
        case,
        note,
        c.speedup_vs_eager if c else None,
        c.speedup_vs_compile if c else None,
    )


def advance(modules: Sequence[ModuleProgress], updates: Sequence[ModuleProgress]) -> list[ModuleProgress]:
    """``modules`` (in their order) with each update that moves its module further along
    (:data:`PROGRESS_RANK`); updates for other targets are ignored."""
    latest = {p.target: p for p in modules}
    for u in updates:
        now = latest.get(u.target)
        if now is not None and PROGRESS_RANK[u.state] > PROGRESS_RANK[now.state]:
            latest[u.target] = u
    return list(latest.values())


def check_run_progress(
    modules: Sequence[ModuleProgress],
    *,
    waiting: str | None = None,
    ahead: tuple[int, int] = (0, 0),
    error: str | None = None,
    dashboard: str | None = None,
) -> CheckOutput:
    """The check run before the results are published, from the template of :func:`check_run_output`:
    every module with its state, and a finished one with its outcome so far. ``conclusion`` is None.

    ``waiting``: why the whole job waits (the installation's limits: ``bot/jobs.py`` ``wait_reason``);
    ``ahead``: (modules, jobs) that reached the GPU queue before this job and have not finished, told
    to the queued ones; ``error``: the job failed (``conclusion`` "failure"), said first, and the
    modules that had not finished say so."""
    counts = Counter(p.state for p in modules)
    conclusion = None
    if error is not None:
        title, conclusion = "Kernelize failed", "failure"
    elif waiting:
        title = f"Queued: {_plural(len(modules), 'module')}, held by the installation's limits"
    else:
        states = ", ".join(f"{counts[s]} {s}" for s in ("done", "error", "running", "queued") if counts[s])
        title = f"Checking {_plural(len(modules), 'module')}" + (f": {states}" if states else "")
    summary = _tidy_render(
        "checks/output.md.j2",
        part="progress",
        modules=modules,
        waiting=waiting,
        ahead_modules=ahead[0],
        ahead_jobs=ahead[1],
        error=error,
        dashboard=dashboard,
    )
    return CheckOutput(title, _clip(summary, CHECK_LIMIT, "summary"), "", conclusion)


__all__ = [
    "CHECK_LIMIT",
    "COMMENT_LIMIT",
    "PROGRESS_RANK",
    "SUMMARY_MARKER",
    "CheckOutput",
    "HeldBack",
    "ModuleProgress",
    "ReviewComment",
    "ReviewPlan",
    "SuggestedChange",
    "advance",
    "check_run_output",
    "check_run_progress",
    "fence",
    "module_progress",
    "parse_suggestion_marker",
    "plan_review",
    "right_hunks",
    "suggestion_anchor",
    "suggestion_marker",
    "summary_comment",
]
