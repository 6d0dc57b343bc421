"""Input pipelines (worker/data/) on small real files generated here."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests.support.tf_records import (
    STEP,
    class_image,
    example,
    jpeg,
    make_folder_tree,
    make_tfrecord_dir,
    png,
    write_shards,
)

tf = pytest.importorskip("tensorflow")

from worker.data import (  # noqa: E402
    CIFAR10_MEAN,
    CIFAR10_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    Dataset,
    DatasetError,
    DatasetSpec,
    digits_split,
    load_dataset,
    validate,
)

SIZE = 16


def collect(ds: tf.data.Dataset) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = zip(*[(x.numpy(), y.numpy()) for x, y in ds])
    return np.concatenate(xs), np.concatenate(ys)


def pixel_class(images: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """Undo the normalisation and read the class back from the brightness."""
    raw = images * np.asarray(std, np.float32) + np.asarray(mean, np.float32)
    return np.rint(raw.mean(axis=(1, 2, 3)) / STEP).astype(int) - 1


@pytest.fixture(scope="module")
def tfrecord_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int], list[int]]:
    return make_tfrecord_dir(tmp_path_factory.mktemp("imagenet-tfrecord"))


def open_tfrecord(path: Path, cache: Path, **options: object) -> Dataset:
    return load_dataset("imagenet-tfrecord", str(path), image_size=SIZE, num_classes=5, cache_dir=str(cache), **options)


# --------------------------------------------------------------------------- #
# imagenet-tfrecord


def test_tfrecord_validation_batches_have_shapes_and_label_positions(tfrecord_dir, tmp_path):
    path, _, val_labels = tfrecord_dir
    data = open_tfrecord(path, tmp_path)
    assert data.label_offset == 1  # smallest stored label is 1 -> 1-based
    assert (data.num_classes, data.image_size) == (5, SIZE)
    images, labels = collect(data.validation(4))
    assert images.shape == (6, SIZE, SIZE, 3) and images.dtype == np.float32
    assert labels.shape == (6, 5) and labels.dtype == np.float32
    assert np.all(labels.sum(axis=1) == 1.0)
    # Stored label L lands in one-hot position L - 1, paired with its own image.
    assert np.array_equal(labels.argmax(axis=1), pixel_class(images, IMAGENET_MEAN, IMAGENET_STD))
    assert sorted(labels.argmax(axis=1).tolist()) == sorted(val_labels)
    # Normalised: a mid-grey class is near zero, not on the 0..255 scale.
    assert np.abs(images).max() < 5


def test_tfrecord_train_epoch_covers_every_record_with_right_labels(tfrecord_dir, tmp_path):
    path, train_labels, _ = tfrecord_dir
    data = open_tfrecord(path, tmp_path, augment=False)
    assert data.train_size == 12 and data.validation_size == 6
    assert data.train_steps(5) == 3 and data.train_steps(5, drop_remainder=True) == 2
    images, labels = collect(data.train(5))
    assert images.shape == (12, SIZE, SIZE, 3)
    assert sorted(labels.argmax(axis=1).tolist()) == sorted(train_labels)
    assert np.array_equal(labels.argmax(axis=1), pixel_class(images, IMAGENET_MEAN, IMAGENET_STD))
    assert [x.shape[0] for x, _ in data.train(5, drop_remainder=True)] == [5, 5]


def test_tfrecord_zero_based_labels_are_detected(tmp_path):
    path, _, val_labels = make_tfrecord_dir(tmp_path / "zero", first_label=0, train_shards=1)
    data = open_tfrecord(path, tmp_path / "cache")
    assert data.label_offset == 0
    images, labels = collect(data.validation(6))
    assert np.array_equal(labels.argmax(axis=1), pixel_class(images, IMAGENET_MEAN, IMAGENET_STD))
    assert sorted(labels.argmax(axis=1).tolist()) == sorted(val_labels)


def test_tfrecord_labels_outside_classes_are_an_error(tfrecord_dir, tmp_path):
    path, _, _ = tfrecord_dir
    # 1-based labels 1..5 read as 0-based do not fit 5 classes.
    with pytest.raises(DatasetError, match="outside 0..4") as err:
        open_tfrecord(path, tmp_path, label_offset=0)
    assert str(path) in str(err.value)
    with pytest.raises(DatasetError, match="outside 0..3"):
        load_dataset("imagenet-tfrecord", str(path), image_size=SIZE, num_classes=4, cache_dir=str(tmp_path))


def test_tfrecord_counts_are_cached_outside_the_dataset(tfrecord_dir, tmp_path):
    path, _, _ = tfrecord_dir
    before = sorted(os.listdir(path))
    cache = tmp_path / "cache"
    assert open_tfrecord(path, cache).train_size == 12
    assert sorted(os.listdir(path)) == before
    index = cache / "tfrecord-index.json"
    assert index.is_file()
    # A second open reads the counts from the cache (proved by a doctored entry).
    text = index.read_text()
    import json

    entries = json.loads(text)
    first = str(path / "train-00000-of-00003")
    entries[first]["records"] = 100
    index.write_text(json.dumps(entries))
    assert open_tfrecord(path, cache).train_size == 108
    # A changed shard is counted again.
    os.utime(first, ns=(0, 0))
    assert open_tfrecord(path, cache).train_size == 12


def test_tfrecord_training_is_deterministic_per_seed(tfrecord_dir, tmp_path):
    path, _, _ = tfrecord_dir
    first = collect(open_tfrecord(path, tmp_path).train(4, seed=7))
    again = collect(open_tfrecord(path, tmp_path).train(4, seed=7))
    other = collect(open_tfrecord(path, tmp_path).train(4, seed=8))
    assert np.array_equal(first[0], again[0]) and np.array_equal(first[1], again[1])
    assert not np.array_equal(first[0], other[0])
    # Each epoch reshuffles and re-augments; the epoch sequence is itself reproducible.
    ds = open_tfrecord(path, tmp_path).train(4, seed=7)
    epoch1, epoch2 = collect(ds), collect(ds)
    assert np.array_equal(epoch1[0], first[0])
    assert not np.array_equal(epoch1[0], epoch2[0])
    ds_again = open_tfrecord(path, tmp_path).train(4, seed=7)
    collect(ds_again)
    assert np.array_equal(collect(ds_again)[0], epoch2[0])


def test_tfrecord_validation_is_deterministic(tfrecord_dir, tmp_path):
    path, _, _ = tfrecord_dir
    ds = open_tfrecord(path, tmp_path).validation(4)
    a, b = collect(ds), collect(ds)
    c = collect(open_tfrecord(path, tmp_path).validation(3))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[0], c[0]) and np.array_equal(a[1], c[1])


def single_image_tfrecord(root: Path, image: np.ndarray) -> Path:
    root.mkdir()
    record = example(jpeg(image), 1)
    write_shards(root, "train", [[record]])
    write_shards(root, "validation", [[record]])
    return root


def test_tfrecord_augmentation_changes_images_but_not_shapes(tmp_path):
    image = np.random.default_rng(1).integers(0, 256, size=(40, 48, 3)).astype(np.uint8)
    path = single_image_tfrecord(tmp_path / "one", image)
    cache = tmp_path / "cache"
    plain = load_dataset("imagenet-tfrecord", str(path), image_size=SIZE, num_classes=2, cache_dir=str(cache), augment=False)
    augmented = load_dataset("imagenet-tfrecord", str(path), image_size=SIZE, num_classes=2, cache_dir=str(cache))
    reference = collect(plain.validation(1))[0]
    # Without augmentation training sees exactly the validation view.
    assert np.array_equal(collect(plain.train(1))[0], reference)
    ds = augmented.train(1, seed=3)
    views = [collect(ds)[0] for _ in range(4)]
    for view in views:
        assert view.shape == (1, SIZE, SIZE, 3) and view.dtype == np.float32
        assert not np.allclose(view, reference)
    assert len({v.tobytes() for v in views}) == 4  # a new crop/flip every epoch


def test_tfrecord_training_crops_and_flips_horizontally(tmp_path):
    # A left-to-right ramp: any crop keeps it rising, only a flip makes it fall.
    ramp = np.broadcast_to(np.linspace(0, 255, 64)[None, :, None], (48, 64, 3)).astype(np.uint8)
    path = single_image_tfrecord(tmp_path / "ramp", ramp)
    data = load_dataset("imagenet-tfrecord", str(path), image_size=SIZE, num_classes=2, cache_dir=str(tmp_path))
    ds = data.train(1, seed=11)
    slopes, widths = [], []
    for _ in range(10):
        view = collect(ds)[0][0, :, :, 0]
        slopes.append(np.sign(view[:, -1].mean() - view[:, 0].mean()))
        widths.append(view[:, -1].mean() - view[:, 0].mean())
    assert set(slopes) == {-1.0, 1.0}
    assert len({round(abs(w), 3) for w in widths}) > 1  # crops of different sizes


def test_tfrecord_sharding_by_files_and_by_records(tfrecord_dir, tmp_path):
    path, train_labels, _ = tfrecord_dir
    for count in (3, 5):  # 3 files: whole files per worker; 5 > 3 files: every 5th record
        sizes, labels = [], []
        for index in range(count):
            data = open_tfrecord(path, tmp_path, shard=(index, count), augment=False)
            shard_labels = collect(data.train(4))[1].argmax(axis=1).tolist()
            assert len(shard_labels) == data.train_size
            assert data.validation_size == 6  # validation is never sharded
            sizes.append(data.train_size)
            labels += shard_labels
        assert sum(sizes) == 12
        assert sorted(labels) == sorted(train_labels)
    assert sizes == [3, 3, 2, 2, 2]


def test_png_inside_a_tfrecord_is_decoded(tmp_path):
    rng = np.random.default_rng(2)
    root = tmp_path / "png"
    root.mkdir()
    write_shards(root, "train", [[example(png(class_image(rng, c)), c + 1) for c in (0, 1)]])
    write_shards(root, "validation", [[example(png(class_image(rng, c)), c + 1) for c in (1, 0)]])
    data = load_dataset("imagenet-tfrecord", str(root), image_size=SIZE, num_classes=2, cache_dir=str(tmp_path))
    images, labels = collect(data.validation(2))
    assert np.array_equal(labels.argmax(axis=1), [1, 0])
    assert np.array_equal(pixel_class(images, IMAGENET_MEAN, IMAGENET_STD), [1, 0])
    assert collect(data.train(2))[0].shape == (2, SIZE, SIZE, 3)


# --------------------------------------------------------------------------- #
# imagenet-folder


def test_folder_tree_labels_follow_sorted_class_names(tmp_path):
    root = make_folder_tree(tmp_path / "tree", val_name="validation")
    data = load_dataset("imagenet-folder", str(root), image_size=SIZE)
    assert data.classes == ["a_cls", "b_cls", "c_cls"]
    assert (data.num_classes, data.train_size, data.validation_size) == (3, 9, 6)
    images, labels = collect(data.validation(4))
    assert images.shape == (6, SIZE, SIZE, 3) and labels.shape == (6, 3)
    assert labels.argmax(axis=1).tolist() == [0, 0, 1, 1, 2, 2]
    assert np.array_equal(pixel_class(images, IMAGENET_MEAN, IMAGENET_STD), [0, 0, 1, 1, 2, 2])
    assert np.array_equal(collect(data.validation(6))[0], images)

    train_images, train_labels = collect(data.train(4, seed=1))
    assert train_images.shape == (9, SIZE, SIZE, 3)
    assert sorted(train_labels.argmax(axis=1).tolist()) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    again = collect(load_dataset("imagenet-folder", str(root), image_size=SIZE).train(4, seed=1))
    assert np.array_equal(train_images, again[0]) and np.array_equal(train_labels, again[1])


def test_folder_num_classes_may_exceed_the_folders(tmp_path):
    root = make_folder_tree(tmp_path / "tree")
    data = load_dataset("imagenet-folder", str(root), image_size=SIZE, num_classes=10, augment=False)
    assert collect(data.validation(6))[1].shape == (6, 10)
    with pytest.raises(DatasetError, match="3 class folders"):
        load_dataset("imagenet-folder", str(root), image_size=SIZE, num_classes=2)


def test_folder_sharding_splits_the_training_files(tmp_path):
    root = make_folder_tree(tmp_path / "tree")
    sizes = [load_dataset("imagenet-folder", str(root), image_size=SIZE, shard=(i, 2)).train_size for i in range(2)]
    assert sizes == [5, 4]


# --------------------------------------------------------------------------- #
# cifar10


def cifar_records(labels: list[int]) -> bytes:
    """Records whose planes are recognisable: R = 10 * label, G = 100, B = 200,
    with one marker pixel (row 0, column 1) of the R plane at 255."""
    out = bytearray()
    for label in labels:
        planes = np.empty((3, 32, 32), np.uint8)
        planes[0], planes[1], planes[2] = 10 * label, 100, 200
        planes[0, 0, 1] = 255
        out += bytes([label]) + planes.tobytes()
    return bytes(out)


def make_cifar_dir(root: Path) -> Path:
    directory = root / "cifar-10-batches-bin"
    directory.mkdir(parents=True)
    for i in range(1, 6):
        (directory / f"data_batch_{i}.bin").write_bytes(cifar_records([i, (i + 5) % 10]))
    (directory / "test_batch.bin").write_bytes(cifar_records([3, 7, 0]))
    return root


def test_cifar_binary_layout_and_labels(tmp_path):
    root = make_cifar_dir(tmp_path)
    data = load_dataset("cifar10", str(root))  # the extraction root is accepted too
    assert (data.num_classes, data.image_size, data.train_size, data.validation_size) == (10, 32, 10, 3)
    images, labels = collect(data.validation(2))
    assert images.shape == (3, 32, 32, 3) and images.dtype == np.float32
    assert labels.argmax(axis=1).tolist() == [3, 7, 0]
    raw = images * np.asarray(CIFAR10_STD, np.float32) + np.asarray(CIFAR10_MEAN, np.float32)
    # Channel-major on disk, channel-last here.
    assert np.allclose(raw[:, 5, 5, 0], [30, 70, 0], atol=1e-3)
    assert np.allclose(raw[:, 5, 5, 1], 100, atol=1e-3) and np.allclose(raw[:, 5, 5, 2], 200, atol=1e-3)
    assert np.allclose(raw[:, 0, 1, 0], 255, atol=1e-3) and np.allclose(raw[:, 1, 0, 0], [30, 70, 0], atol=1e-3)

    train_images, train_labels = collect(data.train(4, seed=0))
    assert train_images.shape == (10, 32, 32, 3)
    assert sorted(train_labels.argmax(axis=1).tolist()) == list(range(10))


def test_cifar_augmentation_and_resize(tmp_path):
    root = make_cifar_dir(tmp_path)
    plain = load_dataset("cifar10", str(root / "cifar-10-batches-bin"), augment=False)
    augmented = load_dataset("cifar10", str(root / "cifar-10-batches-bin"))
    a_images, a_labels = collect(plain.train(10, seed=5))
    b_images, b_labels = collect(augmented.train(10, seed=5))
    assert np.array_equal(a_labels, b_labels)  # same shuffle, only the pixels move
    assert b_images.shape == a_images.shape and not np.allclose(a_images, b_images)
    bigger = load_dataset("cifar10", str(root), image_size=48)
    assert collect(bigger.train(4))[0].shape == (10, 48, 48, 3)
    assert collect(bigger.validation(4))[0].shape == (3, 48, 48, 3)


# --------------------------------------------------------------------------- #
# digits


def test_digits_split_classes_and_real_images():
    from sklearn.datasets import load_digits

    data = load_dataset("digits", image_size=32)
    assert (data.num_classes, data.train_size, data.validation_size) == (10, 1437, 360)
    images, labels = collect(data.validation(128))
    assert images.shape == (360, 32, 32, 3) and labels.shape == (360, 10)
    assert np.bincount(labels.argmax(axis=1), minlength=10).tolist() == [36] * 10
    train_images, train_labels = collect(data.train(256, seed=0))
    assert train_images.shape == (1437, 32, 32, 3)
    assert set(train_labels.argmax(axis=1).tolist()) == set(range(10))
    # Real images: varied within an image and between images; grey copied to 3 channels.
    assert images.std(axis=(1, 2, 3)).min() > 0.3
    assert len({img.tobytes() for img in images}) == 360
    assert np.array_equal(images[..., 0], images[..., 2])
    # At the native 8x8 size the pixels are sklearn's own, in split order.
    train_idx, val_idx = digits_split()
    assert len(set(train_idx) & set(val_idx)) == 0 and len(train_idx) + len(val_idx) == 1797
    native = load_dataset("digits", image_size=8)
    small, small_labels = collect(native.validation(360))
    digits = load_digits()
    assert np.array_equal(small_labels.argmax(axis=1), digits.target[val_idx])
    correlation = np.corrcoef(small[..., 0].reshape(-1), digits.images[val_idx].reshape(-1))[0, 1]
    assert correlation > 0.999
    assert np.array_equal(collect(data.validation(100))[0], images)  # deterministic


# --------------------------------------------------------------------------- #
# spec and errors


def test_spec_round_trips_through_a_dict():
    spec = DatasetSpec(kind="cifar10", path="/data/cifar", image_size=32, shard=(1, 4))
    assert DatasetSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(DatasetError, match="unknown dataset settings: colour"):
        DatasetSpec.from_dict({"kind": "digits", "colour": "red"})
    assert isinstance(load_dataset(DatasetSpec(kind="digits", image_size=8)), Dataset)


def write_corrupt(tmp: Path, case: str) -> tuple[Path, Path, str]:
    """Build one broken dataset; return (path to open, path the message must name, kind)."""
    rng = np.random.default_rng(4)
    good = example(jpeg(class_image(rng, 0)), 1)
    root = tmp / case
    root.mkdir()
    if case == "tfrecord-no-train":
        write_shards(root, "validation", [[good]])
        return root, root, "imagenet-tfrecord"
    if case == "tfrecord-no-validation":
        write_shards(root, "train", [[good]])
        return root, root, "imagenet-tfrecord"
    if case == "tfrecord-garbage":
        write_shards(root, "validation", [[good]])
        (root / "train-00000-of-00001").write_bytes(b"this is not a TFRecord file at all")
        return root, root / "train-00000-of-00001", "imagenet-tfrecord"
    if case == "tfrecord-empty-shard":
        write_shards(root, "train", [[good]])
        (root / "validation-00000-of-00001").write_bytes(b"")
        return root, root / "validation-00000-of-00001", "imagenet-tfrecord"
    if case == "tfrecord-no-image-feature":
        write_shards(root, "train", [[example(None, 1), good]])
        write_shards(root, "validation", [[good]])
        return root, root / "train-00000-of-00001", "imagenet-tfrecord"
    if case == "tfrecord-undecodable":
        write_shards(root, "train", [[good]])
        write_shards(root, "validation", [[example(b"\xff\xd8 definitely not a jpeg", 1)]])
        return root, root / "validation-00000-of-00001", "imagenet-tfrecord"
    if case == "tfrecord-truncated-validation":
        write_shards(root, "train", [[good]])
        write_shards(root, "validation", [[good, good]])
        shard = root / "validation-00000-of-00001"
        shard.write_bytes(shard.read_bytes()[:-20])
        return root, shard, "imagenet-tfrecord"
    if case == "folder-no-class-folders":
        (root / "train").mkdir()
        (root / "val").mkdir()
        (root / "train" / "x.JPEG").write_bytes(jpeg(class_image(rng, 0)))
        return root, root / "train", "imagenet-folder"
    if case == "folder-flat-val":
        make_folder_tree(root)
        for file in (root / "val" / "a_cls").iterdir():
            file.rename(root / "val" / file.name)
        for name in ("a_cls", "b_cls", "c_cls"):
            for file in (root / "val" / name).iterdir():
                file.unlink()
            (root / "val" / name).rmdir()
        return root, root / "val", "imagenet-folder"
    if case == "folder-no-val":
        make_folder_tree(root)
        os.rename(root / "val", root / "test")
        return root, root, "imagenet-folder"
    if case == "folder-undecodable":
        make_folder_tree(root)
        bad = root / "train" / "a_cls" / "img_0.JPEG"
        bad.write_bytes(b"\xff\xd8\xff garbage")
        return root, bad, "imagenet-folder"
    if case == "cifar-wrong-size":
        make_cifar_dir(root)
        bad = root / "cifar-10-batches-bin" / "data_batch_3.bin"
        bad.write_bytes(bad.read_bytes()[:-7])
        return root, bad, "cifar10"
    if case == "cifar-missing-file":
        make_cifar_dir(root)
        (root / "cifar-10-batches-bin" / "test_batch.bin").unlink()
        return root / "cifar-10-batches-bin", root / "cifar-10-batches-bin", "cifar10"
    if case == "cifar-bad-label":
        make_cifar_dir(root)
        bad = root / "cifar-10-batches-bin" / "data_batch_2.bin"
        content = bytearray(bad.read_bytes())
        content[0] = 12
        bad.write_bytes(bytes(content))
        return root, bad, "cifar10"
    if case == "missing-directory":
        return root / "nowhere", root / "nowhere", "imagenet-tfrecord"
    if case == "file-not-directory":
        (root / "file").write_text("x")
        return root / "file", root / "file", "cifar10"
    raise AssertionError(case)


ERROR_CASES = {
    "tfrecord-no-train": "no train-\\* shards found",
    "tfrecord-no-validation": "no validation-\\* shards found",
    "tfrecord-garbage": "not a valid TFRecord",
    "tfrecord-empty-shard": "not a valid TFRecord file \\(empty\\)",
    "tfrecord-no-image-feature": "first record lacks image/encoded",
    "tfrecord-undecodable": "fails to decode",
    "tfrecord-truncated-validation": "corrupt TFRecord",
    "folder-no-class-folders": "no class folders",
    "folder-flat-val": "no class folders",
    "folder-no-val": "no val/ or validation/",
    "folder-undecodable": "fails to decode",
    "cifar-wrong-size": "not a positive multiple of 3073",
    "cifar-missing-file": "missing test_batch.bin",
    "cifar-bad-label": "label 12",
    "missing-directory": "no such directory",
    "file-not-directory": "not a directory",
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_broken_datasets_give_one_clear_error(tmp_path, case):
    path, named, kind = write_corrupt(tmp_path, case)
    with pytest.raises(DatasetError, match=ERROR_CASES[case]) as err:
        validate(kind, str(path), image_size=SIZE, num_classes=5, cache_dir=str(tmp_path / "cache"))
    assert str(named) in str(err.value)
    assert isinstance(err.value, ValueError)
    assert "\n" not in str(err.value)


def test_truncated_training_shard_is_reported_when_counting(tmp_path):
    root, _, _ = make_tfrecord_dir(tmp_path / "data", train_shards=1)
    shard = root / "train-00000-of-00001"
    shard.write_bytes(shard.read_bytes()[:-30])
    data = open_tfrecord(root, tmp_path / "cache")
    with pytest.raises(DatasetError, match="truncated") as err:
        data.train_size
    assert str(shard) in str(err.value)


@pytest.mark.parametrize(
    ("kind", "path", "options", "message"),
    [
        ("mnist", None, {}, "unknown dataset kind 'mnist'"),
        ("digits", "/some/where", {}, "takes no path"),
        ("cifar10", None, {}, "needs a path"),
        ("digits", None, {"image_size": 4}, "image size"),
        ("digits", None, {"shard": (2, 2)}, "shard"),
        ("digits", None, {"num_classes": 7}, "10 classes"),
        ("cifar10", "/x", {"label_offset": 1}, "label_offset applies only"),
    ],
)
def test_bad_settings_are_rejected(kind, path, options, message):
    with pytest.raises(DatasetError, match=message):
        load_dataset(kind, path, **options)
