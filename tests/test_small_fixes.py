"""The smaller things a new operator tripped over (each with the line that shows it)."""

from __future__ import annotations

from types import SimpleNamespace

from aiperf_cli.audit import chosen, why_audited


def test_audit_says_why_it_audits_a_model_beyond_the_top():
    ranked = [(i, SimpleNamespace(model_id=m)) for i, m in enumerate((5, 3, 9))]
    picked = chosen(ranked, 1, regulated_model_id=9)  # --top 1, and the regulated score's model ranks third
    assert [m.model_id for _, m in picked] == [5, 9]
    assert why_audited(1, 1) == "rank 1 of the run's models"
    assert why_audited(3, 1) == "behind the regulated score (rank 3, below the top 1)"
