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


def _claim(engine: Engine, delivery_id: str, **fields: object) -> bool:
    values: dict[str, object] = {"event": "pull_request", "outcome": "enqueued"} | fields
    with engine.begin() as conn:
        return db.claim_delivery(conn, delivery_id=delivery_id, **values)  # type: ignore[arg-type]


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


def test_in_memory_sqlite_is_shared_across_threads() -> None:
    engine = db.make_engine("sqlite://")
    db.create_schema(engine)
    sessions = db.session_factory(engine)

    thread = threading.Thread(target=_claim, args=(engine, "t"), kwargs={"event": "ping", "outcome": "ping"})
    thread.start()
    thread.join()
    assert _count(sessions) == 1


def test_claim_records_once_as_it_will_stay(engine: Engine, sessions: sessionmaker[Session]) -> None:
    # Installation ids outgrew 32 bits long ago.
    fields = {"action": "opened", "installation_id": 2**40, "repository": "octo/hello"}
    assert _claim(engine, "c", job_id="delivery-c", **fields) is True
    assert _claim(engine, "c", outcome="ignored") is False  # a redelivery: the first row stays
    with sessions() as session:
        row = session.execute(select(Delivery)).scalar_one()
    assert (row.delivery_id, row.event, row.action, row.installation_id, row.repository) == (
        "c",
        "pull_request",
        "opened",
        2**40,
        "octo/hello",
    )
    assert (row.outcome, row.job_id) == ("enqueued", "delivery-c")
    assert row.received_at.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert abs((datetime.now(UTC) - row.received_at).total_seconds()) < 60


def test_claim_rolled_back_leaves_nothing_and_can_be_claimed_again(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    with pytest.raises(RuntimeError), engine.begin() as conn:
        assert db.claim_delivery(conn, delivery_id="c", event="push", outcome="ignored")
        raise RuntimeError("broker down")
    assert _count(sessions) == 0
    assert _claim(engine, "c") is True


def test_claim_refuses_other_integrity_errors(engine: Engine, sessions: sessionmaker[Session]) -> None:
    with pytest.raises(IntegrityError):
        _claim(engine, "c", outcome="maybe")
    assert _count(sessions) == 0


@pytest.mark.parametrize("first_commits", [True, False])
def test_concurrent_claims_record_once(
    engine: Engine, sessions: sessionmaker[Session], first_commits: bool
) -> None:
    """Two transactions racing on one delivery id. The second waits for the first, then records
    nothing when it committed, its own row when it rolled back (the broker refused: GitHub's
    redelivery must get through)."""
    results: dict[str, bool] = {}
    first_inserted, release = threading.Event(), threading.Event()

    def first() -> None:
        try:
            with engine.begin() as conn:
                results["first"] = db.claim_delivery(conn, delivery_id="c", event="push", outcome="ignored")
                first_inserted.set()
                release.wait(5)  # hold the transaction open while the second one tries
                if not first_commits:
                    raise RuntimeError("broker down")
        except RuntimeError:
            pass

    def second() -> None:
        first_inserted.wait(5)
        results["second"] = _claim(engine, "c", event="push", outcome="ignored")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    threading.Timer(0.3, release.set).start()
    for thread in threads:
        thread.join(10)
    assert results == {"first": True, "second": not first_commits}
    assert _count(sessions) == 1


def test_set_job_id(engine: Engine, sessions: sessionmaker[Session]) -> None:
    assert _claim(engine, "c", job_id="delivery-c")
    with engine.begin() as conn:
        db.set_job_id(conn, "c", "another-id")
    with sessions() as session:
        assert session.execute(select(Delivery.job_id)).scalar_one() == "another-id"
