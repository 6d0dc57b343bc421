"""weight digests: the digest of a model's weights at each epoch's end, on the report that
closes the epoch, stamped with the report's master time

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27 00:00:00

Reports recorded before this revision carry no digest ("").
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN, in place on every dialect (as in 0010)
    op.add_column('progress', sa.Column('weights_sha256', sa.String(length=64), nullable=False, server_default=''))


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        op.execute('ALTER TABLE progress DROP COLUMN weights_sha256')  # in place, as in 0005
        return
    with op.batch_alter_table('progress', schema=None) as batch_op:
        batch_op.drop_column('weights_sha256')
