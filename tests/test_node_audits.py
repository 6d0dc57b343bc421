"""Node audits through the real server: the master draws one model per worker (any state) from
a secret it keeps, the auditor on the worker's node times it and sends the node's inventory,
and an official run is valid only when every worker's node audit passed and its inventory
matches (master/core/node_audits.py)."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf.api.client import Accelerator, ApiError, NodeInventory
from aiperf.hyperparameters import Hyperparameters
from aiperf.profiles import OFFICIAL
from master.core import node_audits
from tests.support.master_clients import H100, IMAGENET, clients
from tests.support.master_clients import h100s as _gpus


def _run(master_server, workers: dict[str, list[Accelerator]], models_each: int = 3):
    h = master_server()
    w, c = clients(h)
    ids = {name: w.register(name=name, host=f"host-{name}", cpus=8, accelerators=acc).worker_id
           for name, acc in workers.items()}
    c.start_run(7200, profile="official")
    g = OFFICIAL.base_graph()
    batch = OFFICIAL.for_accelerator_memory(80 << 30).batch_size
    models = {name: [w.submit_model(wid, g.to_json(), g.hash(), 0, r + 1, Hyperparameters(batch, 3),
                                    dataset=IMAGENET, queue=True).model_id for r in range(models_each)]
              for name, wid in ids.items()}
    return h, w, c, ids, models


def _node_audit(c, model_id: int, node: NodeInventory, rate: float = 1e6, hardware: str = H100):
    return c.record_audit(model_id, verdict="no checkpoint", architecture_ok=False, node=node,
                          auditor_host="node", audited_images_per_second=rate, auditor_hardware=hardware)


def test_every_worker_gets_one_drawn_model_and_needs_its_node_audit(master_server):
    h, w, c, ids, models = _run(master_server, {"a": _gpus("GPU-a"), "b": _gpus("GPU-b")})
    drawn = list(c.list_audits().node_audit_model_ids)
    assert len(drawn) == 2 and drawn == list(c.list_audits().node_audit_model_ids)  # stable
    by_worker = {name: next(m for m in drawn if m in models[name]) for name in ids}
    sb = c.scoreboard()
    for name, wid in ids.items():
        assert f"worker {wid} ({name}): no node audit of its drawn model {by_worker[name]}" in sb.invalid_reason
    w.finish_model(ids["a"], by_worker["a"], "failed", reason="oom")  # any state is audited
    a = _node_audit(c, by_worker["a"], NodeInventory(_gpus("GPU-a"), "Xeon", 8))
    assert a.node_audit and a.inventory == "matches" and a.throughput == "passed" and a.verdict == "passed"
    sb = c.scoreboard()
    assert f"worker {ids['a']} (a)" not in sb.invalid_reason and f"worker {ids['b']} (b)" in sb.invalid_reason
    _node_audit(c, by_worker["b"], NodeInventory(_gpus("GPU-b", "GPU-other"), "Xeon", 8))
    assert "node audits" not in c.scoreboard().invalid_reason


@pytest.mark.parametrize("node, hardware, why", [
    (NodeInventory(_gpus("GPU-1"), "Xeon", 8), H100, "accelerator 1 (GPU-2) is not on the node"),
    (NodeInventory(_gpus("GPU-1", "GPU-2", model="NVIDIA A100-SXM4-80GB"), "Xeon", 8), H100,
     "registered as 'NVIDIA H100 80GB HBM3'"),
    (NodeInventory(_gpus("GPU-1", "GPU-2"), "Xeon", 8), "NVIDIA A100-SXM4-80GB", "different hardware"),
])
def test_a_node_that_is_not_what_its_worker_registered_fails(master_server, node, hardware, why):
    h, w, c, ids, models = _run(master_server, {"liar": _gpus("GPU-1", "GPU-2")})
    [drawn] = c.list_audits().node_audit_model_ids
    _node_audit(c, drawn, node, hardware=hardware)
    sb = c.scoreboard()
    assert "node audits" in sb.invalid_reason and why in sb.invalid_reason


def test_a_node_audit_that_was_not_timed_fails_and_a_weights_verdict_is_refused(master_server):
    h, w, c, ids, models = _run(master_server, {"a": _gpus("GPU-a")})
    [drawn] = c.list_audits().node_audit_model_ids
    _node_audit(c, drawn, NodeInventory(_gpus("GPU-a"), "Xeon", 8), rate=0.0, hardware="")
    assert "is not timed" in c.scoreboard().invalid_reason
    with pytest.raises(ApiError) as e:
        c.record_audit(drawn, verdict="passed", architecture_ok=True, audited_accuracy=0.9, validation_images=10,
                       node=NodeInventory(_gpus("GPU-a"), "Xeon", 8))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_the_draw_is_not_the_workers_to_choose():
    """The draw depends on the secret: across secrets every model of a worker is drawn."""
    ids = [11, 12, 13, 14]
    seen = {node_audits.draw(f"secret-{i}", 1, 7, ids) for i in range(200)}
    assert seen == set(ids)


@settings(max_examples=50, deadline=None)
@given(registered=st.lists(st.sampled_from(["GPU-1", "GPU-2", "GPU-3", ""]), min_size=1, max_size=4),
       node=st.lists(st.sampled_from(["GPU-1", "GPU-2", "GPU-3"]), max_size=3, unique=True))
def test_an_inventory_matches_only_when_every_registered_chip_is_on_the_node(registered, node):
    verdict = node_audits.inventory_check({"accelerators": [{"model": H100, "uuid": u} for u in registered]},
                                          [{"model": "NVIDIA H100-SXM5-80GB", "uuid": u} for u in node], "", 0)
    assert (verdict == node_audits.MATCHES) == all(u and u in node for u in registered)


def test_a_cpu_worker_matches_on_its_cpu_model_and_count():
    inv = {"accelerators": [], "cpus": 16, "cpu": {"model": "Intel(R) Xeon(R) Gold 6338"}}
    assert node_audits.inventory_check(inv, [], "Intel(R)  Xeon(R) Gold 6338", 16) == node_audits.MATCHES
    assert "16 CPUs" in node_audits.inventory_check(inv, [], "Intel(R) Xeon(R) Gold 6338", 2)
    assert "registered CPU" in node_audits.inventory_check(inv, [], "AMD EPYC 9654", 16)


def test_aiperf_audit_node_times_the_drawn_models_of_its_node_and_sends_its_inventory(master_server, small_graph,
                                                                                      capsys):
    """`aiperf audit --node NAME` on a CPU node: only the drawn models of the workers whose host is
    NAME are audited, with this machine's CPU model and count as the node's inventory."""
    import json

    from aiperf_cli.main import main
    from worker.inventory import inventory

    inv = inventory()
    h = master_server()
    w, c = clients(h)
    here = w.register(name="here", host="node-a", cpus=inv.cpus, cpu_model=inv.cpu_model).worker_id
    elsewhere = w.register(name="there", host="node-b", cpus=2, cpu_model="Other CPU").worker_id
    c.start_run(600, profile="smoke")
    hp = Hyperparameters(32, 3)
    mine = [w.submit_model(here, small_graph.to_json(), small_graph.hash(), 0, r, hp, queue=True).model_id
            for r in (1, 2)]
    w.submit_model(elsewhere, small_graph.to_json(), small_graph.hash(), 0, 1, hp)
    capsys.readouterr()
    code = main(["audit", "--master", h.address, "--admin-token", h.admin_token, "--dataset-format", "digits",
                 "--node", "node-a", "--no-timing", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    [row] = json.loads(out.strip().splitlines()[-1])["audits"]
    assert row["model_id"] in mine and row["node_audit"] and row["inventory"] == "matches"
    assert row["throughput"] == "not timed"  # --no-timing: never a pass
