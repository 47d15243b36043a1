"""The GitHub-side Celery tasks: plan a pull request, answer commands, publish what the GPUs found.

``plan_pull_request`` (queue ``github``) reads the pull request and the
repository config (from the default branch), decides whether it may run and
what, maps the diff to the ``nn.Module`` classes it touches, packs the
repository's Python into a bundle and fans out one ``kernelize_file`` task
per changed file to the ``gpu`` queue (its classes, and their suggestions
checked applied together); a chord calls ``publish_pull_request`` (queue
``github``) with their reports. Meanwhile ``record_progress`` (queue ``github``,
from each GPU task's start notice and its link) keeps the check run naming every
module with its state. ``command`` answers ``/kernelize`` comments.
Tasks take primitives and load the rest; GitHub credentials never leave this
side.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from collections.abc import Sequence
from typing import Any

from celery import chord
from sqlalchemy import update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from bot import applying, broker, commands, db, jobs, planning, publish, tracking
from bot.github import GitHubApp, GitHubError, InstallationClient, PullInfo
from bot.models import Job, utcnow
from bot.planning import BUNDLE_TEXT_BYTES
from bot.repo_config import CONFIG_PATH, RepoConfig, RepoConfigError, load_repo_config
from bot.settings import Settings, load_settings
from runners.bundle import BundleError, pack
from runners.celery_app import (
    COMMAND_TASK,
    GITHUB_QUEUE,
    GPU_QUEUE,
    INSTALLATION_TASK,
    KERNELIZE_FILE_TASK,
    PLAN_TASK,
    PROGRESS_TASK,
    PUBLISH_FAILED_TASK,
    PUBLISH_TASK,
    TRACK_TASK,
)
from runners.generators import AVAILABLE as GENERATORS
from runners.messages import GpuRequest, ModuleResult, PublishContext
from runners.results import CandidateResult, DeviceInfo, MessageError, ModuleReport, RunReport

log = logging.getLogger(__name__)
CHECK_NAME = "Kernelize"
OUTDATED_MARKER = "<!-- kernelize:outdated -->"
APPLIED_MARKER = "<!-- kernelize:applied -->"
WAIT_RETRY_S = 60.0


class Deferred(Exception):
    """The job must wait (installation limits); the task retries after ``countdown`` seconds."""

    def __init__(self, countdown: float) -> None:
        super().__init__(f"deferred for {countdown:.0f} s")
        self.countdown = countdown


@functools.lru_cache(maxsize=1)
def _settings() -> Settings:
    return load_settings(web=False)


@functools.lru_cache(maxsize=1)
def _app() -> GitHubApp:
    s = _settings()
    key = s.private_key()
    if s.github_app_id is None or key is None:
        raise RuntimeError("KERNELIZE_GITHUB_APP_ID and a private key are needed on the github queue")
    return GitHubApp(
        s.github_app_id,
        key,
        base_url=s.github_api_url,
        seconds_between_writes=s.seconds_between_writes,
        git_url=s.github_git_url,
    )


@functools.lru_cache(maxsize=1)
def _sessions() -> sessionmaker[Session]:
    engine = db.make_engine(_settings().database_url)
    db.create_schema(engine)
    return db.session_factory(engine)


def _client(installation_id: int) -> InstallationClient:
    return _app().installation(installation_id)


def _limits() -> jobs.Limits:
    s = _settings()
    return jobs.Limits(s.max_concurrent_jobs, s.gpu_minutes_per_day)


def settings_hash(request: dict[str, Any]) -> str:
    """The part of the idempotency key that says how the engine was asked to run."""
    keys = ("generators", "samples", "min_speedup", "dtypes", "tolerance", "targets", "mode")
    blob = json.dumps({k: request.get(k) for k in keys}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------
# Trust: automatic runs spend a repository's GPUs on the pull request's code, so only for authors the
# repository trusts. Anyone else's pull request waits for a maintainer (button, re-run, command, label).

WRITE_PERMISSIONS = frozenset({"admin", "maintain", "write"})
RUN_ACTION = {
    "label": "Run Kernelize",
    "description": "Kernelize this pull request's modules",
    "identifier": "run",
}


def _has_write(client: InstallationClient, owner: str, repo: str, login: str) -> bool:
    return bool(login) and client.permission(owner, repo, login) in WRITE_PERMISSIONS


def _may_run(
    client: InstallationClient,
    owner: str,
    repo: str,
    pull: PullInfo,
    reason: str,
    sender: str,
    config: RepoConfig,
) -> bool:
    if not reason.startswith("pull_request.") or reason == "pull_request.labeled":
        # a button, a re-run, a command or a label: whoever did it must have write access
        return _has_write(client, owner, repo, sender)
    if pull.author_association in config.trust.associations:
        return True
    return _has_write(client, owner, repo, pull.author_login)


def _ask_for_approval(
    client: InstallationClient, owner: str, repo: str, head_sha: str, author: str, config: RepoConfig
) -> dict[str, Any]:
    waiting = [
        r for r in client.check_runs(owner, repo, head_sha, CHECK_NAME) if r.conclusion == "action_required"
    ]
    if not waiting:
        label = f", by adding the `{config.trust.label}` label" if config.trust.label else ""
        summary = (
            f"This pull request is from @{author}, who does not have write access to this repository, so "
            "Kernelize did not run its code automatically. A maintainer can start it with the "
            f"**Run Kernelize** button above, by commenting `/kernelize`{label} or by re-running this check."
        )
        client.create_check_run(
            owner,
            repo,
            head_sha,
            CHECK_NAME,
            "completed",
            conclusion="action_required",
            output={"title": "Waiting for a maintainer", "summary": summary},
            actions=[RUN_ACTION],
        )
    return {"skipped": f"waiting for a maintainer: @{author} may not run code here"}


# ---------------------------------------------------------------------------
# Replies to commands


def _react(client: InstallationClient, owner: str, repo: str, comment_id: int | None, content: str) -> None:
    if comment_id is not None:
        client.react(owner, repo, comment_id, content)


def _tell(
    client: InstallationClient,
    owner: str,
    repo: str,
    number: int,
    comment_id: int | None,
    text: str,
    *,
    failed: bool = False,
) -> None:
    """Answer a command (no-op for automatic runs): a reply, and 😕 when it failed."""
    if comment_id is None:
        return
    if failed:
        client.react(owner, repo, comment_id, "confused")
    client.comment(owner, repo, number, text)


def _load_config(client: InstallationClient, owner: str, repo: str, pull: PullInfo) -> RepoConfig:
    """The config on the default branch: a pull request cannot change its own rules."""
    return load_repo_config(client.file_text(owner, repo, CONFIG_PATH, pull.default_branch))


def _config_failed(
    client: InstallationClient, owner: str, repo: str, head_sha: str, exc: RepoConfigError
) -> None:
    summary = (
        f"`{exc.path}` on the default branch is not valid, so nothing ran:\n\n"
        f"- key: `{exc.key or '(file)'}`\n- problem: {exc.message}\n\n"
        "Fix the file on the default branch, then re-run this check. The reference is `docs/config.md`."
    )
    client.create_check_run(
        owner,
        repo,
        head_sha,
        CHECK_NAME,
        "completed",
        conclusion="failure",
        output={"title": f"Invalid {exc.path}", "summary": summary},
    )


# ---------------------------------------------------------------------------
# Planning


def _targets(
    client: InstallationClient,
    owner: str,
    repo: str,
    number: int,
    head_sha: str,
    config: RepoConfig,
    wanted: Sequence[dict[str, Any]],
) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, str]]:
    """The changed modules to run (config paths and, for a command, its targets), the changed
    sources, and the patches by path (``bot/planning.py`` decides)."""
    return planning.changed_targets(
        client.pull_files(owner, repo, number),
        lambda path: client.file_text(owner, repo, path, head_sha),
        config,
        wanted,
    )


def _engine(config: RepoConfig) -> dict[str, Any]:
    s = _settings()
    table = config.tolerance_table()
    return {
        "generators": list(config.generators or s.generators),
        "samples": config.samples or s.samples,
        "min_speedup": config.min_speedup or s.min_speedup,
        "timeout_s": s.candidate_timeout_s,
        "dtypes": list(config.dtypes or []),
        "tolerance": {k: list(v) for k, v in table.items()},
    }


def _open_job(
    key: str, installation_id: int, owner: str, repo: str, number: int, head_sha: str, **fields: Any
) -> int:
    """The active job for ``key`` (a redelivered or retried plan), or a new one; its id."""
    with _sessions()() as session, session.begin():
        for job in jobs.pull_jobs(session, f"{owner}/{repo}", number):
            if job.key == key:
                return job.id
        job = Job(
            key=key,
            installation_id=installation_id,
            repository=f"{owner}/{repo}",
            pull_number=number,
            head_sha=head_sha,
            state="queued",
            task_ids=[],
            **fields,
        )
        session.add(job)
        session.flush()
        return job.id


def plan_pull_request(
    app: Any,
    installation_id: int,
    owner: str,
    repo: str,
    number: int,
    head_sha: str = "",
    reason: str = "",
    sender: str = "",
    targets: Sequence[dict[str, Any]] = (),
    options: dict[str, Any] | None = None,
    comment_id: int | None = None,
    draft: bool = False,
    label: str = "",
    **_: Any,
) -> dict[str, Any]:
    client = _client(installation_id)
    pull = client.pull(owner, repo, number)
    if reason == "pull_request.synchronize":
        _track_push(client, owner, repo, number, head_sha, sender)
    if pull.state != "open":
        _tell(
            client,
            owner,
            repo,
            number,
            comment_id,
            "This pull request is closed; nothing to do.",
            failed=True,
        )
        return {"skipped": "the pull request is closed"}
    head_sha = head_sha or pull.head_sha  # a command runs on the current head
    if pull.head_sha != head_sha:
        return {"skipped": f"head moved from {head_sha[:7]} to {pull.head_sha[:7]}; a newer event covers it"}
    try:
        config = _load_config(client, owner, repo, pull)
    except RepoConfigError as exc:
        _config_failed(client, owner, repo, head_sha, exc)
        _tell(client, owner, repo, number, comment_id, f"Nothing ran: {exc}", failed=True)
        return {"failed": str(exc)}
    if not config.enabled:
        why = f"Kernelize is disabled for this repository (`enabled: false` in `{CONFIG_PATH}`)."
        _tell(client, owner, repo, number, comment_id, why, failed=True)
        return {"skipped": "disabled by the repository config"}
    automatic = reason.startswith("pull_request.") and reason != "pull_request.labeled"
    if automatic and not config.auto_run:
        return {"skipped": "auto_run is off; waiting for /kernelize"}
    if automatic and draft and not config.drafts:
        return {"skipped": "draft pull request"}
    if reason == "pull_request.labeled" and (not config.trust.label or label != config.trust.label):
        return {"skipped": f"label {label!r} is not the configured trust label"}
    if not _may_run(client, owner, repo, pull, reason, sender, config):
        return _ask_for_approval(client, owner, repo, head_sha, pull.author_login, config)
    try:
        config = config.with_overrides(**(options or {}))
    except RepoConfigError as exc:
        _tell(client, owner, repo, number, comment_id, f"Nothing ran: {exc}", failed=True)
        return {"failed": str(exc)}

    found, sources, patches = _targets(client, owner, repo, number, head_sha, config, targets)
    if not found:
        _mark_outdated(client, owner, repo, number, head_sha)
        what = "matches your targets" if targets else "was changed in this pull request"
        _tell(client, owner, repo, number, comment_id, f"No `nn.Module` class {what}.", failed=bool(targets))
        return {"skipped": "no nn.Module class changed"}
    found, kernelized = _already_kernelized(owner, repo, number, found, sources)
    over = found[config.max_modules :]
    found = found[: config.max_modules]

    engine = _engine(config)
    mode = config.comment.mode
    scope = sorted(f"{t['path']}::{t['class_name']}" for t in found) if targets else None
    # Idempotency: one key per (repository, PR, head sha, engine settings, targets), kept as the check
    # run's external id. A completed run for the key is not redone unless someone asked for a re-run; a
    # redelivered plan (its worker died) carries on with the run it opened.
    key = f"{owner}/{repo}#{number}@{head_sha}:{settings_hash({**engine, 'targets': scope, 'mode': mode})}"
    existing = [r for r in client.check_runs(owner, repo, head_sha, CHECK_NAME) if r.external_id == key]
    rerun = reason.startswith("check_run.") or reason == "command"
    if any(r.status == "completed" for r in existing) and not rerun:
        return {"skipped": f"{key} is done already"}
    job_id = _open_job(
        key,
        installation_id,
        owner,
        repo,
        number,
        head_sha,
        reason=reason[:64],
        requested_by=sender[:100],
        comment_id=comment_id,
        modules=len(found),
    )
    # Every module the check run names, in the order the results will list them: those to run
    # queued, the rest (over the limit, already kernelized) known now.
    entries = [publish.ModuleProgress(f"{t['path']}::{t['class_name']}") for t in found]
    over_reports = planning.over_limit([f"{t['path']}::{t['class_name']}" for t in over], config.max_modules)
    entries += [publish.module_progress(r) for r in over_reports]
    entries += [publish.module_progress(_kernelized_report(k)) for k in kernelized]
    with _sessions()() as session:
        job = session.get(Job, job_id)
        assert job is not None
        if job.state == "cancelled":
            return {"skipped": "cancelled"}
        check_run_id = job.check_run_id or next((r.id for r in existing if r.status != "completed"), None)
    if check_run_id is None:  # opened queued, outside any transaction: GitHub's time holds no lock
        check_run_id = client.create_check_run(
            owner,
            repo,
            head_sha,
            CHECK_NAME,
            "queued",
            output=publish.check_run_progress(entries).as_output(),
            external_id=key,
        )
    with _sessions()() as session, session.begin():
        job = session.get(Job, job_id, with_for_update=True)
        assert job is not None
        job.check_run_id = check_run_id
        cancelled, wait, first_wait = job.state == "cancelled", None, False
        if not cancelled:
            jobs.lock_installation(session, installation_id)  # two plans never both take the last slot
            wait = jobs.wait_reason(session, installation_id, _limits(), job_id)
            first_wait = bool(wait) and job.detail != wait
            if wait:
                job.detail = wait
            else:
                job.state, job.detail = "running", ""
        detail = job.detail
    if cancelled:  # cancelled while the run was being opened: closed the way cancel closes runs
        output = {"title": "Cancelled", "summary": detail or "Cancelled."}
        client.update_check_run(owner, repo, check_run_id, conclusion="cancelled", output=output)
        return {"skipped": "cancelled"}
    if wait:  # committed above: the next try finds the job, its check run and that we said so
        if first_wait:
            _tell(client, owner, repo, number, comment_id, f"Queued: {wait}.")
            output = publish.check_run_progress(entries, waiting=wait).as_output()
            client.update_check_run(owner, repo, check_run_id, status="queued", output=output)
        running = "running" in wait
        raise Deferred(WAIT_RETRY_S if running else min(3600.0, jobs.seconds_to_midnight() + 5))
    try:
        # The whole repository's Python at the head, so the module's imports of unchanged files resolve.
        repo_files = client.python_files(owner, repo, head_sha, BUNDLE_TEXT_BYTES, pull_number=number)
        bundle = pack({**repo_files, **sources})
    except (BundleError, GitHubError) as exc:  # too big, or GitHub failing: the user must see it
        client.update_check_run(
            owner,
            repo,
            check_run_id,
            conclusion="failure",
            output={"title": "Kernelize could not start", "summary": str(exc)[:60000]},
        )
        _finish(job_id, "failed", detail=str(exc))
        _tell(client, owner, repo, number, comment_id, f"Kernelize could not start: {exc}", failed=True)
        return {"failed": str(exc)}
    # One GPU task per file: its classes' suggestions are checked applied together there. Each
    # tells the github side when it starts (its notice) and ends (its link): the check run follows.
    by_file: dict[str, list[str]] = {}
    for t in found:
        by_file.setdefault(t["path"], []).append(t["class_name"])
    notice = {
        "job_id": job_id,
        "installation_id": installation_id,
        "owner": owner,
        "repo": repo,
        "check_run_id": check_run_id,
    }
    header = []
    for path, names in by_file.items():
        request = GpuRequest(
            bundle=bundle,
            rel_path=path,
            class_names=names,
            modules=config.modules,
            notify={"context": notice},
            **engine,
        )
        sig = app.signature(KERNELIZE_FILE_TASK, kwargs={"request": request.to_dict()}, queue=GPU_QUEUE)
        sig.link(app.signature(PROGRESS_TASK, kwargs={"context": notice}, queue=GITHUB_QUEUE))
        header.append(sig)
    task_ids = [str(sig.freeze().id) for sig in header]
    with _sessions()() as session, session.begin():
        job = jobs.lock_job(session, job_id)
        assert job is not None
        job.task_ids = task_ids
        job.progress = {
            "sent": utcnow().isoformat(timespec="microseconds"),
            "seq": (job.progress or {}).get("seq", 0),  # a redelivered plan's numbers go on
            "modules": [dataclasses.asdict(e) for e in entries],
            "tasks": {
                tid: [f"{p}::{n}" for n in by_file[p]] for tid, p in zip(task_ids, by_file, strict=True)
            },
        }
    context = PublishContext(
        installation_id=installation_id,
        owner=owner,
        repo=repo,
        number=number,
        head_sha=head_sha,
        check_run_id=check_run_id,
        targets=found,
        over=[f"{t['path']}::{t['class_name']}" for t in over],
        max_modules=config.max_modules,
        patches=patches,
        key=key,
        job_id=job_id,
        comment_id=comment_id,
        mode=mode,
        when_nothing_found=config.comment.when_nothing_found,
        min_speedup=engine["min_speedup"],
        min_speedup_vs_compile=config.min_speedup_vs_compile,
        private=pull.private,
        kernelized=kernelized,
    )
    if not header:  # every changed class is an applied suggestion, unchanged: nothing to run
        publish_pull_request([], context)
        return {"modules": 0, "kernelized": len(kernelized), "check_run_id": check_run_id, "job_id": job_id}
    show_progress(notice)  # in progress: every module queued, and what is ahead of them
    run_chord(app, header, context)
    log.info("planned %d module(s) for %s/%s#%d at %s", len(found), owner, repo, number, head_sha[:7])
    return {"modules": len(found), "check_run_id": check_run_id, "job_id": job_id}


def run_chord(app: Any, header: list[Any], context: PublishContext) -> Any:
    """The modules' GPU tasks, then publishing; if any of them fails (its worker lost, a time
    limit, an exception), the error callback fails the job and completes the check run instead.

    The callback takes the failed task's id alone (Celery's old-style errback), so Celery sends it
    through the queue to a github worker: a GPU worker never runs GitHub code."""
    body = app.signature(PUBLISH_TASK, kwargs={"context": context.to_dict()})
    body.link_error(app.signature(PUBLISH_FAILED_TASK, kwargs={"context": context.to_dict()}))
    return chord(header)(body)


def publish_failed(
    failed_task_id: str,
    context: PublishContext,
    why: str,
    task_errors: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A module's task failed, so the chord never publishes: the job ends failed, the check run is
    completed with the reason and each module's state (``task_errors``: the failed GPU tasks' ids →
    what each raised), and a command gets its answer. Idempotent (a repeated call finds the job
    ended and the check run completed, and says so again)."""
    owner, repo, number = context.owner, context.repo, context.number
    detail = f"a module's GPU task failed ({why}); no results were published"[:1000]
    job_id = context.job_id
    if job_id is not None and _finish(job_id, "failed", detail=detail) == "cancelled":
        return {"cancelled": True}
    client = _client(context.installation_id)
    summary = (
        f"Kernelize could not finish: {detail}. Task `{failed_task_id}`. "
        "Comment `/kernelize` on the pull request to run it again."
    )
    modules, tasks = _job_progress(job_id)
    failed = [
        publish.ModuleProgress(target, "error", note=error)
        for task_id, error in (task_errors or {}).items()
        for target in tasks.get(task_id, [])
    ]
    modules = publish.advance(modules, failed)
    out = publish.check_run_progress(modules, error=summary[:60000], dashboard=_dashboard_url(owner, repo))
    _complete_check_run(client, context, out)
    _tell(client, owner, repo, number, context.comment_id, summary, failed=True)
    return {"failed": detail}


def _read_results(
    results: Sequence[dict[str, Any]], job_id: int | None
) -> tuple[list[ModuleResult], dict[str, str]]:
    """The GPU tasks' results (in the order the tasks were sent), read; and those refused, by the
    task's id (its place when the job does not list it): the reason, as a failed task's error reads."""
    read, refused = [], {}
    for i, result in enumerate(results):
        try:
            read.append(ModuleResult.from_dict(result))
        except MessageError as exc:
            refused[i] = _exception_line(exc)
    if not refused:
        return read, {}
    ids: list[str] = []
    if job_id is not None:
        with _sessions()() as session:
            job = session.get(Job, job_id)
            ids = list(job.task_ids or []) if job is not None else []
    return read, {ids[i] if i < len(ids) else f"result {i + 1}": why for i, why in refused.items()}


def _read_context(context: Any) -> PublishContext:
    """The publish step's context, read. One this worker cannot read says nowhere it could trust to
    report to: the reason is logged, and the task fails with it."""
    try:
        return PublishContext.from_dict(context)
    except MessageError as exc:
        log.error("a publish context was refused: %s", exc)
        raise


def _job_progress(job_id: int | None) -> tuple[list[publish.ModuleProgress], dict[str, list[str]]]:
    """The job's modules as last recorded, and its GPU tasks' targets by task id (none: empty)."""
    if job_id is None:
        return [], {}
    with _sessions()() as session:
        job = session.get(Job, job_id)
        progress = (job.progress if job is not None else None) or {}
    modules = [publish.ModuleProgress(**m) for m in progress.get("modules", [])]
    return modules, dict(progress.get("tasks", {}))


def _complete_check_run(
    client: InstallationClient, context: PublishContext, out: publish.CheckOutput
) -> None:
    """Complete the job's check run with ``out``, kept with the job first: a progress update that
    reaches GitHub after this one is followed by it again (:func:`show_progress`)."""
    job_id, output = context.job_id, out.as_output()
    if job_id is not None:
        with _sessions()() as session, session.begin():
            final = {"conclusion": out.conclusion, "output": output}
            session.execute(update(Job).where(Job.id == job_id).values(check_final=final))
    owner, repo = context.owner, context.repo
    client.update_check_run(owner, repo, context.check_run_id, conclusion=out.conclusion, output=output)


# ---------------------------------------------------------------------------
# Progress: the check run follows the GPU tasks. Each GPU task's start notice and its link (its
# result) run record_progress here on the github queue; GPU workers never call GitHub.

PROGRESS_ROUNDS = 3  # a writer that may have overtaken a newer one shows the latest again, this often at most


def record_progress(
    context: dict[str, Any], result: dict[str, Any] | None = None, running: Sequence[str] = ()
) -> dict[str, Any]:
    """A file's GPU task started (``running``: its targets) or finished (``result``: what it
    returned, a :class:`ModuleResult`): the job's modules move forward and the check run shows them
    (:func:`show_progress`). A result this worker cannot read is only logged here: publishing (the
    chord) reads it too, and fails the job with the reason."""
    try:
        modules = ModuleResult.from_dict(result).modules if result is not None else []
    except MessageError as exc:
        log.error("job %s: a GPU task's result was refused: %s", context.get("job_id"), exc)
        return {"refused": str(exc)}
    updates = [publish.module_progress(m) for m in modules]
    updates += [publish.ModuleProgress(target, "running") for target in running]
    return show_progress(context, updates)


def show_progress(context: dict[str, Any], updates: Sequence[publish.ModuleProgress] = ()) -> dict[str, Any]:
    """Record ``updates`` with the job and show its modules on the check run, while it runs.

    Never fails the job: GitHub or the database failing loses this update only (logged). Never
    takes the check run back: a job that is not running is not shown, and when the job ended
    while this update was on its way, the check run's final output (``Job.check_final``, kept
    before it is sent) is sent again after it. Each update takes a number (``seq``); one that finds
    a newer number after its write may have overtaken it, and shows the latest state again."""
    job_id, owner, repo = context["job_id"], context["owner"], context["repo"]
    client = _client(context["installation_id"])
    shown: int | None = None
    for _ in range(PROGRESS_ROUNDS):
        try:
            snapshot = _progress_snapshot(context, updates)
        except SQLAlchemyError as exc:
            log.error("job %s: progress not recorded: %s", job_id, exc)
            return {"dropped": str(exc)}
        updates = ()
        if snapshot is None:
            return {"skipped": "the job is not running"}
        seq, output = snapshot
        try:
            client.update_check_run(owner, repo, context["check_run_id"], status="in_progress", output=output)
            shown = seq
        except GitHubError as exc:
            log.warning("job %s: progress %d not shown: %s", job_id, seq, exc)
        if not _overtaken(context, seq):
            break
    return {"shown": shown}


def _progress_snapshot(
    context: dict[str, Any], updates: Sequence[publish.ModuleProgress]
) -> tuple[int, dict[str, str]] | None:
    """Record ``updates`` and take the next number: (number, the check run's output); None when
    the job is not running."""
    with _sessions()() as session, session.begin():
        job = jobs.lock_job(session, context["job_id"])
        if job is None or job.state != "running" or job.progress is None:
            return None
        modules = publish.advance([publish.ModuleProgress(**m) for m in job.progress["modules"]], updates)
        seq = int(job.progress.get("seq", 0)) + 1
        job.progress = {**job.progress, "seq": seq, "modules": [dataclasses.asdict(m) for m in modules]}
        ahead = jobs.work_ahead(session, job)
    dashboard = _dashboard_url(context["owner"], context["repo"])
    return seq, publish.check_run_progress(modules, ahead=ahead, dashboard=dashboard).as_output()


def _overtaken(context: dict[str, Any], seq: int) -> bool:
    """After progress write ``seq``: when the job has ended meanwhile, its final output is sent again
    (this write may have reached GitHub after it); True when a newer write exists, which this one
    may have overtaken."""
    job_id = context["job_id"]
    try:
        with _sessions()() as session:
            job = session.get(Job, job_id)
            if job is None:
                return False
            state, final, latest = job.state, job.check_final, (job.progress or {}).get("seq")
    except SQLAlchemyError as exc:
        log.error("job %s: could not look at the job after progress %d: %s", job_id, seq, exc)
        return False
    if state == "running":
        return latest != seq
    if final:  # ended: its last word goes last
        owner, repo, run_id = context["owner"], context["repo"], context["check_run_id"]
        try:
            _client(context["installation_id"]).update_check_run(
                owner, repo, run_id, conclusion=final["conclusion"], output=final["output"]
            )
        except GitHubError as exc:
            log.error("job %s: check run %s may show progress after its end: %s", job_id, run_id, exc)
    return False


def _finish(job_id: int, state: str, *, gpu_seconds: float = 0.0, detail: str = "") -> str:
    """Record the job's end; return its final state (a cancel that came first sticks)."""
    with _sessions()() as session, session.begin():
        job = jobs.finish(session, job_id, state, gpu_seconds=gpu_seconds, detail=detail)
        return job.state if job is not None else state


# ---------------------------------------------------------------------------
# Publishing


def _applied_comments(owner: str, repo: str, number: int) -> dict[int, str]:
    """Review comment id → the sha that applied it, for this PR's applied (or merged) suggestions."""
    try:
        with _sessions()() as session:
            found = tracking.applied_comments(session, f"{owner}/{repo}", number)
    except SQLAlchemyError as exc:
        log.error("could not look up applied suggestions of %s/%s#%d: %s", owner, repo, number, exc)
        return {}
    return found


def _as_applied(body: str, sha: str) -> str:
    """A suggestion comment once applied: its evidence kept, its code no longer a suggestion
    (nothing to apply twice), and a line saying so first."""
    kept = body.replace("```suggestion", "```python")
    where = f" in `{sha[:7]}`" if sha else ""
    head = f"**Applied ✓**{where}: this code is in the pull request now. What it was verified as:"
    return f"{head}\n\n{kept}\n{APPLIED_MARKER}"


def _mark_outdated(client: InstallationClient, owner: str, repo: str, number: int, head_sha: str) -> int:
    """Our reviews for other shas: a suggestion that was applied says so and keeps its evidence; the
    others lose their code (so nobody applies stale code). Returns how many reviews were marked."""
    marked = 0
    applied: dict[int, str] | None = None
    for review in client.reviews(owner, repo, number):
        if (
            review.commit_id == head_sha
            or OUTDATED_MARKER in review.body
            or APPLIED_MARKER in review.body
            or "kernelize:review" not in review.body
        ):
            continue
        if applied is None:
            applied = _applied_comments(owner, repo, number)
        note = (
            f"**Outdated:** this review was for `{review.commit_id[:7]}`; the pull request has moved on to "
            f"`{head_sha[:7]}`, and Kernelize's summary comment has the current results."
        )
        kinds = set()
        for line in client.review_comments(owner, repo, number, review.id):
            if "```suggestion" not in line.body or OUTDATED_MARKER in line.body:
                continue
            if line.id in applied:
                client.edit_review_comment(owner, repo, line.id, _as_applied(line.body, applied[line.id]))
                kinds.add("applied")
            else:
                client.edit_review_comment(owner, repo, line.id, f"{note}\n{OUTDATED_MARKER}")
                kinds.add("outdated")
        if kinds == {"applied"}:
            head = f"**Applied ✓:** this review's suggestions are in the pull request (`{head_sha[:7]}`)."
            client.update_review(owner, repo, number, review.id, f"{head}\n{APPLIED_MARKER}\n\n{review.body}")
        else:
            if "applied" in kinds:
                note += " Its suggestions marked **Applied ✓** are in the pull request."
            body = f"{note}\n{OUTDATED_MARKER}\n\n{review.body}"
            client.update_review(owner, repo, number, review.id, body)
        marked += 1
    return marked


def _ms(c: CandidateResult, name: str) -> float | None:
    timing = c.timings.get(name)
    return timing.median_ms if timing is not None else None


def _record_suggestions(
    client: InstallationClient,
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
    owner, repo, number = context.owner, context.repo, context.number
    try:
        review = next((r for r in client.reviews(owner, repo, number) if marker in r.body), None)
        lines = client.review_comments(owner, repo, number, review.id) if review else []
        modules = {m.target: m for m in reports}
        originals = {f"{t['path']}::{t['class_name']}": t.get("original_sha256", "") for t in context.targets}
        offered = [(sug, next((c for c in lines if sug.marker in c.body), None)) for sug in plan.suggestions]
        offered += [(sug, None) for sug in publish.held_suggestions(plan, context.targets, reports)]
        rows = []
        for sug, line in offered:
            m = modules[sug.target]
            best = m.best_candidate()
            code = winners.get((sug.target, sug.candidate_id))
            if best is None or code is None:
                continue
            rows.append(
                {
                    "installation_id": context.installation_id,
                    "repository": f"{owner}/{repo}",
                    "private": context.private,
                    "pull_number": number,
                    "head_sha": context.head_sha,
                    "path": sug.path,
                    "start_line": sug.start_line,
                    "end_line": sug.end_line,
                    "class_name": m.class_name,
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
                    "review_id": review.id if review else None,
                    "comment_id": line.id if line else None,
                    "comment_url": line.html_url[:500] if line else "",
                }
            )
        with _sessions()() as session, session.begin():
            tracking.record_posted(session, rows)
    except (GitHubError, SQLAlchemyError) as exc:
        log.error("could not record the suggestions of %s/%s#%d: %s", owner, repo, number, exc)


def _track_push(
    client: InstallationClient, owner: str, repo: str, number: int, head_sha: str, sender: str
) -> None:
    """A new head: which suggestions it applied or made outdated (never blocks the run itself)."""
    try:
        commit = client.commit(owner, repo, head_sha)
        push = tracking.Push(
            head_sha, sender or None, commit.author_login, commit.message, _app().bot_login()
        )
        with _sessions()() as session, session.begin():
            tracking.lock_pull(session, f"{owner}/{repo}", number)
            counts = tracking.on_push(session, client, f"{owner}/{repo}", number, push)
            tracking.refresh_feedback(session, client, f"{owner}/{repo}", number)
        if any(counts.values()):
            log.info("%s/%s#%d at %s: %s", owner, repo, number, head_sha[:7], counts)
    except (GitHubError, SQLAlchemyError) as exc:
        log.error("could not track the push to %s/%s#%d: %s", owner, repo, number, exc)


def track(
    installation_id: int,
    owner: str,
    repo: str,
    number: int,
    change: str,
    sender: str = "",
    merged: bool = False,
    comment_ids: Sequence[int] = (),
    head_sha: str = "",
    **_: Any,
) -> dict[str, Any]:
    """A pull request closed, a review thread resolved, or a push by a bot: update its suggestions."""
    client = _client(installation_id)
    repository = f"{owner}/{repo}"
    if change == "push":
        _track_push(client, owner, repo, number, head_sha, sender)
        return {"change": change}
    with _sessions()() as session, session.begin():
        tracking.lock_pull(session, repository, number)
        if not tracking.open_suggestions(session, repository, number):
            return {"change": change, "open": 0}
        if change == "closed":
            tracking.refresh_feedback(session, client, repository, number)
            return {
                "change": change,
                **tracking.on_closed(session, repository, number, merged, sender or None),
            }
        if change == "thread_resolved":
            n = tracking.on_thread_resolved(session, repository, number, comment_ids, sender or None)
            return {"change": change, "dismissed": n}
    return {"change": change, "unknown": True}


def _already_kernelized(
    owner: str, repo: str, number: int, found: list[dict[str, Any]], sources: dict[str, str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``found`` split into the classes to run and those that are a suggestion applied earlier,
    unchanged (what was verified is what is there: not run again). A database that cannot answer
    runs everything."""
    try:
        with _sessions()() as session:
            run, done = [], []
            for t in found:
                s = tracking.applied_here(
                    session, f"{owner}/{repo}", number, t["path"], t["class_name"], sources[t["path"]]
                )
                if s is None:
                    run.append(t)
                    continue
                done.append(
                    {
                        "target": f"{t['path']}::{t['class_name']}",
                        "applied_sha": s.applied_sha or "",
                        "verified_sha": s.head_sha,
                        "gpu": s.gpu,
                        "speedup_eager": s.speedup_eager,
                        "speedup_compile": s.speedup_compile,
                        "comment_url": s.comment_url,
                    }
                )
            return run, done
    except SQLAlchemyError as exc:
        log.error("could not look up applied suggestions of %s/%s#%d: %s", owner, repo, number, exc)
        return found, []


def _kernelized_report(k: dict[str, Any]) -> ModuleReport:
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


def _dashboard_url(owner: str, repo: str) -> str | None:
    """The repository's dashboard page, where the service has a public address."""
    base = _settings().public_url
    return f"{base.rstrip('/')}/repos/{owner}/{repo}" if base else None


def publish_pull_request(results: list[dict[str, Any]], context: PublishContext) -> dict[str, Any]:
    """The chord's end: ``results``, one :class:`ModuleResult` per GPU task in the order they were
    sent, become the review, the summary comment and the check run's verdict. A result this worker
    cannot read fails the job as a failed task does (:func:`publish_failed`), with its reason."""
    owner, repo, number, head_sha = context.owner, context.repo, context.number, context.head_sha
    read, refused = _read_results(results, context.job_id)
    if refused:
        task_id, why = next(iter(refused.items()))
        return publish_failed(task_id, context, why, refused)
    client = _client(context.installation_id)
    comment_id = context.comment_id
    reports = [m for r in read for m in r.modules]
    gpu_seconds = sum(c.wall_s or 0.0 for m in reports for c in m.candidates)
    job_id = context.job_id
    if job_id is not None and _finish(job_id, "done", gpu_seconds=gpu_seconds) == "cancelled":
        return {"cancelled": True}
    reports += planning.over_limit(context.over, context.max_modules)
    reports += [_kernelized_report(k) for k in context.kernelized]
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
    _mark_outdated(client, owner, repo, number, head_sha)
    review_id = None
    marker = f"<!-- kernelize:review key={context.key} -->"
    posted = any(marker in body for body in client.review_bodies(owner, repo, number))
    if plan.comments and not posted:  # a redelivered publish never posts the same review twice
        body = f"{plan.body}\n{marker}"
        review_id = client.create_review(owner, repo, number, head_sha, body, plan.comments, marker)
    if plan.suggestions or plan.held_back:
        _record_suggestions(client, context, plan, reports, winners, device, marker)
    dashboard = _dashboard_url(owner, repo)
    summary = publish.summary_comment(run, reports, head_sha, plan, dashboard)
    # Nothing to say: no new comment unless configured (an earlier summary is still brought up to date).
    speak = bool(winners) or context.when_nothing_found == "summary" or comment_id is not None
    summary_id = client.upsert_comment(owner, repo, number, publish.SUMMARY_MARKER, summary, create=speak)
    out = publish.check_run_output(run, reports, plan, dashboard=dashboard)
    _complete_check_run(client, context, out)
    _react(client, owner, repo, comment_id, "rocket")
    return {"review_id": review_id, "summary_comment_id": summary_id, "conclusion": out.conclusion}


# ---------------------------------------------------------------------------
# Commands


def _status_text(found: list[Job]) -> str:
    if not found:
        return "Nothing is queued or running for this pull request."
    rows = ["| job | commit | state | modules | started by | detail |", "|---|---|---|---|---|---|"]
    for j in found:
        detail = j.detail.replace("|", "\\|") or "—"
        rows.append(
            f"| {j.id} | `{j.head_sha[:7]}` | {j.state} | {j.modules} | {j.reason} "
            f"{'@' + j.requested_by if j.requested_by else ''} | {detail} |"
        )
    return "Kernelize jobs for this pull request:\n\n" + "\n".join(rows)


def _cancel(app: Any, client: InstallationClient, owner: str, repo: str, number: int, sender: str) -> str:
    """Cancel this pull request's queued and running jobs: their GPU tasks are revoked and whatever
    they still report is discarded."""
    output = {"title": "Cancelled", "summary": f"Cancelled by @{sender} with `/kernelize cancel`."}
    with _sessions()() as session, session.begin():
        found = jobs.pull_jobs(session, f"{owner}/{repo}", number)
        for job in found:
            job.state, job.detail = "cancelled", f"cancelled by @{sender}"
            job.finished_at = job.finished_at or utcnow()
            job.check_final = {"conclusion": "cancelled", "output": output}  # see show_progress
        cancelled = [(j.id, list(j.task_ids or []), j.check_run_id) for j in found]
    for _, task_ids, check_run_id in cancelled:
        if task_ids:
            app.control.revoke(task_ids)
        if check_run_id is not None:
            client.update_check_run(owner, repo, check_run_id, conclusion="cancelled", output=output)
    if not cancelled:
        return "Nothing is queued or running for this pull request, so there was nothing to cancel."
    return f"Cancelled {len(cancelled)} job(s): " + ", ".join(str(j) for j, _, _ in cancelled) + "."


def handle_command(
    app: Any,
    installation_id: int,
    owner: str,
    repo: str,
    number: int,
    comment_id: int,
    body: str,
    sender: str = "",
    **_: Any,
) -> dict[str, Any]:
    """Answer one ``/kernelize`` comment: 👀 when picked up, then a reply, a run, or 😕 with the reason."""
    client = _client(installation_id)
    try:
        command = commands.parse(body, GENERATORS)
    except commands.CommandError as exc:
        client.react(owner, repo, comment_id, "confused")
        client.comment(owner, repo, number, commands.help_text(GENERATORS, error=exc))
        return {"error": exc.message}
    if command is None:
        return {"skipped": "no command"}
    client.react(owner, repo, comment_id, "eyes")
    if command.action == "help":
        pull = client.pull(owner, repo, number)
        try:
            summary = _load_config(client, owner, repo, pull).summary()
        except RepoConfigError as exc:
            summary = f"**The config is not valid:** {exc}"
        client.comment(owner, repo, number, commands.help_text(GENERATORS, config_summary=summary))
        return {"action": "help"}
    if command.action == "status":
        with _sessions()() as session:
            found = jobs.pull_jobs(session, f"{owner}/{repo}", number)
            text = _status_text(found)
        client.comment(owner, repo, number, text)
        return {"action": "status", "jobs": len(found)}
    if command.action == "stats":
        with _sessions()() as session:
            data = tracking.stats(session, repository=f"{owner}/{repo}")
        client.comment(owner, repo, number, tracking.stats_markdown(data, f"{owner}/{repo}"))
        return {"action": "stats", **{k: data[k] for k in ("posted", "accepted")}}
    if not _has_write(client, owner, repo, sender):
        does = {"apply": "commits to this pull request's branch"}.get(
            command.action, "runs code on this repository's GPUs"
        )
        text = (
            f"Sorry @{sender}, `/kernelize {command.action}` {does}, so it "
            "needs write, maintain or admin permission on the repository. A maintainer can start it for you."
        )
        client.react(owner, repo, comment_id, "confused")
        client.comment(owner, repo, number, text)
        return {"refused": sender}
    if command.action == "cancel":
        client.comment(owner, repo, number, _cancel(app, client, owner, repo, number, sender))
        return {"action": "cancel"}
    if command.action == "apply":
        target = command.targets[0]
        return applying.answer(client, _sessions(), owner, repo, number, comment_id, target, sender)
    targets = [{"path": t.path, "class_name": t.class_name} for t in command.targets]
    return plan_pull_request(
        app,
        installation_id,
        owner,
        repo,
        number,
        reason="command",
        sender=sender,
        targets=targets,
        options=command.overrides(),
        comment_id=comment_id,
    )


def record_installation(event: str, payload: dict[str, Any]) -> dict[str, Any]:
    with _sessions()() as session, session.begin():
        row = jobs.record_installation(session, event, payload)
        return {"installation": row.id if row else None}


def register(app: Any) -> None:
    """Register the GitHub-side tasks on a Celery app; on the embedded broker, this worker takes
    its tasks through bot/broker.py's transport (a dead worker's tasks are given back)."""
    broker.install()

    @app.task(name=PLAN_TASK, shared=False, bind=True, acks_late=True, max_retries=None)  # type: ignore[untyped-decorator]
    def _plan(self: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return plan_pull_request(self.app, **kwargs)
        except Deferred as wait:
            raise self.retry(countdown=wait.countdown) from None

    @app.task(name=COMMAND_TASK, shared=False, bind=True, acks_late=True, max_retries=None)  # type: ignore[untyped-decorator]
    def _command(self: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return handle_command(self.app, **kwargs)
        except Deferred as wait:
            # The command's run waits for the installation's limits: retry the plan, not the command
            # (its 👀 and any reply are already there).
            plan = {k: kwargs[k] for k in ("installation_id", "owner", "repo", "number", "comment_id")}
            self.app.send_task(
                PLAN_TASK,
                kwargs={
                    **plan,
                    "reason": "command",
                    "sender": kwargs.get("sender", ""),
                    **_command_run(kwargs),
                },
                countdown=wait.countdown,
            )
            return {"deferred": wait.countdown}

    @app.task(name=TRACK_TASK, shared=False, acks_late=True)  # type: ignore[untyped-decorator]
    def _track(**kwargs: Any) -> dict[str, Any]:
        return track(**kwargs)

    @app.task(name=INSTALLATION_TASK, shared=False, acks_late=True)  # type: ignore[untyped-decorator]
    def _installation(event: str, payload: dict[str, Any]) -> dict[str, Any]:
        return record_installation(event, payload)

    @app.task(name=PUBLISH_TASK, shared=False, acks_late=True)  # type: ignore[untyped-decorator]
    def _publish(results: list[dict[str, Any]], context: dict[str, Any]) -> dict[str, Any]:
        return publish_pull_request(results, _read_context(context))

    @app.task(name=PUBLISH_FAILED_TASK, shared=False, bind=True, acks_late=True)  # type: ignore[untyped-decorator]
    def _publish_failed(self: Any, failed_task_id: str, context: dict[str, Any]) -> dict[str, Any]:
        read = _read_context(context)
        why = _failure(self.app, failed_task_id)
        return publish_failed(failed_task_id, read, why, _task_errors(self.app, read.job_id))

    # Called with a GPU task's result (its link) or its targets (its start notice); nothing to keep.
    @app.task(name=PROGRESS_TASK, shared=False, acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
    def _progress(
        result: dict[str, Any] | None = None, *, context: dict[str, Any], running: Sequence[str] = ()
    ) -> dict[str, Any]:
        return record_progress(context, result, running)


def _failure(app: Any, task_id: str) -> str:
    """What a failed task's result says (for a chord, Celery's ChordError naming the module's task
    and its exception): the exception's type and first line."""
    try:  # the callback may run before the chord's failure is stored: wait a little for it
        result = app.AsyncResult(task_id)
        result.get(timeout=10, propagate=False, disable_sync_subtasks=False)
        exc = result.result
    except Exception as err:  # the result backend itself failed: say that, never lose the callback
        return f"its result could not be read: {type(err).__name__}"
    return _exception_line(exc) if isinstance(exc, BaseException) else "no result was stored"


def _exception_line(exc: BaseException) -> str:
    """The exception's type and the first line of its message."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first}"[:300] if first else type(exc).__name__


def _task_errors(app: Any, job_id: int | None) -> dict[str, str]:
    """The job's GPU tasks that failed, by id: what each raised (type and first line), as the
    result backend has it. A backend that cannot answer names none."""
    _, tasks = _job_progress(job_id)
    errors = {}
    for task_id in tasks:
        try:
            result = app.AsyncResult(task_id)
            failed, exc = result.failed(), result.result
        except Exception as err:  # the backend itself failed: the summary still names the cause
            log.error("could not read the result of task %s: %s", task_id, err)
            continue
        if failed and isinstance(exc, BaseException):
            errors[task_id] = _exception_line(exc)
    return errors


def _command_run(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The plan arguments of a run command (it parsed once already, so it parses again the same)."""
    command = commands.parse(kwargs.get("body", ""), GENERATORS)
    if command is None:
        return {}
    targets = [{"path": t.path, "class_name": t.class_name} for t in command.targets]
    return {"targets": targets, "options": command.overrides()}
