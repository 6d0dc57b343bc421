"""Training of one round with real TensorFlow on tiny data (worker/trainer.py)."""

import dataclasses
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from aiperf.flops import count_flops
from aiperf.graph import INSERTED, conv, simple, with_inserted_kernel
from aiperf.hyperparameters import Hyperparameters
from aiperf.profiles import SMOKE
from aiperf.resnet import resnet50
from tests.support.graphs import tiny_graph
from tests.support.training import PROFILE, TinyDataset

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
from worker.trainer import Progress, _Tracker, train_model  # noqa: E402

pytestmark = pytest.mark.slow


def graph_with_inserted_conv():
    """ResNet-50 (width 1/8) with one morphism-style inserted conv block after the stem."""
    g = resnet50(input_size=32, channels=3, classes=10, width=0.125)
    c = g.shapes["pool1_pool"][2]
    new = [conv("ins_conv", "pool1_pool", c, 3, tag=INSERTED), simple("ins_bn", "batchnorm", "ins_conv"),
           simple("ins_relu", "relu", "ins_bn")]
    layers = [dataclasses.replace(l, inputs=tuple("ins_relu" if i == "pool1_pool" else i for i in l.inputs))
              for l in g.layers]
    return g.with_layers(layers + new)




@pytest.fixture(scope="module")
def graph():
    return tiny_graph()


def test_progress_counts_images_and_flops_exactly():
    graph = graph_with_inserted_conv()  # a real ResNet-50 (reduced width) once; the others use a tiny graph
    data = TinyDataset(n_train=100, n_val=40)
    reports: list[Progress] = []
    res = train_model(graph, Hyperparameters(32, 5), data, PROFILE, 1,
                      on_progress=reports.append, progress_interval_s=0.0, seed=1)
    assert res.state == "done" and res.epochs == 2 and len(res.val_accuracies) == 2
    assert res.replicas == 1 and res.global_batch_size == 32
    # Every image processed is reported once: 100 train (32+32+32+4) and 40 val per epoch.
    assert sum(r.images_trained for r in reports) == res.images_trained == 200
    assert sum(r.images_validated for r in reports) == res.images_validated == 80
    assert [r.images_trained for r in reports if r.images_trained][:4] == [32, 32, 32, 4]
    # The FLOP figure is the counter's, for the kernel size really trained (5, not the graph's 3).
    fc = count_flops(with_inserted_kernel(graph, 5))
    assert fc.train != count_flops(graph).train
    for r in reports:
        assert r.worker_flops == fc.ops(r.images_trained, r.images_validated)
    assert res.worker_flops == fc.ops(200, 80)
    ends = [r for r in reports if r.epoch_end]
    assert [r.epoch for r in ends] == [1, 2]
    assert [r.val_accuracy for r in ends] == list(res.val_accuracies)
    assert res.best_val_accuracy == max(res.val_accuracies)
    assert res.best_val_accuracy <= res.predicted_accuracy <= 1.0
    assert res.hyperparameters == Hyperparameters(32, 5)


def test_reports_follow_the_interval(graph):
    data = TinyDataset(n_train=64, n_val=32)
    reports: list[Progress] = []
    res = train_model(graph, Hyperparameters(16, 3), data, PROFILE, 2,
                      on_progress=reports.append, progress_interval_s=3600.0, epochs=2)
    # With a long interval only the epoch ends report, carrying the whole epoch.
    assert [(r.images_trained, r.images_validated, r.epoch_end) for r in reports] == [(64, 32, True)] * 2
    assert res.epochs == 2  # the `epochs` cap overrides the profile's 6 for round 2


def test_should_stop_stops_within_a_batch(graph):
    data = TinyDataset(n_train=160, n_val=40)
    calls = {"n": 0}

    def should_stop():  # asked once before training, then after every batch: true after the 3rd batch
        calls["n"] += 1
        return calls["n"] >= 4

    reports: list[Progress] = []
    res = train_model(graph, Hyperparameters(16, 3), data, PROFILE, 2,
                      on_progress=reports.append, should_stop=should_stop, progress_interval_s=3600.0)
    assert res.state == "stopped" and res.reason == "stop requested"
    assert res.images_trained == 3 * 16 and res.epochs == 0 and res.val_accuracies == ()
    assert res.images_validated <= 16            # the validation pass stopped after a batch too
    assert reports, "what was done before the stop is reported"
    assert sum(r.images_trained for r in reports) == res.images_trained
    assert sum(r.images_validated for r in reports) == res.images_validated
    assert res.best_val_accuracy is None and res.predicted_accuracy is None


def test_stop_before_start_trains_nothing(graph):
    reports: list[Progress] = []
    res = train_model(graph, Hyperparameters(16, 3), TinyDataset(), PROFILE, 1,
                      on_progress=reports.append, should_stop=lambda: True)
    assert (res.state, res.images_trained, res.images_validated, reports) == ("stopped", 0, 0, [])


def test_early_stopping_uses_the_profile_patience(graph):
    # lr 0: validation accuracy cannot improve, so a patience of 1 ends the round early.
    profile = dataclasses.replace(PROFILE, learning_rate=0.0, bn_momentum=None, early_stop_monitor="val_accuracy",
                                  patience_base=0, patience_step=1, patience_max=1)
    assert profile.patience(2) == 1
    data = TinyDataset(n_train=32, n_val=32)
    res = train_model(graph, Hyperparameters(32, 3), data, profile, 2,
                      on_progress=lambda p: None)
    assert res.state == "done" and res.early_stopped and "early stop" in res.reason
    assert res.epochs < profile.epochs_for_round(2)
    # It stopped at the first epoch that did not beat the best so far.
    accs = res.val_accuracies
    first_flat = next(i for i in range(1, len(accs)) if accs[i] <= max(accs[:i]))
    assert res.epochs == first_flat + 1
    assert res.predicted_accuracy == res.best_val_accuracy


def test_patience_rule_counts_epochs_without_improvement():
    fc = count_flops(resnet50(32, 3, 10, 0.125))
    t = _Tracker(fc, lambda p: None, lambda: False, SMOKE.patience(1), interval_s=30)
    assert t.patience == 8
    for acc in [0.1, 0.5, 0.4, 0.45, 0.5, 0.3, 0.2, 0.49, 0.1]:
        t._end_epoch(acc)
        assert not t.early_stopped
    t._end_epoch(0.5)  # the 8th epoch after the best (0.5 is not better than 0.5)
    assert t.early_stopped


def _failing_steps(monkeypatch, error, where="train"):
    """compile_round as usual, then the training step (or the preparation itself) raises `error`."""
    import worker.trainer

    real = worker.trainer.compile_round

    def compile_round(*args, **kwargs):
        if where == "prepare":
            raise error
        compiled = real(*args, **kwargs)

        def step(iterator):
            raise error

        compiled.train_step = step
        return compiled

    monkeypatch.setattr(worker.trainer, "compile_round", compile_round)


@pytest.mark.parametrize("where", ["train", "prepare"])
def test_out_of_memory_marks_the_model_failed(graph, monkeypatch, where):
    _failing_steps(monkeypatch, tf.errors.ResourceExhaustedError(
        None, None, "OOM when allocating tensor with shape[128,64,16,16]"), where)
    before = keras.config.dtype_policy().name
    res = train_model(graph, Hyperparameters(128, 3), TinyDataset(), PROFILE, 1,
                      on_progress=lambda p: None, precision="mixed_bf16")
    assert res.state == "failed"
    assert res.reason.startswith("out of memory at batch size 128")
    assert res.images_trained == 0 and res.epochs == 0
    assert keras.config.dtype_policy().name == before


@pytest.mark.parametrize("where", ["train", "prepare"])
def test_other_errors_propagate(graph, monkeypatch, where):
    _failing_steps(monkeypatch, tf.errors.InvalidArgumentError(None, None, "bad input"), where)
    with pytest.raises(tf.errors.InvalidArgumentError):
        train_model(graph, Hyperparameters(16, 3), TinyDataset(), PROFILE, 1,
                    on_progress=lambda p: None)


def test_bad_arguments(graph):
    with pytest.raises(ValueError, match="precision"):
        train_model(graph, Hyperparameters(16, 3), TinyDataset(), PROFILE, 1,
                    on_progress=lambda p: None, precision="fp4")
    with pytest.raises(ValueError, match="does not match"):
        train_model(graph, Hyperparameters(16, 3), TinyDataset(classes=7), PROFILE, 1,
                    on_progress=lambda p: None)


@pytest.mark.parametrize("precision", ["mixed_bf16", "mixed_fp16"])
def test_mixed_precision_trains_and_restores_the_policy(graph, precision, monkeypatch):
    import aiperf.keras_builder

    built = []
    real_build = aiperf.keras_builder.build_model

    def spy(*args, **kwargs):
        built.append(real_build(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(aiperf.keras_builder, "build_model", spy)
    before = keras.config.dtype_policy().name
    reports: list[Progress] = []
    res = train_model(graph, Hyperparameters(32, 3), TinyDataset(n_train=64, n_val=32),
                      dataclasses.replace(PROFILE, epochs_per_round=(1,)), 1,
                      on_progress=reports.append, precision=precision)
    assert res.state == "done" and res.images_trained == 64 and res.images_validated == 32
    assert 0.0 <= res.val_accuracies[0] <= 1.0
    assert keras.config.dtype_policy().name == before
    model = built[0]
    expected = {"mixed_bf16": "mixed_bfloat16", "mixed_fp16": "mixed_float16"}[precision]
    assert model.get_layer("ins").dtype_policy.name == expected
    assert model.get_layer("out").dtype_policy.name == "float32"  # softmax stays float32
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer) == (expected == "mixed_float16")


def test_xla_compiled_training_counts_the_same(graph):
    reports: list[Progress] = []
    res = train_model(graph, Hyperparameters(32, 3), TinyDataset(n_train=64, n_val=32),
                      dataclasses.replace(PROFILE, epochs_per_round=(1,)), 1,
                      on_progress=reports.append, xla=True, progress_interval_s=0.0)
    # (Full batches only: every new batch shape is another XLA compilation.)
    assert res.state == "done" and res.images_trained == 64 and res.images_validated == 32
    assert [r.images_trained for r in reports if r.images_trained] == [32, 32]


@pytest.fixture(scope="module")
def two_devices() -> dict[str, str]:
    """The RESULT lines of one fresh interpreter with two logical CPU devices (standing in for two
    GPUs; TensorFlow must be configured before first use): "round", a round trained on both with
    MirroredStrategy, and "losses", the first 4 steps' losses of the same round on one device and on
    two. One interpreter for both: TensorFlow's start-up was most of each."""
    script = textwrap.dedent('''
        import dataclasses, json, sys
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        sys.path.insert(0, sys.argv[1])
        from aiperf.hyperparameters import Hyperparameters
        from tests.support.graphs import tiny_graph
        from tests.support.training import PROFILE, TinyDataset
        from aiperf.graph import with_inserted_kernel
        from worker.rounds import StepSettings
        from worker.steps import compile_round
        from worker.trainer import train_model

        strategy = tf.distribute.MirroredStrategy(devices=["/cpu:0", "/cpu:1"])
        reports = []
        res = train_model(tiny_graph(), Hyperparameters(16, 3),
                          TinyDataset(n_train=100, n_val=40), dataclasses.replace(PROFILE, epochs_per_round=(1,)),
                          1, on_progress=reports.append, progress_interval_s=0.0, strategy=strategy)
        trained = [r.images_trained for r in reports if r.images_trained]
        print("RESULT round", res.state, res.replicas, res.global_batch_size, res.images_trained,
              res.images_validated, trained, flush=True)

        def losses(devices):
            settings = StepSettings(graph=with_inserted_kernel(tiny_graph(), 3), precision="fp32",
                                    strategy=tf.distribute.MirroredStrategy(devices=devices), global_batch=32,
                                    epochs=1, steps_per_epoch=4, seed=3)
            compiled = compile_round(settings, TinyDataset(), PROFILE)
            return [float(compiled.train_step(compiled.train_iterator)[0]) for _ in range(4)]

        print("RESULT losses", json.dumps([losses(["/cpu:0"]), losses(["/cpu:0", "/cpu:1"])]), flush=True)
    ''')
    out = subprocess.run([sys.executable, "-c", script, str(__import__("pathlib").Path(__file__).parents[1])],
                         capture_output=True, text=True, timeout=420)
    lines = dict(l.removeprefix("RESULT ").split(" ", 1) for l in out.stdout.splitlines() if l.startswith("RESULT "))
    return {**lines, "stderr": out.stderr[-3000:]}


def test_two_replicas_use_a_global_batch_and_count_every_image(two_devices):
    assert "round" in two_devices, two_devices["stderr"]
    assert two_devices["round"] == "done 2 32 100 40 [32, 32, 32, 4]"


def test_two_replicas_give_one_devices_losses_within_the_batch_norm_difference(two_devices):
    """The same round (same weights, same batches) on one logical device and on two: MirroredStrategy
    normalises each replica's half batch with its own batch-norm statistics (JAX's mesh normalises
    over the global batch: tests/test_jax_backend.py, rtol 1e-5), so the losses differ by the
    statistics of 16 images against 32: measured 1.1e-3 relative at most over the first 4 steps."""
    assert "losses" in two_devices, two_devices["stderr"]
    one, two = json.loads(two_devices["losses"])
    np.testing.assert_allclose(two, one, rtol=5e-3)
    assert one[0] != one[3], "the steps train"


def test_the_stored_weights_are_the_best_epochs(graph):
    """on_weights (the checkpoint `aiperf audit` re-evaluates) gets the weights of the epoch that
    validated best, not the last epoch's: evaluated again they give the round's best accuracy."""
    from aiperf.keras_builder import build_model
    from worker.rounds import set_layer_weights

    data = TinyDataset(n_train=64, n_val=40)
    profile = dataclasses.replace(PROFILE, learning_rate=0.5, patience_base=6, patience_step=0, patience_max=6)
    got: list[dict] = []
    res = train_model(graph, Hyperparameters(16, 3), data, profile, 2,
                      on_progress=lambda p: None, on_weights=got.append)
    assert res.state == "done" and len(got) == 1 and len(res.val_accuracies) >= 2
    model = build_model(graph, kernel_size=3)
    set_layer_weights(model, got[0])
    x, y = data._x[data.train_size:], data._y[data.train_size:]
    accuracy = float(np.mean(np.argmax(model(x, training=False), -1) == np.argmax(y, -1)))
    assert accuracy == pytest.approx(res.best_val_accuracy, abs=1e-9), res.val_accuracies


def _train_graphs() -> int:
    import gc

    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o).__name__ == "FuncGraph" and o.name == "train")


def test_a_trained_round_leaves_no_graph_behind(graph):
    """TensorFlow keeps the gradient function of every custom gradient traced in graph mode
    (tensorflow#97697), and MirroredStrategy's all-reduce of the gradients is one: each round's
    training graph stayed alive for the rest of the run. A round's graphs go with it."""
    from tensorflow.python.framework import ops

    registry = ops._gradient_registry._registry
    graphs, names = _train_graphs(), set(registry)
    for seed in (1, 2):
        res = train_model(graph, Hyperparameters(16, 3), TinyDataset(), PROFILE, 1,
                          on_progress=lambda p: None, epochs=1, seed=seed)
        assert res.state == "done" and res.images_trained == 100
    assert set(registry) == names
    assert _train_graphs() <= graphs


def test_released_custom_gradients_keeps_what_was_there_and_gradients_work():
    from tensorflow.python.framework import ops

    from worker.steps import released_custom_gradients

    registry = ops._gradient_registry._registry
    registry["CustomGradient-test-before"] = {}
    try:
        names = set(registry)

        @tf.custom_gradient
        def doubled(x):
            return 2 * x, lambda dy: 10 * dy  # a gradient no built-in rule gives

        @tf.function
        def gradient(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = doubled(x)
            return tape.gradient(y, x)

        with released_custom_gradients():
            concrete = gradient.get_concrete_function(tf.TensorSpec([], tf.float32))
            assert len(set(registry) - names) == 1  # registered while tracing
        assert set(registry) == names  # dropped after it; what was there before kept
        assert float(concrete(tf.constant(3.0))) == 10.0  # the traced step runs as traced
    finally:
        registry.pop("CustomGradient-test-before", None)


def test_a_released_rounds_iterators_are_deleted_on_the_reaper_thread(graph):
    """Deleting an autotuned tf.data iterator waits for its autotuning thread's next wake-up
    (seconds): not on the thread that releases the round."""
    import threading
    import weakref

    from worker.rounds import wait_for_released
    from worker.trainer import prepare_round

    deleted_on: list[str] = []

    class Recorded:
        def __del__(self):
            deleted_on.append(threading.current_thread().name)

    prepared = prepare_round(graph, Hyperparameters(16, 3), TinyDataset(), PROFILE, 1)
    compiled = prepared.compiled
    next(compiled.train_iterator)  # the pipeline (and its autotuning) started
    train_iterator = weakref.ref(compiled.train_iterator)  # the round's own distributed iterator
    compiled.validation_iterator = Recorded()
    prepared.release()
    assert prepared.compiled is None and compiled.train_iterator is None and compiled.model is None
    assert wait_for_released(120)
    assert deleted_on == ["iterator-reaper"]
    assert train_iterator() is None, "the round's iterator is deleted too (by its last reference)"


def test_waiting_for_released_iterators_ends_when_they_are_deleted_or_at_the_timeout():
    """Before an out-of-memory retry the look-ahead waits for what the reaper still holds."""
    import threading

    from worker.rounds import _reaper, wait_for_released

    gate = threading.Event()

    class Blocking:
        def __del__(self):
            gate.wait(30)

    _reaper.drop([Blocking()])
    assert not wait_for_released(0.2), "the deletion is still under way"
    gate.set()
    assert wait_for_released(30)
