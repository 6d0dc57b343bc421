"""The pipeline without TensorFlow against the tf.data pipeline, kind by kind, on the same files:
sizes, formats, labels and order, pixels within stated tolerances, the augmentation's rules and
statistics, the TFRecord framing and Example schema, and the errors they give.

The tolerances (docs/spec.md, "Input pipelines"): the in-memory kinds agree to float rounding
(1e-4 after normalisation); the ImageNet kinds' validation images within 1.5 levels of 255 on
average and 6 at most, almost all of it from the JPEG DCT (TensorFlow decodes with libjpeg's fast
integer DCT, OpenCV with the accurate one): with TensorFlow's accurate DCT the two agree within
0.76 of a level, the 8-bit resize's rounding.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

tf = pytest.importorskip("tensorflow")

from tests.support.data_sources import cifar_dir, folder_tree, jpeg, photo, tfrecord_dir  # noqa: E402
from worker.data import IMAGENET_MEAN, IMAGENET_STD, DatasetError, load_dataset  # noqa: E402
from worker.data.crops import (  # noqa: E402
    CROP_ASPECT_RANGE,
    MIN_OBJECT_COVERED,
    WINDOW_DRAWS,
    central_window,
    random_window,
    translation_pad,
)
from worker.data.example import image_and_label, serialised  # noqa: E402
from worker.data.images import _central_window, _random_window, normalise_image  # noqa: E402
from worker.data.opencv_images import ARRAY_DRAWS, normalise_into, translate_into  # noqa: E402
from worker.data.records import read_records, write_records  # noqa: E402
from worker.data.tfrecord import interleaved  # noqa: E402

SIZE = 16
LEVELS = np.asarray(IMAGENET_STD, np.float32)  # normalised difference x std = difference in 0..255 levels


def tf_epoch(ds) -> tuple[np.ndarray, np.ndarray, list[int]]:
    xs, ys = zip(*[(x.numpy(), y.numpy()) for x, y in ds])
    return np.concatenate(xs), np.concatenate(ys), [len(x) for x in xs]


def np_epoch(batches) -> tuple[np.ndarray, np.ndarray, list[int]]:
    xs, ys = zip(*batches)
    return np.concatenate(xs), np.concatenate(ys), [len(x) for x in xs]


def opened(kind: str, root: Path | None, tmp: Path, **options):
    if kind == "imagenet-tfrecord":
        options = {"num_classes": 5, "cache_dir": str(tmp / "cache"), **options}
    return load_dataset(kind, None if root is None else str(root), **{"image_size": SIZE, **options})


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path | None]:
    base = tmp_path_factory.mktemp("sources")
    return {
        "imagenet-tfrecord": tfrecord_dir(base / "records", [4, 3, 5], [3, 2, 4])[0],
        "imagenet-folder": folder_tree(base / "tree"),
        "cifar10": cifar_dir(base / "cifar", 27, 9),
        "digits": None,
    }


@pytest.mark.parametrize("kind", ["imagenet-tfrecord", "imagenet-folder", "cifar10", "digits"])
def test_both_pipelines_give_the_same_batches_labels_and_validation_pixels(sources, tmp_path, kind):
    data = opened(kind, sources[kind], tmp_path)
    ours, theirs = np_epoch(data.numpy_validation(4)), tf_epoch(data.validation(4))
    assert ours[2] == theirs[2] and ours[0].shape == theirs[0].shape and ours[0].dtype == theirs[0].dtype
    assert np.array_equal(ours[1], theirs[1]), "the same labels in the same order"
    difference = np.abs(ours[0] - theirs[0])
    if kind in ("cifar10", "digits"):
        assert difference.max() < 1e-4
    else:
        levels = difference * LEVELS
        assert levels.mean() < 1.5 and levels.max() < 6, (levels.mean(), levels.max())
    for drop in (False, True):
        ours, theirs = np_epoch(data.numpy_train(5, seed=3, drop_remainder=drop)), tf_epoch(
            data.train(5, seed=3, drop_remainder=drop))
        assert ours[2] == theirs[2] and ours[0].shape == theirs[0].shape
    # every element once, and the same normalisation and augmentation: over several epochs (the
    # crops' and flips' own spread averages out) the pixel statistics agree. tf.data's sequence
    # also follows TensorFlow's global seed, which other tests in the process may have set.
    numpy_batches, tf_batches = data.numpy_train(5, seed=3), data.train(5, seed=3)
    ours = [np_epoch(numpy_batches) for _ in range(6)]
    theirs = [tf_epoch(tf_batches) for _ in range(6)]
    for (_, a, _), (_, b, _) in zip(ours, theirs):
        assert sorted(a.argmax(axis=1)) == sorted(b.argmax(axis=1)), "the same elements"
    ours_images, theirs_images = np.concatenate([e[0] for e in ours]), np.concatenate([e[0] for e in theirs])
    assert abs(float(ours_images.mean() - theirs_images.mean())) < 0.05
    assert abs(float(ours_images.std() - theirs_images.std())) < 0.05


def test_with_tensorflows_accurate_dct_the_validation_images_agree_within_the_resize_rounding(sources, tmp_path):
    data = opened("imagenet-folder", sources["imagenet-folder"], tmp_path, image_size=24)
    ours = np_epoch(data.numpy_validation(6))[0]
    paths = [str(p) for p in data._validation[0]]
    for path, image in zip(paths, ours):
        decoded = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        if path.endswith(".JPEG"):
            decoded = tf.io.decode_jpeg(tf.io.read_file(path), channels=3, dct_method="INTEGER_ACCURATE")
        top, left, height, width = _central_window(tf.shape(decoded)).numpy()
        crop = decoded[top:top + height, left:left + width]
        reference = normalise_image(tf.image.resize(crop, [24, 24], method="bilinear"), IMAGENET_MEAN,
                                    IMAGENET_STD).numpy()
        assert (np.abs(image - reference) * LEVELS).max() < 0.76, path


def test_the_normalisation_is_bit_identical():
    image = np.random.default_rng(0).integers(0, 256, size=(9, 7, 3), dtype=np.uint8)
    out = np.empty((9, 7, 3), np.float32)
    normalise_into(image, IMAGENET_MEAN, IMAGENET_STD, out)
    assert np.array_equal(out, normalise_image(tf.constant(image), IMAGENET_MEAN, IMAGENET_STD).numpy())


@settings(max_examples=150, deadline=None)
@given(height=st.integers(1, 3000), width=st.integers(1, 3000))
def test_the_central_window_is_tensorflows(height, width):
    assert central_window(height, width) == tuple(_central_window(tf.constant([height, width, 3])).numpy())


@settings(max_examples=300, deadline=None)
@given(height=st.integers(1, 2000), width=st.integers(1, 2000), seed=st.integers(0, 2**32 - 1))
def test_a_random_window_keeps_the_rules(height, width, seed):
    draws = np.random.default_rng(seed).random(WINDOW_DRAWS)
    top, left, h, w = random_window(height, width, draws)
    assert 0 <= top and 0 <= left and 1 <= h and 1 <= w and top + h <= height and left + w <= width
    if (h, w) != (height, width):
        assert h * w >= MIN_OBJECT_COVERED * height * width * (1 - 1e-6)
        # the width is round(height x aspect) for an aspect in the range
        assert CROP_ASPECT_RANGE[0] * h - 0.5 - 1e-3 <= w <= CROP_ASPECT_RANGE[1] * h + 0.5 + 1e-3


@pytest.mark.parametrize("shape", [(375, 500), (30, 40), (600, 90)])
def test_random_windows_are_distributed_as_tensorflows(shape):
    from scipy.stats import ks_2samp

    rng = np.random.default_rng(1)
    ours = np.array([random_window(*shape, rng.random(WINDOW_DRAWS)) for _ in range(1500)])
    window = _random_window  # TensorFlow's, the tf.data pipeline's own function
    theirs = np.array([window(tf.constant([s, s + 1], tf.int32))(tf.constant([*shape, 3])).numpy()
                       for s in range(1500)])
    for name, pick in (("area", lambda w: w[:, 2] * w[:, 3]), ("aspect", lambda w: w[:, 3] / w[:, 2]),
                       ("top", lambda w: w[:, 0]), ("left", lambda w: w[:, 1])):
        assert ks_2samp(pick(ours), pick(theirs)).pvalue > 1e-3, (shape, name)
    whole = lambda w: float(np.mean((w[:, 2] == shape[0]) & (w[:, 3] == shape[1])))  # noqa: E731
    assert abs(whole(ours) - whole(theirs)) < 0.03


@pytest.mark.parametrize("size", [8, 16, 32])
def test_the_translation_of_the_in_memory_kinds_is_tensorflows_pad_and_crop(size):
    rng = np.random.default_rng(size)
    image = rng.normal(size=(size, size, 3)).astype(np.float32)
    pad = translation_pad(size)
    assert pad == max(size // 8, 1), "1/8 of the side (worker/data/arrays.py)"
    seen = set()
    for _ in range(60):
        draws = rng.random(ARRAY_DRAWS)
        out = np.empty_like(image)
        translate_into(image, draws, True, out)
        oy, ox = (min(int(u * (2 * pad + 1)), 2 * pad) for u in draws[:2])
        seen.add((oy, ox))
        padded = tf.image.pad_to_bounding_box(image, pad, pad, size + 2 * pad, size + 2 * pad)
        expected = tf.image.crop_to_bounding_box(padded, oy, ox, size, size).numpy()
        if draws[2] < 0.5:
            expected = expected[:, ::-1]
        assert np.array_equal(out, expected)
    assert len(seen) > (2 * pad + 1) ** 2 // 2, "offsets over the whole range"


def test_interleaving_follows_tf_datas_order_when_files_end_at_different_times(tmp_path):
    files = []
    for n, count in enumerate([3, 1, 2, 0, 4]):
        files.append(str(tmp_path / f"f{n}"))
        write_records(files[-1], [f"{n}.{i}".encode() for i in range(count)])
    for cycle in (1, 2, 3, 16):
        ours = [payload for payload, _, _ in interleaved(files, cycle)]
        theirs = tf.data.Dataset.from_tensor_slices(files).interleave(
            tf.data.TFRecordDataset, cycle_length=min(cycle, len(files)), num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True)
        assert ours == list(theirs.as_numpy_iterator()), cycle


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.binary(max_size=300), max_size=6))
def test_our_tfrecord_files_are_byte_for_byte_tensorflows(tmp_path_factory, payloads):
    folder = tmp_path_factory.mktemp("rec")
    write_records(str(folder / "ours"), payloads)
    with tf.io.TFRecordWriter(str(folder / "theirs")) as writer:
        for payload in payloads:
            writer.write(payload)
    assert (folder / "ours").read_bytes() == (folder / "theirs").read_bytes()
    assert list(read_records(str(folder / "theirs"))) == payloads


values = st.one_of(st.builds(lambda v: tf.train.Feature(bytes_list=tf.train.BytesList(value=v)),
                             st.lists(st.binary(max_size=8), max_size=3)),
                   st.builds(lambda v: tf.train.Feature(int64_list=tf.train.Int64List(value=v)),
                             st.lists(st.integers(-2**63, 2**63 - 1), max_size=3)),
                   st.builds(lambda v: tf.train.Feature(float_list=tf.train.FloatList(value=v)),
                             st.lists(st.floats(width=32, allow_nan=False), max_size=3)))


@settings(max_examples=80, deadline=None)
@given(features=st.dictionaries(st.sampled_from(["image/encoded", "image/class/label", "image/format", "x"]),
                                values, max_size=4))
def test_examples_parse_as_tensorflow_parses_them(features):
    record = tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64)}
    try:
        parsed = tf.io.parse_single_example(record, spec)
        expected = (parsed["image/encoded"].numpy(), int(parsed["image/class/label"].numpy()))
    except tf.errors.InvalidArgumentError:
        expected = None
    if expected is None:
        with pytest.raises(DatasetError):
            image_and_label(record, "record")
    else:
        assert image_and_label(record, "record") == expected
    assert tf.train.Example.FromString(serialised(b"abc", 7)).features.feature["image/class/label"].int64_list.value == [7]


def test_a_label_outside_the_classes_gives_the_same_words_on_both_paths(tmp_path):
    path, _ = tfrecord_dir(tmp_path / "d", [3], [2], classes=3)
    write_records(str(path / "train-00001-of-00002"), [serialised(jpeg(photo(np.random.default_rng(0), 20, 20)), 9)])
    data = opened("imagenet-tfrecord", path, tmp_path, num_classes=3)
    words = "label >= num_classes after the offset"
    with pytest.raises(tf.errors.InvalidArgumentError, match=words):
        tf_epoch(data.train(2))
    with pytest.raises(DatasetError, match=words):
        np_epoch(data.numpy_train(2))
