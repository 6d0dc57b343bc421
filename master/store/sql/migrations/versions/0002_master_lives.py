"""master lives: a liveness stamp per master process, from which outages are known

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('master_lives',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('started_at', sa.Float(), nullable=False),
    sa.Column('alive_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )


def downgrade() -> None:
    op.drop_table('master_lives')
