"""Progress: the check run follows the GPU tasks. Each GPU task's start notice and its link (its
result) run :func:`record_progress` on the github queue; GPU workers never call GitHub.

``context`` is the notice the plan gave each GPU task: the job, the installation, the repository
and the check run."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any, Literal

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from bot import jobs, publish
from bot.flows.common import Services, dashboard_url
from bot.github import GitHubError
from bot.models import Job
from runners.messages import ModuleResult
from runners.results import MessageError

log = logging.getLogger(__name__)
PROGRESS_ROUNDS = 3  # a writer that may have overtaken a newer one shows the latest again, this often at most

AfterWrite = Literal["again", "final", "done"]


def after_write(state: str | None, latest: Any, seq: int, has_final: bool) -> AfterWrite:
    """What follows progress write ``seq``, from the job as it is now (``state`` None: it is gone):
    ``again`` when a newer write exists, which this one may have overtaken (the latest is shown
    again); ``final`` when the job ended meanwhile with its last word kept (sent again, after this
    write); else ``done``."""
    if state == "running":
        return "again" if latest != seq else "done"
    return "final" if state is not None and has_final else "done"


def record_progress(
    svc: Services, context: dict[str, Any], result: dict[str, Any] | None = None, running: Sequence[str] = ()
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
    return show_progress(svc, context, updates)


def show_progress(
    svc: Services, context: dict[str, Any], updates: Sequence[publish.ModuleProgress] = ()
) -> dict[str, Any]:
    """Record ``updates`` with the job and show its modules on the check run, while it runs.

    Never fails the job: GitHub or the database failing loses this update only (logged). Never
    takes the check run back: a job that is not running is not shown, and when the job ended
    while this update was on its way, the check run's final output (``Job.check_final``, kept
    before it is sent) is sent again after it. Each update takes a number (``seq``); one that finds
    a newer number after its write may have overtaken it, and shows the latest state again."""
    job_id = context["job_id"]
    shown: int | None = None
    for _ in range(PROGRESS_ROUNDS):
        try:
            snapshot = _snapshot(svc, context, updates)
        except SQLAlchemyError as exc:
            log.error("job %s: progress not recorded: %s", job_id, exc)
            return {"dropped": str(exc)}
        updates = ()
        if snapshot is None:
            return {"skipped": "the job is not running"}
        seq, output = snapshot
        try:
            svc.github.update_check_run(context["check_run_id"], status="in_progress", output=output)
            shown = seq
        except GitHubError as exc:
            log.warning("job %s: progress %d not shown: %s", job_id, seq, exc)
        if not _overtaken(svc, context, seq):
            break
    return {"shown": shown}


def _snapshot(
    svc: Services, context: dict[str, Any], updates: Sequence[publish.ModuleProgress]
) -> tuple[int, dict[str, str]] | None:
    """Record ``updates`` and take the next number: (number, the check run's output); None when
    the job is not running."""
    with svc.sessions() as session, session.begin():
        job = jobs.lock_job(session, context["job_id"])
        if job is None or job.state != "running" or job.progress is None:
            return None
        modules = publish.advance([publish.ModuleProgress(**m) for m in job.progress["modules"]], updates)
        seq = int(job.progress.get("seq", 0)) + 1
        job.progress = {**job.progress, "seq": seq, "modules": [dataclasses.asdict(m) for m in modules]}
        ahead = jobs.work_ahead(session, job)
    dashboard = dashboard_url(svc.settings, svc.github.full_name)
    return seq, publish.check_run_progress(modules, ahead=ahead, dashboard=dashboard).as_output()


def _overtaken(svc: Services, context: dict[str, Any], seq: int) -> bool:
    """After progress write ``seq`` (see :func:`after_write`): True when it must show the latest
    again; the job's final output sent again when it ended meanwhile."""
    job_id = context["job_id"]
    try:
        with svc.sessions() as session:
            job = session.get(Job, job_id)
            state = job.state if job is not None else None
            final = job.check_final if job is not None else None
            latest = (job.progress or {}).get("seq") if job is not None else None
    except SQLAlchemyError as exc:
        log.error("job %s: could not look at the job after progress %d: %s", job_id, seq, exc)
        return False
    step = after_write(state, latest, seq, bool(final))
    if step == "final" and final:
        run_id = context["check_run_id"]
        try:
            svc.github.update_check_run(run_id, conclusion=final["conclusion"], output=final["output"])
        except GitHubError as exc:
            log.error("job %s: check run %s may show progress after its end: %s", job_id, run_id, exc)
    return step == "again"


def job_progress(
    sessions: sessionmaker[Session], job_id: int | None
) -> tuple[list[publish.ModuleProgress], dict[str, list[str]]]:
    """The job's modules as last recorded, and its GPU tasks' targets by task id (none: empty)."""
    if job_id is None:
        return [], {}
    with sessions() as session:
        job = session.get(Job, job_id)
        progress = (job.progress if job is not None else None) or {}
    modules = [publish.ModuleProgress(**m) for m in progress.get("modules", [])]
    return modules, dict(progress.get("tasks", {}))
