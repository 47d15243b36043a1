"""Database tables (SQLAlchemy 2 declarative). SQLite by default, PostgreSQL in production."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    String,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

Outcome = Literal["enqueued", "ignored", "ping"]
OUTCOMES: tuple[Outcome, ...] = ("enqueued", "ignored", "ping")

# SQLite only auto-increments an INTEGER PRIMARY KEY; elsewhere ids are 64-bit.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in and out, also on SQLite (which stores no offset)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: pass an aware one (datetime.now(UTC))")
        return value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


class Delivery(Base):
    """One webhook delivery GitHub sent us, recorded once (``delivery_id`` is unique)."""

    __tablename__ = "deliveries"
    __table_args__ = (
        CheckConstraint(
            "outcome IN ({})".format(", ".join(f"'{o}'" for o in OUTCOMES)), name="deliveries_outcome"
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    # X-GitHub-Delivery: a GUID; redeliveries keep it, so it is the deduplication key.
    delivery_id: Mapped[str] = mapped_column(String(100), unique=True)
    event: Mapped[str] = mapped_column(String(64))
    action: Mapped[str | None] = mapped_column(String(64))
    installation_id: Mapped[int | None] = mapped_column(BigInteger)
    repository: Mapped[str | None] = mapped_column(String(256))  # owner/name
    received_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    outcome: Mapped[str] = mapped_column(String(16))
    job_id: Mapped[str | None] = mapped_column(String(255))

    def __repr__(self) -> str:
        return f"<Delivery {self.delivery_id} {self.event}.{self.action} {self.outcome}>"


JobState = Literal["queued", "running", "done", "failed", "cancelled"]
JOB_STATES: tuple[JobState, ...] = ("queued", "running", "done", "failed", "cancelled")
ACTIVE_STATES: tuple[JobState, ...] = ("queued", "running")


class Job(Base):
    """One run of the engine over a pull request's modules: what limits, ``status`` and ``cancel`` see."""

    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint("state IN ({})".format(", ".join(f"'{s}'" for s in JOB_STATES)), name="jobs_state"),
        Index("jobs_pull", "repository", "pull_number"),
        Index("jobs_installation_state", "installation_id", "state"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    key: Mapped[str] = mapped_column(String(400))  # the idempotency key (repo#PR@sha:settings)
    installation_id: Mapped[int] = mapped_column(BigInteger)
    repository: Mapped[str] = mapped_column(String(256))  # owner/name
    pull_number: Mapped[int] = mapped_column(Integer)
    head_sha: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(String(64))  # what started it: pull_request.opened, command, ...
    requested_by: Mapped[str] = mapped_column(String(100), default="")
    state: Mapped[str] = mapped_column(String(16), default="queued")
    detail: Mapped[str] = mapped_column(String(500), default="")  # why it waits, failed or was cancelled
    modules: Mapped[int] = mapped_column(Integer, default=0)
    check_run_id: Mapped[int | None] = mapped_column(BigInteger)
    comment_id: Mapped[int | None] = mapped_column(BigInteger)  # the command comment, for reactions
    task_ids: Mapped[list[str]] = mapped_column(JSON, default=list)  # the GPU tasks, for cancel
    gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.repository}#{self.pull_number}@{self.head_sha[:7]} {self.state}>"


class Installation(Base):
    """An installation of the app, kept up to date from ``installation*`` events."""

    __tablename__ = "installations"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)  # GitHub's id
    account: Mapped[str] = mapped_column(String(100))
    account_type: Mapped[str] = mapped_column(String(32), default="User")
    repository_selection: Mapped[str] = mapped_column(String(16), default="selected")
    repositories: Mapped[list[str]] = mapped_column(JSON, default=list)  # owner/name, when selected
    suspended: Mapped[bool] = mapped_column(Boolean, default=False)
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)

    def __repr__(self) -> str:
        return f"<Installation {self.id} {self.account}{' deleted' if self.deleted else ''}>"
