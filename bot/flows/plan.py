"""Planning: a pull request (an event or a command) to GPU tasks.

Read the pull request and the repository config (from the default branch), decide whether it may
run and what, map the diff to the ``nn.Module`` classes it touches, pack the repository's Python
into a bundle and fan out one ``kernelize_file`` task per changed file to the ``gpu`` queue (its
classes, and their suggestions checked applied together); a chord then publishes their reports
(``bot/flows/publish.py``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from celery import chord
from sqlalchemy.exc import SQLAlchemyError

from bot import jobs, planning, publish, tracking
from bot.flows.common import (
    CHECK_NAME,
    Services,
    finish,
    has_write,
    job_limits,
    load_config,
    tell,
)
from bot.flows.progress import show_progress
from bot.flows.publish import kernelized_report, mark_outdated, publish_pull_request
from bot.flows.track import track_push
from bot.github import CheckRunInfo, GitHubError, PullInfo, RepoClient
from bot.models import Job, utcnow
from bot.planning import BUNDLE_TEXT_BYTES
from bot.repo_config import CONFIG_PATH, RepoConfig, RepoConfigError
from bot.settings import Settings
from runners.bundle import BundleError, pack
from runners.celery_app import (
    GITHUB_QUEUE,
    GPU_QUEUE,
    KERNELIZE_FILE_TASK,
    PROGRESS_TASK,
    PUBLISH_FAILED_TASK,
    PUBLISH_TASK,
)
from runners.messages import GpuRequest, PublishContext

log = logging.getLogger(__name__)
WAIT_RETRY_S = 60.0
RUN_ACTION = {
    "label": "Run Kernelize",
    "description": "Kernelize this pull request's modules",
    "identifier": "run",
}


class Deferred(Exception):
    """The job must wait (installation limits); the task retries after ``countdown`` seconds."""

    def __init__(self, countdown: float) -> None:
        super().__init__(f"deferred for {countdown:.0f} s")
        self.countdown = countdown


@dataclass(frozen=True)
class PlanRequest:
    """What a plan was asked for: the pull request, the event that asked (``reason``: the event
    and action, ``check_run.…`` or ``command``) and who sent it, and for a command its targets,
    options and comment."""

    number: int
    head_sha: str = ""
    reason: str = ""
    sender: str = ""
    targets: Sequence[dict[str, Any]] = ()
    options: dict[str, Any] | None = None
    comment_id: int | None = None
    draft: bool = False
    label: str = ""


@dataclass(frozen=True)
class Slot:
    """The job's turn under the installation's limits: cancelled meanwhile, or waiting (``wait``:
    why; ``first_wait``: not said before), or running; ``detail`` as the job records it."""

    cancelled: bool
    wait: str | None
    first_wait: bool
    detail: str


# ---------------------------------------------------------------------------
# Decisions (pure). Trust: automatic runs spend a repository's GPUs on the pull request's code, so
# only for authors the repository trusts; anyone else's pull request waits for a maintainer (button,
# re-run, command, label).


def is_automatic(reason: str) -> bool:
    """A pull request event nobody asked for by hand (a label counts as asking)."""
    return reason.startswith("pull_request.") and reason != "pull_request.labeled"


def config_skip(config: RepoConfig, reason: str, draft: bool, label: str) -> str | None:
    """Why the repository's config lets this event run nothing (None: it may run)."""
    automatic = is_automatic(reason)
    if automatic and not config.auto_run:
        return "auto_run is off; waiting for /kernelize"
    if automatic and draft and not config.drafts:
        return "draft pull request"
    if reason == "pull_request.labeled" and (not config.trust.label or label != config.trust.label):
        return f"label {label!r} is not the configured trust label"
    return None


def who_decides(
    reason: str, sender: str, author_association: str, author_login: str, trusted: Collection[str]
) -> str | None:
    """Whose write access decides whether this run may start: whoever pressed the button, re-ran
    the check, commented or labelled; for an automatic run the author, unless the repository trusts
    their association already (None: it may start)."""
    if not is_automatic(reason):
        return sender
    if author_association in trusted:
        return None
    return author_login


def needs_approval_run(runs: Sequence[CheckRunInfo]) -> bool:
    """Whether to open a check run asking for a maintainer: not when one already asks."""
    return not any(r.conclusion == "action_required" for r in runs)


def approval_summary(author: str, trust_label: str | None) -> str:
    label = f", by adding the `{trust_label}` label" if trust_label else ""
    return (
        f"This pull request is from @{author}, who does not have write access to this repository, so "
        "Kernelize did not run its code automatically. A maintainer can start it with the "
        f"**Run Kernelize** button above, by commenting `/kernelize`{label} or by re-running this check."
    )


def nothing_found_text(targets: Sequence[dict[str, Any]]) -> str:
    what = "matches your targets" if targets else "was changed in this pull request"
    return f"No `nn.Module` class {what}."


def within_limit(
    found: list[dict[str, Any]], max_modules: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The modules to run and those over the repository's limit, in the order found."""
    return found[:max_modules], found[max_modules:]


def engine_settings(config: RepoConfig, settings: Settings) -> dict[str, Any]:
    """How the engine runs: the repository's choices, else the server's."""
    table = config.tolerance_table()
    return {
        "generators": list(config.generators or settings.generators),
        "samples": config.samples or settings.samples,
        "min_speedup": config.min_speedup or settings.min_speedup,
        "timeout_s": settings.candidate_timeout_s,
        "dtypes": list(config.dtypes or []),
        "tolerance": {k: list(v) for k, v in table.items()},
    }


def settings_hash(request: dict[str, Any]) -> str:
    """The part of the idempotency key that says how the engine was asked to run."""
    keys = ("generators", "samples", "min_speedup", "dtypes", "tolerance", "targets", "mode")
    blob = json.dumps({k: request.get(k) for k in keys}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def idempotency_key(
    repository: str,
    number: int,
    head_sha: str,
    engine: dict[str, Any],
    found: Sequence[dict[str, Any]],
    targets: Sequence[dict[str, Any]],
    mode: str,
) -> str:
    """One key per (repository, PR, head sha, engine settings, targets), kept as the check run's
    external id. A command's targets count as the modules they found; a run of everything as none."""
    scope = sorted(f"{t['path']}::{t['class_name']}" for t in found) if targets else None
    return f"{repository}#{number}@{head_sha}:{settings_hash({**engine, 'targets': scope, 'mode': mode})}"


def is_done(existing: Sequence[CheckRunInfo], reason: str) -> bool:
    """A completed run for the key is not redone unless someone asked for a re-run (a check run's
    button or re-run, a command); a redelivered plan carries on with the run it opened."""
    rerun = reason.startswith("check_run.") or reason == "command"
    return any(r.status == "completed" for r in existing) and not rerun


def check_run_to_reuse(job_check_run_id: int | None, existing: Sequence[CheckRunInfo]) -> int | None:
    """The job's check run, else an open one for the key (a plan redelivered before it recorded it)."""
    return job_check_run_id or next((r.id for r in existing if r.status != "completed"), None)


def says_queued(wait: str | None, previous_detail: str) -> bool:
    """Whether to tell that the job waits: the first time for this reason only."""
    return bool(wait) and previous_detail != wait


def retry_countdown(wait: str, seconds_to_midnight: float) -> float:
    """When to try a waiting job again: soon when it waits for a running job, else after midnight
    UTC (the day's GPU minutes), within the hour."""
    return WAIT_RETRY_S if "running" in wait else min(3600.0, seconds_to_midnight + 5)


def progress_entries(
    found: Sequence[dict[str, Any]],
    over: Sequence[dict[str, Any]],
    kernelized: Sequence[dict[str, Any]],
    max_modules: int,
) -> list[publish.ModuleProgress]:
    """Every module the check run names, in the order the results will list them: those to run
    queued, the rest (over the limit, already kernelized) known now."""
    entries = [publish.ModuleProgress(f"{t['path']}::{t['class_name']}") for t in found]
    over_reports = planning.over_limit([f"{t['path']}::{t['class_name']}" for t in over], max_modules)
    entries += [publish.module_progress(r) for r in over_reports]
    entries += [publish.module_progress(kernelized_report(k)) for k in kernelized]
    return entries


def by_file(found: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    """The classes to run, by file: one GPU task each."""
    out: dict[str, list[str]] = {}
    for t in found:
        out.setdefault(t["path"], []).append(t["class_name"])
    return out


# ---------------------------------------------------------------------------
# The flow


def plan_pull_request(svc: Services, app: Any, ask: PlanRequest) -> dict[str, Any]:
    """Plan one pull request for ``ask`` (see the module's docstring); the task's answer. Raises
    :class:`Deferred` when the installation's limits make the job wait."""
    github, number = svc.github, ask.number
    pull = github.pull(number)
    if ask.reason == "pull_request.synchronize":
        track_push(svc, number, ask.head_sha, ask.sender)
    if pull.state != "open":
        tell(github, number, ask.comment_id, "This pull request is closed; nothing to do.", failed=True)
        return {"skipped": "the pull request is closed"}
    head_sha = ask.head_sha or pull.head_sha  # a command runs on the current head
    if pull.head_sha != head_sha:
        return {"skipped": f"head moved from {head_sha[:7]} to {pull.head_sha[:7]}; a newer event covers it"}
    admitted = _admit(svc, ask, pull, head_sha)
    if not isinstance(admitted, RepoConfig):
        return admitted
    return _plan(svc, app, ask, pull, head_sha, admitted)


def _admit(svc: Services, ask: PlanRequest, pull: PullInfo, head_sha: str) -> RepoConfig | dict[str, Any]:
    """The config this run goes by (the command's options applied), once the config, the event and
    trust let it run; else the task's answer."""
    github, number, comment_id = svc.github, ask.number, ask.comment_id
    try:
        config = load_config(github, pull)
    except RepoConfigError as exc:
        _config_failed(github, head_sha, exc)
        tell(github, number, comment_id, f"Nothing ran: {exc}", failed=True)
        return {"failed": str(exc)}
    if not config.enabled:
        why = f"Kernelize is disabled for this repository (`enabled: false` in `{CONFIG_PATH}`)."
        tell(github, number, comment_id, why, failed=True)
        return {"skipped": "disabled by the repository config"}
    skip = config_skip(config, ask.reason, ask.draft, ask.label)
    if skip is not None:
        return {"skipped": skip}
    login = who_decides(
        ask.reason, ask.sender, pull.author_association, pull.author_login, config.trust.associations
    )
    if login is not None and not has_write(github, login):
        return _ask_for_approval(github, head_sha, pull.author_login, config)
    try:
        return config.with_overrides(**(ask.options or {}))
    except RepoConfigError as exc:
        tell(github, number, comment_id, f"Nothing ran: {exc}", failed=True)
        return {"failed": str(exc)}


def _plan(
    svc: Services, app: Any, ask: PlanRequest, pull: PullInfo, head_sha: str, config: RepoConfig
) -> dict[str, Any]:
    """The changed modules to GPU tasks: the job and its check run opened, a turn under the limits
    taken, the bundle packed, the tasks sent."""
    github, number = svc.github, ask.number
    found, sources, patches = planning.changed_targets(
        github.pull_files(number), lambda path: github.file_text(path, head_sha), config, ask.targets
    )
    if not found:
        mark_outdated(svc, number, head_sha)
        tell(github, number, ask.comment_id, nothing_found_text(ask.targets), failed=bool(ask.targets))
        return {"skipped": "no nn.Module class changed"}
    found, kernelized = _already_kernelized(svc, number, found, sources)
    found, over = within_limit(found, config.max_modules)
    engine = engine_settings(config, svc.settings)
    mode = config.comment.mode
    key = idempotency_key(github.full_name, number, head_sha, engine, found, ask.targets, mode)
    existing = [r for r in github.check_runs(head_sha, CHECK_NAME) if r.external_id == key]
    if is_done(existing, ask.reason):
        return {"skipped": f"{key} is done already"}
    job_id = _open_job(svc, key, ask, head_sha, len(found))
    entries = progress_entries(found, over, kernelized, config.max_modules)
    cancelled, check_run_id = _job_check_run(svc, job_id, existing)
    if cancelled:
        return {"skipped": "cancelled"}
    if check_run_id is None:  # opened queued, outside any transaction: GitHub's time holds no lock
        output = publish.check_run_progress(entries).as_output()
        check_run_id = github.create_check_run(head_sha, CHECK_NAME, "queued", output=output, external_id=key)
    slot = _take_slot(svc, job_id, check_run_id)
    if slot.cancelled:  # cancelled while the run was being opened: closed the way cancel closes runs
        output = {"title": "Cancelled", "summary": slot.detail or "Cancelled."}
        github.update_check_run(check_run_id, conclusion="cancelled", output=output)
        return {"skipped": "cancelled"}
    if slot.wait:  # committed: the next try finds the job, its check run and that we said so
        if slot.first_wait:
            tell(github, number, ask.comment_id, f"Queued: {slot.wait}.")
            output = publish.check_run_progress(entries, waiting=slot.wait).as_output()
            github.update_check_run(check_run_id, status="queued", output=output)
        raise Deferred(retry_countdown(slot.wait, jobs.seconds_to_midnight()))
    try:
        # The whole repository's Python at the head, so the module's imports of unchanged files resolve.
        repo_files = github.python_files(head_sha, BUNDLE_TEXT_BYTES, pull_number=number)
        bundle = pack({**repo_files, **sources})
    except (BundleError, GitHubError) as exc:  # too big, or GitHub failing: the user must see it
        output = {"title": "Kernelize could not start", "summary": str(exc)[:60000]}
        github.update_check_run(check_run_id, conclusion="failure", output=output)
        finish(svc.sessions, job_id, "failed", detail=str(exc))
        tell(github, number, ask.comment_id, f"Kernelize could not start: {exc}", failed=True)
        return {"failed": str(exc)}
    context = PublishContext(
        installation_id=github.installation_id,
        owner=github.owner,
        repo=github.repo,
        number=number,
        head_sha=head_sha,
        check_run_id=check_run_id,
        targets=found,
        over=[f"{t['path']}::{t['class_name']}" for t in over],
        max_modules=config.max_modules,
        patches=patches,
        key=key,
        job_id=job_id,
        comment_id=ask.comment_id,
        mode=mode,
        when_nothing_found=config.comment.when_nothing_found,
        min_speedup=engine["min_speedup"],
        min_speedup_vs_compile=config.min_speedup_vs_compile,
        private=pull.private,
        kernelized=kernelized,
    )
    return _fan_out(svc, app, context, config, engine, bundle, entries)


def _fan_out(
    svc: Services,
    app: Any,
    context: PublishContext,
    config: RepoConfig,
    engine: dict[str, Any],
    bundle: Any,
    entries: list[publish.ModuleProgress],
) -> dict[str, Any]:
    """One GPU task per file: its classes' suggestions are checked applied together there. Each
    tells the github side when it starts (its notice) and ends (its link): the check run follows."""
    job_id, check_run_id, found = context.job_id, context.check_run_id, context.targets
    assert job_id is not None
    files = by_file(found)
    notice = {
        "job_id": job_id,
        "installation_id": context.installation_id,
        "owner": context.owner,
        "repo": context.repo,
        "check_run_id": check_run_id,
    }
    header = []
    for path, names in files.items():
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
    _record_sent(svc, job_id, task_ids, entries, files)
    if not header:  # every changed class is an applied suggestion, unchanged: nothing to run
        publish_pull_request(svc, [], context)
        kernelized = len(context.kernelized)
        return {"modules": 0, "kernelized": kernelized, "check_run_id": check_run_id, "job_id": job_id}
    show_progress(svc, notice)  # in progress: every module queued, and what is ahead of them
    run_chord(app, header, context)
    log.info(
        "planned %d module(s) for %s#%d at %s",
        len(found),
        svc.github.full_name,
        context.number,
        context.head_sha[:7],
    )
    return {"modules": len(found), "check_run_id": check_run_id, "job_id": job_id}


def run_chord(app: Any, header: list[Any], context: PublishContext) -> Any:
    """The modules' GPU tasks, then publishing; if any of them fails (its worker lost, a time
    limit, an exception), the error callback fails the job and completes the check run instead.

    The callback takes the failed task's id alone (Celery's old-style errback), so Celery sends it
    through the queue to a github worker: a GPU worker never runs GitHub code."""
    body = app.signature(PUBLISH_TASK, kwargs={"context": context.to_dict()})
    body.link_error(app.signature(PUBLISH_FAILED_TASK, kwargs={"context": context.to_dict()}))
    return chord(header)(body)


def _ask_for_approval(github: RepoClient, head_sha: str, author: str, config: RepoConfig) -> dict[str, Any]:
    if needs_approval_run(github.check_runs(head_sha, CHECK_NAME)):
        github.create_check_run(
            head_sha,
            CHECK_NAME,
            "completed",
            conclusion="action_required",
            output={
                "title": "Waiting for a maintainer",
                "summary": approval_summary(author, config.trust.label),
            },
            actions=[RUN_ACTION],
        )
    return {"skipped": f"waiting for a maintainer: @{author} may not run code here"}


def _config_failed(github: RepoClient, head_sha: str, exc: RepoConfigError) -> None:
    summary = (
        f"`{exc.path}` on the default branch is not valid, so nothing ran:\n\n"
        f"- key: `{exc.key or '(file)'}`\n- problem: {exc.message}\n\n"
        "Fix the file on the default branch, then re-run this check. The reference is `docs/config.md`."
    )
    github.create_check_run(
        head_sha,
        CHECK_NAME,
        "completed",
        conclusion="failure",
        output={"title": f"Invalid {exc.path}", "summary": summary},
    )


def _already_kernelized(
    svc: Services, number: int, found: list[dict[str, Any]], sources: dict[str, str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``found`` split into the classes to run and those that are a suggestion applied earlier,
    unchanged (what was verified is what is there: not run again). A database that cannot answer
    runs everything."""
    repository = svc.github.full_name
    try:
        with svc.sessions() as session:
            run, done = [], []
            for t in found:
                s = tracking.applied_here(
                    session, repository, number, t["path"], t["class_name"], sources[t["path"]]
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
        log.error("could not look up applied suggestions of %s#%d: %s", repository, number, exc)
        return found, []


def _open_job(svc: Services, key: str, ask: PlanRequest, head_sha: str, modules: int) -> int:
    """The active job for ``key`` (a redelivered or retried plan), or a new one; its id."""
    repository = svc.github.full_name
    with svc.sessions() as session, session.begin():
        for job in jobs.pull_jobs(session, repository, ask.number):
            if job.key == key:
                return job.id
        job = Job(
            key=key,
            installation_id=svc.github.installation_id,
            repository=repository,
            pull_number=ask.number,
            head_sha=head_sha,
            state="queued",
            task_ids=[],
            reason=ask.reason[:64],
            requested_by=ask.sender[:100],
            comment_id=ask.comment_id,
            modules=modules,
        )
        session.add(job)
        session.flush()
        return job.id


def _job_check_run(svc: Services, job_id: int, existing: Sequence[CheckRunInfo]) -> tuple[bool, int | None]:
    """Whether the job was cancelled already; else its check run to go on with (None: open one)."""
    with svc.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
        if job.state == "cancelled":
            return True, None
        return False, check_run_to_reuse(job.check_run_id, existing)


def _take_slot(svc: Services, job_id: int, check_run_id: int) -> Slot:
    """The job's check run recorded, and its turn under the installation's limits taken (running)
    or not (waiting, why recorded); two plans never both take the last slot."""
    installation_id = svc.github.installation_id
    with svc.sessions() as session, session.begin():
        job = session.get(Job, job_id, with_for_update=True)
        assert job is not None
        job.check_run_id = check_run_id
        cancelled, wait, first_wait = job.state == "cancelled", None, False
        if not cancelled:
            jobs.lock_installation(session, installation_id)
            wait = jobs.wait_reason(session, installation_id, job_limits(svc.settings), job_id)
            first_wait = says_queued(wait, job.detail)
            if wait:
                job.detail = wait
            else:
                job.state, job.detail = "running", ""
        return Slot(cancelled, wait, first_wait, job.detail)


def _record_sent(
    svc: Services,
    job_id: int,
    task_ids: list[str],
    entries: list[publish.ModuleProgress],
    files: dict[str, list[str]],
) -> None:
    """The job's GPU tasks and its modules' progress, kept before the tasks are sent."""
    with svc.sessions() as session, session.begin():
        job = jobs.lock_job(session, job_id)
        assert job is not None
        job.task_ids = task_ids
        job.progress = {
            "sent": utcnow().isoformat(timespec="microseconds"),
            "seq": (job.progress or {}).get("seq", 0),  # a redelivered plan's numbers go on
            "modules": [dataclasses.asdict(e) for e in entries],
            "tasks": {tid: [f"{p}::{n}" for n in files[p]] for tid, p in zip(task_ids, files, strict=True)},
        }
