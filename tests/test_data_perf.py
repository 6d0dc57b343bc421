"""Input pipeline performance settings (worker/data): order only where the run asks for it, autotuning
within a RAM budget; the node's core check at worker start; benchmarks/data_bench.py's short variant."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.data import DatasetError, DatasetSpec, load_dataset
from worker.data.spec import normalise
from worker.inventory import AcceleratorInfo, Inventory, core_shortage, input_cores_needed


def _labels(dataset, batch: int = 64, seed: int = 3) -> list[int]:
    out: list[int] = []
    for _, y in dataset.train(batch, seed=seed):
        out += list(np.argmax(y.numpy(), axis=1))
    return out


def test_a_non_deterministic_pipeline_gives_every_element_once_an_epoch_within_its_ram_budget():
    fixed = load_dataset("digits", image_size=16)
    free = load_dataset("digits", image_size=16, deterministic=False, ram_budget_bytes=64 << 20)
    a, b = _labels(fixed), _labels(free)
    assert len(a) == len(b) == fixed.train_size and Counter(a) == Counter(b)
    assert _labels(fixed) == a, "a deterministic pipeline repeats itself for the same seed"
    options = free.train(64, seed=3).options()
    assert options.deterministic is False and options.autotune.enabled
    assert options.autotune.ram_budget == 64 << 20
    assert fixed.validation(64).options().deterministic is True
    assert fixed.train(64).options().autotune.ram_budget > 0  # the default: a quarter of the node's memory


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=-2**40, max_value=2**40))
def test_the_ram_budget_is_at_least_one_mebibyte(budget):
    spec = DatasetSpec(kind="digits", ram_budget_bytes=budget)
    if budget >= 1 << 20:
        assert normalise(spec).ram_budget_bytes == budget
    else:
        with pytest.raises(DatasetError, match="ram_budget_bytes"):
            normalise(spec)


def test_a_node_with_too_few_cores_for_its_accelerators_is_told_at_worker_start():
    h100 = AcceleratorInfo("NVIDIA H100 80GB HBM3", 80 << 30)
    # 3,000 images/s per H100 at 450 images per CPU-second: 6.7 cores each, plus one for the worker
    assert input_cores_needed(0) == 1 and input_cores_needed(1) == 8 and input_cores_needed(8) == 55
    assert core_shortage(Inventory((h100,), cpus=16, memory_bytes=1 << 40)) == ""
    assert core_shortage(Inventory((h100,) * 8, cpus=55, memory_bytes=1 << 40)) == ""
    assert core_shortage(Inventory((), cpus=2, memory_bytes=1 << 30)) == "", "a CPU-only node trains on its CPUs"
    warning = core_shortage(Inventory((h100,) * 8, cpus=54, memory_bytes=1 << 40))
    assert "54 CPUs for 8 accelerators" in warning and "about 55" in warning


@pytest.mark.slow
def test_the_data_bench_short_variant_prints_its_result(capsys):
    from benchmarks import data_bench

    data_bench.main(["--rounds", "1", "--batches", "2", "--warmup", "1", "--images", "64"])
    out = capsys.readouterr().out
    result = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert len(result) == 1
    fields = dict(pair.split("=") for pair in result[0].split()[1:])
    assert set(fields) == {"data_ratio_vs_plain", "images_per_cpu_second", "plain_images_per_cpu_second",
                           "cores_per_h100", "data_ratio_nontf_vs_tfdata", "nontf_images_per_cpu_second",
                           "nontf_cores_per_h100"}
    assert all(float(value) > 0 for value in fields.values())
    assert "tfrecord:" in out and "folder:" in out and "needs" in out and "nontf/tf.data" in out
