"""The committed generated code matches protos/*.proto and imports as a package."""

from __future__ import annotations

from pathlib import Path

from aiperf.api import generate


def test_committed_code_is_up_to_date_with_the_protos(tmp_path: Path):
    written = generate.generate(out_dir=tmp_path)
    assert written, "nothing generated"
    stale = []
    for fresh in written:
        committed = generate.API_DIR / fresh.name
        if not committed.exists() or committed.read_text() != fresh.read_text():
            stale.append(fresh.name)
    assert not stale, f"run `make protos`: out of date: {stale}"


def test_generated_modules_import_from_the_package():
    from aiperf.api import aiperf_pb2, aiperf_pb2_grpc

    text = (generate.API_DIR / "aiperf_pb2_grpc.py").read_text()
    assert "from aiperf.api import aiperf_pb2 as" in text
    assert hasattr(aiperf_pb2_grpc, "WorkerServiceStub") and hasattr(aiperf_pb2_grpc, "ControlServiceStub")
    names = {s.name for s in aiperf_pb2.DESCRIPTOR.services_by_name.values()}
    assert names == {"WorkerService", "ControlService"}
    # explicit states and a version field, as the API promises
    assert [v.name for v in aiperf_pb2.RunState.DESCRIPTOR.values][1:] == [
        "RUN_PENDING", "RUN_RUNNING", "RUN_STOPPING", "RUN_FINISHED", "RUN_ABORTED"]
    assert [v.name for v in aiperf_pb2.ModelState.DESCRIPTOR.values][1:] == [
        "MODEL_QUEUED", "MODEL_TRAINING", "MODEL_DONE", "MODEL_FAILED", "MODEL_ABANDONED", "MODEL_CUT"]
    assert "api_version" in aiperf_pb2.RegisterRequest.DESCRIPTOR.fields_by_name


def test_a_changed_proto_is_detected(tmp_path: Path):
    protos = tmp_path / "protos"
    protos.mkdir()
    src = (generate.PROTO_DIR / "aiperf.proto").read_text()
    field = "message SendResourceSamplesResponse {\n  uint32 stored = 1;\n"
    assert field in src
    (protos / "aiperf.proto").write_text(src.replace(field, field + "  string extra = 2;\n", 1))
    out = tmp_path / "out"
    generate.generate(out_dir=out, proto_dir=protos)
    assert (out / "aiperf_pb2.py").read_text() != (generate.API_DIR / "aiperf_pb2.py").read_text()
