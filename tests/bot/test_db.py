"""The deliveries table on SQLite and PostgreSQL: unique delivery ids, real rollbacks, UTC times."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from bot import db
from bot.models import Delivery


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = db.make_engine(database_url)
    db.create_schema(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    return db.session_factory(engine)


def _count(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return session.execute(select(func.count()).select_from(Delivery)).scalar_one()


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("postgresql://u:p@h:5433/d", "postgresql+psycopg://u:p@h:5433/d"),
        ("postgres://u@h/d?sslmode=require", "postgresql+psycopg://u@h/d?sslmode=require"),
        ("postgresql+psycopg://h/d", "postgresql+psycopg://h/d"),
        ("sqlite:///kernelize.db", "sqlite:///kernelize.db"),
        ("sqlite:////abs/path.db", "sqlite:////abs/path.db"),
    ],
)
def test_normalize_url(url: str, normal: str) -> None:
    assert db.normalize_url(url) == normal


def test_postgresql_urls_use_psycopg3() -> None:
    assert db.make_engine("postgresql://u@127.0.0.1/d").dialect.driver == "psycopg"


def test_record_then_duplicate(sessions: sessionmaker[Session]) -> None:
    with sessions() as session, session.begin():
        row = db.record_delivery(
            session,
            delivery_id="d-1",
            event="pull_request",
            action="opened",
            installation_id=2**40,  # installation ids outgrew 32 bits long ago
            repository="octo/hello",
            outcome="ignored",
        )
        assert row is not None
    with sessions() as session, session.begin():
        again = db.record_delivery(session, delivery_id="d-1", event="pull_request", outcome="ignored")
        assert again is None
        # The transaction is still usable after the duplicate (a savepoint took the error).
        assert db.record_delivery(session, delivery_id="d-2", event="ping", outcome="ping") is not None
    with sessions() as session:
        stored = session.execute(select(Delivery).where(Delivery.delivery_id == "d-1")).scalar_one()
        assert (stored.event, stored.action, stored.installation_id, stored.repository) == (
            "pull_request",
            "opened",
            2**40,
            "octo/hello",
        )
        assert stored.received_at.tzinfo is not None
        assert stored.received_at.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
        assert abs((datetime.now(UTC) - stored.received_at).total_seconds()) < 60
    assert _count(sessions) == 2


def test_rollback_after_record_leaves_nothing(sessions: sessionmaker[Session]) -> None:
    """The web edge rolls back when the broker refuses; the row must go too (pysqlite's SAVEPOINT trap)."""
    with pytest.raises(RuntimeError), sessions() as session, session.begin():
        assert db.record_delivery(session, delivery_id="d-1", event="push", outcome="ignored") is not None
        raise RuntimeError("broker down")
    assert _count(sessions) == 0


def test_other_integrity_errors_are_not_duplicates(sessions: sessionmaker[Session]) -> None:
    with pytest.raises(IntegrityError), sessions() as session, session.begin():
        db.record_delivery(session, delivery_id="d-1", event="push", outcome="maybe")  # type: ignore[arg-type]
    assert _count(sessions) == 0


def test_concurrent_inserts_record_once(sessions: sessionmaker[Session]) -> None:
    """Two transactions racing on one delivery id: one row, one None, no error."""
    results: list[bool] = []
    first_inserted, release = threading.Event(), threading.Event()

    def first() -> None:
        with sessions() as session, session.begin():
            results.append(
                db.record_delivery(session, delivery_id="d", event="push", outcome="ignored") is not None
            )
            first_inserted.set()
            release.wait(5)  # hold the transaction open while the second one tries

    def second() -> None:
        first_inserted.wait(5)
        with sessions() as session, session.begin():
            results.append(
                db.record_delivery(session, delivery_id="d", event="push", outcome="ignored") is not None
            )

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    threading.Timer(0.3, release.set).start()
    for thread in threads:
        thread.join(10)
    assert sorted(results) == [False, True]
    assert _count(sessions) == 1


def test_in_memory_sqlite_is_shared_across_threads() -> None:
    engine = db.make_engine("sqlite://")
    db.create_schema(engine)
    sessions = db.session_factory(engine)

    def insert() -> None:
        with sessions() as session, session.begin():
            db.record_delivery(session, delivery_id="t", event="ping", outcome="ping")

    thread = threading.Thread(target=insert)
    thread.start()
    thread.join()
    assert _count(sessions) == 1
