"""Which framework trains: TensorFlow or JAX, both through Keras 3; one per process.

Keras fixes its backend when it is first imported (``KERAS_BACKEND``), so a
worker chooses before anything imports Keras (`select`, from ``aiperf worker
--backend`` or ``AIPERF_BACKEND``). Each backend is one module of the round
layer with the same functions: `worker.steps` (TensorFlow) and
`worker.jax_steps` (JAX). The functions here pass each call to the module of
the backend in use; nothing above them (trainer, look-ahead, audit,
inheritance, agent) knows which one runs.

The interface, implemented by both modules:

- ``compile_round(settings, dataset, profile, *, warm, evaluate) -> CompiledRound``
  (`worker.rounds`): the model built, its steps compiled, its iterators;
- ``local_distribution()``: the round's distribution over every local device
  (``num_replicas_in_sync``, ``scope()``); ``one_device()``: (name, distribution)
  of the one device an audit times on;
- ``is_out_of_memory(exc)``: the framework's out-of-memory error;
- ``host_scope()``: a context in which scratch models are built off the accelerator;
- ``set_determinism(on)``; ``count_correct(model, batches)``: an audit's evaluation;
- ``validation_batches(dataset, batch_size)`` and ``in_memory_batches(batch)``:
  data as the backend's steps take it.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType
from typing import Any, Iterable

from aiperf.api.enums import BACKENDS as _NAMES

BACKENDS: tuple[str, ...] = tuple(_NAMES.values())  # the API's names; the first is the default
DEFAULT = BACKENDS[0]
ENV = "AIPERF_BACKEND"
_MODULES = {"tensorflow": "worker.steps", "jax": "worker.jax_steps"}
_PACKAGES = {"tensorflow": "tensorflow", "jax": "jax"}  # what each backend needs installed


class BackendError(Exception):
    """A backend that is unknown, not installed, or not the one Keras already runs on."""


def select(name: str) -> None:
    """Make `name` this process's backend (sets KERAS_BACKEND). Keras already imported on
    another backend, an unknown name or a framework not installed: BackendError."""
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})")
    keras = sys.modules.get("keras")
    if keras is not None and keras.backend.backend() != name:
        raise BackendError(f"Keras already runs on {keras.backend.backend()} in this process; "
                           f"the backend must be chosen before Keras is imported")
    if not installed(name):
        raise BackendError(f"the {name} backend needs the {_PACKAGES[name]} package, which is not installed")
    os.environ["KERAS_BACKEND"] = name


def installed(name: str) -> bool:
    """Whether the framework of backend `name` can be imported here."""
    import importlib.util

    try:
        return importlib.util.find_spec(_PACKAGES[name]) is not None
    except (ImportError, ValueError):  # a blocked or broken package
        return False


def name() -> str:
    """The backend this process trains with: Keras's once imported, else the one Keras will take."""
    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "backend"):
        return str(keras.backend.backend())
    chosen = os.environ.get("KERAS_BACKEND") or DEFAULT
    return chosen if chosen in BACKENDS else DEFAULT


def module() -> ModuleType:
    """The round-layer module of the backend in use."""
    import importlib

    return importlib.import_module(_MODULES[name()])


def compile_round(settings: Any, dataset: Any, profile: Any, *, warm: bool = True, evaluate: bool = True) -> Any:
    return module().compile_round(settings, dataset, profile, warm=warm, evaluate=evaluate)


def local_distribution() -> Any:
    return module().local_distribution()


def one_device() -> tuple[str, Any]:
    device: tuple[str, Any] = module().one_device()
    return device


def is_out_of_memory(exc: BaseException) -> bool:
    return bool(module().is_out_of_memory(exc))


def host_scope() -> Any:
    return module().host_scope()


def set_determinism(on: bool) -> None:
    module().set_determinism(on)


def count_correct(model: Any, batches: Iterable[tuple[Any, Any]]) -> tuple[int, int]:
    counts: tuple[int, int] = module().count_correct(model, batches)
    return counts


def validation_batches(dataset: Any, batch_size: int) -> Iterable[tuple[Any, Any]]:
    batches: Iterable[tuple[Any, Any]] = module().validation_batches(dataset, batch_size)
    return batches


def in_memory_batches(batch: tuple[Any, Any]) -> Any:
    return module().in_memory_batches(batch)
