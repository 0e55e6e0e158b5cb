"""Pipelines: their definitions, their runs (one per interval) and each run's attempts.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # sqlite_autoincrement: ids are never reused, so a deleted pipeline's runs stay apart.
    op.create_table(
        "spillway_pipelines",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(100), nullable=False, unique=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("definition", sa.JSON(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("scheduled_through", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claim_seq", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "spillway_pipeline_runs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("uid", sa.String(32), nullable=False, unique=True),
        sa.Column("pipeline_id", sa.Integer(), nullable=False),
        sa.Column("logical_date", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data_interval_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("spec", sa.JSON()),
        sa.Column("reason", sa.String(2000)),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True)),
        sa.Column("result_location", sa.String(4096)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.UniqueConstraint("pipeline_id", "logical_date", name="uq_spillway_pipeline_run_key"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_spillway_pipeline_runs_state", "spillway_pipeline_runs", ["state"])
    op.create_table(
        "spillway_pipeline_attempts",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(32)),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("error", sa.String(2000)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.UniqueConstraint("run_id", "attempt", name="uq_spillway_pipeline_attempt"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_spillway_pipeline_attempts_run_id", "spillway_pipeline_attempts", ["run_id"])
    op.create_index("ix_spillway_pipeline_attempts_state", "spillway_pipeline_attempts", ["state"])


def downgrade() -> None:
    op.drop_table("spillway_pipeline_attempts")
    op.drop_table("spillway_pipeline_runs")
    op.drop_table("spillway_pipelines")
