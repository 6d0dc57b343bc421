"""The hyperparameters of one trained model, and the one rule that validates them.

Two are searched (SPEC section 5): ``batch_size``, per accelerator (the global
batch is batch size × replicas), and ``kernel_size``, the kernel of the convs
that morphism inserted (`aiperf.graph.with_inserted_kernel`). Their dict form
``{"batch_size": int, "kernel_size": int}`` is what JSON, the CLI and NNI use.
`Hyperparameters` is the one type the tuner, the worker, the trainer and the typed
client pass around; the wire form is made and read in aiperf/api only.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Mapping

from aiperf.limits import MAX_KERNEL_SIZE


class HyperparameterError(ValueError):
    """A hyperparameter outside its rule; the message names it."""


def check_kernel_size(kernel_size: Any) -> int:
    """`kernel_size` as an int when it is odd and in 1..MAX_KERNEL_SIZE."""
    k = _integer(kernel_size)
    if k is None or k < 1 or k % 2 == 0 or k > MAX_KERNEL_SIZE:
        raise HyperparameterError(f"kernel_size must be an odd integer in 1..{MAX_KERNEL_SIZE}, "
                                  f"got {kernel_size!r}")
    return k


def check_batch_size(batch_size: Any) -> int:
    """`batch_size` as an int when it is a positive integer."""
    b = _integer(batch_size)
    if b is None or b < 1:
        raise HyperparameterError(f"batch_size must be a positive integer, got {batch_size!r}")
    return b


@dataclass(frozen=True)
class Hyperparameters:
    """Validated hyperparameters of one model; HyperparameterError otherwise."""

    batch_size: int  # per accelerator
    kernel_size: int  # of the convs morphism inserted

    def __post_init__(self) -> None:
        # numpy integers (from NNI) become plain ints.
        object.__setattr__(self, "batch_size", check_batch_size(self.batch_size))
        object.__setattr__(self, "kernel_size", check_kernel_size(self.kernel_size))

    def to_dict(self) -> dict[str, int]:
        return {"batch_size": self.batch_size, "kernel_size": self.kernel_size}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Hyperparameters":
        """Inverse of `to_dict`; HyperparameterError naming a missing or unknown key."""
        if not isinstance(data, Mapping):
            raise HyperparameterError(f"hyperparameters must be an object, got {data!r}")
        unknown = set(data) - {"batch_size", "kernel_size"}
        if unknown:
            raise HyperparameterError(f"unknown hyperparameter(s): {', '.join(sorted(map(str, unknown)))}")
        missing = [k for k in ("batch_size", "kernel_size") if k not in data]
        if missing:
            raise HyperparameterError(f"missing hyperparameter(s): {', '.join(missing)}")
        return cls(data["batch_size"], data["kernel_size"])


def _integer(value: Any) -> int | None:
    """The value as an int if it is an integer (a bool is not), else None."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return None
