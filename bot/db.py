"""Engine, sessions and the few writes the web edge makes. SQLite and PostgreSQL alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from bot.models import Delivery, Outcome

# psycopg 3 is the driver we ship; a bare postgresql:// would make SQLAlchemy look for psycopg2.
_PG_ALIASES = ("postgresql", "postgres")


def normalize_url(url: str) -> str:
    """``postgresql://`` and ``postgres://`` become ``postgresql+psycopg://``; others pass through."""
    parsed = make_url(url)
    if parsed.drivername in _PG_ALIASES:
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def make_engine(url: str) -> Engine:
    parsed = make_url(normalize_url(url))
    backend = parsed.get_backend_name()
    if backend != "sqlite":
        connect_args: dict[str, object] = {}
        if backend == "postgresql" and "connect_timeout" not in parsed.query:
            connect_args["connect_timeout"] = 5  # a dead database fails /healthz and requests, not hangs
        # The web handlers run in a 40-thread pool: at SQLAlchemy's default (5 + 10 overflow) a burst of
        # 32 concurrent deliveries opened ~400 new PostgreSQL connections per 2,000 (bench/webhook_ingest.py).
        return create_engine(
            parsed, pool_pre_ping=True, pool_size=20, max_overflow=20, connect_args=connect_args
        )
    if parsed.database in (None, "", ":memory:"):
        # One shared in-memory database for every thread (the web handlers run in a threadpool).
        engine = create_engine(parsed, connect_args={"check_same_thread": False}, poolclass=StaticPool)
    else:
        # Writers queue for the file lock instead of failing at once (pysqlite's default is 5 s).
        engine = create_engine(parsed, connect_args={"timeout": 15})
        use_wal(parsed.database)
    _sqlite_real_transactions(engine)
    return engine


def use_wal(path: str) -> None:
    """Put the SQLite file at ``path`` in write-ahead-log mode (kept by the file, for every process).

    In WAL mode readers never wait for the writer nor the writer for readers: the worker polling
    the embedded broker, the dashboard reading and the web process recording a delivery do not
    queue behind each other; only writers take turns, each for one short transaction."""
    import sqlite3

    if not Path(path).parent.is_dir():
        return  # the engine's first connection reports it, where the caller handles errors
    conn = sqlite3.connect(path, timeout=15)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()


def prepare_sqlite_files(*urls: str | None) -> None:
    """WAL mode for each SQLite file among Celery's ``sqla+sqlite:///`` / ``db+sqlite:///`` URLs."""
    for url in urls:
        if not url:
            continue
        scheme, _, rest = url.partition("+")
        if scheme not in ("sqla", "db") or not rest.startswith("sqlite"):
            continue
        database = make_url(rest).database
        if database not in (None, "", ":memory:"):
            use_wal(database)


def _sqlite_real_transactions(engine: Engine) -> None:
    """Let SQLAlchemy, not pysqlite, begin transactions (SQLAlchemy's documented recipe).

    pysqlite defers BEGIN to the first INSERT, so a SAVEPOINT issued first becomes the
    outermost transaction and its RELEASE commits: a rollback afterwards would undo nothing.
    """

    @event.listens_for(engine, "connect")
    def _no_implicit_begin(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def bound_engine(sessions: sessionmaker[Session]) -> Engine:
    """The engine ``sessions`` is bound to now (``sessions.configure(bind=…)`` changes it)."""
    bind = sessions.kw["bind"]
    assert isinstance(bind, Engine)
    return bind


MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_MIGRATION_LOCK = 0x6B7A  # a PostgreSQL advisory lock id: one process migrates at a time


def alembic_config() -> Any:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision`` with the Alembic migrations (web and workers call this at start)."""
    from alembic import command

    config = alembic_config()
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str) -> None:
    from alembic import command

    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)


def create_schema(engine: Engine) -> None:
    """The schema at the newest migration."""
    migrate(engine)


# INSERT … ON CONFLICT (delivery_id) DO NOTHING RETURNING id, per dialect, built once.
_CLAIM = {
    "postgresql": postgresql.insert(Delivery)
    .on_conflict_do_nothing(index_elements=[Delivery.delivery_id])
    .returning(Delivery.id),
    "sqlite": sqlite.insert(Delivery)
    .on_conflict_do_nothing(index_elements=[Delivery.delivery_id])
    .returning(Delivery.id),
}


def claim_delivery(
    conn: Connection,
    *,
    delivery_id: str,
    event: str,
    outcome: Outcome,
    action: str | None = None,
    installation_id: int | None = None,
    repository: str | None = None,
    job_id: str | None = None,
) -> bool:
    """Record the delivery in ``conn``'s transaction as it will stay; False when already recorded.

    One statement, one round trip. The unique key decides, not a prior SELECT: a second
    transaction inserting the same id waits for the first (on PostgreSQL the row's lock, on SQLite
    the file's), then inserts nothing (the first committed) or its own row (the first rolled
    back), so two concurrent redeliveries cannot both get through. Any other constraint raises.
    """
    values = {
        "delivery_id": delivery_id,
        "event": event,
        "action": action,
        "installation_id": installation_id,
        "repository": repository,
        "outcome": outcome,
        "job_id": job_id,
    }
    return conn.execute(_CLAIM[conn.dialect.name], values).first() is not None


def set_job_id(conn: Connection, delivery_id: str, job_id: str) -> None:
    conn.execute(update(Delivery).where(Delivery.delivery_id == delivery_id).values(job_id=job_id))
