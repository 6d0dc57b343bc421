"""worker credentials: the hash of each worker's per-worker secret

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-28 00:00:00

Workers registered before this revision have no credential (NULL): none of
their calls can prove an identity, so they must register again, and their
name may be claimed by the first Register that asks for it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.add_column(sa.Column('credential_hash', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.drop_column('credential_hash')
