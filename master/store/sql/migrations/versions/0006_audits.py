"""audits: re-evaluations of DONE models' stored weights (`aiperf audit`)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 00:00:00

A run recorded before this revision has no audit: its regulated-score model is
"not audited", which makes an official run invalid (docs/spec.md, "Audit").
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'audits',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('model_id', sa.Integer(), nullable=False),
        sa.Column('audited_at', sa.Float(), nullable=False),
        sa.Column('auditor_host', sa.String(length=255), nullable=False),
        sa.Column('verdict', sa.String(length=32), nullable=False),
        sa.Column('architecture_ok', sa.Boolean(), nullable=False),
        sa.Column('claimed_accuracy', sa.Float(), nullable=True),
        sa.Column('audited_accuracy', sa.Float(), nullable=True),
        sa.Column('validation_images', sa.BigInteger(), nullable=False),
        sa.Column('tolerance', sa.Float(), nullable=False),
        sa.Column('detail', sa.String(length=500), nullable=False),
        sa.ForeignKeyConstraint(['model_id'], ['models.id']),
        sa.ForeignKeyConstraint(['run_id'], ['runs.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('audits', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_audits_model_id'), ['model_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_audits_run_id'), ['run_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('audits', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_audits_run_id'))
        batch_op.drop_index(batch_op.f('ix_audits_model_id'))
    op.drop_table('audits')
