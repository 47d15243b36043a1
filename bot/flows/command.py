"""Commands: one ``/kernelize`` comment answered. 👀 when it is picked up, then a reply, a run, or
😕 with the reason. ``COMMANDS`` maps each action of the grammar (``bot/commands.py``) to its
handler and whether it needs write access: adding a command is one entry there."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot import applying, commands, jobs, tracking
from bot.flows.common import Services, has_write, load_config
from bot.flows.plan import PlanRequest, plan_pull_request
from bot.models import Job, utcnow
from bot.repo_config import RepoConfigError
from runners.generators import AVAILABLE as GENERATORS

RUNS_CODE = "runs code on this repository's GPUs"


@dataclass(frozen=True)
class CommandCall:
    """One parsed command and what answering it works with (``app``: the Celery app, which
    sends a run's tasks and revokes a cancelled job's)."""

    svc: Services
    app: Any
    number: int
    comment_id: int
    sender: str
    command: commands.Command


@dataclass(frozen=True)
class Handler:
    """How one action is answered: ``answer`` does it; ``needs_write`` refuses anyone without
    write access first, telling them the action ``does`` that."""

    answer: Callable[[CommandCall], dict[str, Any]]
    needs_write: bool = False
    does: str = RUNS_CODE


# ---------------------------------------------------------------------------
# Decisions (pure)


def refusal(sender: str, action: str, does: str) -> str:
    """The reply to someone who may not give this command."""
    return (
        f"Sorry @{sender}, `/kernelize {action}` {does}, so it "
        "needs write, maintain or admin permission on the repository. A maintainer can start it for you."
    )


def status_text(found: list[Job]) -> str:
    """The pull request's active jobs as a table (``/kernelize status``)."""
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


def cancelled_text(job_ids: list[int]) -> str:
    if not job_ids:
        return "Nothing is queued or running for this pull request, so there was nothing to cancel."
    return f"Cancelled {len(job_ids)} job(s): " + ", ".join(str(j) for j in job_ids) + "."


def run_arguments(command: commands.Command) -> dict[str, Any]:
    """A run command's targets and options, as the plan takes them (plain values, for a queue)."""
    targets = [{"path": t.path, "class_name": t.class_name} for t in command.targets]
    return {"targets": targets, "options": command.overrides()}


# ---------------------------------------------------------------------------
# Handlers


def _help(call: CommandCall) -> dict[str, Any]:
    github = call.svc.github
    pull = github.pull(call.number)
    try:
        summary = load_config(github, pull).summary()
    except RepoConfigError as exc:
        summary = f"**The config is not valid:** {exc}"
    github.comment(call.number, commands.help_text(GENERATORS, config_summary=summary))
    return {"action": "help"}


def _status(call: CommandCall) -> dict[str, Any]:
    github = call.svc.github
    with call.svc.sessions() as session:
        found = jobs.pull_jobs(session, github.full_name, call.number)
        text = status_text(found)
    github.comment(call.number, text)
    return {"action": "status", "jobs": len(found)}


def _stats(call: CommandCall) -> dict[str, Any]:
    github = call.svc.github
    with call.svc.sessions() as session:
        data = tracking.stats(session, repository=github.full_name)
    github.comment(call.number, tracking.stats_markdown(data, github.full_name))
    return {"action": "stats", **{k: data[k] for k in ("posted", "accepted")}}


def _cancel(call: CommandCall) -> dict[str, Any]:
    """Cancel this pull request's queued and running jobs: their GPU tasks are revoked and whatever
    they still report is discarded."""
    github, sender = call.svc.github, call.sender
    output = {"title": "Cancelled", "summary": f"Cancelled by @{sender} with `/kernelize cancel`."}
    with call.svc.sessions() as session, session.begin():
        found = jobs.pull_jobs(session, github.full_name, call.number)
        for job in found:
            job.state, job.detail = "cancelled", f"cancelled by @{sender}"
            job.finished_at = job.finished_at or utcnow()
            job.check_final = {"conclusion": "cancelled", "output": output}  # see bot/flows/progress.py
        cancelled = [(j.id, list(j.task_ids or []), j.check_run_id) for j in found]
    for _, task_ids, check_run_id in cancelled:
        if task_ids:
            call.app.control.revoke(task_ids)
        if check_run_id is not None:
            github.update_check_run(check_run_id, conclusion="cancelled", output=output)
    github.comment(call.number, cancelled_text([j for j, _, _ in cancelled]))
    return {"action": "cancel"}


def _apply(call: CommandCall) -> dict[str, Any]:
    target = call.command.targets[0]
    return applying.answer(
        call.svc.github, call.svc.sessions, call.number, call.comment_id, target, call.sender
    )


def _run(call: CommandCall) -> dict[str, Any]:
    ask = PlanRequest(
        call.number,
        reason="command",
        sender=call.sender,
        comment_id=call.comment_id,
        **run_arguments(call.command),
    )
    return plan_pull_request(call.svc, call.app, ask)


COMMANDS: dict[commands.Action, Handler] = {
    "help": Handler(_help),
    "status": Handler(_status),
    "stats": Handler(_stats),
    "cancel": Handler(_cancel, needs_write=True),
    "apply": Handler(_apply, needs_write=True, does="commits to this pull request's branch"),
    "run": Handler(_run, needs_write=True),
}


def handle_command(
    svc: Services, app: Any, number: int, comment_id: int, body: str, sender: str = ""
) -> dict[str, Any]:
    """Answer one ``/kernelize`` comment: 👀 when picked up, then a reply, a run, or 😕 with the
    reason. A comment the grammar cannot read gets the help, with the word at fault pointed out."""
    github = svc.github
    try:
        command = commands.parse(body, GENERATORS)
    except commands.CommandError as exc:
        github.react(comment_id, "confused")
        github.comment(number, commands.help_text(GENERATORS, error=exc))
        return {"error": exc.message}
    if command is None:
        return {"skipped": "no command"}
    github.react(comment_id, "eyes")
    handler = COMMANDS[command.action]
    if handler.needs_write and not has_write(github, sender):
        github.react(comment_id, "confused")
        github.comment(number, refusal(sender, command.action, handler.does))
        return {"refused": sender}
    return handler.answer(CommandCall(svc, app, number, comment_id, sender, command))
