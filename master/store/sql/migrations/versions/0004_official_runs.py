"""official runs: a CPU worker's measured peak, each run worker's dataset and refused reports

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 00:00:00

workers.cpu: a worker without accelerators registers its CPU's measured GEMM
rates and the master's check of them (NULL: none measured).
run_workers.dataset: the dataset a worker reported for the run (kind, split
sizes, classes, image size, fingerprint; NULL: none reported), which decides
whether an official run stays official. run_workers.implausible_reports: that
worker's reports refused above its accepted peak in the run (before this
revision counted in memory only, since the master started).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.add_column(sa.Column('cpu', sa.JSON(), nullable=True))
    with op.batch_alter_table('run_workers', schema=None) as batch_op:
        batch_op.add_column(sa.Column('dataset', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('implausible_reports', sa.Integer(), nullable=False, server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('run_workers', schema=None) as batch_op:
        batch_op.drop_column('implausible_reports')
        batch_op.drop_column('dataset')
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.drop_column('cpu')
