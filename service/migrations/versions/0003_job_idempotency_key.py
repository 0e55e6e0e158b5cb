"""Idempotency keys: unique among jobs (an index: SQLite cannot add a UNIQUE column).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("spillway_jobs", sa.Column("idempotency_key", sa.String(200)))
    op.create_index("uq_spillway_jobs_idempotency_key", "spillway_jobs", ["idempotency_key"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_spillway_jobs_idempotency_key", table_name="spillway_jobs")
    with op.batch_alter_table("spillway_jobs") as batch:
        batch.drop_column("idempotency_key")
