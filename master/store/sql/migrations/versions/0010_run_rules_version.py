"""rules version: the version of AIPerf's rules a run is scored under, recorded when it is created

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27 00:00:00

Runs recorded before this revision have no rules version (NULL): the scoreboard
says it was not recorded rather than guess which rules they were started under.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN, in place on every dialect: a batch copy would have to drop `runs`,
    # which the foreign keys of models, progress rows and run workers forbid (as in 0005)
    op.add_column('runs', sa.Column('rules_version', sa.String(length=64), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        op.execute('ALTER TABLE runs DROP COLUMN rules_version')  # in place, as in 0005
        return
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('rules_version')
