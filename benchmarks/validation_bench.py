"""Validation benchmark: the hand-written bounds (aiperf/api/bounds.py) against
protovalidate (buf.validate annotations) on the same rules and messages.

The buf.validate annotations are generated from the bounds table itself
(integers: gte/lte; doubles: gte/lte/finite; text: max_len and a printable
pattern; enums: in; repeated: max_items; maps: max_pairs, keys, values;
a oneof: required) onto a copy of aiperf.proto's descriptors, so both
validators check the same thing, except the graph JSON's depth, which
protovalidate cannot express (its column adds the hand-written depth check).
Prints the CPU per call of each on representative requests, the ratio, and
what a protobuf parse of the same message costs for scale.

    pip install protovalidate   # not a dependency of the project
    python -m benchmarks.validation_bench [--calls 20000]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from typing import Any, Callable

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from aiperf.api import aiperf_pb2 as pb
from aiperf.api import bounds

PACKAGE = "aiperf.bench"
PRINTABLE = r"^(?:[^\p{C}\p{Z}]| )*$"
PRINTABLE_MULTILINE = r"^(?:[^\p{C}\p{Z}]|[ \n\t])*$"
_F = descriptor_pb2.FieldDescriptorProto
TYPE_RULES = {_F.TYPE_UINT64: "uint64", _F.TYPE_UINT32: "uint32", _F.TYPE_INT64: "int64", _F.TYPE_INT32: "int32"}


def _scalar_rules(target: Any, rule: Any, field_type: int) -> None:
    """Fill a FieldRules (or a map's keys/values rules) from one bounds rule."""
    if isinstance(rule, bounds.Integer) and field_type == descriptor_pb2.FieldDescriptorProto.TYPE_ENUM:
        return  # api_version: any non-negative number (the master answers FAILED_PRECONDITION)
    if isinstance(rule, bounds.Integer):
        r = getattr(target, TYPE_RULES[field_type])
        r.gte, r.lte = max(rule.lo, 0) if TYPE_RULES[field_type].startswith("u") else rule.lo, rule.hi
    elif isinstance(rule, bounds.Real):
        target.double.gte, target.double.lte, target.double.finite = rule.lo, rule.hi, True
    elif isinstance(rule, bounds.Text):
        target.string.max_len = rule.max_chars
        target.string.pattern = PRINTABLE_MULTILINE if rule.multiline else PRINTABLE
    elif isinstance(rule, bounds.GraphJson):
        target.string.max_len = rule.max_chars
    elif isinstance(rule, bounds.Enum):
        target.enum.__getattribute__("in").extend(sorted(rule.values))


def annotated_classes() -> dict[str, Any]:
    """aiperf.proto's messages under package aiperf.bench, with buf.validate rules from bounds.RULES."""
    for dep in ("duration_pb2", "field_mask_pb2", "timestamp_pb2"):  # validate.proto's imports, into the pool
        importlib.import_module(f"google.protobuf.{dep}")
    from protovalidate._gen.buf.validate import validate_pb

    pool = descriptor_pool.Default()
    pool.AddSerializedFile(validate_pb._DESC.proto.to_binary())
    field_ext = pool.FindExtensionByName("buf.validate.field")
    oneof_ext = pool.FindExtensionByName("buf.validate.oneof")
    fd = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(fd)
    fd.name, fd.package = "bench/aiperf_validated.proto", PACKAGE
    fd.dependency.append("buf/validate/validate.proto")
    del fd.service[:]
    rules_by_name = {m.DESCRIPTOR.name: r for m, r in bounds.RULES.items()}
    for m in fd.message_type:
        for f in m.field:
            if f.HasField("type_name"):
                f.type_name = f.type_name.replace(".aiperf.v1.", f".{PACKAGE}.")
            rule = rules_by_name.get(m.name, {}).get(f.name)
            if rule is None:
                continue
            target = f.options.Extensions[field_ext]
            if isinstance(rule, bounds.Repeated):
                target.repeated.max_items = rule.max_items
            elif isinstance(rule, bounds.Mapping):
                target.map.max_pairs = rule.max_items
                _scalar_rules(target.map.keys, rule.key, descriptor_pb2.FieldDescriptorProto.TYPE_STRING)
                _scalar_rules(target.map.values, rule.value, descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE)
            else:
                _scalar_rules(target, rule, f.type)
        for nested in m.nested_type:  # map entries
            for f in nested.field:
                if f.HasField("type_name"):
                    f.type_name = f.type_name.replace(".aiperf.v1.", f".{PACKAGE}.")
        for o in m.oneof_decl:
            o.options.Extensions[oneof_ext].required = True
    pool.AddSerializedFile(fd.SerializeToString())
    return {m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{m.name}"))
            for m in fd.message_type}


def samples() -> dict[str, Any]:
    """Representative requests: the hot path (heartbeat, report) and the larger ones."""
    from aiperf.resnet import resnet50

    graph = resnet50()
    acc = pb.Accelerator(model="NVIDIA H100 80GB HBM3", memory_bytes=80 << 30, peak_flops=4e14,
                         peak_flops_by_dtype={"float32": 5e13, "float16": 7e14, "bfloat16": 7e14})
    return {
        "Connect heartbeat": pb.WorkerMessage(heartbeat=pb.HeartbeatRequest(worker_id=17, model_id=1234)),
        "Connect progress report": pb.WorkerMessage(progress=pb.ProgressReport(
            worker_id=17, model_id=1234, seq=42, images_trained=44800, images_validated=10000, has_accuracy=True,
            val_accuracy=0.61, epoch=3, worker_flops=10**15)),
        "Register (8 accelerators)": pb.RegisterRequest(
            api_version=pb.API_VERSION_1, name="node-17", host="node-17.cluster.local", accelerators=[acc] * 8,
            cpus=128, memory_bytes=2 << 40,
            software=[pb.SoftwareVersion(name=n, version="2.21.0") for n in ("tensorflow", "keras", "cuda")]),
        "SubmitModel (ResNet-50)": pb.SubmitModelRequest(
            worker_id=17, run_id=1, graph_json=graph.to_json(), graph_hash=graph.hash(), parent_id=3, round=6,
            hyperparameters=pb.Hyperparameters(batch_size=448, kernel_size=5)),
        "SendResourceSamples (9)": pb.SendResourceSamplesRequest(worker_id=17, samples=[
            pb.ResourceSample(age_s=0.5, accelerator_index=i - 1, accelerator_util=0.9, accelerator_memory_used=1 << 34,
                              cpu_util=0.3, memory_used=1 << 36) for i in range(9)]),
        "StartRun": pb.StartRunRequest(duration_s=7200, profile=pb.PROFILE_OFFICIAL, seed=42,
                                       limits=pb.Limits(max_models=1000), precision=pb.PRECISION_MIXED_FP16),
    }


def cpu_per_call(fn: Callable[[], Any], calls: int) -> float:
    """CPU seconds per call (best of 3 rounds: the machine may be shared)."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - start) / calls)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls per message and validator per round")
    args = parser.parse_args(argv)
    try:
        import protovalidate
    except ImportError:
        print("protovalidate is not installed: pip install protovalidate", file=sys.stderr)
        print("SKIP protovalidate is not installed")  # for benchmarks/summary.py
        return 2
    classes = annotated_classes()
    validator = protovalidate.Validator()
    depth = bounds.RULES[pb.SubmitModelRequest]["graph_json"]
    print(f"validation_bench: CPU per call, best of 3 x {args.calls} calls")
    print(f"  {'request':<28}{'parse':>10}{'bounds':>10}{'protovalidate':>15}{'ratio':>8}")
    ratios = []
    for name, msg in samples().items():
        twin = classes[msg.DESCRIPTOR.name].FromString(msg.SerializeToString())
        bounds.check(msg)
        assert not validator.collect_violations(twin), validator.collect_violations(twin)
        if isinstance(msg, pb.SubmitModelRequest):
            def by_protovalidate() -> None:  # + the depth, which buf.validate cannot express
                validator.validate(twin)
                depth.check(twin.graph_json)
        else:
            def by_protovalidate() -> None:
                validator.validate(twin)
        data = msg.SerializeToString()
        parse = cpu_per_call(lambda: type(msg).FromString(data), args.calls)
        hand = cpu_per_call(lambda: bounds.check(msg), args.calls)
        proto = cpu_per_call(by_protovalidate, args.calls)
        print(f"  {name:<28}{parse * 1e6:>8.2f}us{hand * 1e6:>8.2f}us{proto * 1e6:>13.2f}us{proto / hand:>7.2f}x")
        ratios.append(proto / hand)
    _agree(classes, validator)
    print(f"RESULT protovalidate_over_bounds_min={min(ratios):.3g} protovalidate_over_bounds_max={max(ratios):.3g}")
    return 0


def _agree(classes: dict[str, Any], validator: Any) -> None:
    """Both refuse the same out-of-bounds requests (a sanity check of the translation)."""
    bad = [
        pb.WorkerMessage(progress=pb.ProgressReport(worker_id=1, model_id=1, seq=1, images_trained=2**50)),
        pb.WorkerMessage(progress=pb.ProgressReport(worker_id=1, model_id=1, seq=1, val_accuracy=float("nan"))),
        pb.WorkerMessage(),
        pb.RegisterRequest(name="a\x00b"),
        pb.RegisterRequest(name="n", accelerators=[pb.Accelerator()] * 65),
        pb.RegisterRequest(accelerators=[pb.Accelerator(peak_flops_by_dtype={"float16": float("inf")})]),
        pb.StartRunRequest(duration_s=1e308),
        pb.FinishModelRequest(worker_id=1, model_id=1, state=pb.MODEL_DONE, reason="\x1b[31m"),
    ]
    for msg in bad:
        twin = classes[msg.DESCRIPTOR.name].FromString(msg.SerializeToString())
        try:
            bounds.check(msg)
            raise AssertionError(f"bounds accepted {msg}")
        except bounds.BoundsError:
            pass
        assert validator.collect_violations(twin), f"protovalidate accepted {msg}"
    print(f"  both refuse the same {len(bad)} out-of-bounds requests")


if __name__ == "__main__":
    sys.exit(main())
