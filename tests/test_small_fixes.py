"""The smaller things a new operator tripped over (each with the line that shows it)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from aiperf.api import aiperf_pb2 as pb
from aiperf_cli.audit import chosen, why_audited
from tests.support.master_clients import wait_for


def test_audit_says_why_it_audits_a_model_beyond_the_top():
    ranked = [(i, SimpleNamespace(model_id=m)) for i, m in enumerate((5, 3, 9))]
    picked = chosen(ranked, 1, regulated_model_id=9)  # --top 1, and the regulated score's model ranks third
    assert [m.model_id for _, m in picked] == [5, 9]
    assert why_audited(1, 1) == "rank 1 of the run's models"
    assert why_audited(3, 1) == "behind the regulated score (rank 3, below the top 1)"


def test_a_taken_port_is_one_line_before_the_database_is_touched(tmp_path, capfd):
    import socket

    from aiperf_cli.main import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc = main(["master", "serve", "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(tmp_path / "d")])
    out, err = capfd.readouterr()  # the file descriptors: a C++ log line would be here too
    assert rc == 2 and err == f"aiperf: error: cannot listen on 127.0.0.1:{port}: the port is in use (another " \
                              f"master or service; pick another --port)\n"
    assert not (tmp_path / "d" / "master.db").exists()  # nothing migrated for a master that cannot start


def test_choice_errors_name_the_closest_choice(capsys):
    from aiperf_cli.main import main

    assert main(["start", "--duration", "1h", "--profile", "smok"]) == 2
    err = capsys.readouterr().err
    assert "Value error" not in err and err.strip().endswith("'smok' is not one of 'official', 'smoke'; did you "
                                                            "mean 'smoke'?")
    assert main(["models", "--state", "xyz"]) == 2
    assert "did you mean" not in capsys.readouterr().err  # nothing close: nothing suggested


def test_help_shows_package_extras_and_serve_names_its_token_variables(capsys, monkeypatch):
    from aiperf_cli.main import main

    monkeypatch.setenv("COLUMNS", "300")  # one help line per option
    assert main(["worker", "--help"]) == 0
    out = capsys.readouterr().out
    assert "needs aiperf[object-store]" in out and "needs aiperf[jax]" in out  # not eaten as rich markup
    assert main(["master", "serve", "--help"]) == 0
    out = capsys.readouterr().out
    assert "AIPERF_TOKEN" in out and "AIPERF_ADMIN_TOKEN" in out


def test_tensorflow_and_grpc_are_quiet_below_info(monkeypatch):
    import os

    from aiperf_cli.worker import quiet_tensorflow

    for level, tf in (("warning", "3"), ("error", "3"), ("info", "2"), ("debug", "0")):
        monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
        monkeypatch.delenv("GRPC_VERBOSITY", raising=False)
        quiet_tensorflow(level)
        assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == tf
        assert os.environ.get("GRPC_VERBOSITY") == (None if level == "debug" else "ERROR")


def test_the_worker_reads_the_token_the_master_wrote_in_the_current_directory(tmp_path, monkeypatch):
    from aiperf_cli.options import UsageError
    from aiperf_cli.worker import _token

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="run where .aiperf/worker.token is"):
        _token(None, None)
    (tmp_path / ".aiperf").mkdir()
    (tmp_path / ".aiperf" / "worker.token").write_text("w-secret\n")
    assert _token(None, None) == "w-secret"
    assert _token("given", None) == "given"  # an explicit token wins


def test_readme_ranges_are_the_clis():
    from pathlib import Path

    from aiperf.limits import MAX_ID, MAX_SEED

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    power = {2**31 - 1: "2^31-1", 2**63 - 1: "2^63-1"}
    assert f"run ids\n0..{power[MAX_ID]}" in readme and f"seeds\n0..{power[MAX_SEED]}" in readme


def test_the_slurm_script_names_the_token_file_the_master_writes():
    from pathlib import Path

    from master.rpc.tokens import WORKER_TOKEN_FILE

    script = (Path(__file__).resolve().parents[1] / "slurm" / "aiperf-workers.sbatch").read_text()
    assert f".aiperf/{WORKER_TOKEN_FILE}" in script and "worker-token" not in script


@pytest.mark.parametrize("master, cause", [
    ("no-such-host.invalid:50051", "its host name does not resolve"),
    ("127.0.0.1:{port}", "nothing listens there (connection refused)"),
])
def test_an_unresolvable_name_and_a_master_not_started_say_so(capsys, master, cause):
    import socket

    from aiperf_cli.main import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc = main(["status", "--master", master.format(port=port), "--admin-token", "x"])
    err = capsys.readouterr().err
    assert rc == 3 and cause in err and len(err.strip().splitlines()) == 1, err


def test_a_smoke_run_shorter_than_its_minimum_is_started_with_a_warning(master_server, monkeypatch, capsys):
    from aiperf_cli.main import main

    h = master_server()
    monkeypatch.setenv("AIPERF_MASTER", h.address)
    monkeypatch.setenv("AIPERF_ADMIN_TOKEN", h.admin_token)
    assert main(["start", "--duration", "60s", "--profile", "smoke"]) == 0
    err = capsys.readouterr().err
    assert err == ("aiperf: warning: run 1 lasts 0:01:00, less than the smoke profile's minimum running time of "
                   "0:02:00: it cannot be valid (its running-time rule will fail)\n")
    assert main(["stop", "--abort"]) == 0
    assert main(["start", "--duration", "2m", "--profile", "smoke"]) == 0
    assert "warning" not in capsys.readouterr().err  # long enough: nothing to say


def test_the_export_extra_has_a_make_target_that_keeps_the_editable_install():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    make = (root / "Makefile").read_text()
    assert "install-export: $(STAMP)\n\t$(PY) -m pip install -q -e '.[worker,jax,test,export]'" in make
    assert "make install-export" in (root / "README.md").read_text()
    assert "make install-export" in (root / "aiperf_cli" / "export.py").read_text()


def test_a_worker_that_says_it_leaves_is_lost_at_the_next_tick_not_15_s_later(master_server):

    from aiperf.api.client import ControlClient, WorkerClient

    h = master_server()  # heartbeats every 5 s: lost after 15 s of silence
    with WorkerClient(h.address, h.worker_token) as w, ControlClient(h.address, h.admin_token) as c:
        stays = w.register(name="stays", host="a").worker_id
        leaves = w.register(name="leaves", host="b").worker_id
        w.heartbeat(leaves, leaving=True)  # the last beat of a worker stopped by SIGTERM
        def states() -> dict[int, int]:
            return {x.worker_id: x.state for x in c.list_workers().workers}

        wait_for(lambda: states()[leaves] == pb.WORKER_LOST, 5, "the leaving worker lost", 0.1)
        assert states() == {stays: pb.WORKER_ALIVE, leaves: pb.WORKER_LOST}
        w.heartbeat(leaves)  # it may come back: alive again
        assert {x.worker_id: x.state for x in c.list_workers().workers}[leaves] == pb.WORKER_ALIVE


def test_heartbeats_count_a_leaving_worker_lost_however_recent_its_beat():
    from master.core.heartbeats import Heartbeats

    hb = Heartbeats([], 0.0)
    hb.registered(1, 100.0)
    hb.registered(2, 100.0)
    hb.leave(2)
    assert hb.mark_silent(101.0, 15.0) == {2: 1.0}  # 1 s after its last beat, not 15
    assert hb.mark_silent(101.0, 15.0) == {}  # once
    assert hb.is_alive(1) and not hb.is_alive(2)


def test_tables_fold_long_cells_instead_of_cutting_them():
    import io

    from rich.console import Console

    from aiperf_cli.tables import audits_table, models_table, runs_table

    hp = {"batch_size": 448, "kernel_size": 7}
    models = [{"model_id": 2**31 - 1, "parent_id": 2**31 - 2, "worker_id": 123456, "round": 99999, "state": state,
               "hyperparameters": hp, "best_accuracy": 0.91944, "predicted_accuracy": 0.84173,
               "graph_hash": "ab" * 32} for state in ("abandoned", "cut", "training")]
    runs = [{"run_id": 1, "state": "stopping", "profile": "official", "seed": 2**63 - 1, "precision": "mixed_bf16",
             "duration_s": 30 * 86400.0, "started_at": 1.8e9, "stop_reason": "deadline reached " * 3}]
    audits = [{"model_id": 7, "why": "behind the regulated score (rank 12, below the top 3)", "claimed_accuracy": 0.9,
               "audited_accuracy": 0.85, "architecture_ok": True, "verdict": "failed", "detail": "x" * 300,
               "claimed_images_per_second": 12345.0, "audited_images_per_second": 6789.0}]
    for table in (models_table(1, 3, models), runs_table(runs, 1), audits_table(1, audits)):
        out = io.StringIO()
        Console(file=out, width=80).print(table)
        text = out.getvalue()
        assert "…" not in text, text  # nothing cut: long cells wrap onto more lines
        wide = io.StringIO()
        Console(file=wide, width=160).print(table)  # a log's width (aiperf_cli.options.LOG_COLUMNS)
        assert "…" not in wide.getvalue()
    out = io.StringIO()
    Console(file=out, width=160).print(models_table(1, 3, models))
    assert "abandoned" in out.getvalue() and "2147483647" in out.getvalue() and "0.9194" in out.getvalue()


def test_goodbye_is_sent_or_given_up_within_its_timeout(master_server):
    import socket
    import time

    from aiperf.api.client import ControlClient, WorkerClient

    h = master_server()
    with WorkerClient(h.address, h.worker_token) as w, ControlClient(h.address, h.admin_token) as c:
        wid = w.register(name="n", host="n").worker_id
        assert w.connect().goodbye(wid, 5.0) is True
        wait_for(lambda: c.list_workers().workers[0].state == pb.WORKER_LOST, 5, "the worker lost after goodbye", 0.1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with WorkerClient(f"127.0.0.1:{port}", "t") as gone:
        start = time.monotonic()
        assert gone.connect().goodbye(1, 0.5) is False  # nobody there: the stop is not held
        assert time.monotonic() - start < 2.0
