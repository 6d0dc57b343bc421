"""initial schema

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-21 05:53:28.168408
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table('runs',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('profile', sa.String(length=16), nullable=False),
    sa.Column('seed', sa.BigInteger(), nullable=False),
    sa.Column('duration_s', sa.Float(), nullable=False),
    sa.Column('precision', sa.String(length=16), nullable=False),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('software', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=True),
    sa.Column('deadline', sa.Float(), nullable=True),
    sa.Column('stopped_at', sa.Float(), nullable=True),
    sa.Column('finished_at', sa.Float(), nullable=True),
    sa.Column('stop_reason', sa.String(length=200), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_runs_state'), ['state'], unique=False)

    op.create_table('workers',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('accelerators', sa.JSON(), nullable=False),
    sa.Column('cpus', sa.Integer(), nullable=False),
    sa.Column('memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('software', sa.JSON(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('registered_at', sa.Float(), nullable=False),
    sa.Column('last_heartbeat', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.create_table('models',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('parent_id', sa.Integer(), nullable=True),
    sa.Column('worker_id', sa.Integer(), nullable=False),
    sa.Column('round', sa.Integer(), nullable=False),
    sa.Column('graph_json', sa.Text(), nullable=False),
    sa.Column('graph_hash', sa.String(length=64), nullable=False),
    sa.Column('batch_size', sa.Integer(), nullable=False),
    sa.Column('kernel_size', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.String(length=500), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=True),
    sa.Column('finished_at', sa.Float(), nullable=True),
    sa.Column('best_accuracy', sa.Float(), nullable=True),
    sa.Column('predicted_accuracy', sa.Float(), nullable=True),
    sa.Column('flops_per_train_image', sa.BigInteger(), nullable=False),
    sa.Column('flops_per_eval_image', sa.BigInteger(), nullable=False),
    sa.Column('images_trained', sa.BigInteger(), nullable=False),
    sa.Column('images_validated', sa.BigInteger(), nullable=False),
    sa.Column('epochs', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['parent_id'], ['models.id'], ),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.ForeignKeyConstraint(['worker_id'], ['workers.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('models', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_models_graph_hash'), ['graph_hash'], unique=False)
        batch_op.create_index(batch_op.f('ix_models_run_id'), ['run_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_models_state'), ['state'], unique=False)
        batch_op.create_index(batch_op.f('ix_models_worker_id'), ['worker_id'], unique=False)

    op.create_table('resource_samples',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('worker_id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=True),
    sa.Column('t', sa.Float(), nullable=False),
    sa.Column('accelerator_index', sa.Integer(), nullable=False),
    sa.Column('accelerator_util', sa.Float(), nullable=False),
    sa.Column('accelerator_memory_used', sa.BigInteger(), nullable=False),
    sa.Column('cpu_util', sa.Float(), nullable=False),
    sa.Column('memory_used', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.ForeignKeyConstraint(['worker_id'], ['workers.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('resource_samples', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_resource_samples_run_id'), ['run_id'], unique=False)
        batch_op.create_index('ix_resource_worker_t', ['worker_id', 't'], unique=False)

    op.create_table('run_workers',
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('worker_id', sa.Integer(), nullable=False),
    sa.Column('joined_at', sa.Float(), nullable=False),
    sa.Column('inventory', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.ForeignKeyConstraint(['worker_id'], ['workers.id'], ),
    sa.PrimaryKeyConstraint('run_id', 'worker_id')
    )
    op.create_table('progress',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('model_id', sa.Integer(), nullable=False),
    sa.Column('worker_id', sa.Integer(), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('t', sa.Float(), nullable=False),
    sa.Column('epoch', sa.Integer(), nullable=False),
    sa.Column('images_trained', sa.BigInteger(), nullable=False),
    sa.Column('images_validated', sa.BigInteger(), nullable=False),
    sa.Column('accuracy', sa.Float(), nullable=True),
    sa.Column('worker_flops', sa.BigInteger(), nullable=False),
    sa.Column('master_flops', sa.BigInteger(), nullable=False),
    sa.Column('flops_mismatch', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['model_id'], ['models.id'], ),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.ForeignKeyConstraint(['worker_id'], ['workers.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('model_id', 'seq', name='uq_progress_model_seq')
    )
    with op.batch_alter_table('progress', schema=None) as batch_op:
        batch_op.create_index('ix_progress_run_t', ['run_id', 't'], unique=False)




def downgrade() -> None:

    with op.batch_alter_table('progress', schema=None) as batch_op:
        batch_op.drop_index('ix_progress_run_t')

    op.drop_table('progress')
    op.drop_table('run_workers')
    with op.batch_alter_table('resource_samples', schema=None) as batch_op:
        batch_op.drop_index('ix_resource_worker_t')
        batch_op.drop_index(batch_op.f('ix_resource_samples_run_id'))

    op.drop_table('resource_samples')
    with op.batch_alter_table('models', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_models_worker_id'))
        batch_op.drop_index(batch_op.f('ix_models_state'))
        batch_op.drop_index(batch_op.f('ix_models_run_id'))
        batch_op.drop_index(batch_op.f('ix_models_graph_hash'))

    op.drop_table('models')
    op.drop_table('workers')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_runs_state'))

    op.drop_table('runs')

