"""What the flows share: the services they are handed, the check run's name, replies to commands,
the repository config and who may write."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from bot import jobs
from bot.github import PullInfo, RepoClient
from bot.repo_config import CONFIG_PATH, RepoConfig, load_repo_config
from bot.settings import Settings

CHECK_NAME = "Kernelize"
WRITE_PERMISSIONS = frozenset({"admin", "maintain", "write"})


@dataclass(frozen=True)
class Services:
    """What a flow works with, built by the task that runs it: one repository's GitHub client, the
    server's settings and the database, handed in so that a flow reads no global state."""

    github: RepoClient
    settings: Settings
    sessions: sessionmaker[Session]


def react(github: RepoClient, comment_id: int | None, content: str) -> None:
    """A reaction on the command's comment; an automatic run has none to react to."""
    if comment_id is not None:
        github.react(comment_id, content)


def tell(github: RepoClient, number: int, comment_id: int | None, text: str, *, failed: bool = False) -> None:
    """Answer a command (no-op for automatic runs): a reply, and 😕 when it failed."""
    if comment_id is None:
        return
    if failed:
        github.react(comment_id, "confused")
    github.comment(number, text)


def may_write(permission: str) -> bool:
    """Whether a permission GitHub reports lets its holder start work that spends the GPUs."""
    return permission in WRITE_PERMISSIONS


def has_write(github: RepoClient, login: str) -> bool:
    """Whether ``login`` may write to the repository; nobody (an empty login) may, without asking."""
    return bool(login) and may_write(github.permission(login))


def load_config(github: RepoClient, pull: PullInfo) -> RepoConfig:
    """The config on the default branch: a pull request cannot change its own rules."""
    return load_repo_config(github.file_text(CONFIG_PATH, pull.default_branch))


def job_limits(settings: Settings) -> jobs.JobLimits:
    """The server's per-installation limits on jobs."""
    return jobs.JobLimits(settings.max_concurrent_jobs, settings.gpu_minutes_per_day)


def dashboard_url(settings: Settings, repository: str) -> str | None:
    """The repository's dashboard page, where the service has a public address."""
    base = settings.public_url
    return f"{base.rstrip('/')}/repos/{repository}" if base else None


def finish(
    sessions: sessionmaker[Session], job_id: int, state: str, *, gpu_seconds: float = 0.0, detail: str = ""
) -> str:
    """Record the job's end; return its final state (a cancel that came first sticks)."""
    with sessions() as session, session.begin():
        job = jobs.finish(session, job_id, state, gpu_seconds=gpu_seconds, detail=detail)
        return job.state if job is not None else state


def exception_line(exc: BaseException) -> str:
    """The exception's type and the first line of its message."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first}"[:300] if first else type(exc).__name__
