"""The JAX backend's checks, run in a process of their own (tests/test_jax_backend.py).

Keras fixes its backend at import, and the test process runs Keras on TensorFlow, so these run
as `python -m tests.support.jax_checks OUT.json [INHERIT_DIR]` (from the repository root) with KERAS_BACKEND=jax, two virtual CPU
devices (XLA_FLAGS=--xla_force_host_platform_device_count=2) and TensorFlow made unimportable
(`block_tensorflow`, as on a GPU node without it). Each check writes its figures into OUT.json;
the tests assert on them.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import json
import math
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from tests.support.graphs import tiny_graph


class TensorFlowBlocker(importlib.abc.MetaPathFinder):
    """Makes `import tensorflow` (and its submodules) fail as if it were not installed."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: a node without TensorFlow)")
        return None


def block_tensorflow() -> None:
    sys.meta_path.insert(0, TensorFlowBlocker())


class NumpyData:
    """Random 32x32 images with one-hot labels behind the data interface the JAX round reads
    (numpy_train / numpy_validation; one epoch per iteration, the partial last batch included)."""

    def __init__(self, n_train: int = 100, n_val: int = 40, classes: int = 10) -> None:
        rng = np.random.default_rng(0)
        self.image_size, self.num_classes = 32, classes
        self.train_size, self.validation_size = n_train, n_val
        self.x = rng.normal(size=(n_train + n_val, 32, 32, 3)).astype(np.float32)
        self.y = np.eye(classes, dtype=np.float32)[rng.integers(0, classes, n_train + n_val)]

    def numpy_train(self, batch_size: int, *, seed: int = 0, drop_remainder: bool = False) -> Any:
        data = self

        class Epochs:
            rng = np.random.default_rng(seed)

            def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
                order = self.rng.permutation(data.train_size)
                for i in range(0, data.train_size, batch_size):
                    yield data.x[order[i:i + batch_size]], data.y[order[i:i + batch_size]]

        return Epochs()

    def numpy_validation(self, batch_size: int) -> Any:
        data = self

        class Passes:
            def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
                end = data.train_size + data.validation_size
                for i in range(data.train_size, end, batch_size):
                    yield data.x[i:min(i + batch_size, end)], data.y[i:min(i + batch_size, end)]

        return Passes()

    def train_steps(self, batch_size: int) -> int:
        return math.ceil(self.train_size / batch_size)


def profile(epochs: int = 1) -> Any:
    from aiperf.profiles import SMOKE

    return dataclasses.replace(SMOKE, epochs_per_round=(epochs,), learning_rate=0.05)


def losses_on(devices: Any, steps: int) -> list[float]:
    """The losses of the first `steps` steps of the same round (same weights, same batches)."""
    from aiperf.graph import with_inserted_kernel
    from worker.jax_steps import compile_round
    from worker.rounds import StepSettings

    settings = StepSettings(graph=with_inserted_kernel(tiny_graph(), 3), precision="fp32", strategy=devices,
                            global_batch=32, epochs=1, steps_per_epoch=4, seed=3)
    compiled = compile_round(settings, NumpyData(), profile())
    try:
        return [float(compiled.train_step(compiled.train_iterator)[0]) for _ in range(steps)]
    finally:
        compiled.release()


def check_data_parallel(out: dict[str, Any]) -> None:
    import jax

    from worker.jax_steps import Devices, local_distribution

    out["devices"] = len(jax.local_devices())
    out["losses_two"] = losses_on(local_distribution(), 4)  # the 4th step: the remainder of 4 images
    out["losses_one"] = losses_on(Devices((jax.local_devices()[0],)), 4)


def check_seed(out: dict[str, Any]) -> None:
    """The master's seed on JAX: the same seed the same weights, another seed others, and a prepared
    round (two devices) that starts from it holds exactly those weights, with its epoch digests."""
    from aiperf.hyperparameters import Hyperparameters
    from aiperf.weight_digest import weights_digest
    from worker.trainer import prepare_round, run_round
    from worker.weight_seed import seed_weights

    seeds = (2**62 + 1, 2**62 + 1, 2**62 + 2)
    digests = [weights_digest(seed_weights(tiny_graph(), 3, s)) for s in seeds]
    prepared = prepare_round(tiny_graph(), Hyperparameters(16, 3), NumpyData(), profile(1), 1, epochs=1)
    prepared.start_from_seed(seeds[0])
    started = weights_digest(prepared.compiled.weights())
    reports: list[Any] = []
    run_round(prepared, on_progress=reports.append, should_stop=lambda: False, progress_interval_s=0.0,
              phase_reports=False, release=False)
    out["seed"] = {"digests": digests, "started": started,
                   "epoch_end": [r.weights_sha256 for r in reports if r.epoch_end],
                   "trained": weights_digest(prepared.compiled.weights())}
    prepared.release()


def check_round(out: dict[str, Any]) -> None:
    """A whole round on both devices: replicas, global batch, exact image counts, accuracies."""
    from aiperf.hyperparameters import Hyperparameters
    from worker.trainer import train_model

    reports: list[Any] = []
    res = train_model(tiny_graph(), Hyperparameters(16, 3), NumpyData(), profile(2), 1,
                      on_progress=reports.append, progress_interval_s=0.0)
    out["round"] = {"state": res.state, "replicas": res.replicas, "global_batch": res.global_batch_size,
                    "trained": res.images_trained, "validated": res.images_validated,
                    "reported": [r.images_trained for r in reports if r.images_trained],
                    "accuracies": list(res.val_accuracies), "timings": sorted(res.timings)}


def check_precisions(out: dict[str, Any]) -> None:
    import keras

    import aiperf.keras_builder
    from aiperf.hyperparameters import Hyperparameters
    from worker.trainer import train_model

    built: list[Any] = []
    real = aiperf.keras_builder.build_model
    aiperf.keras_builder.build_model = lambda *a, **k: built.append(real(*a, **k)) or built[-1]
    try:
        for precision in ("mixed_bf16", "mixed_fp16"):
            res = train_model(tiny_graph(), Hyperparameters(16, 3), NumpyData(), profile(), 1,
                              on_progress=lambda p: None, precision=precision)
            model = built[-1]
            out[precision] = {"state": res.state, "trained": res.images_trained,
                              "policy": model.get_layer("ins").dtype_policy.name,
                              "loss_scale": isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer),
                              "after": keras.config.dtype_policy().name}
    finally:
        aiperf.keras_builder.build_model = real


def check_out_of_memory(out: dict[str, Any]) -> None:
    """A real one: a conv of 2**20 filters, whose activation at batch 16 is 64 GiB."""
    from aiperf.graph import INPUT, Graph, conv, dense, simple
    from aiperf.hyperparameters import Hyperparameters
    from worker.trainer import train_model

    layers = [conv("wide", INPUT, 2**20, 1, 1), simple("pool", "avgpool", "wide"), dense("fc", "pool", 10),
              simple("out", "softmax", "fc")]
    res = train_model(Graph((32, 32, 3), 10, tuple(layers)), Hyperparameters(16, 3), NumpyData(),
                      profile(), 1, on_progress=lambda p: None)
    out["oom"] = {"state": res.state, "reason": res.reason, "trained": res.images_trained}


def check_planned_memory(out: dict[str, Any]) -> None:
    """The memory XLA plans for the tiny graph's steps, then the same round on devices that report a
    limit below it (the CPU reports none: the limit is the one thing given here)."""
    from aiperf.hyperparameters import Hyperparameters
    from worker import jax_memory
    from worker.trainer import train_model

    planned: list[tuple[str, int, int | None]] = []
    check_fits, device_limit = jax_memory.check_fits, jax_memory.device_limit

    def recording(compiled: Any, devices: Any, images: int, what: str) -> None:
        planned.append((what, images, jax_memory.planned_bytes(compiled)))
        check_fits(compiled, devices, images, what)

    jax_memory.check_fits = recording
    try:
        res = train_model(tiny_graph(), Hyperparameters(16, 3), NumpyData(), profile(), 1,
                          on_progress=lambda p: None)
        step = next(b for what, images, b in planned if what == "training step" and images == 32)
        jax_memory.device_limit = lambda devices: step - 1
        small = train_model(tiny_graph(), Hyperparameters(16, 3), NumpyData(), profile(), 1,
                            on_progress=lambda p: None)
    finally:
        jax_memory.check_fits, jax_memory.device_limit = check_fits, device_limit
    out["planned"] = {"state": res.state, "steps": planned, "small_state": small.state,
                      "small_reason": small.reason, "small_trained": small.images_trained,
                      "small_fits": small.batch_size_that_fits}


def check_memory_plan(out: dict[str, Any]) -> None:
    """benchmarks/memory_plan's figures at the tiny ResNet-50 shape (the official recipe, 32 px)."""
    import argparse

    from benchmarks import memory_plan

    args = argparse.Namespace(size=32, width=0.125, classes=10, precision="mixed_bf16")
    points = list(zip((8, 16), memory_plan.planned_bytes((8, 16), args)))
    out["memory_plan"] = {"points": points, "figures": memory_plan.fit_figures(points, 1 << 30)}


def check_inheritance(out: dict[str, Any], directory: Path) -> None:
    """Weights in and out through Keras: the TensorFlow parent's checkpoint (written by the test
    process) is inherited here, the child trained and its best weights stored for TensorFlow."""
    from aiperf.api.records import ModelRecord
    from aiperf.hyperparameters import Hyperparameters
    from aiperf.states import ModelState
    from worker.checkpoints import open_store
    from worker.inheritance import Inheritance
    from worker.trainer import train_model

    spec = json.loads((directory / "parent.json").read_text())
    from aiperf.graph import Graph

    parent_graph, child_graph = Graph.from_json(spec["graph"]), Graph.from_json(spec["child"])
    inh = Inheritance(open_store(str(directory / "store")), directory / "scratch")
    parent = ModelRecord(model_id=1, run_id=1, state=ModelState.DONE, checkpoint_uri=spec["uri"],
                         checkpoint_sha256=spec["sha256"], hyperparameters=Hyperparameters(16, 3))
    start = inh.child_start(True, parent, parent_graph, child_graph, Hyperparameters(16, 3))
    x = np.load(directory / "x.npy")
    from aiperf.keras_builder import build_model
    from worker.rounds import set_layer_weights

    model = build_model(child_graph, kernel_size=3)
    set_layer_weights(model, start.weights)
    np.save(directory / "child_logits_jax.npy", np.asarray(model(x, training=False)))
    kept: list[Any] = []
    res = train_model(child_graph, Hyperparameters(16, 3), NumpyData(), profile(), 2,
                      on_progress=lambda p: None, initial_weights=start.weights, on_weights=kept.append)
    ckpt = inh.save(1, 2, child_graph, 3, kept[-1])
    out["inheritance"] = {"inherited_from": start.inherited_from, "state": res.state, "uri": ckpt.uri,
                          "sha256": ckpt.sha256, "best": res.best_val_accuracy}


def check_audit_and_peaks(out: dict[str, Any], directory: Path) -> None:
    """The audit's evaluation and timed steps, the GEMM peak and the inventory, on JAX."""
    from aiperf.profiles import SMOKE
    from worker.audit import evaluate
    from worker.gemm import measure_cpu_peak
    from worker.inventory import inventory
    from worker.throughput import auditor_hardware, one_device, training_rate

    spec = json.loads((directory / "parent.json").read_text())
    from aiperf.graph import Graph

    child = Graph.from_json(spec["child"])
    weights = Path(out["inheritance"]["uri"][len("file://"):])
    accuracy, images = evaluate(weights, child, 3, "fp32", NumpyData(), 16)
    device, distribution = one_device()
    rate = training_rate(child, 3, 16, "fp32", True, NumpyData(), SMOKE, distribution)
    inv = inventory()
    out["audit"] = {"accuracy": accuracy, "images": images, "rate": rate, "device": device,
                    "hardware": auditor_hardware(device), "cpu_peak": measure_cpu_peak(),
                    "backend": inv.backend, "accelerators": len(inv.accelerators), "software": sorted(inv.software)}


def check_recipe(out: dict[str, Any]) -> None:
    """The training recipe's figures (tests/support/recipe_checks.py) on JAX, as tests/test_recipe.py on TensorFlow."""
    from tests.support.recipe_checks import first_step, recipe, schedule_rates, to_json, validation_loss

    data = NumpyData(n_train=64, n_val=24)
    out["recipe"] = {
        "plain": to_json(first_step(recipe())),
        "smoothed": to_json(first_step(recipe(label_smoothing=0.1))),
        "decayed": to_json(first_step(recipe(weight_decay=0.01))),
        "rates_round": schedule_rates(recipe(epochs_per_round=(2, 4)), 2, 3),
        "rates_max_epochs": schedule_rates(recipe(epochs_per_round=(2, 4), lr_decay="max_epochs"), 2, 3),
        "validation": validation_loss(recipe(label_smoothing=0.1), data, (data.x[64:], data.y[64:])),
    }


def main() -> int:
    block_tensorflow()
    target = Path(sys.argv[1])
    directory = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    out: dict[str, Any] = {"errors": {}, "seconds": {}}
    checks: list[tuple[str, Callable[[], None]]] = [
        ("data_parallel", lambda: check_data_parallel(out)),
        ("round", lambda: check_round(out)),
        ("precisions", lambda: check_precisions(out)),
        ("out_of_memory", lambda: check_out_of_memory(out)),
        ("planned_memory", lambda: check_planned_memory(out)),
        ("memory_plan", lambda: check_memory_plan(out)),
        ("recipe", lambda: check_recipe(out)),
        ("seed", lambda: check_seed(out)),
    ]
    if directory is not None:
        checks += [("inheritance", lambda: check_inheritance(out, directory)),
                   ("audit", lambda: check_audit_and_peaks(out, directory))]
    for name, check in checks:
        start = time.monotonic()
        try:
            check()
        except Exception:  # noqa: BLE001 - reported to the test, which fails on it
            out["errors"][name] = traceback.format_exc()
        out["seconds"][name] = round(time.monotonic() - start, 1)
    out["tensorflow_imported"] = "tensorflow" in sys.modules
    target.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
