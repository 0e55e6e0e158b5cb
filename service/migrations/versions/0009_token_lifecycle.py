"""Token lifecycle: an expiry, the last use, and when a token was revoked or rotated.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels = None
depends_on = None


_COLUMNS = ("expires_at", "last_used_at", "revoked_at", "rotated_at")


def upgrade() -> None:
    for name in _COLUMNS:
        op.add_column("spillway_tokens", sa.Column(name, sa.DateTime(timezone=True)))


def downgrade() -> None:
    with op.batch_alter_table("spillway_tokens") as batch:
        for name in _COLUMNS:
            batch.drop_column(name)
