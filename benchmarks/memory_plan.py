"""The device memory the worker's JAX training step needs per batch size, and the largest batch
that fits: what the official profile's memory rule (12-14 images per GiB, the original's,
calibrated on TensorFlow and a V100) should be checked against on each accelerator.

For each --batches size (per accelerator) it builds the worker's round for the profile's
ResNet-50 (kernel 3 inserted) in --precision and compiles its training step on one device as
`worker.jax_steps.compile_round` does, without running it: XLA assigns every buffer when it
compiles, so the memory one step needs is known then (`worker.jax_memory.planned_bytes`).
Memory grows linearly with the batch (activations) above a fixed part (weights, optimizer
state, workspace): a least-squares line through the sizes gives both, and with the device's
memory limit (--memory-gib where the device reports none, as the CPU) the largest batch that
fits, the images per GiB of the accelerator's memory it means, and how many of the official
profile's batch sizes for that memory fit. Compiling only, it runs in the time of a few XLA
compilations (on the CPU too: there the figures are the CPU compiler's plan, not a GPU's).

    RESULT planned_bytes_per_image=... planned_fixed_bytes=... largest_batch_that_fits=...
           images_per_gib_that_fit=... official_batch_sizes_that_fit=<k>/<n>

Usage (KERAS_BACKEND=jax): python -m benchmarks.memory_plan [--batches 128,256] [--size 224]
       [--width 1.0] [--classes 1000] [--precision mixed_bf16] [--memory-gib 140] [--out plan.jsonl]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Sequence

GIB = 2**30


def planned_bytes(batches: Sequence[int], args: argparse.Namespace) -> list[int | None]:
    """The training step's planned memory per device at each of `batches` images (one model built,
    its step compiled per size, not run)."""
    from aiperf.graph import with_inserted_kernel
    from aiperf.profiles import get_profile
    from aiperf.resnet import resnet50
    from worker.jax_steps import one_device, planned_step_bytes
    from worker.rounds import StepSettings

    graph = with_inserted_kernel(resnet50(input_size=args.size, classes=args.classes, width=args.width), 3)
    settings = StepSettings(graph=graph, precision=args.precision, strategy=one_device()[1],
                            global_batch=max(batches), epochs=1, steps_per_epoch=1)
    return planned_step_bytes(settings, get_profile("official"), batches)


def line_through(points: list[tuple[int, int]]) -> tuple[float, float]:
    """(fixed, per image) of the least-squares line bytes = fixed + per_image × batch (the closed
    form: np.polyfit loses digits of the slope when the fixed part is millions of times larger)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    per_image = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
    return mean_y - per_image * mean_x, per_image


def device_memory(args: argparse.Namespace) -> int | None:
    """--memory-gib, else the first device's limit (None on the CPU)."""
    if args.memory_gib:
        return int(args.memory_gib * GIB)
    from worker import jax_memory
    from worker.jax_steps import one_device

    return jax_memory.device_limit(one_device()[1].devices)


def fit_figures(points: list[tuple[int, int]], memory: int | None) -> dict[str, Any]:
    """The line through the points and, with the device's memory, what fits in it."""
    from aiperf.profiles import OFFICIAL

    fixed, per_image = line_through(points)
    figures: dict[str, Any] = {"planned_bytes_per_image": round(per_image), "planned_fixed_bytes": round(fixed)}
    if memory is not None and per_image > 0:
        largest = max(0, math.floor((memory - fixed) / per_image))
        official = OFFICIAL.for_accelerator_memory(memory).batch_sizes
        fitting = sum(1 for b in official if fixed + per_image * b <= memory)
        figures.update(memory_bytes=memory, largest_batch_that_fits=largest,
                       images_per_gib_that_fit=round(largest / max(1, round(memory / GIB)), 2),
                       official_batch_sizes_that_fit=f"{fitting}/{len(official)}")
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", default="128,256", help="batch sizes per accelerator, two or more")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--width", type=float, default=1.0)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--precision", default="mixed_bf16")
    p.add_argument("--memory-gib", type=float, help="the accelerator's memory (default: the device's limit)")
    p.add_argument("--out", type=Path, help="append each batch's figure here as a JSON line")
    args = p.parse_args(argv)
    try:
        batches = sorted({int(b) for b in args.batches.split(",") if b.strip()})
    except ValueError:
        batches = []
    if len(batches) < 2 or batches[0] < 1:
        print(f"memory_plan: --batches needs two or more sizes >= 1, got {args.batches!r}", file=sys.stderr)
        return 2
    if os.environ.get("KERAS_BACKEND") != "jax":
        print("memory_plan: set KERAS_BACKEND=jax (XLA's plan is read from a compiled JAX step)", file=sys.stderr)
        return 2
    points = []
    for batch, needed in zip(batches, planned_bytes(batches, args)):
        if needed is None:
            print("memory_plan: this platform gives no memory plan", file=sys.stderr)
            return 2
        points.append((batch, needed))
        print(f"batch {batch}: {needed / GIB:.3f} GiB planned per device", flush=True)
        if args.out:
            with args.out.open("a") as f:
                f.write(json.dumps({"batch": batch, "planned_bytes": needed, "precision": args.precision,
                                    "size": args.size, "width": args.width}) + "\n")
    figures = fit_figures(points, device_memory(args))
    print("RESULT " + " ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
