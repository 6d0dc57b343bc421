"""Time to count the FLOPs of the official ResNet-50 graph, next to TensorFlow's profiler.

Target: our analytic count under 5 ms. The profiler (trace, freeze, profile the
same Keras model) is the baseline, measured in the same run; the ratio is printed.
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from aiperf.flops import count_flops
from aiperf.graph import Graph
from aiperf.resnet import resnet50

TARGET_MS = 5.0


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    graph = resnet50()
    text = graph.to_json()
    ours = timed(lambda: count_flops(graph), 200)
    parsed = timed(lambda: count_flops(Graph.from_json(text)), 50)
    from aiperf.keras_builder import build_model, profiler_flops

    model = build_model(graph)
    prof = timed(lambda: profiler_flops(model), 3)
    ours_ms = statistics.median(ours) * 1e3
    parsed_ms = statistics.median(parsed) * 1e3
    prof_ms = statistics.median(prof) * 1e3
    print(f"count_flops(official ResNet-50):        {ours_ms:8.3f} ms (median of {len(ours)}; target < {TARGET_MS} ms: "
          f"{'PASS' if ours_ms < TARGET_MS else 'FAIL'})")
    print(f"from_json + count_flops:                {parsed_ms:8.3f} ms (median of {len(parsed)})")
    print(f"TensorFlow profiler on the Keras model: {prof_ms:8.1f} ms (median of {len(prof)})")
    print(f"speed-up of the analytic count over the profiler: {prof_ms / ours_ms:,.0f}x")
    print(f"RESULT count_flops_ms={ours_ms:.4g} profiler_ms={prof_ms:.4g} speedup_vs_profiler={prof_ms / ours_ms:.4g}")


if __name__ == "__main__":
    main()
