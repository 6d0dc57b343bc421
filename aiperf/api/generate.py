"""Regenerate the protobuf/gRPC Python code in `aiperf/api/` from `protos/*.proto`.

Run as `python -m aiperf.api.generate` (what `make protos` does), or with
`--out DIR` to write somewhere else (the freshness test compares the two).
protoc writes `import aiperf_pb2`, which only works with the output folder on
sys.path; the import is rewritten to `from aiperf.api import ...` so the
generated modules work as part of the package.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

log = logging.getLogger(__name__)

API_DIR = Path(__file__).resolve().parent
PROTO_DIR = API_DIR.parent.parent / "protos"
PACKAGE = "aiperf.api"


def proto_files(proto_dir: Path = PROTO_DIR) -> list[Path]:
    files = sorted(proto_dir.glob("*.proto"))
    if not files:
        raise FileNotFoundError(f"no .proto files in {proto_dir}")
    return files


def _fix_imports(text: str, modules: set[str]) -> str:
    # `import x_pb2 as y` -> `from aiperf.api import x_pb2 as y` for our own modules only
    def repl(m: re.Match[str]) -> str:
        mod = m.group(1)
        if mod in modules:
            return f"from {PACKAGE} import {mod} as {m.group(2)}"
        return m.group(0)

    return re.sub(r"^import (\w+_pb2) as (\w+)$", repl, text, flags=re.MULTILINE)


def generate(out_dir: Path = API_DIR, proto_dir: Path = PROTO_DIR) -> list[Path]:
    """Run protoc on every .proto file; return the files written in out_dir."""
    import importlib.resources
    import subprocess

    out_dir.mkdir(parents=True, exist_ok=True)
    protos = proto_files(proto_dir)
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")  # test/dev dependency
    # protoc runs in its own process: in a process that has loaded TensorFlow
    # (the test suite), its native protobuf clashes with TensorFlow's and crashes.
    args = [
        sys.executable, "-m", "grpc_tools.protoc",
        f"-I{proto_dir}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[p.name for p in protos],
    ]
    done = subprocess.run(args, cwd=proto_dir, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"protoc failed with exit code {done.returncode}: {done.stderr.strip()}")
    modules = {p.stem + "_pb2" for p in protos}
    written = []
    for p in protos:
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            path = out_dir / f"{p.stem}{suffix}"
            path.write_text(_fix_imports(path.read_text(), modules))
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=API_DIR, help="output folder")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for path in generate(args.out):
        log.info("wrote %s", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
