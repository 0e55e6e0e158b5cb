"""Pipelines record their owner, the token that created them; their runs' jobs are its.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("spillway_pipelines", sa.Column("owner", sa.String(100)))


def downgrade() -> None:
    with op.batch_alter_table("spillway_pipelines") as batch:
        batch.drop_column("owner")
