"""``tf.train.Example`` records without TensorFlow: the public schema, parsed by the protobuf runtime.

The schema is TensorFlow's ``example.proto``/``feature.proto`` (an Example holds
Features, a map from name to Feature; a Feature is one of a BytesList, a
FloatList or an Int64List), declared here field number for field number in a
private descriptor pool under its own package name, so that it never meets
TensorFlow's own ``tensorflow.Example`` in a process that has both. Declared
as proto2: the parser then takes feature names that are not valid UTF-8, as
TensorFlow's own example parser does.
"""

from __future__ import annotations

import functools
from typing import Any

from worker.data.spec import DatasetError

FEATURE_IMAGE = "image/encoded"
FEATURE_LABEL = "image/class/label"

_PACKAGE = "aiperf.tfexample"


def image_and_label(record: bytes, where: str) -> tuple[bytes, int]:
    """A serialised Example's ``image/encoded`` bytes and ``image/class/label``, each a single value.

    Raises ``DatasetError`` starting with `where` when the record is not an
    Example or a feature is missing, of another type, or not a single value.
    """
    feature = _parse(record, where).features.feature
    image, label_feature = feature.get(FEATURE_IMAGE), feature.get(FEATURE_LABEL)
    if image is None or image.WhichOneof("kind") != "bytes_list":
        raise DatasetError(f"{where} lacks {FEATURE_IMAGE}")
    if label_feature is None or label_feature.WhichOneof("kind") != "int64_list":
        raise DatasetError(f"{where} lacks {FEATURE_LABEL} (int64)")
    images, labels = image.bytes_list.value, label_feature.int64_list.value
    if len(images) != 1:
        raise DatasetError(f"{where}: {FEATURE_IMAGE} holds {len(images)} values, not 1")
    if len(labels) != 1:
        raise DatasetError(f"{where}: {FEATURE_LABEL} holds {len(labels)} values, not 1")
    return images[0], int(labels[0])


def label(record: bytes, where: str) -> int:
    """A serialised Example's single ``image/class/label``."""
    feature = _parse(record, where).features.feature
    if FEATURE_LABEL not in feature or feature[FEATURE_LABEL].WhichOneof("kind") != "int64_list":
        raise DatasetError(f"{where} lacks {FEATURE_LABEL} (int64)")
    labels = feature[FEATURE_LABEL].int64_list.value
    if len(labels) != 1:
        raise DatasetError(f"{where}: {FEATURE_LABEL} holds {len(labels)} values, not 1")
    return int(labels[0])


def serialised(encoded: bytes, label_value: int) -> bytes:
    """An Example of one ``image/encoded`` and one ``image/class/label`` (benchmarks and tests write them)."""
    example = example_class()()
    feature = example.features.feature
    feature[FEATURE_IMAGE].bytes_list.value.append(encoded)
    feature[FEATURE_LABEL].int64_list.value.append(label_value)
    data: bytes = example.SerializeToString()
    return data


def example_class() -> Any:
    """The Example message class of the private pool."""
    return _classes()["Example"]


def _parse(record: bytes, where: str) -> Any:
    from google.protobuf.message import DecodeError

    try:
        return _classes()["Example"].FromString(record)
    except DecodeError as exc:
        raise DatasetError(f"{where} is not a tf.train.Example ({exc})") from None


@functools.lru_cache(maxsize=1)
def _classes() -> dict[str, Any]:
    """The message classes of the schema, by name."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.Add(_schema())
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
            for name in ("Example", "Features", "Feature", "BytesList", "FloatList", "Int64List")}


def _schema() -> Any:
    """example.proto and feature.proto as one FileDescriptorProto."""
    from google.protobuf import descriptor_pb2

    field = descriptor_pb2.FieldDescriptorProto
    schema = descriptor_pb2.FileDescriptorProto(name="aiperf/tf_example.proto", package=_PACKAGE,
                                                syntax="proto2")
    for name, kind in (("BytesList", field.TYPE_BYTES), ("FloatList", field.TYPE_FLOAT),
                       ("Int64List", field.TYPE_INT64)):
        values = schema.message_type.add(name=name).field.add(
            name="value", number=1, label=field.LABEL_REPEATED, type=kind)
        if kind != field.TYPE_BYTES:
            values.options.packed = True
    feature = schema.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, name in enumerate(("bytes_list", "float_list", "int64_list"), start=1):
        type_name = "".join(part.capitalize() for part in name.split("_"))
        feature.field.add(name=name, number=number, label=field.LABEL_OPTIONAL, type=field.TYPE_MESSAGE,
                          type_name=f".{_PACKAGE}.{type_name}", oneof_index=0)
    features = schema.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, label=field.LABEL_OPTIONAL, type=field.TYPE_STRING)
    entry.field.add(name="value", number=2, label=field.LABEL_OPTIONAL, type=field.TYPE_MESSAGE,
                    type_name=f".{_PACKAGE}.Feature")
    features.field.add(name="feature", number=1, label=field.LABEL_REPEATED, type=field.TYPE_MESSAGE,
                       type_name=f".{_PACKAGE}.Features.FeatureEntry")
    schema.message_type.add(name="Example").field.add(
        name="features", number=1, label=field.LABEL_OPTIONAL, type=field.TYPE_MESSAGE,
        type_name=f".{_PACKAGE}.Features")
    return schema
