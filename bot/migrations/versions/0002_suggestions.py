"""Suggestions and their status history.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
When = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "suggestions",
        sa.Column("id", BigId, primary_key=True),
        sa.Column("installation_id", sa.BigInteger(), nullable=False),
        sa.Column("repository", sa.String(256), nullable=False),
        sa.Column("private", sa.Boolean(), nullable=False),
        sa.Column("pull_number", sa.Integer(), nullable=False),
        sa.Column("head_sha", sa.String(64), nullable=False),
        sa.Column("path", sa.String(1000), nullable=False),
        sa.Column("start_line", sa.Integer(), nullable=False),
        sa.Column("end_line", sa.Integer(), nullable=False),
        sa.Column("class_name", sa.String(200), nullable=False),
        sa.Column("target", sa.String(1200), nullable=False),
        sa.Column("generator", sa.String(64), nullable=False),
        sa.Column("candidate_id", sa.String(200), nullable=False),
        sa.Column("code", sa.Text(), nullable=False),
        sa.Column("code_sha256", sa.String(64), nullable=False),
        sa.Column("original_sha256", sa.String(64), nullable=False),
        sa.Column("max_abs_error", sa.Float()),
        sa.Column("eager_ms", sa.Float()),
        sa.Column("compile_ms", sa.Float()),
        sa.Column("kernel_ms", sa.Float()),
        sa.Column("speedup_eager", sa.Float()),
        sa.Column("speedup_compile", sa.Float()),
        sa.Column("gpu", sa.String(200), nullable=False),
        sa.Column("review_id", sa.BigInteger()),
        sa.Column("comment_id", sa.BigInteger()),
        sa.Column("comment_url", sa.String(500), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("applied_sha", sa.String(64)),
        sa.Column("applied_by", sa.String(100)),
        sa.Column("applied_via_button", sa.Boolean(), nullable=False),
        sa.Column("thumbs_up", sa.Integer(), nullable=False),
        sa.Column("thumbs_down", sa.Integer(), nullable=False),
        sa.Column("posted_at", When, nullable=False),
        sa.Column("applied_at", When),
        sa.Column("closed_at", When),
        sa.CheckConstraint(
            "status IN ('posted', 'applied', 'merged', 'outdated', 'dismissed')", name="suggestions_status"
        ),
        sa.UniqueConstraint("repository", "pull_number", "head_sha", "target", name="suggestions_once"),
    )
    op.create_index("suggestions_repo_status", "suggestions", ["repository", "status"])
    op.create_table(
        "suggestion_events",
        sa.Column("id", BigId, primary_key=True),
        sa.Column(
            "suggestion_id",
            BigId,
            sa.ForeignKey("suggestions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("at", When, nullable=False),
        sa.Column("sha", sa.String(64)),
        sa.Column("actor", sa.String(100)),
        sa.Column("detail", sa.String(500), nullable=False),
    )
    op.create_index("ix_suggestion_events_suggestion_id", "suggestion_events", ["suggestion_id"])


def downgrade() -> None:
    op.drop_index("ix_suggestion_events_suggestion_id", table_name="suggestion_events")
    op.drop_table("suggestion_events")
    op.drop_index("suggestions_repo_status", table_name="suggestions")
    op.drop_table("suggestions")
