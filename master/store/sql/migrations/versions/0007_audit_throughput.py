"""audit throughput: the timed training rate of an audited model against its worker's claims

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 00:00:00

An audit recorded before this revision has no throughput check: its columns
read "" and 0, and its verdict stays what it was.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

_STRINGS = (("throughput", 32), ("worker_hardware", 300), ("auditor_hardware", 300))
_FLOATS = ("claimed_images_per_second", "audited_images_per_second", "worker_flops", "audited_flops",
           "throughput_tolerance")


def upgrade() -> None:
    with op.batch_alter_table('audits', schema=None) as batch_op:
        for name, length in _STRINGS:
            batch_op.add_column(sa.Column(name, sa.String(length=length), nullable=False, server_default=''))
        for name in _FLOATS:
            batch_op.add_column(sa.Column(name, sa.Float(), nullable=False, server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('audits', schema=None) as batch_op:
        for name in reversed(_FLOATS):
            batch_op.drop_column(name)
        for name, _ in reversed(_STRINGS):
            batch_op.drop_column(name)
