"""`aiperf graph ...` through the real console entry point."""

import json
import subprocess
import sys

import pytest

from aiperf.graph import Graph
from aiperf.resnet import resnet50

FLOPS_KEYS = {"conv", "dense", "batchnorm", "relu", "maxpool", "avgpool", "add", "softmax", "total"}


def aiperf(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aiperf_cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_resnet50_prints_canonical_json():
    out = aiperf("graph", "resnet50")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == resnet50().to_json()
    small = aiperf("graph", "resnet50", "--input-size", "32", "--classes", "10", "--width", "0.25")
    assert Graph.from_json(small.stdout) == resnet50(input_size=32, classes=10, width=0.25)


def test_flops_json_has_the_documented_shape(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(resnet50().to_json())
    out = aiperf("graph", "flops", str(path), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) == {"params", "per_image"}
    assert data["params"] == 25_636_712
    per = data["per_image"]
    assert set(per) == {"forward", "backward", "train", "eval"}
    assert set(per["forward"]) == FLOPS_KEYS and set(per["backward"]) == FLOPS_KEYS
    assert f"{per['forward']['total']:.2e}" == "7.81e+09"
    assert f"{per['train']:.2e}" == "2.31e+10"
    assert per["eval"] == per["forward"]["total"]


def test_show_and_flops_read_stdin():
    text = resnet50(input_size=32, classes=10, width=0.25).to_json()
    show = aiperf("graph", "show", "-", stdin=text)
    assert show.returncode == 0, show.stderr
    assert "parameters:  1,506,026" in show.stdout
    assert "depth:       50" in show.stdout
    table = aiperf("graph", "flops", "-", stdin=text)
    assert table.returncode == 0 and "train (forward+backward) per image" in table.stdout
    # written as every table writes a count of operations (aiperf.units), not in e-notation
    assert "e+" not in table.stdout and "e+" not in show.stdout
    assert "FLOP" in table.stdout and "per image:   forward " in show.stdout


@pytest.mark.parametrize("args,stdin,message", [
    (["graph", "show", "-"], "{broken", "not valid JSON"),
    (["graph", "flops", "-"], '{"format": "aiperf.graph", "version": 7}', "unsupported graph version 7"),
    (["graph", "show", "/no/such/file.json"], None, "no such file"),
    (["graph", "resnet50", "--width", "-1"], None, "Invalid value for '--width': -1 is not in the range 0<x<=16"),
    (["graph", "flops"], None, "Missing argument"),
])
def test_bad_input_is_one_line_and_exit_2(args, stdin, message):
    out = aiperf(*args, stdin=stdin)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
    assert out.stdout == ""


def test_morph_is_reproducible_and_records_lineage():
    parent = resnet50(input_size=32, classes=10, width=0.25)
    text = parent.to_json()
    first = aiperf("graph", "morph", "-", "--seed", "5", "--steps", "3", stdin=text)
    again = aiperf("graph", "morph", "-", "--seed", "5", "--steps", "3", stdin=text)
    other = aiperf("graph", "morph", "-", "--seed", "6", "--steps", "3", stdin=text)
    assert first.returncode == 0, first.stderr
    assert first.stdout == again.stdout, "same arguments, byte-identical child"
    child = Graph.from_json(first.stdout)
    assert child.hash() != parent.hash()
    assert Graph.from_json(other.stdout).hash() != child.hash()
    assert len(child.meta["operations"]) == 3
    # A multi-step child names the graph it was morphed from, and every operation.
    assert child.meta["parent"] == parent.hash()


@pytest.mark.parametrize("args,message", [
    (["--seed", "1", "--kernel-size", "4"], "'4' is not one of '3', '5', '7'"),
    (["--seed", "1", "--steps", "0"], "Invalid value for '--steps'"),
    (["--seed", "1", "--max-layers", "10"], "layers"),
])
def test_morph_bad_arguments_exit_2(args, message):
    text = resnet50(input_size=32, classes=10, width=0.25).to_json()
    out = aiperf("graph", "morph", "-", *args, stdin=text)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1
