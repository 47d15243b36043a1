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
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
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
    # What the check run shows while the GPU tasks run: {"sent", "seq", "modules": [ModuleProgress]}
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The check run's last word ({"conclusion", "output"}), kept before it is sent: a progress update
    # that reaches GitHub after it puts it back (bot/flows/progress.py)
    check_final: Mapped[dict[str, Any] | None] = mapped_column(JSON)
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


SuggestionStatus = Literal["posted", "applied", "merged", "outdated", "dismissed"]
SUGGESTION_STATUSES: tuple[SuggestionStatus, ...] = ("posted", "applied", "merged", "outdated", "dismissed")


class Suggestion(Base):
    """One suggested change as posted, and what became of it (``events`` keeps the history)."""

    __tablename__ = "suggestions"
    __table_args__ = (
        CheckConstraint(
            "status IN ({})".format(", ".join(f"'{s}'" for s in SUGGESTION_STATUSES)),
            name="suggestions_status",
        ),
        UniqueConstraint("repository", "pull_number", "head_sha", "target", name="suggestions_once"),
        Index("suggestions_repo_status", "repository", "status"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    installation_id: Mapped[int] = mapped_column(BigInteger)
    repository: Mapped[str] = mapped_column(String(256))  # owner/name
    private: Mapped[bool] = mapped_column(Boolean, default=True)  # unknown counts as private
    pull_number: Mapped[int] = mapped_column(Integer)
    head_sha: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(String(1000))
    start_line: Mapped[int] = mapped_column(Integer)
    end_line: Mapped[int] = mapped_column(Integer)
    class_name: Mapped[str] = mapped_column(String(200))
    target: Mapped[str] = mapped_column(String(1200))
    generator: Mapped[str] = mapped_column(String(64))
    candidate_id: Mapped[str] = mapped_column(String(200))
    code: Mapped[str] = mapped_column(Text)  # the suggested code, as verified
    code_sha256: Mapped[str] = mapped_column(String(64))
    original_sha256: Mapped[str] = mapped_column(String(64))  # the class's lines it replaces
    max_abs_error: Mapped[float | None] = mapped_column(Float)
    eager_ms: Mapped[float | None] = mapped_column(Float)
    compile_ms: Mapped[float | None] = mapped_column(Float)
    kernel_ms: Mapped[float | None] = mapped_column(Float)
    speedup_eager: Mapped[float | None] = mapped_column(Float)
    speedup_compile: Mapped[float | None] = mapped_column(Float)
    gpu: Mapped[str] = mapped_column(String(200), default="")
    review_id: Mapped[int | None] = mapped_column(BigInteger)
    comment_id: Mapped[int | None] = mapped_column(BigInteger)
    comment_url: Mapped[str] = mapped_column(String(500), default="")
    status: Mapped[str] = mapped_column(String(16), default="posted")
    applied_sha: Mapped[str | None] = mapped_column(String(64))
    applied_by: Mapped[str | None] = mapped_column(String(100))
    applied_via_button: Mapped[bool] = mapped_column(Boolean, default=False)
    thumbs_up: Mapped[int] = mapped_column(Integer, default=0)
    thumbs_down: Mapped[int] = mapped_column(Integer, default=0)
    posted_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    applied_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())  # merged, dismissed or outdated
    events: Mapped[list[SuggestionEvent]] = relationship(
        back_populates="suggestion", order_by="SuggestionEvent.id", cascade="all, delete-orphan"
    )

    def __repr__(self) -> str:
        return f"<Suggestion {self.id} {self.repository}#{self.pull_number} {self.target} {self.status}>"


class SuggestionEvent(Base):
    """A status change of a suggestion, with when, why and who."""

    __tablename__ = "suggestion_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    suggestion_id: Mapped[int] = mapped_column(
        BigId, ForeignKey("suggestions.id", ondelete="CASCADE"), index=True
    )
    status: Mapped[str] = mapped_column(String(16))
    at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    sha: Mapped[str | None] = mapped_column(String(64))
    actor: Mapped[str | None] = mapped_column(String(100))
    detail: Mapped[str] = mapped_column(String(500), default="")
    suggestion: Mapped[Suggestion] = relationship(back_populates="events")


class WebSession(Base):
    """A dashboard sign-in: who, and which repositories GitHub said they can read (at sign-in)."""

    __tablename__ = "web_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 of the cookie's token
    login: Mapped[str] = mapped_column(String(100))
    repositories: Mapped[list[str]] = mapped_column(JSON, default=list)  # owner/name
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
