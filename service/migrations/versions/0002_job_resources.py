"""Jobs record the GPU memory and spilling measured while they ran.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("spillway_jobs", sa.Column("resources", sa.JSON()))


def downgrade() -> None:
    with op.batch_alter_table("spillway_jobs") as batch:
        batch.drop_column("resources")
