"""How long a smoke round takes on this machine, and what accuracy it reaches.

Decides whether `aiperf demo` can train >= 15 architectures in 10 minutes with
an error under 30% on the digits. For each smoke round length (rounds 1..3 of
the profile, default hyperparameters) the trainer's wall time, epochs and
validation accuracies are printed, then round 3 with TPE's extreme choices
(batch 16 and 128, inserted kernel 7 on a morphed child). Baseline, measured in
the same run: a plain `model.fit` of the same model and data without the
trainer (no MirroredStrategy, no progress callback); the ratio is the
trainer's overhead.

Usage: .venv/bin/python -m benchmarks.smoke_round_bench (about 3 minutes on 2 cores)
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from aiperf.graph import INSERTED
from aiperf.hyperparameters import Hyperparameters
from aiperf.profiles import SMOKE

DEMO_SECONDS = 600
DEMO_ARCHITECTURES = 15


def plain_fit_seconds(graph, dataset, epochs: int, batch: int) -> float:
    import keras

    from aiperf.keras_builder import build_model

    t = time.perf_counter()
    model = build_model(graph, seed=0)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = SMOKE.bn_momentum
    steps = epochs * dataset.train_steps(batch)
    model.compile(optimizer=keras.optimizers.SGD(
        keras.optimizers.schedules.PolynomialDecay(SMOKE.learning_rate, steps, 0.0), momentum=0.9),
        loss="categorical_crossentropy", metrics=["accuracy"])
    model.fit(dataset.train(batch), validation_data=dataset.validation(batch), epochs=epochs,
              verbose=0, shuffle=False)
    keras.backend.clear_session()
    return time.perf_counter() - t


def main() -> None:
    from aiperf.morphism import random_morph
    from worker.data import load_dataset
    from worker.trainer import train_model

    dataset = load_dataset("digits", image_size=SMOKE.input_size)
    parent = SMOKE.base_graph()
    # A child with a morphism-inserted conv, so the kernel-size hyperparameter matters.
    child = next(c for c in (random_morph(parent, seed=s, steps=2) for s in range(100))
                 if any(layer.tag == INSERTED for layer in c.layers))
    print(f"smoke profile: width {SMOKE.width}, {parent.num_params():,} parameters, "
          f"epochs per round {SMOKE.epochs_per_round}, batch {SMOKE.batch_size}, lr {SMOKE.learning_rate}, "
          f"BN momentum {SMOKE.bn_momentum}; {os.cpu_count()} CPUs")

    def run(label: str, graph, hyper, round_index: int) -> float:
        t = time.perf_counter()
        res = train_model(graph, hyper, dataset, SMOKE, round_index, on_progress=lambda p: None, seed=0)
        secs = time.perf_counter() - t
        accs = ", ".join(f"{a:.3f}" for a in res.val_accuracies)
        print(f"{label:<38} {secs:6.1f} s  {res.state:<7} epochs {res.epochs}  val [{accs}]  "
              f"predicted {res.predicted_accuracy:.3f}")
        return secs

    times = {}
    # Round 1 runs first and also pays TensorFlow's one-time start-up, as in a worker.
    for r in (1, 2, 3):
        label = f"round {r} ({SMOKE.epochs_for_round(r)} epochs) default"
        times[r] = run(label, parent, SMOKE.default_hyperparameters(), r)
    for b, k in ((16, 3), (128, 3), (64, 7)):
        run(f"round 3 child, batch {b}, kernel {k}", child, Hyperparameters(batch_size=b, kernel_size=k), 3)
    base = plain_fit_seconds(parent, dataset, SMOKE.epochs_for_round(3), SMOKE.batch_size)
    print(f"baseline plain model.fit, round 3 length: {base:6.1f} s; trainer/plain = {times[3] / base:.2f}")
    print(f"RESULT smoke_round3_s={times[3]:.3g} plain_fit_round3_s={base:.3g} trainer_vs_plain_fit={times[3] / base:.3g}")
    # A demo worker runs rounds 1, 2, then round-3-length rounds.
    lengths = [times[1], times[2]] + [times[3]] * (DEMO_ARCHITECTURES - 2)
    print(f"{DEMO_ARCHITECTURES} architectures of training: {sum(lengths):.0f} s of the demo's {DEMO_SECONDS} s "
          f"(~{DEMO_SECONDS / times[3]:.0f} round-3 rounds fit in {DEMO_SECONDS} s, before generator/master costs)")


if __name__ == "__main__":
    main()
