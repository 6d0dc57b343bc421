"""Weight inheritance in the worker path (worker/inheritance.py): a child starts from its
parent's function, end to end on the smoke profile through a real master, a real agent, a
real checkpoint directory and real TensorFlow; a missing or corrupt parent checkpoint gives a
child trained from scratch; inserted convs never shrink their kernel; --no-inherit."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.records import ModelRecord
from aiperf.graph import with_inserted_kernel
from aiperf.hyperparameters import Hyperparameters
from aiperf.states import ModelState
from worker.checkpoints import open_store


def _accuracy(graph, kernel_size: int, weights: dict, dataset: Any, batch: int = 64) -> float:
    """Top-1 validation accuracy of `graph` with `weights`, in inference mode, over the whole split."""
    import keras

    from aiperf.keras_builder import build_model
    from worker.rounds import set_layer_weights

    model = build_model(graph, kernel_size=kernel_size)
    set_layer_weights(model, weights)
    correct = total = 0
    for x, y in dataset.validation(batch):
        predicted = keras.ops.convert_to_numpy(model(x, training=False))
        correct += int(np.sum(np.argmax(predicted, -1) == np.argmax(y.numpy(), -1)))
        total += int(x.shape[0])
    return correct / total


def test_a_child_starts_at_its_parents_final_accuracy_end_to_end(master_server, tmp_path, monkeypatch):
    """The issue's check: on the smoke profile, a child's validation accuracy before its first
    training step equals its parent's final one within 1e-3."""
    import worker.trainer as trainer
    from aiperf.api.client import ControlClient
    from worker.agent import Agent, AgentConfig

    real_prepare, real_run = trainer.prepare_round, trainer.run_round
    rounds: list[dict[str, Any]] = []
    planned: dict[int, dict[str, Any]] = {}  # id(prepared round) -> what was seen when it was planned

    def observed_prepare(graph, hyper, dataset, profile, round_index, **kwargs):
        seen: dict[str, Any] = {"graph": graph, "kernel": hyper.kernel_size, "dataset": dataset,
                                "at_preparation": kwargs.get("initial_weights") is not None}
        prepared = real_prepare(graph, hyper, dataset, profile, round_index, **kwargs)
        planned[id(prepared)] = seen
        return prepared

    def observed_run(prepared, **kwargs):
        seen = planned[id(prepared)]
        # the weights the worker is about to train from, whether given at preparation or at the hand-over
        seen["before"] = _accuracy(seen["graph"], seen["kernel"], prepared.compiled.weights(), seen["dataset"])
        result = real_run(prepared, **kwargs)
        seen["final"] = result.val_accuracies[-1] if result.val_accuracies else None
        rounds.append(seen)
        return result

    monkeypatch.setattr(trainer, "prepare_round", observed_prepare)
    monkeypatch.setattr(trainer, "run_round", observed_run)
    h = master_server()
    control = ControlClient(h.address, h.admin_token)
    run = control.start_run(3600, profile="smoke", seed=3, max_rounds_per_worker=3, max_epochs_per_round=1)
    assert run.config.inherit  # on by default
    store = tmp_path / "ckpt"
    agent = Agent(AgentConfig(master=h.address, token=h.worker_token, name="heir", measure_peak=False,
                              generator_processes=1, exit_when_run_ends=True, checkpoints=str(store)))
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    thread.join(timeout=900)
    assert not thread.is_alive(), "the agent did not finish its 3 rounds"
    models = sorted(control.list_models().models, key=lambda m: m.model_id)
    control.stop_run(abort=True)
    assert len(models) == len(rounds) == 3 and all(m.state == pb.MODEL_DONE for m in models)
    by_id = {m.model_id: (m, r) for m, r in zip(models, rounds)}
    for m, r in by_id.values():  # every done model has its weights in the store, digest and all
        assert m.checkpoint_uri.startswith(store.resolve().as_uri()) and len(m.checkpoint_sha256) == 64
        assert Path(m.checkpoint_uri[len("file://"):]).is_file()
    # one worker: every parent finished (checkpoint written) before its child's first step, so every
    # child inherits, the one prepared by the look-ahead while its parent still trained included
    children = [(m, r) for m, r in by_id.values() if m.parent_id]
    assert len(children) == 2 and not any(r["at_preparation"] for m, r in children if m.round == 2)
    for child, r in children:
        assert child.inherited_from == child.parent_id
        parent, pr = by_id[child.parent_id]
        print(f"child {child.model_id}: {r['before']:.6f} before its first step, parent {parent.model_id}'s "
              f"final {pr['final']:.6f}")
        assert abs(r["before"] - pr["final"]) <= 1e-3, (child.model_id, r["before"], pr["final"])
        assert abs(pr["final"] - parent.best_accuracy) <= 1e-9  # one epoch: the final is the best
    first = models[0]
    assert first.parent_id == 0 and first.inherited_from == 0


def _trained_parent(tmp_path: Path, graph, kernel: int, model_id: int = 1) -> tuple[Any, ModelRecord, dict]:
    """A parent with random (non-initial) weights stored as its checkpoint."""
    from aiperf.keras_builder import build_model
    from worker.inheritance import Inheritance
    from worker.rounds import layer_weights

    model = build_model(graph, kernel_size=kernel, seed=5)
    rng = np.random.default_rng(0)
    for layer in model.layers:  # batch-norm statistics away from their initial values
        if layer.__class__.__name__ == "BatchNormalization":
            g, b, m, v = layer.get_weights()
            layer.set_weights([rng.uniform(0.5, 1.5, g.shape), rng.normal(0, 0.1, b.shape),
                               rng.normal(0, 0.1, m.shape), rng.uniform(0.5, 1.5, v.shape)])
    inh = Inheritance(open_store(str(tmp_path / "store")), tmp_path / "scratch")
    weights = layer_weights(model)
    ckpt = inh.save(1, model_id, graph, kernel, weights)
    parent = ModelRecord(model_id=model_id, run_id=1, state=ModelState.DONE, checkpoint_uri=ckpt.uri,
                         checkpoint_sha256=ckpt.sha256, hyperparameters=Hyperparameters(32, kernel))
    return inh, parent, weights


def _logits(graph, kernel: int, weights: dict, x: np.ndarray) -> np.ndarray:
    import keras

    from aiperf.keras_builder import build_model
    from worker.rounds import set_layer_weights

    model = build_model(graph, kernel_size=kernel)
    set_layer_weights(model, weights)
    return keras.ops.convert_to_numpy(model(x, training=False))


def test_inserted_convs_never_shrink_their_kernel_and_the_child_keeps_the_function(tmp_path, small_graph):
    from aiperf.morphism import deeper_at

    parent_graph = deeper_at(small_graph, "conv2_block1_out")  # an inserted conv
    child_graph = deeper_at(parent_graph, "conv3_block1_out")
    inh, parent, weights = _trained_parent(tmp_path, parent_graph, kernel=7)
    start = inh.child_start(True, parent, parent_graph, child_graph, Hyperparameters(32, 3))
    assert start.inherited_from == 1 and start.hyperparameters == Hyperparameters(32, 7)  # kept at 7, not 3
    x = np.random.default_rng(1).random((4, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(_logits(child_graph, 7, start.weights, x), _logits(parent_graph, 7, weights, x),
                               atol=1e-4)
    # a larger kernel is an exact zero-pad: the child's choice stands
    assert inh.child_start(True, parent, parent_graph, child_graph,
                           Hyperparameters(32, 7)).hyperparameters.kernel_size == 7
    # a parent without inserted convs: whatever the search chose
    inh2, base_parent, _ = _trained_parent(tmp_path / "b", small_graph, kernel=7, model_id=2)
    assert inh2.child_start(True, base_parent, small_graph, parent_graph,
                            Hyperparameters(32, 3)).hyperparameters.kernel_size == 3


def test_a_child_planned_while_its_parent_trains_inherits_at_the_hand_over(tmp_path, small_graph):
    """The look-ahead plans round r + 1 while round r, its parent, still trains: the child is prepared
    at the kernel it inherits with and takes the weights at the hand-over, if the checkpoint is there."""
    from aiperf.morphism import deeper_at

    parent_graph = deeper_at(small_graph, "conv2_block1_out")
    child_graph = deeper_at(parent_graph, "conv3_block1_out")
    inh, parent, weights = _trained_parent(tmp_path, parent_graph, kernel=5)
    training = replace(parent, state=ModelState.TRAINING, checkpoint_uri="", checkpoint_sha256="")
    start = inh.child_start(True, training, parent_graph, child_graph, Hyperparameters(32, 3))
    assert (start.weights, start.inherited_from, start.pending_parent) == (None, 0, 1)
    assert start.hyperparameters.kernel_size == 5, "prepared at the kernel it will inherit with"
    # done meanwhile, its checkpoint written: the child's weights compute the parent's function
    got, why = inh.late_weights(parent, parent_graph, child_graph, 5)
    x = np.random.default_rng(1).random((4, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(_logits(child_graph, 5, got, x), _logits(parent_graph, 5, weights, x), atol=1e-4)
    assert why == "inherited at the hand-over"
    # those weights came from memory (the checkpoint this worker just stored); from the file, the same
    inh._last_saved = None
    from_file, _ = inh.late_weights(parent, parent_graph, child_graph, 5)
    for name, arrays in got.items():
        for a, b in zip(arrays, from_file[name]):
            np.testing.assert_array_equal(a, b)
    # still no checkpoint by the first step (another worker's parent, slower): from scratch, said so
    assert inh.late_weights(training, parent_graph, child_graph, 5) == (
        None, "from scratch: the parent's checkpoint was not written by the first step")
    # a parent that ended without a checkpoint is not waited for
    failed = replace(training, state=ModelState.FAILED)
    assert inh.child_start(True, failed, parent_graph, child_graph, Hyperparameters(32, 3)).pending_parent == 0


def test_a_missing_or_corrupt_parent_checkpoint_trains_from_scratch_and_says_so(tmp_path, small_graph, caplog):
    from aiperf.morphism import deeper_at

    child_graph = deeper_at(small_graph, "conv2_block1_out")
    inh, parent, _ = _trained_parent(tmp_path, small_graph, kernel=3)
    hyper = Hyperparameters(32, 3)
    path = Path(parent.checkpoint_uri[len("file://"):])
    data = path.read_bytes()
    path.write_bytes(data[:-10] + b"0123456789")  # corrupt
    with caplog.at_level(logging.WARNING, logger="worker.inheritance"):
        start = inh.child_start(True, parent, small_graph, child_graph, hyper)
    assert (start.weights, start.inherited_from, start.hyperparameters) == (None, 0, hyper)
    assert "corrupt" in start.why and "event=inheritance_failed parent=1" in caplog.text
    path.unlink()  # missing: the worker that wrote it crashed before
    start = inh.child_start(True, parent, small_graph, child_graph, hyper)
    assert start.weights is None and start.inherited_from == 0 and "missing" in start.why
    deleted = replace(parent, checkpoint_deleted=True)
    assert "deleted by retention" in inh.child_start(True, deleted, small_graph, child_graph, hyper).why
    none = replace(parent, checkpoint_uri="", checkpoint_sha256="")
    assert "no checkpoint" in inh.child_start(True, none, small_graph, child_graph, hyper).why
    # a checkpoint of another architecture does not fit
    inh_other, other_parent, _ = _trained_parent(tmp_path / "o", child_graph, kernel=3, model_id=1)
    assert "does not fit" in inh.child_start(True, other_parent, small_graph, child_graph, hyper).why
    # --no-inherit, and no parent: from scratch without reading anything
    assert inh.child_start(False, parent, small_graph, child_graph, hyper).why == "the run trains from scratch"
    assert inh.child_start(True, None, None, child_graph, hyper).inherited_from == 0


def test_the_compiled_round_starts_from_the_given_weights(small_graph):
    """The trainer builds the round's model with the inherited weights, and its warm-up step leaves them."""
    from aiperf.keras_builder import build_model
    from aiperf.profiles import SMOKE
    from worker.data import load_dataset
    from worker.rounds import layer_weights
    from worker.trainer import prepare_round

    graph = with_inserted_kernel(small_graph, 3)
    weights = layer_weights(build_model(graph, seed=11))
    dataset = load_dataset("digits", None, image_size=32)
    prepared = prepare_round(graph, Hyperparameters(16, 3), dataset, SMOKE, 1, seed=1,
                             initial_weights=weights)
    try:
        got = layer_weights(prepared.compiled.model)
        for name, arrays in weights.items():
            for a, b in zip(arrays, got[name]):
                np.testing.assert_array_equal(a, b)
    finally:
        prepared.release()


def test_no_inherit_is_in_the_run_config_and_the_scoreboard(master_server, tmp_path, capsys, monkeypatch):
    import json

    from aiperf_cli.main import main

    h = master_server()
    monkeypatch.setenv("AIPERF_MASTER", h.address)
    monkeypatch.setenv("AIPERF_ADMIN_TOKEN", h.admin_token)
    assert main(["start", "--duration", "10m", "--profile", "smoke", "--no-inherit", "--keep-checkpoints", "3",
                 "--json"]) == 0
    started = json.loads(capsys.readouterr().out)
    assert started["inherit"] is False and started["keep_checkpoints"] == 3
    assert main(["scoreboard"]) == 0
    assert "off (children train from scratch)" in capsys.readouterr().out
    assert main(["scoreboard", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inherit"] is False
    main(["stop", "--abort"])
    capsys.readouterr()
    assert main(["start", "--duration", "10m", "--profile", "smoke", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["inherit"] is True and d["keep_checkpoints"] == 10
    assert main(["start", "--duration", "10m", "--keep-checkpoints", "-1"]) == 2
    main(["stop", "--abort"])
    # `aiperf demo --no-inherit` starts its run the same way
    from rich.console import Console

    import aiperf_cli.demo as demo
    from aiperf.api.client import ControlClient
    from aiperf.api.control_session import ControlSession

    monkeypatch.setattr(demo, "_watch", lambda *args: None)
    monkeypatch.setattr(demo, "fetch_report", lambda control, run_id: ({}, ""))
    monkeypatch.setattr(demo, "scoreboard_view", lambda board: "")
    with ControlClient(h.address, h.admin_token) as control:
        demo._run(Console(quiet=True), ControlSession(control), tmp_path, 5.0, 3, None, False, inherit=False)
        assert control.run_status(0).run.config.inherit is False
