"""What a worker reports of its dataset (worker/data/fingerprint.py): split sizes
of the whole split, and a fingerprint that follows the files' names and sizes."""

from __future__ import annotations

import logging
import shutil

from aiperf.profiles import OFFICIAL, SMOKE
from tests.support.tf_records import make_folder_tree, make_tfrecord_dir
from worker.data import load_dataset
from worker.data.fingerprint import checked_dataset, dataset_info


def test_digits_reports_its_split_and_a_stable_fingerprint():
    a = dataset_info(load_dataset("digits", image_size=32))
    b = dataset_info(load_dataset("digits", image_size=32))
    assert (a["kind"], a["train_images"], a["validation_images"], a["num_classes"], a["image_size"]) == (
        "digits", 1437, 360, 10, 32)
    assert a["fingerprint"] == b["fingerprint"] and len(a["fingerprint"]) == 64
    assert dataset_info(load_dataset("digits", image_size=16))["fingerprint"] != a["fingerprint"]


def test_tfrecord_counts_every_shard_and_the_fingerprint_follows_the_shard_sizes(tmp_path):
    root, train, val = make_tfrecord_dir(tmp_path / "a")
    cache = tmp_path / "cache"
    whole = dataset_info(load_dataset("imagenet-tfrecord", str(root), image_size=32, num_classes=5,
                                      cache_dir=str(cache)))
    assert (whole["train_images"], whole["validation_images"]) == (len(train), len(val))
    # a worker reading one shard of the training split still reports the whole split
    shard = dataset_info(load_dataset("imagenet-tfrecord", str(root), image_size=32, num_classes=5,
                                      cache_dir=str(cache), shard=(0, 3)))
    assert shard["train_images"] == len(train) and shard["fingerprint"] == whole["fingerprint"]
    copy = shutil.copytree(root, tmp_path / "b")
    moved = dataset_info(load_dataset("imagenet-tfrecord", str(copy), image_size=32, num_classes=5,
                                      cache_dir=str(cache)))
    assert moved["fingerprint"] == whole["fingerprint"]  # names and sizes, not the directory
    (copy / "validation-00001-of-00002").unlink()
    fewer = dataset_info(load_dataset("imagenet-tfrecord", str(copy), image_size=32, num_classes=5,
                                      cache_dir=str(cache)))
    assert fewer["validation_images"] == 3 and fewer["fingerprint"] != whole["fingerprint"]


def test_folder_fingerprint_lists_the_images(tmp_path):
    root = make_folder_tree(tmp_path / "f")
    info = dataset_info(load_dataset("imagenet-folder", str(root), image_size=32))
    assert (info["train_images"], info["validation_images"], info["num_classes"]) == (9, 6, 3)
    (root / "train" / "a_cls" / "img_0.JPEG").rename(root / "train" / "a_cls" / "img_9.JPEG")
    assert dataset_info(load_dataset("imagenet-folder", str(root), image_size=32))["fingerprint"] != info["fingerprint"]


def test_the_worker_warns_when_an_official_run_gets_another_dataset(caplog):
    digits = load_dataset("digits", image_size=32)
    with caplog.at_level(logging.WARNING, logger="worker.data.fingerprint"):
        info = checked_dataset(SMOKE, digits)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING] and info["kind"] == "digits"
    with caplog.at_level(logging.WARNING, logger="worker.data.fingerprint"):
        checked_dataset(OFFICIAL, digits)
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert "1,437 training images (official: 1,281,167)" in warned and "will be unofficial" in warned
