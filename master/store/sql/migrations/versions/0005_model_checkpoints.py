"""model checkpoints: where each model's weights are stored, and whom it inherited from

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 00:00:00

Models recorded before this revision have no checkpoint (NULL) and were
trained from scratch (inherited_from NULL): no worker stored weights then.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ADD COLUMNs, in place on every dialect: a batch copy of the table would have to drop
    # `models` on SQLite, which the foreign keys of progress rows and child models forbid
    op.add_column('models', sa.Column('checkpoint_uri', sa.String(length=1024), nullable=True))
    op.add_column('models', sa.Column('checkpoint_sha256', sa.String(length=64), nullable=True))
    op.add_column('models', sa.Column('checkpoint_deleted', sa.Boolean(), nullable=False,
                                      server_default=sa.false()))
    op.add_column('models', sa.Column('inherited_from', sa.Integer(), nullable=True))


_COLUMNS = ('inherited_from', 'checkpoint_deleted', 'checkpoint_sha256', 'checkpoint_uri')


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        # SQLite drops a plain column in place (3.35+); a batch copy of the table would have to
        # drop `models`, which the foreign keys of progress rows and child models forbid
        for column in _COLUMNS:
            op.execute(f'ALTER TABLE models DROP COLUMN {column}')
        return
    with op.batch_alter_table('models', schema=None) as batch_op:
        for column in _COLUMNS:
            batch_op.drop_column(column)
