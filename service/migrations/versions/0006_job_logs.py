"""Jobs keep their log: service events, the worker traceback and warnings.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("spillway_jobs", sa.Column("logs", sa.JSON()))


def downgrade() -> None:
    with op.batch_alter_table("spillway_jobs") as batch:
        batch.drop_column("logs")
