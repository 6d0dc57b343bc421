"""Run profiles: the rules of SPEC section 3 as data."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf.hyperparameters import Hyperparameters
from aiperf.profiles import OFFICIAL, PROFILES, SMOKE, SMOKE_TOP1_TARGET, Profile, get_profile
from aiperf.scoring import PROFILES as SCORING_RULES


def test_official_epochs_per_round_15_30_45_then_60():
    assert [OFFICIAL.epochs_for_round(r) for r in range(1, 8)] == [15, 30, 45, 60, 60, 60, 60]
    assert OFFICIAL.final_epochs == 60


def test_patience_is_min_6_plus_2r_and_20():
    assert [OFFICIAL.patience(r) for r in (1, 2, 3, 6, 7, 8, 20)] == [8, 10, 12, 18, 20, 20, 20]
    assert SMOKE.patience(1) == 8


def test_official_rules():
    p = get_profile("official")
    assert p.official and p.input_shape == (224, 224, 3) and p.num_classes == 1000 and p.width == 1.0
    assert p.dataset == "imagenet-tfrecord"
    assert p.batch_size == 448 and 448 in p.batch_sizes
    assert p.kernel_sizes == (3, 5, 7) and p.kernel_size == 3
    assert p.learning_rate == 0.1 and p.momentum == 0.9
    assert p.min_running_time_s == 3600 and p.max_error == 0.30
    assert p.warmup_rounds == 5
    assert p.default_hyperparameters() == Hyperparameters(batch_size=448, kernel_size=3)


def test_warmup_is_rounds_1_to_5_by_default_and_a_setting():
    assert [OFFICIAL.is_warmup(r) for r in (1, 5, 6)] == [True, True, False]
    four = dataclasses.replace(OFFICIAL, warmup_rounds=4)
    assert four.is_warmup(4) and not four.is_warmup(5)


def test_smoke_profile_is_small_and_unofficial():
    p = get_profile("smoke")
    assert not p.official and p.dataset == "digits"
    assert p.input_shape == (32, 32, 3) and p.num_classes == 10 and p.width < 1
    assert p.batch_size in p.batch_sizes and min(p.batch_sizes) < p.batch_size < max(p.batch_sizes)
    assert p.min_running_time_s < 3600 and p.max_error == 0.30
    g = p.base_graph()
    assert g.input_shape == (32, 32, 3) and g.num_classes == 10


def test_scoring_rules_are_the_spec_rules():
    # SPEC section 3: 1 hour minimum running time, 30% maximum error; smoke is never official.
    official, smoke = SCORING_RULES["official"], SCORING_RULES["smoke"]
    assert (official.min_duration_s, official.min_running_time_s, official.max_error, official.official) == \
        (3600.0, 3600.0, 0.30, True)
    # Valid FLOPS targets (HPC AI500 v3, n = 5): ResNet-50's 76.3% top-1 for the official
    # profile; the smoke network's accuracy after one full-length smoke round for smoke.
    assert official.target_accuracy == 0.763 and smoke.target_accuracy == SMOKE_TOP1_TARGET
    assert smoke.official is False and smoke.min_running_time_s < official.min_running_time_s


@pytest.mark.parametrize("target", [0.0, -0.5, 1.01, float("nan")])
def test_target_accuracy_must_be_a_fraction(target):
    with pytest.raises(ValueError, match="target_accuracy must be in"):
        dataclasses.replace(SMOKE, target_accuracy=target)
    with pytest.raises(ValueError, match="target_accuracy"):
        Profile.from_dict(SMOKE.to_dict() | {"target_accuracy": target})


def test_unknown_profile_is_named():
    with pytest.raises(ValueError, match="'huge'.*official, smoke"):
        get_profile("huge")


@pytest.mark.parametrize("r", [0, -1, 1.5, True])
def test_round_index_must_be_positive_integer(r):
    with pytest.raises(ValueError):
        OFFICIAL.epochs_for_round(r)


def test_inconsistent_profile_rejected():
    with pytest.raises(ValueError, match="default batch size"):
        dataclasses.replace(SMOKE, batch_size=48)
    with pytest.raises(ValueError, match="dataset"):
        dataclasses.replace(SMOKE, dataset="mnist")
    with pytest.raises(ValueError, match="'smoke': kernel_size must be an odd integer"):
        dataclasses.replace(SMOKE, kernel_sizes=(3, 4), kernel_size=3)
    with pytest.raises(ValueError, match="'smoke': batch_size must be a positive integer"):
        dataclasses.replace(SMOKE, batch_sizes=(0, 32), batch_size=32)
    with pytest.raises(ValueError, match="'smoke': widen_fractions must be positive"):
        dataclasses.replace(SMOKE, widen_fractions=(0.5, float("nan")))
    with pytest.raises(ValueError, match="'official': batch_per_gib must be 0 < low <= high"):
        dataclasses.replace(OFFICIAL, batch_per_gib=(14.0, 12.0))
    with pytest.raises(ValueError, match="batch_per_gib"):
        Profile.from_dict({**OFFICIAL.to_dict(), "batch_per_gib": ["12", 14]})
    with pytest.raises(ValueError, match="skip_new_add must be true or false"):
        Profile.from_dict({**OFFICIAL.to_dict(), "skip_new_add": "yes"})


def test_the_official_profile_searches_the_originals_space():
    # AIPerf's code (to_wider_graph: n_add = filters; to_skip_connection_graph2; the
    # [12, 14] x GiB batch space; the father's hyperparameters in warm-up); smoke keeps
    # smaller widening steps.
    assert (OFFICIAL.widen_fractions, OFFICIAL.skip_new_add, OFFICIAL.batch_per_gib,
            OFFICIAL.warmup_from_parent) == ((1.0,), True, (12.0, 14.0), True)
    assert (SMOKE.widen_fractions, SMOKE.skip_new_add, SMOKE.batch_per_gib) == ((0.25, 0.5), True, None)


def test_batch_sizes_scale_with_accelerator_memory():
    assert OFFICIAL.for_accelerator_memory(32 * 2**30) == OFFICIAL
    h100 = OFFICIAL.for_accelerator_memory(80 * 2**30)
    assert h100.batch_size == 1120 and max(h100.batch_sizes) == 1120
    assert all(b % 8 == 0 for b in h100.batch_sizes)
    small = OFFICIAL.for_accelerator_memory(16 * 2**30)
    assert small.batch_size == 224
    assert OFFICIAL.for_accelerator_memory(None) == OFFICIAL
    assert SMOKE.for_accelerator_memory(80 * 2**30) == SMOKE  # smoke sizes are not memory-bound


def test_profile_round_trips_through_json():
    import json

    for p in PROFILES.values():
        assert Profile.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    with pytest.raises(ValueError, match="unknown profile setting"):
        Profile.from_dict({**SMOKE.to_dict(), "turbo": True})


@settings(max_examples=200, deadline=None)
@given(memory=st.integers(1, 4096 * 2**30))
def test_official_batch_choices_stay_in_the_originals_range(memory: int) -> None:
    p = OFFICIAL.for_accelerator_memory(memory)
    gib = max(1, round(memory / 2**30))
    assert p.batch_sizes == tuple(sorted(set(p.batch_sizes))) and len(p.batch_sizes) >= 3
    assert 12 * gib <= min(p.batch_sizes) and max(p.batch_sizes) <= 14 * gib
    assert p.batch_size == max(p.batch_sizes) > 14 * gib - 8
    assert p.default_hyperparameters().batch_size in p.batch_sizes


RECIPE_BOUNDS = {  # field: (a value it takes, values it refuses)
    "label_smoothing": (0.1, [-0.1, 1.0, float("nan"), float("inf"), True, "0.1", None]),
    "weight_decay": (1e-4, [-1e-4, 1.0, float("nan"), float("inf"), False, "1e-4"]),
    "early_stop_min_delta": (0.001, [-0.001, 1.0, float("nan"), True]),
    "learning_rate": (0.1, [-0.1, float("nan"), float("inf"), "0.1"]),
    "lr_decay": ("max_epochs", ["linear", "", None, 1]),
    "early_stop_monitor": ("val_accuracy", ["loss", "val_acc", None]),
    "trials_per_architecture": (3, [0, -1, 11, 2.0, True, "2"]),
}


@pytest.mark.parametrize("name", sorted(RECIPE_BOUNDS))
def test_the_recipe_settings_are_checked(name):
    good, bad = RECIPE_BOUNDS[name]
    assert getattr(dataclasses.replace(SMOKE, **{name: good}), name) == good
    for value in bad:
        with pytest.raises(ValueError, match=f"'smoke': {name} must be"):
            dataclasses.replace(SMOKE, **{name: value})
        with pytest.raises(ValueError, match=name):
            Profile.from_dict({**SMOKE.to_dict(), name: value})


@settings(max_examples=200, deadline=None)
@given(trials=st.integers(1, 10), warmup=st.integers(0, 12), round_index=st.integers(1, 200))
def test_trials_cycle_after_warmup(trials: int, warmup: int, round_index: int) -> None:
    p = dataclasses.replace(SMOKE, trials_per_architecture=trials)
    t = p.trial(round_index, warmup)
    assert 1 <= t <= trials
    if round_index <= warmup:
        assert t == 1
    elif t > 1:  # a later trial follows the one before it, in the round before
        assert p.trial(round_index - 1, warmup) == t - 1


@settings(max_examples=200, deadline=None)
@given(epoch=st.integers(0, 59), fraction=st.floats(0, 1, exclude_max=True))
def test_the_learning_rate_never_rises_and_stays_in_0_to_the_initial(epoch: int, fraction: float) -> None:
    paper = dataclasses.replace(OFFICIAL, lr_decay="max_epochs")
    for p, round_epochs in ((OFFICIAL, 60), (OFFICIAL, 15), (paper, 15), (paper, 60)):
        if epoch >= round_epochs:
            continue
        now = p.learning_rate_at(epoch, round_epochs, fraction)
        assert 0.0 <= now <= p.learning_rate
        assert p.learning_rate_at(epoch, round_epochs) >= now
    # the paper's schedule does not depend on the round's length: "0.1 with decay=0.1/60"
    assert paper.learning_rate_at(min(epoch, 14), 15) == paper.learning_rate_at(min(epoch, 14), 60) == pytest.approx(
        0.1 - 0.1 / 60 * min(epoch, 14))
