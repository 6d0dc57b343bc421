"""MLPerf's own compliance checker, run the way a submitter runs it: a subprocess of
`python -m mlperf_logging.compliance_checker` on a log file."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from aiperf_cli.mllog import RULESET


@dataclass(frozen=True)
class Verdict:
    returncode: int
    output: str  # stdout and stderr: the checker logs its findings on stderr

    @property
    def findings(self) -> list[str]:
        """The checker's warnings and errors (a passing log has none)."""
        return [line for line in self.output.splitlines() if line.startswith(("WARNING", "ERROR"))]

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and not self.findings and "SUCCESS" in self.output


def check_log(log: Path, ruleset: str = RULESET) -> Verdict:
    """The checker's verdict on `log` as an MLPerf Training log of `ruleset`."""
    proc = subprocess.run(
        [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training", "--ruleset", ruleset,
         "--log_output", str(log.with_name(log.name + f".checker-{ruleset}.log")), str(log)],
        capture_output=True, text=True, timeout=120, cwd=log.parent)
    return Verdict(proc.returncode, proc.stdout + proc.stderr)
