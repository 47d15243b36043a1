"""Alembic environment: run on the connection ``bot.db.migrate`` hands over (or the URL option)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from bot.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite alters tables by copying them
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "sqlite:///kernelize.db")
    with engine.begin() as conn:
        _run(conn)
