"""The Alembic migrations, on SQLite and PostgreSQL: up from empty, the models match, down to nothing."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from bot import db
from bot.models import Base

TABLES = {"deliveries", "jobs", "installations", "suggestions", "suggestion_events", "web_sessions"}


def test_upgrade_from_empty_matches_the_models_and_downgrades_to_nothing(database_url: str) -> None:
    engine = db.make_engine(database_url)
    db.migrate(engine)
    assert set(inspect(engine).get_table_names()) >= TABLES
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []
    db.migrate(engine)  # again: nothing to do
    db.downgrade(engine, "0001")
    assert not {"suggestions", "suggestion_events"} & set(inspect(engine).get_table_names())
    db.downgrade(engine, "base")
    assert not TABLES & set(inspect(engine).get_table_names())
    db.migrate(engine)  # and back up
    assert set(inspect(engine).get_table_names()) >= TABLES
    engine.dispose()
