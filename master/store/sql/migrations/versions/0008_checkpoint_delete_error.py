"""checkpoint delete errors: a checkpoint its worker could not delete stays recorded as stored, with why

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 00:00:00

Models recorded before this revision have no delete error (NULL): their worker
reported none, since no worker could.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN, in place on every dialect (see 0005: a batch copy would drop `models`)
    op.add_column('models', sa.Column('checkpoint_delete_error', sa.String(length=500), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        op.execute('ALTER TABLE models DROP COLUMN checkpoint_delete_error')  # in place, as in 0005
        return
    with op.batch_alter_table('models', schema=None) as batch_op:
        batch_op.drop_column('checkpoint_delete_error')
