"""Warm-up defaults, then TPE through NNI's HyperoptTuner."""

import collections
import dataclasses
import random
import subprocess
import sys

import pytest

from aiperf.hpo import Tuner, choose_hyperparameters, search_space
from aiperf.hyperparameters import Hyperparameters
from aiperf.profiles import OFFICIAL, SMOKE

pytest.importorskip("nni")


def history_where_3_and_32_is_best(seed=0, n=16):
    r = random.Random(seed)
    hist = []
    for _ in range(n):
        b, k = r.choice(SMOKE.batch_sizes), r.choice(SMOKE.kernel_sizes)
        acc = 0.9 if (b, k) == (32, 3) else 0.2 + 0.1 * r.random()
        hist.append((Hyperparameters(b, k), acc))
    hist += [(Hyperparameters(32, 3), 0.88), (Hyperparameters(32, 3), 0.91)]
    return hist


def test_warmup_starts_from_the_parents_hyperparameters_as_the_original():
    # The original's warm-up trained a child with its father's best hyperparameters
    # (imagenet_train.py: init_search_space_point from hyperparameter/<father_id>.json).
    h100 = OFFICIAL.for_accelerator_memory(80 * 2**30)
    parent = Hyperparameters(1000, 7)
    for r in range(1, 6):
        assert choose_hyperparameters(h100, r, [], seed=r, parent=parent) == (parent, "parent")
    # another worker's memory gave the parent a batch outside this space: the default for it
    v100 = OFFICIAL.for_accelerator_memory(32 * 2**30)
    assert choose_hyperparameters(v100, 1, [], seed=1, parent=parent) == (Hyperparameters(448, 7), "parent")
    assert choose_hyperparameters(v100, 1, [], seed=1, parent=Hyperparameters(400, 9)) == (
        Hyperparameters(400, 3), "parent")
    assert choose_hyperparameters(v100, 1, [], seed=1) == (v100.default_hyperparameters(), "default")
    off = dataclasses.replace(v100, warmup_from_parent=False)
    assert choose_hyperparameters(off, 1, [], seed=1, parent=parent) == (off.default_hyperparameters(), "default")
    # after warm-up an architecture trains twice (the original's maxTPEsearchNum 2): first with its
    # parent's hyperparameters (the original's init point), then with TPE's
    assert choose_hyperparameters(h100, 6, history_where_3_and_32_is_best(), seed=6, parent=parent) == (
        parent, "parent")
    assert choose_hyperparameters(h100, 7, history_where_3_and_32_is_best(), seed=7, parent=parent)[1] == "tpe"


def test_two_trials_per_architecture_after_warmup_the_first_from_the_parent():
    parent = Hyperparameters(448, 5)
    v100 = OFFICIAL.for_accelerator_memory(32 * 2**30)
    hist = history_where_3_and_32_is_best()
    sources = [choose_hyperparameters(v100, r, [], seed=r, parent=parent)[1] for r in range(1, 6)]
    assert sources == ["parent"] * 5  # warm-up
    assert [v100.trial(r) for r in range(1, 12)] == [1, 1, 1, 1, 1, 1, 2, 1, 2, 1, 2]
    sources = [choose_hyperparameters(v100, r, hist, seed=r, parent=parent)[1] for r in range(6, 12)]
    assert sources == ["parent", "tpe"] * 3
    # without a trained parent the first trial takes the defaults, as warm-up does
    assert choose_hyperparameters(v100, 8, hist, seed=8) == (v100.default_hyperparameters(), "default")
    # a run's own warm-up length moves the trials with it
    assert [v100.trial(r, warmup_rounds=2) for r in range(1, 7)] == [1, 1, 1, 2, 1, 2]
    assert choose_hyperparameters(v100, 4, hist, seed=4, warmup_rounds=2, parent=parent)[1] == "tpe"
    # three trials: the parent's, then two of TPE's
    three = dataclasses.replace(v100, trials_per_architecture=3)
    assert [choose_hyperparameters(three, r, hist, seed=r, parent=parent)[1] for r in range(6, 12)] == [
        "parent", "tpe", "tpe"] * 2
    # one trial (the smoke profile): TPE's from the first round after warm-up
    assert SMOKE.trials_per_architecture == 1 and [SMOKE.trial(r) for r in range(1, 9)] == [1] * 8
    assert choose_hyperparameters(SMOKE, 6, hist, seed=6, parent=Hyperparameters(32, 3))[1] == "tpe"


def test_official_batch_space_is_12_to_14_times_gib_as_the_original():
    # search_space.json: batch_size uniform [12, 14], times utils.MinGpuMem() (GiB, rounded)
    for gib in (16, 32, 40, 80, 141):
        p = OFFICIAL.for_accelerator_memory(gib * 2**30)
        assert 12 * gib <= min(p.batch_sizes) < 12 * gib + 8 and 14 * gib - 8 < max(p.batch_sizes) <= 14 * gib
        assert all(b % 8 == 0 for b in p.batch_sizes) and p.batch_size == max(p.batch_sizes)
        assert search_space(p)["batch_size"]["_value"] == list(p.batch_sizes)
    assert OFFICIAL.for_accelerator_memory(32 * 2**30).batch_size == 448  # the paper's V100 default
    assert OFFICIAL.for_accelerator_memory(2**30).batch_sizes == (12, 13, 14)  # too few eights: every integer


def test_search_space_is_the_profile_choices():
    assert search_space(SMOKE) == {
        "batch_size": {"_type": "choice", "_value": [16, 32, 64, 128]},
        "kernel_size": {"_type": "choice", "_value": [3, 5, 7]},
    }


def test_warmup_rounds_use_defaults_then_tpe():
    hist = history_where_3_and_32_is_best()
    for r in range(1, 6):
        assert choose_hyperparameters(SMOKE, r, hist, seed=r) == (SMOKE.default_hyperparameters(), "default")
    assert SMOKE.default_hyperparameters() == Hyperparameters(SMOKE.batch_size, 3)
    # The warm-up length is a setting of the run.
    assert choose_hyperparameters(SMOKE, 4, hist, seed=4, warmup_rounds=3)[1] == "tpe"
    assert choose_hyperparameters(SMOKE, 7, hist, seed=7, warmup_rounds=7)[1] == "default"
    hyper, source = choose_hyperparameters(SMOKE, 6, hist, seed=6)
    assert source == "tpe"
    assert hyper.batch_size in SMOKE.batch_sizes and hyper.kernel_size in SMOKE.kernel_sizes


def test_tpe_maximises():
    hist = history_where_3_and_32_is_best()
    proposals = [Tuner(SMOKE, hist).propose(seed) for seed in range(20)]
    best = sum(p == Hyperparameters(32, 3) for p in proposals)
    # Random search would hit 1 in 12 configurations (~2 of 20).
    assert best >= 12, collections.Counter(proposals)


def test_tpe_is_in_effect_with_few_observations():
    # hyperopt's default samples at random for 20 observations; ours models them after 5.
    hist = [(Hyperparameters(16, 7), 0.9), (Hyperparameters(128, 3), 0.1),
            (Hyperparameters(64, 5), 0.2), (Hyperparameters(32, 3), 0.15),
            (Hyperparameters(64, 7), 0.2), (Hyperparameters(128, 5), 0.1)]
    proposals = [Tuner(SMOKE, hist).propose(seed) for seed in range(20)]
    assert sum(p == Hyperparameters(16, 7) for p in proposals) >= 12


def test_same_seed_and_history_same_proposal():
    hist = history_where_3_and_32_is_best(seed=3)
    a = [Tuner(SMOKE, hist).propose(s) for s in range(8)]
    b = [Tuner(SMOKE, list(reversed(hist))).propose(s) for s in range(8)]  # order of rows does not matter
    assert a == b
    # ... and the seed does matter (with no information TPE samples the prior).
    assert len({Tuner(SMOKE, []).propose(s) for s in range(10)}) > 1


def test_proposals_stay_in_the_space():
    hist = history_where_3_and_32_is_best(seed=5)
    for profile in (SMOKE, OFFICIAL):
        t = Tuner(profile, [])
        for s in range(15):
            p = t.propose(s)
            assert p.batch_size in profile.batch_sizes and p.kernel_size in profile.kernel_sizes
    t = Tuner(SMOKE, hist)
    assert all(t.propose(s).batch_size in SMOKE.batch_sizes for s in range(10))


def test_failed_and_foreign_entries():
    # 0.0 (a failed model) is an observation, None (still training) and out-of-space entries
    # are not (a malformed one cannot be built: aiperf.hyperparameters checks it).
    hist = [(Hyperparameters(64, 3), 0.0), (Hyperparameters(64, 5), None),
            (Hyperparameters(999, 3), 0.9), (Hyperparameters(16, 9), 0.5)]
    t = Tuner(SMOKE, hist)
    assert t.observations == [(Hyperparameters(64, 3), pytest.approx(1e-6))]
    assert t.propose(1).batch_size in SMOKE.batch_sizes


def test_aiperf_imports_without_nni_or_tensorflow():
    code = ("import sys; import aiperf.hpo, aiperf.profiles, aiperf.learning_curve, worker.trainer, worker.monitor; "
            "assert 'nni' not in sys.modules and 'tensorflow' not in sys.modules and 'hyperopt' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
