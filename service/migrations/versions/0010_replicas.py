"""Replicas on one database: a heartbeat row per replica, leases, and the replica running each job.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("spillway_jobs", sa.Column("replica_id", sa.String(64)))
    op.add_column("spillway_jobs", sa.Column("cancel_requested_at", sa.DateTime(timezone=True)))
    op.create_table(
        "spillway_replicas",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("boot_id", sa.String(64), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "spillway_leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("spillway_leases")
    op.drop_table("spillway_replicas")
    with op.batch_alter_table("spillway_jobs") as batch:
        batch.drop_column("cancel_requested_at")
        batch.drop_column("replica_id")
