"""Following a run: progress lines off a terminal, `aiperf wait` and `aiperf status --watch`."""

from __future__ import annotations

import re
import shlex
import socket

import pytest

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.control_session import ControlSession
from aiperf_cli.options import ExitCode
from aiperf_cli.watch import Follow, follow, progress_line
from tests.support.cli_runs import run_cli as _run


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def board(state: int, elapsed: float, valid: bool = False) -> pb.Scoreboard:
    run = pb.RunInfo(config=pb.RunConfig(run_id=7, duration_s=300, profile=pb.PROFILE_SMOKE), state=state)
    return pb.Scoreboard(run=run, elapsed_s=elapsed, flops=3.7e9, score=3.7e9, provisional=elapsed < 120,
                         best_accuracy=0.5, error=0.5, valid=valid, models_done=2,
                         models=[pb.ModelCount(state=pb.MODEL_DONE, count=2),
                                 pb.ModelCount(state=pb.MODEL_TRAINING, count=1)],
                         checks=[pb.ValidityCheck(rule="running_time", state="pending", figure="0:00:10",
                                                  limit=">= 0:02:00")])


class ScriptedClient:
    """Answers scoreboard() from a script, advancing the fake clock by nothing (the follower sleeps)."""

    def __init__(self, answers: list) -> None:
        self.answers = answers
        self.asked: list[int] = []

    def scoreboard(self, run: int) -> pb.Scoreboard:
        self.asked.append(run)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_a_line_every_interval_then_the_last_board():
    clock = FakeClock()
    running = [board(pb.RUN_RUNNING, 10.0 * i) for i in range(20)]
    client = ScriptedClient([*running, board(pb.RUN_FINISHED, 300.0, valid=True)])
    lines: list[str] = []
    d = follow(ControlSession(client), 0, Follow(interval_s=10.0, poll_s=2.0, on_line=lines.append, clock=clock,
                                 sleep=clock.sleep))
    assert d is not None and d["final"] and d["valid"]
    # 21 polls 2 s apart (0..40 s): a line at 0, 10, 20, 30, 40 s, and the final one
    assert len(lines) == 5 and "finished" in lines[-1] and "valid: yes" in lines[-1]
    assert client.asked == [0] + [7] * 20  # the run id is fixed at the first answer
    first = lines[0]
    assert re.match(r"\d\d:\d\d:\d\dZ run 7 running: elapsed 0:00:00 of 0:05:00; models 2 done, 1 training; "
                    r"FLOPS 3\.70 GFLOPS; score 3\.70 GFLOPS \(provisional\); best accuracy 0\.5000; "
                    r"valid: not yet \(running time pending\)$", first), first


def test_the_timeout_ends_the_follow_and_a_silent_master_is_retried():
    from aiperf.api.client import ApiError

    class Unavailable(ApiError):
        def __init__(self) -> None:
            Exception.__init__(self, "unavailable")

        code = type("Code", (), {"name": "UNAVAILABLE"})()
        details = "connection refused"

    clock = FakeClock()
    with pytest.raises(ApiError):  # never reached: a wrong address, or no master yet (exit 3 at once)
        follow(ControlSession(ScriptedClient([Unavailable()])), 0, Follow(clock=clock, sleep=clock.sleep, on_line=lambda line: None))
    client = ScriptedClient([board(pb.RUN_RUNNING, 1.0), Unavailable()])
    how = Follow(interval_s=5.0, timeout_s=9.0, poll_s=2.0, on_line=lambda line: None, clock=clock,
                 sleep=clock.sleep)
    assert follow(ControlSession(client), 0, how) is None
    assert clock.t == pytest.approx(9.0) and how.unreachable  # still silent at the end: exit 3 for `wait`


def test_wait_exits_by_the_runs_validity_and_writes_the_report(cli, capsys, tmp_path):
    assert _run(capsys, "start", "--duration", "5m", "--profile", "smoke")[0] == 0
    rc, out, err = _run(capsys, "wait", "--timeout", "1s", "--interval", "1")
    assert rc == ExitCode.TIMEOUT == 6 and "did not end within 1s" in err and len(err.splitlines()) == 1
    assert "run 1 running" in out  # a progress line was printed while waiting
    assert _run(capsys, "stop", "--abort")[0] == 0
    report = tmp_path / "run.html"
    rc, out, err = _run(capsys, "wait", "--report", str(report))
    assert rc == ExitCode.INVALID == 5 and "run 1 aborted and is not valid: ran" in err
    assert report.read_text().startswith("<!DOCTYPE html>") and f"wrote {report}" in out
    result = out.strip().splitlines()[-1]
    fields = dict(kv.split("=", 1) for kv in shlex.split(result)[1:])
    assert fields["run_id"] == "1" and fields["state"] == "aborted" and fields["valid"] == "false"
    rc, out, _ = _run(capsys, "status", "--watch", "--interval", "1")  # over already: one line, done
    assert rc == 0 and len(out.strip().splitlines()) == 1 and "run 1 aborted" in out


def test_wait_on_a_master_that_does_not_answer_exits_3(capsys, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, _, err = _run(capsys, "wait", "--master", f"127.0.0.1:{port}", "--admin-token", "x")  # no timeout
    assert rc == ExitCode.UNAVAILABLE and "unreachable" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    (["wait", "--timeout", "soon"], "--timeout: bad duration 'soon'"),
    (["wait", "--interval", "0"], "0 is not in the range"),
    (["status", "--watch", "--json"], "drop --json"),
])
def test_bad_wait_options_are_one_line(cli, capsys, argv, message):
    rc, _, err = _run(capsys, *argv)
    assert rc == ExitCode.BAD_INPUT and message in err and len(err.strip().splitlines()) == 1


def test_progress_line_of_a_finished_valid_run():
    from aiperf.api.views import scoreboard_to_dict

    line = progress_line(scoreboard_to_dict(board(pb.RUN_FINISHED, 300.0, valid=True)), now=0.0)
    assert line.startswith("00:00:00Z run 7 finished: elapsed 0:05:00 of 0:05:00;") and "(final)" in line


class Worker:
    returncode = None

    def poll(self):
        return None


def test_the_demo_shows_a_live_table_on_a_terminal_and_lines_elsewhere(capsys):
    import io

    from rich.console import Console

    from aiperf_cli import demo

    client = ScriptedClient([board(pb.RUN_RUNNING, 10.0), board(pb.RUN_FINISHED, 300.0, valid=True)])
    screen = io.StringIO()
    demo._watch(Console(file=screen, force_terminal=True, width=100), ControlSession(client), 7, Worker(), 1.0)
    shown = screen.getvalue()
    assert "AIPerf run 7 (smoke, unofficial)" in shown and "3.70 GFLOPS" in shown and "valid" in shown
    assert capsys.readouterr().out == ""  # on a terminal: the table, no progress lines

    client = ScriptedClient([board(pb.RUN_FINISHED, 300.0, valid=True)])
    demo._watch(Console(file=io.StringIO(), force_terminal=False), ControlSession(client), 7, Worker(), 1.0)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "run 7 finished" in lines[0] and "valid: yes" in lines[0]
