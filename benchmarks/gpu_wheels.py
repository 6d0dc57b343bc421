"""The wheels a GPU machine without TensorFlow needs for a master and a JAX worker, fetched into
one folder that travels with the working tree (docs/benchmarks.md, "A JAX worker on a node
without TensorFlow: the wheels to carry").

The lent GPU image has JAX, numpy, grpcio's runtime needs, Pillow, OpenCV and the rest listed
there, but nothing can be fetched on it; a call carries at most 64 MiB. This downloads, for
CPython 3.12 on manylinux x86_64, the pinned wheels below without their dependencies, and
NNI's wheel with its web UI (`nni_node/`, `nni_assets/`: 192 MB unpacked, which aiperf/hpo.py
never touches) taken out and its RECORD rewritten to match, so that pip installs it. It says
the size of each and of the whole, and fails when the whole is over the call's limit.

    RESULT wheels=<n> total_mib=<size> fits_one_call=<true|false>

Usage: python -m benchmarks.gpu_wheels [--out .whl] [--python-version 3.12]
Then, in the device call: carry [".whl"] and
`python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl`.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import subprocess
import sys
import zipfile
from pathlib import Path

CARRY_LIMIT_BYTES = 64 * 2**20  # what one device call carries (the device tool's limit)
# What the image lacks, at the versions `make install` resolved when the last GPU run used them.
WHEELS = (
    "keras==3.15.1", "namex==0.1.0", "optree==0.20.0", "sqlalchemy==2.1.9", "alembic==1.20.1", "mako==1.4.3",
    "hyperopt==0.3.0", "json-tricks==3.17.3", "schema==0.7.8", "typeguard==4.1.2", "google-crc32c==1.9.0",
    "tenacity==9.2.1", "grpcio-health-checking==1.85.1", "protobuf==7.36.2", "grpcio==1.85.3",
)
NNI = "nni==3.0"
NNI_LEFT_OUT = ("nni_node/", "nni_assets/")  # NNI's web UI and its Node.js runtime
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")


def download(requirements: tuple[str, ...], out: Path, python_version: str) -> None:
    """pip download of each requirement alone (no dependencies), binary wheels for the target."""
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--python-version", python_version, "--implementation", "cp", "-d", str(out)]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    subprocess.run(command + list(requirements), check=True)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return f"sha256={digest}"


def trim_wheel(wheel: Path, left_out: tuple[str, ...]) -> int:
    """Rewrite `wheel` without the entries under `left_out` (top-level folders), its RECORD listing
    exactly what stays (each file with its hash and size, RECORD itself without); the entries removed."""
    with zipfile.ZipFile(wheel) as source:
        infos = source.infolist()
        kept = [(i, source.read(i)) for i in infos if not i.filename.startswith(left_out)]
    records = [i.filename for i, _ in kept if i.filename.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        raise ValueError(f"{wheel.name}: {len(records)} RECORD files, expected one")
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    for info, data in kept:
        if info.filename == records[0]:
            writer.writerow([info.filename, "", ""])
        elif not info.is_dir():
            writer.writerow([info.filename, _record_hash(data), len(data)])
    trimmed = wheel.with_suffix(".part")
    try:
        with zipfile.ZipFile(trimmed, "w", compression=zipfile.ZIP_DEFLATED) as target:
            for info, data in kept:
                target.writestr(info, rows.getvalue().encode() if info.filename == records[0] else data,
                                compress_type=zipfile.ZIP_DEFLATED)
        trimmed.replace(wheel)
    finally:
        trimmed.unlink(missing_ok=True)  # a write that failed leaves no half wheel beside the whole one
    return len(infos) - len(kept)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(".whl"), help="the folder to fill (git-ignore it)")
    ap.add_argument("--python-version", default="3.12", help="the GPU image's Python")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    download(WHEELS + (NNI,), args.out, args.python_version)
    nni = sorted(args.out.glob("nni-*.whl"))
    if len(nni) != 1:
        print(f"expected one NNI wheel in {args.out}, found {len(nni)}", file=sys.stderr)
        return 1
    removed = trim_wheel(nni[0], NNI_LEFT_OUT)
    wheels = sorted(args.out.glob("*.whl"))
    for w in wheels:
        print(f"{w.stat().st_size / 2**10:10,.0f} KiB  {w.name}")
    total = sum(w.stat().st_size for w in wheels)
    print(f"NNI: {removed} entries of {', '.join(NNI_LEFT_OUT)} left out")
    fits = total <= CARRY_LIMIT_BYTES
    print(f"RESULT wheels={len(wheels)} total_mib={total / 2**20:.1f} fits_one_call={str(fits).lower()}")
    return 0 if fits else 1


if __name__ == "__main__":
    sys.exit(main())
