"""Jobs and installations in the database: what the limits, ``/kernelize status`` and ``cancel`` read.

Functions take a session and leave committing to the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.orm import Session

from bot.models import ACTIVE_STATES, Installation, Job, utcnow


@dataclass(frozen=True)
class JobLimits:
    """How many jobs an installation may run at once, and its GPU minutes a day: shared GPUs are not
    one repository's to take."""

    concurrent_jobs: int = 2
    gpu_minutes_per_day: float = 240.0


# A job still "running" after this long died with its worker or its chord (GPU tasks are bounded by the
# broker's 6 h visibility timeout): it stops holding a slot instead of blocking the installation forever.
STALE_AFTER = timedelta(hours=8)


def active_jobs(session: Session, installation_id: int, *, besides: int | None = None) -> int:
    query = select(func.count(Job.id)).where(
        Job.installation_id == installation_id,
        Job.state == "running",
        Job.created_at >= utcnow() - STALE_AFTER,
    )
    if besides is not None:
        query = query.where(Job.id != besides)
    return int(session.execute(query).scalar_one())


def gpu_seconds_today(session: Session, installation_id: int, now: datetime | None = None) -> float:
    """GPU seconds spent since 00:00 UTC by this installation's jobs."""
    midnight = (now or utcnow()).astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    query = select(func.coalesce(func.sum(Job.gpu_seconds), 0.0)).where(
        Job.installation_id == installation_id, Job.created_at >= midnight
    )
    return float(session.execute(query).scalar_one())


def seconds_to_midnight(now: datetime | None = None) -> float:
    now = (now or utcnow()).astimezone(UTC)
    tomorrow = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return (tomorrow - now).total_seconds()


def lock_installation(session: Session, installation_id: int) -> None:
    """Hold this installation's slots until the transaction ends, so two plans never both take the
    last one: PostgreSQL, a transaction-scoped advisory lock on the installation id; SQLite, the
    database's write lock (taken by a write that changes nothing), which serialises writers."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SLOT_LOCK + installation_id})
    else:
        session.execute(update(Job).where(Job.id == -1).values(detail=Job.detail))


_SLOT_LOCK = 0x6B7A << 32  # advisory lock ids for slots: apart from the migration lock's


def wait_reason(session: Session, installation_id: int, limits: JobLimits, job_id: int) -> str | None:
    """Why this job must wait before it starts, or None when it may start now. Call it after
    :func:`lock_installation` in the transaction that then marks the job running."""
    running = active_jobs(session, installation_id, besides=job_id)
    if running >= limits.concurrent_jobs:
        return (
            f"{running} Kernelize job(s) are running for this installation (limit "
            f"{limits.concurrent_jobs}); this one starts when one finishes"
        )
    used = gpu_seconds_today(session, installation_id) / 60
    if used >= limits.gpu_minutes_per_day:
        return (
            f"this installation has used its {limits.gpu_minutes_per_day:g} GPU-minutes for today "
            f"({used:.0f} min); this job starts after 00:00 UTC"
        )
    return None


def pull_jobs(session: Session, repository: str, number: int, *, active: bool = True) -> list[Job]:
    query = select(Job).where(Job.repository == repository, Job.pull_number == number)
    if active:
        query = query.where(Job.state.in_(ACTIVE_STATES))
    return list(session.execute(query.order_by(Job.id)).scalars())


def lock_job(session: Session, job_id: int) -> Job | None:
    """The job, locked until the transaction ends, for a read-modify-write: PostgreSQL, its row;
    SQLite, the database's write lock, taken first by a write that changes nothing (a transaction
    that read before it wrote fails at the write, in WAL mode, once another writer committed)."""
    session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(state=Job.state)
        .execution_options(synchronize_session=False)
    )
    return session.get(Job, job_id, with_for_update=True)


def work_ahead(session: Session, job: Job) -> tuple[int, int]:
    """``(modules, jobs)``: the unfinished modules of running jobs whose GPU tasks were sent before
    ``job``'s, and how many jobs they belong to; every installation's, as GPU workers are shared.
    From the jobs' recorded progress (``Job.progress``); a job without it is not counted."""
    sent = (job.progress or {}).get("sent")
    if not sent:
        return 0, 0
    query = select(Job).where(
        Job.state == "running", Job.id != job.id, Job.created_at >= utcnow() - STALE_AFTER
    )
    modules = ahead = 0
    for other in session.execute(query).scalars():
        progress = other.progress or {}
        if not progress.get("sent") or progress["sent"] >= sent:
            continue
        left = sum(1 for m in progress.get("modules", []) if m.get("state") in ("queued", "running"))
        modules, ahead = modules + left, ahead + (left > 0)
    return modules, ahead


def finish(
    session: Session, job_id: int, state: str, *, gpu_seconds: float = 0.0, detail: str = ""
) -> Job | None:
    """Mark the job finished unless it was cancelled meanwhile (that state sticks); return it."""
    job = lock_job(session, job_id)
    if job is None:
        return None
    if job.state != "cancelled":
        job.state = state
        job.detail = detail[:500]
    job.gpu_seconds = gpu_seconds
    job.finished_at = job.finished_at or utcnow()
    return job


# ---------------------------------------------------------------------------
# Installations


def record_installation(session: Session, event: str, payload: dict[str, Any]) -> Installation | None:
    """Apply an ``installation`` or ``installation_repositories`` event; return the row."""
    inst = payload.get("installation") or {}
    if "id" not in inst:
        return None
    action = payload.get("action")
    row = session.get(Installation, int(inst["id"]), with_for_update=True)
    account = inst.get("account") or {}
    if row is None:
        row = Installation(id=int(inst["id"]), account=str(account.get("login", "")), repositories=[])
        session.add(row)
    row.account = str(account.get("login", row.account))
    row.account_type = str(account.get("type", row.account_type or "User"))
    row.repository_selection = str(inst.get("repository_selection", row.repository_selection or "selected"))
    repos = set(row.repositories or [])
    if event == "installation":
        if action in ("created", "new_permissions_accepted", "unsuspend"):
            row.deleted = False
        if action == "created":
            repos = {r["full_name"] for r in payload.get("repositories") or [] if "full_name" in r}
        elif action == "deleted":
            row.deleted = True
        row.suspended = action == "suspend" or (action != "unsuspend" and row.suspended)
    elif event == "installation_repositories":
        repos |= {r["full_name"] for r in payload.get("repositories_added") or [] if "full_name" in r}
        repos -= {r["full_name"] for r in payload.get("repositories_removed") or [] if "full_name" in r}
    row.repositories = sorted(repos)
    row.updated_at = utcnow()
    return row
