"""The GitHub-side Celery tasks: the edge between the queue and the flows of ``bot/flows/``.

Each task takes primitives (the names, signatures and arguments messages already in the queues
carry), builds what its flow works with (:class:`bot.flows.common.Services`: the repository's
GitHub client, the settings, the database) and calls it. ``plan_pull_request`` plans a pull request
(``bot/flows/plan.py``) and fans its modules out to the ``gpu`` queue; a chord calls
``publish_pull_request`` (``bot/flows/publish.py``) with their reports, or ``publish_failed`` when
one fails. Meanwhile ``record_progress`` (``bot/flows/progress.py``) keeps the check run naming
every module with its state. ``handle_command`` answers ``/kernelize`` comments
(``bot/flows/command.py``); ``track`` follows the suggestions (``bot/flows/track.py``). GitHub
credentials never leave this side.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from bot import broker, commands, db, jobs
from bot.flows import command, plan, progress, publish
from bot.flows import track as track_flow
from bot.flows.common import Services, exception_line
from bot.flows.plan import Deferred
from bot.github import GitHubApp, InstallationClient
from bot.settings import Settings, load_settings
from runners.celery_app import (
    COMMAND_TASK,
    INSTALLATION_TASK,
    PLAN_TASK,
    PROGRESS_TASK,
    PUBLISH_FAILED_TASK,
    PUBLISH_TASK,
    TRACK_TASK,
)
from runners.generators import AVAILABLE as GENERATORS
from runners.messages import PublishContext
from runners.results import MessageError

__all__ = ["Deferred", "register"]

log = logging.getLogger(__name__)


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


def _services(installation_id: int, owner: str, repo: str) -> Services:
    """What a flow works with, for one repository of one installation."""
    return Services(_client(installation_id).repository(owner, repo), _settings(), _sessions())


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
    ask = plan.PlanRequest(number, head_sha, reason, sender, targets, options, comment_id, draft, label)
    return plan.plan_pull_request(_services(installation_id, owner, repo), app, ask)


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
    svc = _services(installation_id, owner, repo)
    return command.handle_command(svc, app, number, comment_id, body, sender)


def publish_pull_request(results: list[dict[str, Any]], context: PublishContext) -> dict[str, Any]:
    svc = _services(context.installation_id, context.owner, context.repo)
    return publish.publish_pull_request(svc, results, context)


def publish_failed(
    failed_task_id: str,
    context: PublishContext,
    why: str,
    task_errors: dict[str, str] | None = None,
) -> dict[str, Any]:
    svc = _services(context.installation_id, context.owner, context.repo)
    return publish.publish_failed(svc, failed_task_id, context, why, task_errors)


def record_progress(
    context: dict[str, Any], result: dict[str, Any] | None = None, running: Sequence[str] = ()
) -> dict[str, Any]:
    svc = _services(context["installation_id"], context["owner"], context["repo"])
    return progress.record_progress(svc, context, result, running)


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
    svc = _services(installation_id, owner, repo)
    return track_flow.track(svc, number, change, sender, merged, comment_ids, head_sha)


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
            same = {k: kwargs[k] for k in ("installation_id", "owner", "repo", "number", "comment_id")}
            self.app.send_task(
                PLAN_TASK,
                kwargs={
                    **same,
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


def _read_context(context: Any) -> PublishContext:
    """The publish step's context, read. One this worker cannot read says nowhere it could trust to
    report to: the reason is logged, and the task fails with it."""
    try:
        return PublishContext.from_dict(context)
    except MessageError as exc:
        log.error("a publish context was refused: %s", exc)
        raise


def _failure(app: Any, task_id: str) -> str:
    """What a failed task's result says (for a chord, Celery's ChordError naming the module's task
    and its exception): the exception's type and first line."""
    try:  # the callback may run before the chord's failure is stored: wait a little for it
        result = app.AsyncResult(task_id)
        result.get(timeout=10, propagate=False, disable_sync_subtasks=False)
        exc = result.result
    except Exception as err:  # the result backend itself failed: say that, never lose the callback
        return f"its result could not be read: {type(err).__name__}"
    return exception_line(exc) if isinstance(exc, BaseException) else "no result was stored"


def _task_errors(app: Any, job_id: int | None) -> dict[str, str]:
    """The job's GPU tasks that failed, by id: what each raised (type and first line), as the
    result backend has it. A backend that cannot answer names none."""
    _, tasks = progress.job_progress(_sessions(), job_id)
    errors = {}
    for task_id in tasks:
        try:
            result = app.AsyncResult(task_id)
            failed, exc = result.failed(), result.result
        except Exception as err:  # the backend itself failed: the summary still names the cause
            log.error("could not read the result of task %s: %s", task_id, err)
            continue
        if failed and isinstance(exc, BaseException):
            errors[task_id] = exception_line(exc)
    return errors


def _command_run(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The plan arguments of a run command (it parsed once already, so it parses again the same)."""
    parsed = commands.parse(kwargs.get("body", ""), GENERATORS)
    return command.run_arguments(parsed) if parsed is not None else {}
