"""The input pipeline without TensorFlow (Dataset.numpy_train / numpy_validation) on small real files:
batch format and exact counts, order and determinism, threads and prefetch, hostile inputs, and
a subprocess in which TensorFlow cannot be imported. The comparison with the tf.data pipeline is in
tests/test_data_equivalence.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.data_sources import cifar_dir, folder_tree, jpeg, photo, tfrecord_dir
from worker.data import DatasetError, load_dataset
from worker.data.example import image_and_label, serialised
from worker.data.numpy_pipeline import NumpyBatches, Split
from worker.data.records import read_records, write_records

ROOT = Path(__file__).resolve().parents[1]
SIZE = 16


def epoch(batches) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """All images and labels of one iteration, and the batch sizes."""
    pairs = list(batches)
    if not pairs:
        return np.zeros((0, 1, 1, 3), np.float32), np.zeros((0, 1), np.float32), []
    xs, ys = zip(*pairs)
    return np.concatenate(xs), np.concatenate(ys), [len(x) for x in xs]


def wait_for_threads(baseline: set[threading.Thread], timeout: float = 5.0) -> set[threading.Thread]:
    """The threads beyond `baseline` still alive after up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        extra = {t for t in threading.enumerate() if t not in baseline and t.is_alive()}
        if not extra or time.monotonic() > deadline:
            return extra
        time.sleep(0.02)


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> tuple[Path, list[int]]:
    return tfrecord_dir(tmp_path_factory.mktemp("records"), [4, 3, 5], [3, 2])


def open_records(path: Path, cache: Path, **options):
    options = {"image_size": SIZE, "num_classes": 5, "cache_dir": str(cache), **options}
    return load_dataset("imagenet-tfrecord", str(path), **options)


# --------------------------------------------------------------------------- #
# format and counts


def test_every_kind_gives_float32_nhwc_images_and_one_hot_labels(records, tmp_path):
    datasets = [
        open_records(records[0], tmp_path),
        load_dataset("imagenet-folder", str(folder_tree(tmp_path / "tree")), image_size=SIZE),
        load_dataset("cifar10", str(cifar_dir(tmp_path / "cifar", 23, 7)), image_size=SIZE),
        load_dataset("digits", image_size=SIZE),
    ]
    for data in datasets:
        for batches, count in ((data.numpy_train(5, seed=2), data.train_size),
                               (data.numpy_validation(5), data.validation_size)):
            images, labels, sizes = epoch(batches)
            assert images.dtype == labels.dtype == np.float32, data.kind
            assert images.shape == (count, SIZE, SIZE, 3) and labels.shape == (count, data.num_classes)
            assert np.array_equal(labels.sum(axis=1), np.ones(count)) and set(np.unique(labels)) == {0.0, 1.0}
            assert sizes == [5] * (count // 5) + ([count % 5] if count % 5 else [])
            assert np.isfinite(images).all() and abs(float(images.mean())) < 3


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(train=st.integers(5, 60), validation=st.integers(1, 30), batch=st.integers(1, 70), drop=st.booleans(),
       augment=st.booleans())
def test_an_epoch_holds_every_image_once_in_batches_of_the_asked_size(tmp_path_factory, train, validation,
                                                                    batch, drop, augment):
    root = cifar_dir(tmp_path_factory.mktemp("cifar"), train, validation)
    data = load_dataset("cifar10", str(root), image_size=8, augment=augment)
    assert (data.train_size, data.validation_size) == (train, validation)
    for seed in (0, 1):
        images, labels, sizes = epoch(data.numpy_train(batch, seed=seed, drop_remainder=drop))
        full, rest = divmod(train, batch)
        assert sizes == [batch] * full + ([rest] if rest and not drop else [])
        assert len(sizes) == data.train_steps(batch, drop_remainder=drop)
        if not drop:  # every training image exactly once: the labels cycle 0..9 in file order
            assert sorted(labels.argmax(axis=1).tolist()) == sorted(i % 10 for i in range(train))
    images, labels, sizes = epoch(data.numpy_validation(batch))
    assert len(images) == validation and len(sizes) == data.validation_steps(batch)
    assert labels.argmax(axis=1).tolist() == [(train + i) % 10 for i in range(validation)]


def test_a_tfrecord_epoch_reads_each_record_once_whatever_the_sharding(records, tmp_path):
    path, train_labels = records
    for count in (1, 2, 3, 5):  # 3 files: whole files per worker up to 3 workers, records beyond
        labels: list[int] = []
        for index in range(count):
            data = open_records(path, tmp_path, shard=(index, count), shuffle_buffer=4)
            shard = epoch(data.numpy_train(4, seed=index))[1].argmax(axis=1).tolist()
            assert len(shard) == data.train_size
            labels += shard
        assert sorted(labels) == sorted(train_labels), count


# --------------------------------------------------------------------------- #
# order, augmentation and determinism


def test_a_seed_fixes_the_sequence_of_epochs_and_each_epoch_reshuffles(records, tmp_path):
    data = open_records(records[0], tmp_path, deterministic=False)  # numpy's order is fixed anyway
    first, again = data.numpy_train(5, seed=7), data.numpy_train(5, seed=7)
    epochs = [epoch(first)[0] for _ in range(3)]
    assert all(np.array_equal(a, epoch(again)[0]) for a in epochs)
    assert not np.array_equal(epochs[0], epochs[1]), "a new order and new crops every epoch"
    assert not np.array_equal(epochs[0], epoch(data.numpy_train(5, seed=8))[0])
    validation = data.numpy_validation(4)
    assert np.array_equal(epoch(validation)[0], epoch(validation)[0])


def test_without_augmentation_training_sees_the_validation_view(tmp_path):
    image = photo(np.random.default_rng(1), 40, 48)
    root = tmp_path / "one"
    root.mkdir()
    for split in ("train", "validation"):
        write_records(str(root / f"{split}-00000-of-00001"), [serialised(jpeg(image), 1)])
    plain = open_records(root, tmp_path, augment=False)
    reference = epoch(plain.numpy_validation(1))[0]
    assert np.array_equal(epoch(plain.numpy_train(1))[0], reference)
    views = [epoch(b)[0] for b in [open_records(root, tmp_path).numpy_train(1, seed=3)] * 4]
    assert all(v.shape == (1, SIZE, SIZE, 3) and not np.allclose(v, reference) for v in views)
    assert len({v.tobytes() for v in views}) == 4


def test_training_crops_at_several_sizes_and_flips_horizontally(tmp_path):
    # A left-to-right ramp: any crop keeps it rising, only a flip makes it fall.
    ramp = np.broadcast_to(np.linspace(0, 255, 64)[None, :, None], (48, 64, 3)).astype(np.uint8)
    root = tmp_path / "ramp"
    root.mkdir()
    for split in ("train", "validation"):
        write_records(str(root / f"{split}-00000-of-00001"), [serialised(jpeg(ramp), 1)])
    batches = open_records(root, tmp_path, num_classes=2).numpy_train(1, seed=11)
    rises = [float(v[0, :, -1, 0].mean() - v[0, :, 0, 0].mean()) for v in (epoch(batches)[0] for _ in range(40))]
    assert 10 <= sum(r < 0 for r in rises) <= 30, "about half the views flipped"
    assert len({round(abs(r), 3) for r in rises}) > 5, "crops of different sizes"


def test_validation_keeps_the_order_of_tf_datas_interleave(tmp_path):
    # 3 validation shards of 3, 1 and 2 records read in turn: 0 3 4 1 5 2 in file order
    path, _ = tfrecord_dir(tmp_path / "d", [2], [3, 1, 2], classes=6, first_label=0)
    labels = epoch(open_records(path, tmp_path, num_classes=6).numpy_validation(4))[1].argmax(axis=1)
    assert labels.tolist() == [0, 3, 4, 1, 5, 2]


# --------------------------------------------------------------------------- #
# threads, prefetch and shutdown


def test_dropping_or_closing_an_iterator_mid_epoch_leaves_no_thread(records, tmp_path):
    data = load_dataset("imagenet-folder", str(folder_tree(tmp_path / "tree", per_class=(8, 1))), image_size=SIZE)
    baseline = set(threading.enumerate())
    iterator = iter(data.numpy_train(2, seed=0))
    next(iterator)
    assert wait_for_threads(baseline, 0), "the pipeline runs threads while an epoch is open"
    del iterator
    assert not wait_for_threads(baseline)
    with iter(open_records(records[0], tmp_path).numpy_train(2)) as iterator:
        next(iterator)
    assert not wait_for_threads(baseline)
    iterator = iter(data.numpy_validation(2))
    epoch(iterator)  # a finished epoch stops its threads too
    assert not wait_for_threads(baseline)
    with pytest.raises(StopIteration):
        next(iterator)


def test_repeated_epochs_are_the_epochs_one_after_the_other(records, tmp_path):
    data = open_records(records[0], tmp_path)
    baseline = set(threading.enumerate())
    chain = list(data.numpy_train(5, seed=4).repeat(3))
    single = data.numpy_train(5, seed=4)
    expected = [batch for _ in range(3) for batch in single]
    assert len(chain) == len(expected) == 3 * data.train_steps(5)
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(chain, expected))
    # an epoch may end before its feeder thread is seen to stop: the chain goes on all the same
    assert all(len(list(data.numpy_validation(2).repeat(3))) == 9 for _ in range(25))
    assert not wait_for_threads(baseline)
    endless = data.numpy_validation(4).repeat()
    assert len([next(endless) for _ in range(7)]) == 7
    del endless
    assert not wait_for_threads(baseline)
    assert list(data.numpy_validation(4).repeat(0)) == []


def test_the_feeder_stays_a_bounded_number_of_batches_ahead():
    taken: list[int] = []

    def elements(rng, stopped):
        for i in range(10_000):
            taken.append(i)
            yield i, 0

    def fill(payloads, draws, out):
        out[:] = np.asarray(payloads, np.float32)[:, None, None, None]

    split = Split(elements=elements, fill=fill, draws=0, image_size=2, num_classes=2)
    batches = NumpyBatches(split, 10, seed=None, drop_remainder=False, ram_budget_bytes=1 << 30, threads=2)
    iterator = iter(batches)
    first = next(iterator)[0]
    time.sleep(0.5)
    assert first[:, 0, 0, 0].tolist() == list(range(10))
    # one batch consumed, `depth` queued, one in the feeder's hands (one element more to see it was full)
    assert len(taken) <= (batches.depth + 2) * 10 + 1
    iterator.close()


def test_a_batch_array_is_reused_only_once_nothing_refers_to_it():
    data = load_dataset("digits", image_size=SIZE)
    batches = data.numpy_train(64, seed=5)
    kept = [x[:3] for x, _ in batches]  # a view of every batch outlives it
    assert len({id(view.base) for view in kept}) == len(kept), "no array handed out again while a view lives"
    before = [view.copy() for view in kept]
    epoch(batches)  # another epoch while the views live: none of them changes
    assert all(np.array_equal(view, copy) for view, copy in zip(kept, before))
    del kept, before
    seen = {id(x) for x, _ in batches}  # each batch let go before the next: a few arrays go round
    assert len(seen) <= batches.depth + 4 < data.train_steps(64)


def test_the_prefetch_depth_follows_the_threads_and_the_ram_budget():
    split = Split(elements=lambda rng, stopped: iter(()), fill=lambda *a: None, draws=0, image_size=224,
                  num_classes=1000)
    batch_bytes = 256 * 224 * 224 * 3 * 4
    assert NumpyBatches(split, 256, seed=0, drop_remainder=False, ram_budget_bytes=64 << 30, threads=16).depth == 8
    assert NumpyBatches(split, 256, seed=0, drop_remainder=False, ram_budget_bytes=64 << 30, threads=2).depth == 3
    assert NumpyBatches(split, 256, seed=0, drop_remainder=False, ram_budget_bytes=4 * batch_bytes,
                        threads=16).depth == 4
    assert NumpyBatches(split, 256, seed=0, drop_remainder=False, ram_budget_bytes=1 << 20, threads=16).depth == 2


# --------------------------------------------------------------------------- #
# hostile inputs


def test_an_undecodable_image_stops_the_epoch_with_a_dataset_error_naming_it(tmp_path):
    root = folder_tree(tmp_path / "tree", per_class=(4, 1))
    bad = root / "train" / "class_1" / "2.JPEG"
    bad.write_bytes(bad.read_bytes()[:200])  # truncated
    data = load_dataset("imagenet-folder", str(root), image_size=SIZE)
    baseline = set(threading.enumerate())
    with pytest.raises(DatasetError, match="fails to decode") as err:
        epoch(data.numpy_train(3))
    assert str(bad) in str(err.value) and "\n" not in str(err.value)
    assert not wait_for_threads(baseline)


@pytest.mark.parametrize(("damage", "message"), [
    (lambda b: b[:-7], "truncated record #4"),
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "bad data checksum of record #4"),
    (lambda b: b[:40] + bytes([b[40] ^ 1]) + b[41:], "bad data checksum of record #0"),
])
def test_a_damaged_shard_stops_the_epoch_with_a_dataset_error_naming_it(records, tmp_path, damage, message):
    path = tmp_path / "data"
    path.mkdir()
    for shard in records[0].iterdir():
        (path / shard.name).write_bytes(shard.read_bytes())
    victim = path / "train-00002-of-00003"  # 5 records
    victim.write_bytes(damage(victim.read_bytes()))
    data = open_records(path, tmp_path)  # opening reads the first record of the first shards only
    with pytest.raises(DatasetError, match=message) as err:
        epoch(data.numpy_train(4))
    assert str(victim) in str(err.value) and "corrupt TFRecord shard" in str(err.value)


def test_a_training_label_outside_the_classes_is_a_dataset_error(tmp_path):
    path, _ = tfrecord_dir(tmp_path / "d", [3], [2], classes=3)
    write_records(str(path / "train-00001-of-00002"), [serialised(jpeg(photo(np.random.default_rng(0), 20, 20)), 9)])
    data = open_records(path, tmp_path, num_classes=3)
    with pytest.raises(DatasetError, match="label >= num_classes after the offset") as err:
        epoch(data.numpy_train(2))
    assert "train-00001-of-00002: record #0" in str(err.value)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_parse_as_an_example_or_give_a_dataset_error(data):
    try:
        encoded, label = image_and_label(data, "record")
    except DatasetError as exc:
        assert str(exc).startswith("record")
    else:
        assert isinstance(encoded, bytes) and isinstance(label, int)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(st.binary(max_size=40), min_size=1, max_size=5), where=st.data())
def test_every_damaged_byte_of_a_tfrecord_file_is_detected(tmp_path_factory, payloads, where):
    path = tmp_path_factory.mktemp("rec") / "f"
    write_records(str(path), payloads)
    content = path.read_bytes()
    assert list(read_records(str(path))) == payloads
    at = where.draw(st.integers(0, len(content) - 1))
    path.write_bytes(content[:at] + bytes([content[at] ^ where.draw(st.integers(1, 255))]) + content[at + 1:])
    with pytest.raises(DatasetError, match="corrupt TFRecord shard"):
        list(read_records(str(path)))
    path.write_bytes(content[:at])
    boundaries = {sum(16 + len(p) for p in payloads[:n]) for n in range(len(payloads) + 1)}
    if at in boundaries:  # a cut between records leaves a shorter, valid file
        assert len(list(read_records(str(path)))) == sorted(boundaries).index(at)
    else:
        with pytest.raises(DatasetError, match="truncated"):
            list(read_records(str(path)))


# --------------------------------------------------------------------------- #
# no TensorFlow


BLOCKED = textwrap.dedent("""
    import importlib.abc, json, sys

    class NoTensorFlow(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "tensorflow" or name.startswith("tensorflow."):
                raise ImportError("TensorFlow is not installed here")
            return None

    sys.meta_path.insert(0, NoTensorFlow())
    from worker.data import DatasetError, load_dataset, validate
    from worker.data.fingerprint import dataset_info

    out = {}
    for kind, path, options in json.loads(sys.argv[1]):
        try:
            data = load_dataset(kind, path, **options)
        except DatasetError as exc:
            out[path or kind] = "DatasetError: " + str(exc)
            continue
        counts = []
        for batches in (data.numpy_train(4, seed=1), data.numpy_validation(4)):
            images = labels = 0
            for x, y in batches:
                assert x.dtype.name == "float32" and y.dtype.name == "float32", (x.dtype, y.dtype)
                images += len(x)
                labels += int(y.sum())
            counts.append([images, labels])
        out[path or kind] = [counts, [data.train_size, data.validation_size], dataset_info(data)["fingerprint"]]
    out["tensorflow_imported"] = any(m == "tensorflow" or m.startswith("tensorflow.") for m in sys.modules)
    print(json.dumps(out))
""")


def run_without_tensorflow(cases: list[tuple[str, str | None, dict]]) -> dict:
    done = subprocess.run([sys.executable, "-c", BLOCKED, json.dumps(cases)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_every_kind_opens_and_iterates_where_tensorflow_cannot_be_imported(records, tmp_path):
    cache = str(tmp_path / "cache")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train-00000-of-00001").write_bytes(b"")
    write_records(str(bad / "validation-00000-of-00001"), [serialised(b"\xff\xd8 no jpeg", 1)])
    cases = [
        ("imagenet-tfrecord", str(records[0]), {"image_size": SIZE, "num_classes": 5, "cache_dir": cache}),
        ("imagenet-folder", str(folder_tree(tmp_path / "tree")), {"image_size": SIZE}),
        ("cifar10", str(cifar_dir(tmp_path / "cifar", 13, 6)), {"image_size": SIZE}),
        ("digits", None, {"image_size": SIZE}),
        ("imagenet-tfrecord", str(bad), {"cache_dir": cache}),
        ("imagenet-tfrecord", "gs://bucket/imagenet", {}),
    ]
    out = run_without_tensorflow(cases)
    assert out.pop("tensorflow_imported") is False
    for kind, path, options in cases[:4]:
        (train, validation), sizes, fingerprint = out[path or kind]
        assert train == [sizes[0]] * 2 and validation == [sizes[1]] * 2, kind
        data = load_dataset(kind, path, **options)
        assert sizes == [data.train_size, data.validation_size]
        from worker.data.fingerprint import dataset_info

        assert fingerprint == dataset_info(data)["fingerprint"], "the same fingerprint with or without TensorFlow"
    assert "not a valid TFRecord file (empty)" in out[str(bad)]
    assert "needs TensorFlow" in out["gs://bucket/imagenet"]
