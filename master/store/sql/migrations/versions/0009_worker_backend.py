"""worker backend: the framework each worker trains with (TensorFlow or JAX)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28 00:00:00

Workers registered before this revision have no backend (NULL): they trained on
TensorFlow, the only backend then, and are read as such.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN, in place on every dialect (see 0005: a batch copy would drop the table)
    op.add_column('workers', sa.Column('backend', sa.String(length=16), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        op.execute('ALTER TABLE workers DROP COLUMN backend')  # in place, as in 0005
        return
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.drop_column('backend')
