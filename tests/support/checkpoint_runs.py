"""Models finished with checkpoints on a test master, and an agent's finishes with its store's
deletes refused: what the checkpoint, retention and delete tests share."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.client import Accelerator, WorkerClient
from aiperf.flops import count_flops
from aiperf.graph import with_inserted_kernel
from tests.support.master_clients import HP
from worker.checkpoints import CheckpointError, CheckpointStore


def write_file(path: Path, data: bytes) -> Path:
    """`path`, holding `data` (a checkpoint file to put in a store)."""
    path.write_bytes(data)
    return path


def checkpoint_worker(h: Any, name: str = "node-1") -> tuple[WorkerClient, int]:
    """A worker with one V100 registered with the test master `h`: its client and id."""
    w = WorkerClient(h.address, h.worker_token, retries=0)
    reg = w.register(name=name, host=name, accelerators=[Accelerator("Tesla V100", 32 << 30)])
    return w, reg.worker_id


def finish_done(w: WorkerClient, wid: int, graph: Any, parent: int, rnd: int, acc: float, uri: str = "",
                inherited_from: int = 0, reported: bool = True) -> tuple[int, pb.FinishModelResponse]:
    """A DONE model ranked by `acc` (its predicted accuracy); `reported` False: no accuracy
    reported, so it never holds the run's best accuracy (retention's record holders)."""
    mid = w.submit_model(wid, graph.to_json(), graph.hash(), parent, rnd, HP, inherited_from=inherited_from).model_id
    sha = hashlib.sha256(uri.encode()).hexdigest() if uri else ""
    return mid, w.finish_model(wid, mid, "done", best_accuracy=acc if reported else None, predicted_accuracy=acc,
                               checkpoint_uri=uri, checkpoint_sha256=sha)


def finish_stored(w: WorkerClient, wid: int, graph: Any, rnd: int, acc: float,
                  report: bool = True) -> tuple[int, pb.FinishModelResponse]:
    """A DONE model ranked at `acc` and finished with a checkpoint at that best accuracy;
    `report`: the accuracy was reported in progress first (else it enters at the finish)."""
    mid = w.submit_model(wid, graph.to_json(), graph.hash(), 0, rnd, HP).model_id
    if report:
        w.report_progress(wid, mid, 1, 10, 10, 1, count_flops(with_inserted_kernel(graph, 3)).ops(10, 10),
                          val_accuracy=acc)
    uri = f"file:///s/run-1/model-{mid}.weights.h5"
    return mid, w.finish_model(wid, mid, "done", best_accuracy=acc, predicted_accuracy=acc, checkpoint_uri=uri,
                               checkpoint_sha256=hashlib.sha256(uri.encode()).hexdigest())


def morph_child(graph: Any, k: int) -> Any:
    """A one-step child of `graph` by the smoke run's own operations (seeded by k)."""
    import random

    from aiperf.morphism import morph_step
    from aiperf.profiles import SMOKE

    return morph_step(graph, random.Random(k), 3, space=SMOKE.morph_space())


def morph_children(graph: Any, n: int) -> list:
    """n distinct one-step children of `graph`: each descends from it (what the master checks)."""
    out, k = [], 3
    while len(out) < n:
        child = morph_child(graph, k)
        k += 1
        if all(child.hash() != c.hash() for c in out):
            out.append(child)
    return out


def finish_two(agent: Any, run_id: int, small_graph: Any, tmp_path: Path, monkeypatch: Any,
               delete: Any) -> tuple[list[int], list[Any], Any]:
    """`agent` registers, submits two children with stored checkpoints and finishes them with
    `delete` as its store's (keep 1: the second is let go at its finish); their ids, their
    checkpoints and a third child."""
    from aiperf.hyperparameters import Hyperparameters
    from worker.agent import Outbox
    from worker.trainer import TrainResult

    agent._register()
    g1, g2, g3 = morph_children(small_graph, 3)
    ids = [agent._submit(g, 0, n + 1, Hyperparameters(32, 3)) for n, g in enumerate((g1, g2))]
    ckpts = [agent.inheritance.store.put(run_id, mid, write_file(tmp_path / f"{mid}.weights.h5", b"w" * mid))
             for mid in ids]
    monkeypatch.setattr(agent.inheritance.store, "delete", delete)
    box = Outbox()
    for n, (mid, acc) in enumerate(zip(ids, (0.6, 0.5))):
        agent._finish(box, mid, n + 1, TrainResult("done", (acc,), 1, 100, 10, 1, acc, acc), ckpts[n])
    box.close()
    return ids, ckpts, g3


def finish_failed(agent: Any, graph: Any) -> None:
    """`agent` submits `graph` as round 3 and finishes it failed: its FinishModel carries the undeleted list."""
    from aiperf.hyperparameters import Hyperparameters
    from worker.agent import Outbox
    from worker.trainer import TrainResult

    model_id = agent._submit(graph, 0, 3, Hyperparameters(32, 3))
    box = Outbox()
    agent._finish(box, model_id, 3, TrainResult("failed", (), 0, 0, 0, 0, None, None, reason="out of memory"))
    box.close()


class RefusingStore(CheckpointStore):
    """A checkpoint store on a read-only file system: every delete fails."""

    url = "file:///c"

    def delete(self, uri: str) -> None:
        raise CheckpointError(f"cannot delete {uri}: read-only file system")
