"""What each option accepts: numeric ranges and choices, declared once.

Ranges come from the API's bounds (aiperf/api/bounds.py: a run id at most
MAX_ID, what SQL stores; a seed at most MAX_SEED), from the API field an option
fills (a limit is a uint32) or from physics (a TCP port, a run of at most 30 days). An option
built with `int_option` / `float_option` refuses anything else, NaN and
infinities included, while its arguments are parsed: one line naming the
option and the range, exit code 2, before any request is built (protobuf
raises ValueError on an out-of-range field, which would escape as a
traceback).

Choices are Enums, so that a wrong value gets the parser's error listing the
accepted ones.
"""

from __future__ import annotations

import enum
import math
from typing import Any, Optional

import typer

from aiperf import limits
from aiperf.api.enums import BACKENDS, PRECISIONS, PROFILES
from aiperf.profiles import DATASET_KINDS
from aiperf.profiles import PROFILES as RUN_PROFILES

INT64_MAX = 2**63 - 1
UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1

# (lowest, highest) of each kind of option.
RUN_ID = (0, limits.MAX_ID)          # 0: the current (or most recent) run
SEED = (0, limits.MAX_SEED)
KEEP = (0, limits.MAX_KEEP_CHECKPOINTS)  # --keep-checkpoints; 0: the default
COUNT = (0, UINT32_MAX)              # uint32 limits of a run; 0: no limit / the default
PAGE = (1, limits.MAX_PAGE)          # --limit of `aiperf runs` / `workers` / `models`: one page of the master's
PORT = (0, 65535)                    # 0: any free port
DEMO_MINUTES = (0.0, limits.MAX_RUN_DURATION_S / 60)  # low end excluded
HEARTBEAT_S = (0.1, 3600.0)          # below 0.1 s the master's tick cannot keep up; above 1 h no worker is lost
STOP_GRACE_S = (0.0, 86400.0)
RESUME_OUTAGE_S = (0.0, 30 * 86400.0)  # an outage up to a run's longest duration
PROGRESS_SECONDS = (1.0, 86400.0)    # between progress lines: from every poll to once a day
PROCESSES = (1, 1024)                # processes or CPUs on one node
CPUS = (0, 1024)
FRONTENDS = (0, 256)                  # --frontends: 0, the master serves gRPC itself; one per core is plenty
# `aiperf graph`: ResNet-50 needs 32 pixels for its five halvings; the other ends are far
# beyond any image classifier (ImageNet-21k has 21,841 classes) and keep counts finite.
INPUT_SIZE = (32, 8192)
GRAPH_CHANNELS = (1, 1024)
CLASSES = (2, 1_000_000)
WIDTH = (0.0, 16.0)                  # low end excluded
MORPH_STEPS = (1, 100)               # the search applies one at a time; 100 already takes seconds
LAYERS = (1, 1_000_000)
PARAMS = (1, INT64_MAX)


def int_option(default: Any, *names: str, span: tuple[int, int], help: str, **kwargs: Any) -> Any:
    """A typer option taking an integer within `span` (inclusive); anything else is the
    parser's one-line error, exit code 2."""
    lo, hi = span
    return typer.Option(default, *names, min=lo, max=hi, help=help, **kwargs)


def float_option(default: Any, *names: str, span: tuple[float, float], help: str,
                 exclusive_low: bool = False, **kwargs: Any) -> Any:
    """A typer option taking a finite number within `span` (the low end excluded when
    `exclusive_low`); NaN, infinities and anything outside: one line, exit code 2.
    (NaN compares false with every bound, so a plain range check lets it through.)"""
    lo, hi = span
    low = f"{lo:g}<x" if exclusive_low else f"{lo:g}<=x"

    def check(value: Optional[float]) -> Optional[float]:
        if value is None:
            return None
        if not math.isfinite(value) or value < lo or value > hi or (exclusive_low and value == lo):
            raise typer.BadParameter(f"{value:g} is not in the range {low}<={hi:g}")
        return value

    return typer.Option(default, *names, callback=check, help=f"{help} [{low}<={hi:g}]", **kwargs)


def _choices(name: str, values: Any) -> Any:
    """A str Enum whose members are `values` (member name = value)."""
    return enum.Enum(name, [(v, v) for v in values], type=str)


Profile = _choices("Profile", PROFILES.values())
Precision = _choices("Precision", PRECISIONS.values())
DatasetFormat = _choices("DatasetFormat", DATASET_KINDS)
Backend = _choices("Backend", BACKENDS.values())
LogLevel = _choices("LogLevel", ("debug", "info", "warning", "error"))
# `graph morph --kernel-size`: the kernels the profiles search (3, 5, 7)
KernelSize = _choices("KernelSize", sorted({str(k) for p in RUN_PROFILES.values() for k in p.kernel_sizes}, key=int))
