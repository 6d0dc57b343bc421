"""node audits: an audit that timed a model the master drew for its worker on that worker's
node, with the node's inventory compared with the worker's registration

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27 00:00:00

Audits recorded before this revision are audits of the weights (node_audit false) with no
inventory compared ("").
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ADD COLUMNs, in place on every dialect (as in 0010)
    op.add_column('audits', sa.Column('node_audit', sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column('audits', sa.Column('inventory', sa.String(length=300), nullable=False, server_default=''))


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        op.execute('ALTER TABLE audits DROP COLUMN inventory')  # in place, as in 0005
        op.execute('ALTER TABLE audits DROP COLUMN node_audit')
        return
    with op.batch_alter_table('audits', schema=None) as batch_op:
        batch_op.drop_column('inventory')
        batch_op.drop_column('node_audit')
