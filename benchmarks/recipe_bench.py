"""The training recipe on the smoke profile, measured: the smoke profile's own against the original's.

For each recipe (docs/spec.md, "The training recipe") the smoke profile's starting network trains
a round of 2 epochs (the first smoke round) and one of 4 (the longest) with the default
hyperparameters, seeds 0-2, on the digits; printed: the best validation accuracy of each and the
mean over seeds. The recipes:

- smoke: the smoke profile as it is (no label smoothing, no weight decay, lr linear to 0 per round);
- original: label smoothing 0.1 and weight decay 1e-4 on the kernels (the official profile's);
- paper_lr: the smoke profile with the paper's schedule, lr·(1 − e/final_epochs) per epoch;
- original_paper_lr: both.

Early stopping does not enter: its patience (at least 8 epochs) exceeds every smoke round.

Usage: .venv/bin/python -m benchmarks.recipe_bench [SEEDS] (about 10 minutes on 2 idle cores)
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROUNDS = (2, 4)  # the first smoke round's epochs and the longest's


def recipes() -> dict[str, object]:
    from aiperf.profiles import OFFICIAL, SMOKE

    original = dict(label_smoothing=OFFICIAL.label_smoothing, weight_decay=OFFICIAL.weight_decay)
    return {
        "smoke": SMOKE,
        "original": dataclasses.replace(SMOKE, **original),
        "paper_lr": dataclasses.replace(SMOKE, lr_decay="max_epochs"),
        "original_paper_lr": dataclasses.replace(SMOKE, lr_decay="max_epochs", **original),
    }


def main() -> None:
    from worker.data import load_dataset
    from worker.trainer import train_model

    seeds = tuple(range(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
    from aiperf.profiles import SMOKE

    dataset = load_dataset("digits", image_size=SMOKE.input_size)
    graph = SMOKE.base_graph()
    hyper = SMOKE.default_hyperparameters()
    results: dict[tuple[str, int], list[float]] = {}
    for name, profile in recipes().items():
        for epochs in ROUNDS:
            for seed in seeds:
                start = time.perf_counter()
                res = train_model(graph, hyper, dataset, profile, len(profile.epochs_per_round), epochs=epochs,
                                  on_progress=lambda p: None, seed=seed)
                best = max(res.val_accuracies)
                results.setdefault((name, epochs), []).append(best)
                print(f"{name} epochs {epochs} seed {seed}: best {best:.3f} "
                      f"[{', '.join(f'{a:.3f}' for a in res.val_accuracies)}] {time.perf_counter() - start:.0f} s",
                      flush=True)
    for (name, epochs), bests in results.items():
        print(f"RESULT recipe={name} epochs={epochs} mean_best={statistics.mean(bests):.4g} "
              f"min_best={min(bests):.4g} seeds={len(bests)}")


if __name__ == "__main__":
    main()
