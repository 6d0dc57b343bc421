"""The worker's JAX backend (worker/jax_steps.py) on the CPU, in a process of its own with TensorFlow
made unimportable (tests/support/jax_checks.py): data parallel over two virtual devices giving one device's
losses, a round's exact image counts with the partial batch, mixed precision with loss scaling, a
real out-of-memory error, checkpoints interchangeable with TensorFlow both ways, and the audit's
evaluation and timed steps, the GEMM peak and the inventory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("jax")
tf = pytest.importorskip("tensorflow")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
# One device and two: XLA adds the halves' gradients and batch-norm statistics in another order
LOSS_RTOL = 1e-5


def jax_env() -> dict[str, str]:
    return dict(os.environ, KERAS_BACKEND="jax", XLA_FLAGS="--xla_force_host_platform_device_count=2",
                TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu")


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict[str, Any]:
    """A TensorFlow-trained parent's checkpoint written here, then every check run on JAX."""
    from aiperf.keras_builder import build_model
    from aiperf.morphism import deeper_at
    from worker.checkpoints import open_store
    from worker.inheritance import Inheritance
    from worker.rounds import layer_weights

    directory = tmp_path_factory.mktemp("jax")
    from tests.support.graphs import tiny_graph

    parent_graph = tiny_graph()
    child_graph = deeper_at(parent_graph, "r1")
    model = build_model(parent_graph, kernel_size=3, seed=5)
    rng = np.random.default_rng(0)
    for layer in model.layers:  # batch-norm statistics away from their initial values
        if layer.__class__.__name__ == "BatchNormalization":
            g, b, m, v = layer.get_weights()
            layer.set_weights([rng.uniform(0.5, 1.5, g.shape), rng.normal(0, 0.1, b.shape),
                               rng.normal(0, 0.1, m.shape), rng.uniform(0.5, 1.5, v.shape)])
    ckpt = Inheritance(open_store(str(directory / "store")), directory / "scratch").save(
        1, 1, parent_graph, 3, layer_weights(model))
    x = rng.random((4, 32, 32, 3)).astype("float32")
    np.save(directory / "x.npy", x)
    (directory / "parent.json").write_text(json.dumps({"graph": parent_graph.to_json(), "uri": ckpt.uri,
                                                       "sha256": ckpt.sha256, "child": child_graph.to_json()}))
    out = directory / "out.json"
    proc = subprocess.run([sys.executable, "-m", "tests.support.jax_checks", str(out), str(directory)],
                          env=jax_env(), capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0 and out.exists(), proc.stderr[-4000:]
    result = json.loads(out.read_text())
    result.update(directory=directory, parent_logits=np.asarray(model(x, training=False)),
                  child_graph=child_graph)
    print("seconds per check:", result["seconds"])
    return result


def _ok(checked: dict[str, Any], name: str) -> None:
    assert name not in checked["errors"], checked["errors"].get(name)


def test_tensorflow_was_never_imported(checked):
    assert checked["tensorflow_imported"] is False and not checked["errors"], checked["errors"]


def test_two_devices_give_one_devices_losses(checked):
    _ok(checked, "data_parallel")
    assert checked["devices"] == 2
    np.testing.assert_allclose(checked["losses_two"], checked["losses_one"], rtol=LOSS_RTOL)
    assert checked["losses_two"][0] != checked["losses_two"][2], "the steps train"


def test_a_round_counts_every_image_with_the_partial_batch(checked):
    _ok(checked, "round")
    r = checked["round"]
    assert (r["state"], r["replicas"], r["global_batch"], r["trained"], r["validated"]) == ("done", 2, 32, 200, 80)
    assert r["reported"] == [32, 32, 32, 4] * 2 and len(r["accuracies"]) == 2
    assert {"compile_train", "compile_eval", "train", "validation"} <= set(r["timings"])


def test_mixed_precision_with_loss_scaling_for_float16(checked):
    _ok(checked, "precisions")
    bf16, fp16 = checked["mixed_bf16"], checked["mixed_fp16"]
    assert (bf16["state"], bf16["trained"], bf16["policy"], bf16["loss_scale"]) == ("done", 100, "mixed_bfloat16", False)
    assert (fp16["state"], fp16["trained"], fp16["policy"], fp16["loss_scale"]) == ("done", 100, "mixed_float16", True)
    assert bf16["after"] == fp16["after"] == "float32", "the policy is restored"


def test_a_real_out_of_memory_error_fails_the_round(checked):
    # TensorFlow's CPU allocator crashes the process (SIGSEGV) on the same graph, so its test
    # (tests/test_trainer.py) raises TensorFlow's error instead
    _ok(checked, "out_of_memory")
    oom = checked["oom"]
    assert oom["state"] == "failed" and oom["trained"] == 0
    assert oom["reason"].startswith("out of memory at batch size 16 per accelerator") and "RESOURCE_EXHAUSTED" in oom["reason"]


def test_a_step_planned_beyond_the_devices_memory_fails_the_round_before_it_runs(checked):
    _ok(checked, "planned_memory")
    p = checked["planned"]
    steps = {(what, images): planned for what, images, planned in p["steps"]}
    assert p["state"] == "done" and {("training step", 32), ("evaluation step", 32)} <= set(steps)
    assert all(b and b > 0 for b in steps.values())
    # the 100-image split's remainder (4 images) is compiled too, and needs less than the full batch
    assert steps[("training step", 4)] < steps[("training step", 32)]
    assert p["small_state"] == "failed" and p["small_trained"] == 0
    assert p["small_reason"].startswith("out of memory at batch size 16 per accelerator")
    assert "XLA's plan for the training step at 32 images needs" in p["small_reason"]
    # one byte short of the 32-image step: the plan's estimate is below 16 per device, not nothing
    assert 0 < p["small_fits"] < 16


def test_the_memory_plan_of_the_workers_resnet50_grows_with_the_batch(checked):
    _ok(checked, "memory_plan")
    (b8, m8), (b16, m16) = checked["memory_plan"]["points"]
    figures = checked["memory_plan"]["figures"]
    assert (b8, b16) == (8, 16) and 0 < m8 < m16
    assert figures["planned_bytes_per_image"] == round((m16 - m8) / 8)
    assert figures["largest_batch_that_fits"] > 16 and figures["official_batch_sizes_that_fit"] == "3/3"


def test_checkpoints_are_interchangeable_between_the_backends(checked):
    """A JAX child inherits from a TensorFlow parent (same function), and a TensorFlow model
    reads the JAX child's checkpoint (same accuracy)."""
    _ok(checked, "inheritance")
    from aiperf.api.records import ModelRecord
    from aiperf.hyperparameters import Hyperparameters
    from aiperf.keras_builder import build_model
    from aiperf.states import ModelState
    from worker.checkpoints import open_store
    from worker.inheritance import Inheritance
    from worker.rounds import set_layer_weights

    got = checked["inheritance"]
    assert got["inherited_from"] == 1 and got["state"] == "done"
    np.testing.assert_allclose(np.load(checked["directory"] / "child_logits_jax.npy"), checked["parent_logits"],
                               atol=1e-4)
    inh = Inheritance(open_store(str(checked["directory"] / "store")), checked["directory"] / "scratch-tf")
    child = ModelRecord(model_id=2, run_id=1, state=ModelState.DONE, checkpoint_uri=got["uri"],
                        checkpoint_sha256=got["sha256"], hyperparameters=Hyperparameters(16, 3))
    weights = inh.parent_weights(child, checked["child_graph"])
    model = build_model(checked["child_graph"], kernel_size=3)
    set_layer_weights(model, weights)
    from tests.support.jax_checks import NumpyData

    data = NumpyData()
    x, y = data.x[data.train_size:], data.y[data.train_size:]
    accuracy = float(np.mean(np.argmax(model(x, training=False), -1) == np.argmax(y, -1)))
    assert accuracy == pytest.approx(got["best"], abs=1e-9)


def test_the_audit_the_gemm_peak_and_the_inventory_on_jax(checked):
    _ok(checked, "audit")
    a = checked["audit"]
    assert a["accuracy"] == pytest.approx(checked["inheritance"]["best"], abs=1e-9) and a["images"] == 40
    assert a["rate"] > 0 and a["device"] == "/CPU:0" and a["hardware"]
    assert a["cpu_peak"]["float32"] > 1e8
    assert a["backend"] == "jax" and a["accelerators"] == 0 and "jax" in a["software"]


def test_without_tensorflow_the_in_memory_kinds_read_as_their_tf_data_pipeline_does():
    """worker/jax_data.py's fallback (no numpy pipeline, no TensorFlow): the digits' validation
    batches equal tf.data's (resize, grey to RGB, normalisation), and a training epoch holds every
    image once, the partial last batch included."""
    from worker.data import load_dataset
    from worker.jax_data import ArrayBatches

    dataset = load_dataset("digits", None, image_size=32)
    ours = list(ArrayBatches(dataset).validation(64))
    theirs = [(x.numpy(), y.numpy()) for x, y in dataset.validation(64)]
    assert [len(x) for x, _ in ours] == [len(x) for x, _ in theirs] == [64] * 5 + [40]
    for (a, b), (c, d) in zip(ours, theirs):
        np.testing.assert_allclose(a, c, atol=1e-4)
        np.testing.assert_array_equal(b, d)
    epoch = list(ArrayBatches(dataset).train(100, seed=1))
    assert [len(x) for x, _ in epoch] == [100] * 14 + [37]
    labels = np.concatenate([y for _, y in epoch]).argmax(-1)
    assert sorted(labels) == sorted(np.concatenate([y.numpy() for _, y in dataset.train(100)]).argmax(-1))


def test_the_training_recipe_on_jax(checked):
    """The same figures as tests/test_recipe.py on TensorFlow: label smoothing, weight decay on the
    kernels only, both learning-rate schedules and the validation loss, each against its formula."""
    from tests.support.recipe_checks import LEARNING_RATE, kernel_squares, smoothed_cross_entropy

    _ok(checked, "recipe")
    r = checked["recipe"]
    plain, smoothed, decayed = r["plain"], r["smoothed"], r["decayed"]
    assert plain["loss"] == pytest.approx(smoothed_cross_entropy(plain["labels"], plain["predicted"], 0.0), rel=1e-6)
    assert smoothed["loss"] == pytest.approx(smoothed_cross_entropy(smoothed["labels"], smoothed["predicted"], 0.1),
                                             rel=1e-6)
    assert smoothed["loss"] != pytest.approx(plain["loss"], rel=1e-4)
    assert decayed["decayed"] == ["c1/kernel", "fc/kernel", "ins/kernel"]
    assert decayed["loss"] - plain["loss"] == pytest.approx(0.005 * kernel_squares(plain["before"]), rel=1e-5)
    for name in ("c1", "ins", "fc"):
        np.testing.assert_allclose(np.subtract(decayed["after"][name][0], plain["after"][name][0]),
                                   -LEARNING_RATE * 0.01 * np.asarray(plain["before"][name][0]), atol=1e-6)
    for name in ("b1", "b2"):
        np.testing.assert_array_equal(decayed["after"][name][:2], plain["after"][name][:2])
    np.testing.assert_allclose(r["rates_round"], [LEARNING_RATE * (1 - s / 6) for s in range(6)], rtol=1e-6)
    np.testing.assert_allclose(r["rates_max_epochs"], [LEARNING_RATE] * 3 + [LEARNING_RATE * 0.75] * 3, rtol=1e-6)
    v = r["validation"]
    assert v["state"] == "done" and v["val_losses"][0] == pytest.approx(
        smoothed_cross_entropy(np.asarray(v["labels"]), np.asarray(v["predicted"]), 0.1), rel=1e-5)


def test_the_masters_seed_gives_the_same_start_on_jax(checked):
    _ok(checked, "seed")
    seed = checked["seed"]
    same, again, other = seed["digests"]
    assert same == again != other
    assert seed["started"] == same  # the prepared round (two devices) holds the seed's weights
    assert seed["epoch_end"] == [seed["trained"]]  # the epoch's report carries the weights it ended with
