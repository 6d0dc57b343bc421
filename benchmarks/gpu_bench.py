"""The GPU path on one accelerator: GEMM rate per compute type, ResNet-50 training images/s.

For each compute type, the dense n×n GEMM rate against the accelerator's
datasheet figure (`aiperf.peaks.check_peak`, the check the master applies to a
worker's peak). Then ResNet-50 at --size (224: the official shape) training on
one batch held on the device, through the project's path (`aiperf.resnet`
graph → `aiperf.keras_builder.build_model`) and through
`keras.applications.ResNet50(weights=None)`, in each precision of --precisions
(the Keras dtype policy of `aiperf.precision`), SGD with momentum as the
workers train, XLA on and off where the backend has the choice: the best of
--windows windows of at least --seconds each after two untimed steps (compile) and
three that size the windows.
Efficiency = the graph's analytic training FLOPs per image (`aiperf.flops`)
× images/s / the GEMM rate of the precision's compute type. While the windows
run, the worker's own NVML sampler (`worker.monitor`) reads the accelerator's
utilisation and memory.

Then the worker's own round on the same ResNet-50 (path "worker"): the backend's
`compile_round` (`worker.backend`: its SGD with the learning-rate schedule, its loss
scaling, its distribution over the one device, its input path from a batch held in host
memory and put on the device each step) stepped as the trainer's loop does (each step's
loss read after the next is launched), timed the same way, against keras.applications:
`worker_vs_keras_applications_<precision>` (goal >= 0.95), what the worker really trains at.

It runs on the Keras backend in use (KERAS_BACKEND): TensorFlow, the workers'
backend, or JAX, where TensorFlow is not installed (the lent device image has
JAX and no TensorFlow; JAX always compiles with XLA, so only "xla on" exists
there). Each configuration's figures are appended to --out (JSON lines) as soon
as they are measured, so a run cut short keeps what it measured, and no new
configuration starts after --budget-s seconds.

    RESULT gemm_tflops_<type>=... path_ratio_<precision>[_xla|_noxla]=<ours / keras.applications>
           images_per_s_<precision>[_xla|_noxla]=<ours> efficiency_<precision>[...]=<0..1> gpu_util_mean=<%>
           worker_images_per_s_<precision>[...]=... worker_vs_keras_applications_<precision>[...]=<worker / keras>

Goals (docs/benchmarks.md): path ratio >= 0.95 in every precision; GPU utilisation >= 90%
during training steps; mixed-precision efficiency >= 0.30 of the measured fp16
GEMM rate.

Without an accelerator (NVML sees none) it prints SKIP and exits 2, unless --allow-cpu.

Usage: python -m benchmarks.gpu_bench [--batch 256] [--loop async|sync] [--precisions mixed_bf16,mixed_fp16,fp32]
       [--xla on,off] [--size 224] [--width 1.0] [--classes 1000] [--out results.jsonl]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from aiperf.flops import count_flops
from aiperf.keras_builder import build_model
from aiperf.peaks import check_peak
from aiperf.precision import get_precision
from aiperf.resnet import resnet50
from worker import monitor
from worker.gemm import best_rate, gemm_flops, jax_products

# Compute types measured: the workers' three, plus float32 with TF32 forbidden
# (the frameworks run float32 products on TF32 tensor cores by default on Ampere and later).
GEMM_TYPES = ("float32", "float32_strict", "float16", "bfloat16")
SAMPLE_S = 0.5  # NVML sampling interval during the timed windows


def backend() -> str:
    import keras

    return keras.backend.backend()


def accelerator_name() -> str:
    found = monitor.accelerators()
    return found[0].name if found else "CPU"


def gemm_rate(dtype: str, n: int, seconds: float) -> float:
    """Operations per second of n×n products of `dtype` on the first device (2n³ each)."""
    if backend() == "jax":
        return best_rate(jax_products(dtype, n), 2.0 * n ** 3, seconds)
    import tensorflow as tf

    device = "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"
    if dtype != "float32_strict":
        return gemm_flops(device, dtype, n=n, seconds=seconds)
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        return gemm_flops(device, "float32", n=n, seconds=seconds)
    finally:  # TensorFlow's default, which the training that follows must have
        tf.config.experimental.enable_tensor_float_32_execution(True)


def model_builders(size: int, classes: int, width: float) -> dict[str, Callable[[], Any]]:
    """The two ResNet-50s: ours (graph → Keras) and keras.applications'."""
    import keras

    graph = resnet50(input_size=size, classes=classes, width=width)
    builders = {"aiperf": lambda: build_model(graph, seed=0)}
    if width == 1.0:
        builders["keras"] = lambda: keras.applications.ResNet50(weights=None, input_shape=(size, size, 3),
                                                                classes=classes)
    return builders


def train_rate(build: Callable[[], Any], precision: str, batch: int, size: int, classes: int, xla: bool,
               seconds: float, windows: int, loop: str) -> tuple[float, list[float], int]:
    """Best images/s over the timed windows; the accelerator utilisation samples taken in them and
    the most accelerator memory in use."""
    import keras
    import numpy as np

    keras.utils.clear_session()
    keras.config.set_dtype_policy(get_precision(precision).keras_policy)
    try:
        model = build()
        model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                      loss="sparse_categorical_crossentropy", jit_compile=xla)
        rng = np.random.default_rng(0)
        x = keras.ops.convert_to_tensor(rng.standard_normal((batch, size, size, 3), dtype=np.float32))
        y = keras.ops.convert_to_tensor(rng.integers(0, classes, batch).astype("int32"))
        step = _sync_steps if loop == "sync" else _async_steps
        return _timed(lambda k: step(model, x, y, k), batch, seconds, windows)
    finally:
        keras.config.set_dtype_policy("float32")
        keras.utils.clear_session()


def worker_rate(precision: str, batch: int, size: int, classes: int, width: float, xla: bool, seconds: float,
                windows: int) -> tuple[float, list[float], int]:
    """Best images/s of the worker's own compiled round on the first device (see the module
    docstring); the utilisation samples and the most memory in use, as `train_rate`."""
    import numpy as np

    from aiperf.graph import with_inserted_kernel
    from aiperf.profiles import get_profile
    from worker import backend as worker_backend
    from worker.rounds import StepSettings

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, size, size, 3), dtype=np.float32)
    y = np.eye(classes, dtype=np.float32)[rng.integers(0, classes, batch)]
    settings = StepSettings(graph=with_inserted_kernel(resnet50(input_size=size, classes=classes, width=width), 3),
                            precision=precision, strategy=worker_backend.one_device()[1], global_batch=batch,
                            epochs=1, steps_per_epoch=1_000_000, xla=xla)
    compiled = worker_backend.compile_round(settings, worker_backend.in_memory_batches((x, y)),
                                            get_profile("official"), warm=False, evaluate=False)

    def steps(k: int) -> None:  # the trainer's loop: a step's loss read once the next is launched
        pending = None
        for _ in range(k):
            launched = compiled.train_step(compiled.train_iterator)
            if pending is not None:
                float(pending[0])
            pending = launched
        float(pending[0])

    try:
        return _timed(steps, batch, seconds, windows)
    finally:
        compiled.release()


def _timed(run: Callable[[int], None], batch: int, seconds: float, windows: int) -> tuple[float, list[float], int]:
    """Best images/s of `run(steps)` over the windows (after two untimed steps and three that size
    them), with the NVML samples taken meanwhile and the most memory in use."""
    run(2)  # tracing, compilation, first-step allocation
    util: list[float] = []
    memory: list[int] = []

    def take(sample: monitor.ResourceSample) -> None:
        util.extend(a.utilization_percent for a in sample.accelerators)
        memory.extend(a.memory_used_bytes for a in sample.accelerators)

    start = time.perf_counter()
    run(3)  # sizes the windows: at least `seconds` and 3 steps each
    steps = max(3, math.ceil(3 * seconds / (time.perf_counter() - start)))
    best = 0.0
    with monitor.Monitor(SAMPLE_S, take):
        for _ in range(windows):
            start = time.perf_counter()
            run(steps)
            best = max(best, steps * batch / (time.perf_counter() - start))
    return best, util, max(memory, default=0)


def _sync_steps(model: Any, x: Any, y: Any, steps: int) -> None:
    """`steps` steps, each waited for (its loss is read) before the next starts: the audit's timing."""
    for _ in range(steps):
        model.train_on_batch(x, y)


def _async_steps(model: Any, x: Any, y: Any, steps: int) -> None:
    """`steps` steps launched ahead of their results, as the worker's loop keeps one in flight:
    Keras's fit over the batch already on the device, with no callback that reads a step's loss."""
    model.fit(_repeat(x, y), steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)


def _repeat(x: Any, y: Any) -> Any:
    while True:
        yield x, y


def gemm_figures(args: argparse.Namespace, name: str,
                 record: Callable[[dict], None]) -> tuple[dict[str, float], list[str]]:
    """Each compute type's GEMM rate, printed with its datasheet check; the rates and their RESULT pairs."""
    rates: dict[str, float] = {}
    results: list[str] = []
    for dtype in [t for t in args.gemm_types.split(",") if t]:
        rate = rates[dtype] = gemm_rate(dtype, args.gemm_n, args.seconds / 4)
        check = check_peak(name, dtype.removesuffix("_strict"), rate) if name != "CPU" else None
        sheet = f"{check.datasheet_flops / 1e12:8.1f}" if check and check.datasheet_flops else "       -"
        print(f"gemm {dtype:15s} {rate / 1e12:8.2f} TFLOPS  datasheet {sheet}  "
              f"{check.verdict if check else 'CPU: no datasheet'}", flush=True)
        record({"gemm": dtype, "n": args.gemm_n, "flops": rate, "check": check.to_dict() if check else None})
        results.append(f"gemm_tflops_{dtype}={rate / 1e12:.2f}")
    return rates, results


def training_figures(args: argparse.Namespace, precision: str, xla: bool, tag: str, rates: dict[str, float],
                     train_flops: int, record: Callable[[dict], None], util_all: list[float]) -> list[str]:
    """Both ResNet-50s trained in one precision and XLA setting, printed; their RESULT pairs."""
    got: dict[str, float] = {}
    builders = model_builders(args.size, args.classes, args.width)
    for path in [q for q in args.paths.split(",") if q in builders or q == "worker"]:
        t0 = time.monotonic()
        if path == "worker":
            got[path], util, memory = worker_rate(precision, args.batch, args.size, args.classes, args.width, xla,
                                                  args.seconds, args.windows)
        else:
            got[path], util, memory = train_rate(builders[path], precision, args.batch, args.size, args.classes,
                                                 xla, args.seconds, args.windows, args.loop)
        util_all += util
        mean_util = f"{statistics.fmean(util):.0f}%" if util else "-"
        print(f"train {tag:18s} {path:7s} {got[path]:9.1f} images/s  gpu util {mean_util:>4s}  "
              f"memory {memory / 2**30:5.1f} GiB  ({time.monotonic() - t0:.0f} s)", flush=True)
        record({"train": path, "precision": precision, "xla": xla, "batch": args.batch, "loop": args.loop,
                "size": args.size, "images_per_s": got[path], "gpu_util": util, "memory_bytes": memory})
    results = [f"worker_images_per_s_{tag}={got['worker']:.1f}"] if "worker" in got else []
    if "worker" in got and "keras" in got:
        results.append(f"worker_vs_keras_applications_{tag}={got['worker'] / got['keras']:.3f}")
    if "aiperf" not in got:
        return results
    results.append(f"images_per_s_{tag}={got['aiperf']:.1f}")
    if "keras" in got:
        results.append(f"path_ratio_{tag}={got['aiperf'] / got['keras']:.3f}")
    gemm = rates.get(get_precision(precision).gemm_dtype or "")
    if gemm:
        results.append(f"efficiency_{tag}={train_flops * got['aiperf'] / gemm:.3f}")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--width", type=float, default=1.0, help="conv width multiplier (below 1: ours only)")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--precisions", default="mixed_bf16,mixed_fp16,fp32")
    p.add_argument("--xla", default="on,off", help="on, off or both (JAX: on only)")
    p.add_argument("--loop", choices=("async", "sync"), default="async",
                   help="async: steps launched ahead (the worker's loop); sync: each step waited for (the audit's)")
    p.add_argument("--paths", default="aiperf,keras,worker",
                   help="which ResNet-50s: aiperf (ours), keras, worker (ours in the worker's own round)")
    p.add_argument("--gemm-n", type=int, default=8192)
    p.add_argument("--gemm-types", default=",".join(GEMM_TYPES))
    p.add_argument("--seconds", type=float, default=2.0, help="length of a timed window")
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=float("inf"), help="start no configuration after this")
    p.add_argument("--out", type=Path, help="append each measurement here as a JSON line")
    p.add_argument("--allow-cpu", action="store_true", help="run on the CPU when NVML sees no accelerator (tests)")
    args = p.parse_args(argv)
    started = time.monotonic()
    name = accelerator_name()
    if name == "CPU" and not args.allow_cpu:
        print("SKIP no NVIDIA accelerator visible through NVML (this benchmark is for GPU nodes; --allow-cpu runs it "
              "on the CPU)")
        return 2
    xla_modes = [m == "on" for m in args.xla.split(",") if m] if backend() != "jax" else [True]
    print(f"backend={backend()} accelerator={name!r} batch={args.batch} size={args.size} loop={args.loop}",
          flush=True)

    def record(entry: dict[str, Any]) -> None:
        if args.out:
            with args.out.open("a") as f:
                f.write(json.dumps({"accelerator": name, "backend": backend(), **entry}) + "\n")

    rates, results = gemm_figures(args, name, record)
    train_flops = count_flops(resnet50(input_size=args.size, classes=args.classes, width=args.width)).train
    print(f"training FLOPs per image (analytic): {train_flops:.4g}", flush=True)
    util_all: list[float] = []
    for precision in [q for q in args.precisions.split(",") if q]:
        for xla in xla_modes:
            if time.monotonic() - started > args.budget_s:
                print(f"budget: {precision} xla={xla} not started", flush=True)
                continue
            tag = precision + ("" if len(xla_modes) == 1 else "_xla" if xla else "_noxla")
            results += training_figures(args, precision, xla, tag, rates, train_flops, record, util_all)
    if util_all:
        results.append(f"gpu_util_mean={statistics.fmean(util_all):.1f}")
    print("RESULT " + " ".join(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
