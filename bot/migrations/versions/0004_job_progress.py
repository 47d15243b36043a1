"""A job's per-module progress and its check run's final output.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("progress", sa.JSON()))
    op.add_column("jobs", sa.Column("check_final", sa.JSON()))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("check_final")
        batch.drop_column("progress")
