"""TFRecord framing (worker/data/records.py): the masked CRC-32C from google-crc32c
agrees with what TensorFlow's own writer stores, a corrupt header is refused, and
the framing walk counts what TensorFlow reads."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.data.records import _masked_crc32c, check_tfrecord_header, count_tfrecords
from worker.data.spec import DatasetError

tf = pytest.importorskip("tensorflow")


def test_masked_crc_of_the_tfrecord_format_golden_value():
    # The empty record's length header (8 zero bytes) as TensorFlow frames it: the value any
    # TFRecord reader checks first (tensorflow/core/lib/hash/crc32c.h Mask of crc32c(0 x 8)).
    assert _masked_crc32c(b"\0" * 8) == struct.unpack("<I", _written([b""])[8:12])[0]


def _written(records: list[bytes]) -> bytes:
    import os
    import tempfile

    fd, name = tempfile.mkstemp(suffix=".tfrecord")
    os.close(fd)
    try:
        with tf.io.TFRecordWriter(name) as w:
            for r in records:
                w.write(r)
        with open(name, "rb") as f:
            return f.read()
    finally:
        os.unlink(name)


@settings(max_examples=25, deadline=None)
@given(records=st.lists(st.binary(max_size=300), min_size=1, max_size=6))
def test_header_crc_and_count_agree_with_tensorflow(records, tmp_path_factory):
    path = tmp_path_factory.mktemp("rec") / "train-00000-of-00001"
    data = _written(records)
    path.write_bytes(data)
    (length_crc,) = struct.unpack("<I", data[8:12])
    assert _masked_crc32c(data[:8]) == length_crc
    check_tfrecord_header(str(path))
    assert count_tfrecords(str(path), len(data)) == len(records) == sum(1 for _ in tf.data.TFRecordDataset(str(path)))


def test_a_corrupt_length_checksum_or_a_truncated_shard_is_refused(tmp_path):
    data = bytearray(_written([b"x" * 100, b"y" * 50]))
    bad = tmp_path / "train-0"
    bad.write_bytes(bytes(data[:8]) + bytes([data[8] ^ 1]) + bytes(data[9:]))
    with pytest.raises(DatasetError, match="bad length checksum"):
        check_tfrecord_header(str(bad))
    short = tmp_path / "train-1"
    short.write_bytes(bytes(data[:-3]))
    with pytest.raises(DatasetError, match="truncated record at #1"):
        count_tfrecords(str(short), len(data) - 3)
