"""The GPU machine's wheels: NNI's wheel trimmed of its web UI still installs, its RECORD true."""

from __future__ import annotations

import base64
import csv
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.gpu_wheels import trim_wheel

DIST_INFO = "demo-1.0.dist-info"


def _wheel(path: Path, files: dict[str, bytes]) -> Path:
    wheel = path / "demo-1.0-py3-none-any.whl"
    meta = {f"{DIST_INFO}/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
            f"{DIST_INFO}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    everything = {**files, **meta}
    record = "".join(f"{name},,\n" for name in everything) + f"{DIST_INFO}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in everything.items():
            z.writestr(name, data)
        z.writestr(f"{DIST_INFO}/RECORD", record)
    return wheel


def _record(wheel: Path) -> dict[str, tuple[str, str]]:
    with zipfile.ZipFile(wheel) as z:
        rows = csv.reader(z.read(f"{DIST_INFO}/RECORD").decode().splitlines())
        return {r[0]: (r[1], r[2]) for r in rows}


names = st.sampled_from(["demo/a.py", "demo/sub/b.py", "ui/index.html", "ui/deep/app.js", "assets/x.png"])


@settings(max_examples=40, deadline=None)
@given(files=st.dictionaries(names, st.binary(max_size=64), min_size=1))
def test_the_trimmed_record_lists_exactly_what_stays_with_true_hashes(tmp_path_factory, files):
    wheel = _wheel(tmp_path_factory.mktemp("w"), files)
    removed = trim_wheel(wheel, ("ui/", "assets/"))
    assert removed == sum(n.startswith(("ui/", "assets/")) for n in files)
    with zipfile.ZipFile(wheel) as z:
        inside = {i.filename: z.read(i) for i in z.infolist()}
    assert not [n for n in inside if n.startswith(("ui/", "assets/"))]
    record = _record(wheel)
    assert set(record) == set(inside)
    for name, data in inside.items():
        if name.endswith("RECORD"):
            assert record[name] == ("", "")
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert record[name] == (f"sha256={digest}", str(len(data)))


def test_pip_installs_the_trimmed_wheel(tmp_path):
    wheel = _wheel(tmp_path, {"demo/__init__.py": b"X = 1\n", "ui/big.js": b"//" * 1000})
    trim_wheel(wheel, ("ui/",))
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site),
                    str(wheel)], check=True, capture_output=True)
    assert (site / "demo" / "__init__.py").read_text() == "X = 1\n" and not (site / "ui").exists()


def test_a_wheel_without_one_record_is_refused(tmp_path):
    wheel = tmp_path / "bad-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("bad/__init__.py", "")
    with pytest.raises(ValueError, match="0 RECORD files"):
        trim_wheel(wheel, ("ui/",))
