"""cut models: a model the run's deadline or a stop ended before a first validation is "cut"

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27 00:00:00

Before this revision a worker closed such a model as "failed" with a reason starting
"cut: ", and every table read it as a failure. The state column is a plain string, so
only the rows change: those become "cut", their reason without the prefix; downgrading
writes them back as they were.
"""

from __future__ import annotations

from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("UPDATE models SET state = 'cut', reason = substr(reason, 6) "
               "WHERE state = 'failed' AND reason LIKE 'cut: %'")


def downgrade() -> None:
    op.execute("UPDATE models SET state = 'failed', reason = 'cut: ' || reason WHERE state = 'cut'")
