"""The version of AIPerf's rules, recorded with every run when it is started.

The rules are what gives a run's numbers their meaning: the profiles
(`aiperf.profiles`), the datasheet peaks (`aiperf.peaks`), the FLOP count, the
scoring and validity rules (`aiperf.scoring`, `aiperf.audit`, the precisions
and the official workload). Two runs recorded under the same version are
scored by the same rules; a run keeps the version it was started under, and
the scoreboard shows it beside the version the master scores by now.

`tests/test_rules_version.py` holds a digest of those definitions and fails
when they change while this version stays the same.
"""

from __future__ import annotations

RULES_VERSION = "aiperf-rules 1.0"
