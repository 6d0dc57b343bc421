"""The GEMM rate measurement behind efficiency (run on the CPU here; on GPU nodes the same code runs per GPU)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from worker.gemm import gemm_flops, measure_peaks


def test_gemm_rate_on_the_cpu_is_plausible():
    n = 256
    rate = gemm_flops("/CPU:0", "float32", n=n, seconds=0.05, trials=2)
    # the same products in numpy on the same machine: TensorFlow's rate is of the same order.
    # The best of several short windows, so that other jobs on a shared machine do not decide it.
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    numpy_rate = 0.0
    for _ in range(5):
        start, k = time.perf_counter(), 0
        while time.perf_counter() - start < 0.05:
            a @ a
            k += 1
        numpy_rate = max(numpy_rate, 2 * n ** 3 * k / (time.perf_counter() - start))
    assert np.isfinite(rate) and numpy_rate / 50 < rate < numpy_rate * 50


def test_unknown_compute_type_is_refused():
    with pytest.raises(ValueError, match="unknown compute type 'float64'"):
        gemm_flops("/CPU:0", "float64", n=8)


def test_peaks_per_device_skip_what_cannot_be_measured():
    peaks = measure_peaks(["/CPU:0", "/GPU:99"], n=64, seconds=0.02)
    assert len(peaks) == 2
    assert peaks[0]["float32"] > 0
    # a device that does not exist: nothing measured (not the CPU in its place), and no error
    assert peaks[1] == {}
    with pytest.raises(ValueError, match="no device /GPU:99"):
        gemm_flops("/GPU:99", "float32", n=8)
