"""Publishing: the GPU tasks' results become one review with suggested changes, the sticky
summary comment and the check run's verdict (``bot/publish.py`` renders them); each suggestion is
recorded for tracking. Earlier reviews are marked outdated, or applied."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import update
from sqlalchemy.exc import SQLAlchemyError

from bot import planning, publish, tracking
from bot.flows.common import Services, dashboard_url, exception_line, finish, react, tell
from bot.flows.progress import job_progress
from bot.github import GitHubError, LineComment, RepoClient
from bot.models import Job
from runners.messages import ModuleResult, PublishContext
from runners.results import CandidateResult, DeviceInfo, MessageError, ModuleReport, RunReport

log = logging.getLogger(__name__)
OUTDATED_MARKER = "<!-- kernelize:outdated -->"
APPLIED_MARKER = "<!-- kernelize:applied -->"


# ---------------------------------------------------------------------------
# Decisions (pure)


def review_marker(key: str) -> str:
    """The hidden line that names the run a review belongs to (its idempotency key)."""
    return f"<!-- kernelize:review key={key} -->"


def should_post_review(plan: publish.ReviewPlan, bodies: Sequence[str], marker: str) -> bool:
    """A review when it has comments and none of ours carries its marker: a redelivered publish
    never posts the same review twice."""
    return bool(plan.comments) and not any(marker in body for body in bodies)


def should_speak(
    winners: dict[tuple[str, str], str], when_nothing_found: str, comment_id: int | None
) -> bool:
    """Whether the summary comment may be created: with something found, when the repository asks
    for a summary regardless, or for a command (it gets its answer). An earlier summary is brought
    up to date either way."""
    return bool(winners) or when_nothing_found == "summary" or comment_id is not None


def is_stale_review(body: str, commit_id: str, head_sha: str) -> bool:
    """One of our reviews, for another sha, not yet marked outdated or applied."""
    return not (
        commit_id == head_sha
        or OUTDATED_MARKER in body
        or APPLIED_MARKER in body
        or "kernelize:review" not in body
    )


def outdated_note(commit_id: str, head_sha: str) -> str:
    return (
        f"**Outdated:** this review was for `{commit_id[:7]}`; the pull request has moved on to "
        f"`{head_sha[:7]}`, and Kernelize's summary comment has the current results."
    )


def review_after(kinds: set[str], note: str, head_sha: str, body: str) -> str:
    """A stale review's new body, from what became of its suggestion comments (``kinds``:
    ``applied``, ``outdated``): all applied says so first; otherwise it is outdated, naming those
    applied."""
    if kinds == {"applied"}:
        head = f"**Applied ✓:** this review's suggestions are in the pull request (`{head_sha[:7]}`)."
        return f"{head}\n{APPLIED_MARKER}\n\n{body}"
    if "applied" in kinds:
        note += " Its suggestions marked **Applied ✓** are in the pull request."
    return f"{note}\n{OUTDATED_MARKER}\n\n{body}"


def as_applied(body: str, sha: str) -> str:
    """A suggestion comment once applied: its evidence kept, its code no longer a suggestion
    (nothing to apply twice), and a line saying so first."""
    kept = body.replace("```suggestion", "```python")
    where = f" in `{sha[:7]}`" if sha else ""
    head = f"**Applied ✓**{where}: this code is in the pull request now. What it was verified as:"
    return f"{head}\n\n{kept}\n{APPLIED_MARKER}"


def kernelized_report(k: dict[str, Any]) -> ModuleReport:
    """An applied suggestion, unchanged in the file: what it was verified as."""
    path, _, cls = k["target"].rpartition("::")
    speed = ", ".join(
        f"{v:.2f}x {name}"
        for name, v in (("eager", k.get("speedup_eager")), ("torch.compile", k.get("speedup_compile")))
        if v is not None
    )
    where = f" on {k['gpu']}" if k.get("gpu") else ""
    evidence = f"; {speed}{where}" if speed else where
    applied = f" in `{k['applied_sha'][:7]}`" if k.get("applied_sha") else ""
    link = f" ([the suggestion]({k['comment_url']}))" if k.get("comment_url") else ""
    report = ModuleReport(target=k["target"], file=path, class_name=cls, status="kernelized")
    report.reason = (
        f"Already kernelized ✓: Kernelize's suggestion, applied{applied}, is in the file unchanged"
        f"{link}. It was verified on `{k['verified_sha'][:7]}`{evidence}; not run again"
    )
    return report


def _ms(c: CandidateResult, name: str) -> float | None:
    timing = c.timings.get(name)
    return timing.median_ms if timing is not None else None


def suggestion_row(
    context: PublishContext,
    sug: publish.SuggestedChange,
    module: ModuleReport,
    best: CandidateResult,
    code: str,
    device: DeviceInfo,
    review_id: int | None,
    line: LineComment | None,
) -> dict[str, Any]:
    """What is stored of one suggestion (``bot.models.Suggestion``): where it is, the code and
    the evidence it was verified with."""
    originals = {f"{t['path']}::{t['class_name']}": t.get("original_sha256", "") for t in context.targets}
    return {
        "installation_id": context.installation_id,
        "repository": f"{context.owner}/{context.repo}",
        "private": context.private,
        "pull_number": context.number,
        "head_sha": context.head_sha,
        "path": sug.path,
        "start_line": sug.start_line,
        "end_line": sug.end_line,
        "class_name": module.class_name,
        "target": sug.target,
        "generator": sug.generator,
        "candidate_id": sug.candidate_id,
        "code": code,
        "code_sha256": sug.source_sha256,
        "original_sha256": originals.get(sug.target, ""),
        "max_abs_error": best.max_abs_error,
        "eager_ms": _ms(best, "eager"),
        "compile_ms": _ms(best, "compile"),
        "kernel_ms": best.median_ms,
        "speedup_eager": best.speedup_vs_eager,
        "speedup_compile": best.speedup_vs_compile,
        "gpu": device.name[:200],
        "review_id": review_id,
        "comment_id": line.id if line else None,
        "comment_url": line.html_url[:500] if line else "",
    }


# ---------------------------------------------------------------------------
# The flow


def publish_pull_request(
    svc: Services, results: list[dict[str, Any]], context: PublishContext
) -> dict[str, Any]:
    """The chord's end: ``results``, one :class:`ModuleResult` per GPU task in the order they were
    sent, become the review, the summary comment and the check run's verdict. A result this worker
    cannot read fails the job as a failed task does (:func:`publish_failed`), with its reason."""
    github, number, head_sha = svc.github, context.number, context.head_sha
    read, refused = _read_results(svc, results, context.job_id)
    if refused:
        task_id, why = next(iter(refused.items()))
        return publish_failed(svc, task_id, context, why, refused)
    reports = [m for r in read for m in r.modules]
    gpu_seconds = sum(c.wall_s or 0.0 for m in reports for c in m.candidates)
    job_id = context.job_id
    if job_id is not None and finish(svc.sessions, job_id, "done", gpu_seconds=gpu_seconds) == "cancelled":
        return {"cancelled": True}
    reports += planning.over_limit(context.over, context.max_modules)
    reports += [kernelized_report(k) for k in context.kernelized]
    device = read[0].device if read else DeviceInfo("cpu", "unknown", "", "")
    run = RunReport(
        device=device,
        modules=reports,
        min_speedup=context.min_speedup,
        min_speedup_vs_compile=context.min_speedup_vs_compile,
    )
    plan, winners = planning.review(
        reports,
        context.targets,
        context.patches,
        head_sha,
        device=device,
        min_speedup=run.min_speedup,
        summary_only=context.mode == "summary-only",
        min_speedup_vs_compile=run.min_speedup_vs_compile,
    )
    mark_outdated(svc, number, head_sha)
    review_id = None
    marker = review_marker(context.key)
    if should_post_review(plan, github.review_bodies(number), marker):
        review_id = github.create_review(number, head_sha, f"{plan.body}\n{marker}", plan.comments, marker)
    if plan.suggestions or plan.held_back:
        _record_suggestions(svc, context, plan, reports, winners, device, marker)
    dashboard = dashboard_url(svc.settings, github.full_name)
    summary = publish.summary_comment(run, reports, head_sha, plan, dashboard)
    speak = should_speak(winners, context.when_nothing_found, context.comment_id)
    summary_id = github.upsert_comment(number, publish.SUMMARY_MARKER, summary, create=speak)
    out = publish.check_run_output(run, reports, plan, dashboard=dashboard)
    complete_check_run(svc, context, out)
    react(github, context.comment_id, "rocket")
    return {"review_id": review_id, "summary_comment_id": summary_id, "conclusion": out.conclusion}


def publish_failed(
    svc: Services,
    failed_task_id: str,
    context: PublishContext,
    why: str,
    task_errors: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A module's task failed, so the chord never publishes: the job ends failed, the check run is
    completed with the reason and each module's state (``task_errors``: the failed GPU tasks' ids →
    what each raised), and a command gets its answer. Idempotent (a repeated call finds the job
    ended and the check run completed, and says so again)."""
    detail = f"a module's GPU task failed ({why}); no results were published"[:1000]
    job_id = context.job_id
    if job_id is not None and finish(svc.sessions, job_id, "failed", detail=detail) == "cancelled":
        return {"cancelled": True}
    summary = (
        f"Kernelize could not finish: {detail}. Task `{failed_task_id}`. "
        "Comment `/kernelize` on the pull request to run it again."
    )
    modules, tasks = job_progress(svc.sessions, job_id)
    failed = [
        publish.ModuleProgress(target, "error", note=error)
        for task_id, error in (task_errors or {}).items()
        for target in tasks.get(task_id, [])
    ]
    modules = publish.advance(modules, failed)
    dashboard = dashboard_url(svc.settings, svc.github.full_name)
    out = publish.check_run_progress(modules, error=summary[:60000], dashboard=dashboard)
    complete_check_run(svc, context, out)
    tell(svc.github, context.number, context.comment_id, summary, failed=True)
    return {"failed": detail}


def _read_results(
    svc: Services, results: Sequence[dict[str, Any]], job_id: int | None
) -> tuple[list[ModuleResult], dict[str, str]]:
    """The GPU tasks' results (in the order the tasks were sent), read; and those refused, by the
    task's id (its place when the job does not list it): the reason, as a failed task's error reads."""
    read, refused = [], {}
    for i, result in enumerate(results):
        try:
            read.append(ModuleResult.from_dict(result))
        except MessageError as exc:
            refused[i] = exception_line(exc)
    if not refused:
        return read, {}
    ids: list[str] = []
    if job_id is not None:
        with svc.sessions() as session:
            job = session.get(Job, job_id)
            ids = list(job.task_ids or []) if job is not None else []
    return read, {ids[i] if i < len(ids) else f"result {i + 1}": why for i, why in refused.items()}


def complete_check_run(svc: Services, context: PublishContext, out: publish.CheckOutput) -> None:
    """Complete the job's check run with ``out``, kept with the job first: a progress update that
    reaches GitHub after this one is followed by it again (``bot/flows/progress.py``)."""
    job_id, output = context.job_id, out.as_output()
    if job_id is not None:
        with svc.sessions() as session, session.begin():
            final = {"conclusion": out.conclusion, "output": output}
            session.execute(update(Job).where(Job.id == job_id).values(check_final=final))
    svc.github.update_check_run(context.check_run_id, conclusion=out.conclusion, output=output)


def mark_outdated(svc: Services, number: int, head_sha: str) -> int:
    """Our reviews for other shas: a suggestion that was applied says so and keeps its evidence; the
    others lose their code (so nobody applies stale code). Returns how many reviews were marked."""
    github = svc.github
    marked = 0
    applied: dict[int, str] | None = None
    for review in github.reviews(number):
        if not is_stale_review(review.body, review.commit_id, head_sha):
            continue
        if applied is None:
            applied = _applied_comments(svc, number)
        note = outdated_note(review.commit_id, head_sha)
        kinds = _mark_lines(github, number, review.id, applied, note)
        github.update_review(number, review.id, review_after(kinds, note, head_sha, review.body))
        marked += 1
    return marked


def _mark_lines(
    github: RepoClient, number: int, review_id: int, applied: dict[int, str], note: str
) -> set[str]:
    """Each suggestion comment of a stale review marked applied (by the sha that applied it) or
    outdated; which kinds there were."""
    kinds = set()
    for line in github.review_comments(number, review_id):
        if "```suggestion" not in line.body or OUTDATED_MARKER in line.body:
            continue
        if line.id in applied:
            github.edit_review_comment(line.id, as_applied(line.body, applied[line.id]))
            kinds.add("applied")
        else:
            github.edit_review_comment(line.id, f"{note}\n{OUTDATED_MARKER}")
            kinds.add("outdated")
    return kinds


def _applied_comments(svc: Services, number: int) -> dict[int, str]:
    """Review comment id → the sha that applied it, for this PR's applied (or merged) suggestions."""
    repository = svc.github.full_name
    try:
        with svc.sessions() as session:
            found = tracking.applied_comments(session, repository, number)
    except SQLAlchemyError as exc:
        log.error("could not look up applied suggestions of %s#%d: %s", repository, number, exc)
        return {}
    return found


def _record_suggestions(
    svc: Services,
    context: PublishContext,
    plan: publish.ReviewPlan,
    reports: Sequence[ModuleReport],
    winners: dict[tuple[str, str], str],
    device: DeviceInfo,
    marker: str,
) -> None:
    """Store what the review suggested, and the verified code the summary shows instead (held back
    from the review: ``/kernelize apply`` can commit it), for tracking; a failure here never blocks
    the results."""
    github, number = svc.github, context.number
    try:
        review = next((r for r in github.reviews(number) if marker in r.body), None)
        lines = github.review_comments(number, review.id) if review else []
        modules = {m.target: m for m in reports}
        offered = [(sug, next((c for c in lines if sug.marker in c.body), None)) for sug in plan.suggestions]
        offered += [(sug, None) for sug in publish.held_suggestions(plan, context.targets, reports)]
        rows = []
        for sug, line in offered:
            m = modules[sug.target]
            best = m.best_candidate()
            code = winners.get((sug.target, sug.candidate_id))
            if best is None or code is None:
                continue
            review_id = review.id if review else None
            rows.append(suggestion_row(context, sug, m, best, code, device, review_id, line))
        with svc.sessions() as session, session.begin():
            tracking.record_posted(session, rows)
    except (GitHubError, SQLAlchemyError) as exc:
        log.error("could not record the suggestions of %s#%d: %s", github.full_name, number, exc)
