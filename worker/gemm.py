"""Dense GEMM rate of an accelerator: the peak behind a run's efficiency.

Efficiency = Score / peak, where peak is the sum over the accelerators that
took part of a measured matrix-multiply rate at the run's compute type (the
HPL Rmax/Rpeak habit). Measured, not taken from a data sheet: it is what this
node, driver and framework build actually reach.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Sequence

from aiperf.precision import GEMM_DTYPES

log = logging.getLogger(__name__)


def gemm_flops(device: str, dtype: str, n: int = 8192, seconds: float = 0.5, trials: int = 3) -> float:
    """Operations per second (2n³ per product) of n×n matrix products of
    `dtype` on `device` (e.g. "/GPU:0"), the best of `trials` timings of at
    least `seconds` each, with the framework of the backend in use (`worker.backend`)."""
    if dtype not in GEMM_DTYPES:
        raise ValueError(f"unknown compute type {dtype!r} (expected one of {', '.join(GEMM_DTYPES)})")
    if n < 1 or seconds <= 0 or trials < 1:
        raise ValueError("n and trials must be >= 1 and seconds > 0")
    from worker import backend

    if backend.name() == "jax":
        return best_rate(jax_products(dtype, n, device), 2.0 * n ** 3, seconds, trials)
    return best_rate(_tensorflow_products(dtype, n, device), 2.0 * n ** 3, seconds, trials)


def _tensorflow_products(dtype: str, n: int, device: str) -> Callable[[int], float]:
    """run(k): k products of two random n×n matrices of `dtype` on TensorFlow's `device`; its seconds."""
    import tensorflow as tf

    # TensorFlow would quietly run on the CPU for a device it does not have
    wanted = device.upper().split("DEVICE:")[-1].lstrip("/")
    if wanted not in {d.name.upper().split("DEVICE:")[-1] for d in tf.config.list_logical_devices()}:
        raise ValueError(f"no device {device}")
    with tf.device(device):
        a = tf.cast(tf.random.stateless_uniform((n, n), seed=(1, 2), minval=-1.0, maxval=1.0), dtype)
        b = tf.cast(tf.random.stateless_uniform((n, n), seed=(3, 4), minval=-1.0, maxval=1.0), dtype)

    def run(k: int) -> float:
        start = time.perf_counter()
        with tf.device(device):
            for _ in range(k):
                c = tf.linalg.matmul(a, b)
        # the products run in order on the device: waiting for one element of the last waits for all
        c[0, 0].numpy()
        return time.perf_counter() - start

    return run


def jax_products(dtype: str, n: int, device: str = "") -> Callable[[int], float]:
    """run(k): k products of two random n×n matrices of `dtype` on JAX's `device` ("/GPU:0",
    "/CPU:0"; "": the first device); its seconds. "float32_strict": float32 with TF32 forbidden."""
    import jax
    import jax.numpy as jnp

    target = _jax_device(device)
    strict = dtype == "float32_strict"
    dt = jnp.float32 if strict else getattr(jnp, dtype)
    precision = jax.lax.Precision.HIGHEST if strict else jax.lax.Precision.DEFAULT
    product = jax.jit(lambda a, b: jnp.matmul(a, b, precision=precision))
    ka, kb = jax.random.split(jax.random.PRNGKey(0))
    a, b = (jax.device_put(jax.random.uniform(key, (n, n), jnp.float32, -1, 1).astype(dt), target)
            for key in (ka, kb))

    def run(k: int) -> float:
        start = time.perf_counter()
        for _ in range(k):
            c = product(a, b)
        c.block_until_ready()  # the products run in order on the device
        return time.perf_counter() - start

    return run


def _jax_device(device: str) -> Any:
    """The JAX device of a "/GPU:0"-style name ("": the first); ValueError: no such device."""
    import jax

    if not device:
        return jax.local_devices()[0]
    kind, _, index = device.upper().split("DEVICE:")[-1].lstrip("/").partition(":")
    try:
        found = [d for d in jax.local_devices(backend=kind.lower())]
        return found[int(index or 0)]
    except (RuntimeError, IndexError, ValueError):
        raise ValueError(f"no device {device}") from None


def best_rate(run: Callable[[int], float], ops: float, seconds: float, trials: int = 3) -> float:
    """Operations per second of `run(k)`, which does k operations of `ops` each and returns its
    seconds: the best of `trials` timings of about `seconds` each, after an untimed first call
    (kernel selection, compilation, memory allocation)."""
    run(1)
    k = 1
    while (elapsed := run(k)) < seconds / 4:
        k *= 2
    k = max(1, int(k * seconds / elapsed))
    return max(ops * k / run(k) for _ in range(trials))


# The CPU measurement: float32 only (the compute type of the CPU's runs; 16-bit
# types are emulated on most CPUs), small matrices and short windows so that a
# worker starts within about a second (the demo must stay a few minutes); the
# best of CPU_TRIALS windows, so that a passing load spike lowers no rate.
CPU_DTYPE = "float32"
CPU_N = 1024
CPU_SECONDS = 0.2
CPU_TRIALS = 3


def measure_cpu_peak(n: int = CPU_N, seconds: float = CPU_SECONDS, trials: int = CPU_TRIALS) -> dict[str, float]:
    """A worker without accelerators: its CPU's float32 GEMM rate ({} when it cannot be measured)."""
    try:
        rate = gemm_flops("/CPU:0", CPU_DTYPE, n=n, seconds=seconds, trials=trials)
    except Exception as exc:  # noqa: BLE001 - no rate is "peak unknown", never a failed start
        log.warning("event=cpu_gemm_peak_failed error=%s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return {}
    log.info("event=gemm_peak device=/CPU:0 dtype=%s flops=%.3e", CPU_DTYPE, rate)
    return {CPU_DTYPE: rate}


def measure_peaks(devices: Sequence[str], n: int = 8192, seconds: float = 0.5) -> list[dict[str, float]]:
    """For each device, its GEMM rate per compute type it supports (a type the
    device or the framework cannot multiply is left out)."""
    peaks: list[dict[str, float]] = []
    for device in devices:
        found: dict[str, float] = {}
        for dtype in GEMM_DTYPES:
            try:
                found[dtype] = gemm_flops(device, dtype, n=n, seconds=seconds)
            except Exception as exc:  # noqa: BLE001 - an unsupported type is skipped, not fatal
                log.info("event=gemm_peak_skipped device=%s dtype=%s error=%s", device, dtype,
                         str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                continue
            log.info("event=gemm_peak device=%s dtype=%s flops=%.3e", device, dtype, found[dtype])
        peaks.append(found)
    return peaks
