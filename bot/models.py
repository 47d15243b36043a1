"""Database tables (SQLAlchemy 2 declarative). SQLite by default, PostgreSQL in production."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import BigInteger, CheckConstraint, DateTime, Dialect, Integer, String
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
