"""model checkpoints: where each model's weights are stored, and whom it inherited from

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 00:00:00

Models recorded before this revision have no checkpoint (NULL) and were
trained from scratch (inherited_from NULL): no worker stored weights then.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('models', schema=None) as batch_op:
        batch_op.add_column(sa.Column('checkpoint_uri', sa.String(length=1024), nullable=True))
        batch_op.add_column(sa.Column('checkpoint_sha256', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('checkpoint_deleted', sa.Boolean(), nullable=False,
                                      server_default=sa.false()))
        batch_op.add_column(sa.Column('inherited_from', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('models', schema=None) as batch_op:
        batch_op.drop_column('inherited_from')
        batch_op.drop_column('checkpoint_deleted')
        batch_op.drop_column('checkpoint_sha256')
        batch_op.drop_column('checkpoint_uri')
