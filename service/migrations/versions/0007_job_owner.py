"""Jobs record their owner, the token (name#id) that submitted them.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("spillway_jobs", sa.Column("owner", sa.String(100)))


def downgrade() -> None:
    with op.batch_alter_table("spillway_jobs") as batch:
        batch.drop_column("owner")
