"""Deliveries, jobs and installations.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
When = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "deliveries",
        sa.Column("id", BigId, primary_key=True),
        sa.Column("delivery_id", sa.String(100), nullable=False, unique=True),
        sa.Column("event", sa.String(64), nullable=False),
        sa.Column("action", sa.String(64)),
        sa.Column("installation_id", sa.BigInteger()),
        sa.Column("repository", sa.String(256)),
        sa.Column("received_at", When, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("job_id", sa.String(255)),
        sa.CheckConstraint("outcome IN ('enqueued', 'ignored', 'ping')", name="deliveries_outcome"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", BigId, primary_key=True),
        sa.Column("key", sa.String(400), nullable=False),
        sa.Column("installation_id", sa.BigInteger(), nullable=False),
        sa.Column("repository", sa.String(256), nullable=False),
        sa.Column("pull_number", sa.Integer(), nullable=False),
        sa.Column("head_sha", sa.String(64), nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("requested_by", sa.String(100), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("detail", sa.String(500), nullable=False),
        sa.Column("modules", sa.Integer(), nullable=False),
        sa.Column("check_run_id", sa.BigInteger()),
        sa.Column("comment_id", sa.BigInteger()),
        sa.Column("task_ids", sa.JSON(), nullable=False),
        sa.Column("gpu_seconds", sa.Float(), nullable=False),
        sa.Column("created_at", When, nullable=False),
        sa.Column("finished_at", When),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'done', 'failed', 'cancelled')", name="jobs_state"
        ),
    )
    op.create_index("jobs_pull", "jobs", ["repository", "pull_number"])
    op.create_index("jobs_installation_state", "jobs", ["installation_id", "state"])
    op.create_table(
        "installations",
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("account", sa.String(100), nullable=False),
        sa.Column("account_type", sa.String(32), nullable=False),
        sa.Column("repository_selection", sa.String(16), nullable=False),
        sa.Column("repositories", sa.JSON(), nullable=False),
        sa.Column("suspended", sa.Boolean(), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("updated_at", When, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("installations")
    op.drop_index("jobs_installation_state", table_name="jobs")
    op.drop_index("jobs_pull", table_name="jobs")
    op.drop_table("jobs")
    op.drop_table("deliveries")
