"""ImageNet-style input pipelines: images per CPU-second of the worker's two pipelines and a plain one.

Synthetic ImageNet-like JPEGs (500x375, smooth content, about the size of an
ImageNet photo) are written once as TFRecord shards and as a class-per-folder
tree. For each source, the worker's tf.data training pipeline (worker/data: fused
decode-and-crop on an Inception-style random box, resize to 224, random flip,
normalise, one-hot label, parallel interleave over shards, autotuned prefetch
within a RAM budget, non-deterministic order as in a normal run) and a plain
tf.data pipeline doing the same work (the textbook version: stateful random
ops, no seeds, no label checks, normalisation by a per-channel broadcast,
which TensorFlow's CPU kernels make cost about a third of an image's CPU
time where the worker's pipeline uses constants of the image's shape; the
same shuffle buffer, epochs repeated whole), and the worker's pipeline without
TensorFlow (`Dataset.numpy_train`: OpenCV decode, the same crops, resize, flip
and normalisation, a thread pool per CPU, bounded prefetch) are timed in
alternation in this process, --rounds times each, on the same files, the order
of the three rotating from round to round. The figure is images per
CPU-second of the whole process (every thread counted), the median over
rounds; a ratio is the median of the rounds' ratios (within a round), printed
with their spread. Each measurement begins after --warmup batches and the next
one only once the process is idle again (a pipeline's threads outlive its
iterator for a while, and their CPU would be counted against the next one).

    RESULT data_ratio_vs_plain=<tf.data / plain, worst source> images_per_cpu_second=<tf.data, worst source>
           plain_images_per_cpu_second=<plain, same source> cores_per_h100=<at tf.data's rate>
           data_ratio_nontf_vs_tfdata=<without TensorFlow / tf.data, worst source>
           nontf_images_per_cpu_second=<without TensorFlow, same source> nontf_cores_per_h100=<at its rate>

Goals (docs/benchmarks.md): ratio vs plain >= 0.97 and >= 250 images per CPU-second;
the pipeline without TensorFlow at >= 0.9 of tf.data's images per CPU-second.
Also printed: the cores one H100 (about 3,000 images/s training
ResNet-50 in mixed precision) needs at the measured rate. Where TensorFlow is
not installed, only the pipeline without it is measured (its figures alone).

Usage: python -m benchmarks.data_bench [--rounds 5] [--batches 30] [--warmup 10] [--short]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

H100_IMAGES_PER_S = 3000  # ResNet-50, mixed precision, one H100: the rate a node must feed
IMAGE_SIZE = 224
BATCH = 64
CLASSES = 10
SHARDS = 4
SHUFFLE_BUFFER = 10_000  # the worker's default for TFRecords (DatasetSpec.shuffle_buffer)
WARMUP_BATCHES = 10  # untimed batches per measurement


def synthetic_jpegs(count: int, seed: int = 0) -> list[bytes]:
    """Smooth random photos-like JPEGs of 500x375 (quality 90)."""
    import cv2
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        coarse = rng.uniform(0, 255, size=(12, 16, 3)).astype(np.float32)
        image = cv2.resize(coarse, (500, 375), interpolation=cv2.INTER_CUBIC)
        image = image + rng.normal(0, 6, size=(375, 500, 3)).astype(np.float32)
        ok, encoded = cv2.imencode(".jpg", np.clip(image, 0, 255).astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        out.append(encoded.tobytes())
    return out


def write_sources(root: Path, images: list[bytes]) -> tuple[Path, Path]:
    """The images as TFRecord shards (train and validation) and as a folder tree; the two roots."""
    from worker.data.example import serialised
    from worker.data.records import write_records

    records, folder = root / "records", root / "folder"
    records.mkdir(parents=True)
    for split, subset in (("train", images), ("validation", images[:BATCH])):
        for s in range(SHARDS):
            write_records(str(records / f"{split}-{s:05d}-of-{SHARDS:05d}"),
                          (serialised(subset[i], i % CLASSES) for i in range(s, len(subset), SHARDS)))
    for split, subset in (("train", images), ("val", images[:BATCH])):
        for i, data in enumerate(subset):
            d = folder / split / f"c{i % CLASSES}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{i}.JPEG").write_bytes(data)
    return records, folder


def plain_pipeline(kind: str, root: Path) -> Any:
    """The textbook tf.data pipeline doing the same work as the worker's training pipeline."""
    import tensorflow as tf

    mean = tf.constant([0.485 * 255, 0.456 * 255, 0.406 * 255])
    std = tf.constant([0.229 * 255, 0.224 * 255, 0.225 * 255])

    def image(encoded: Any) -> Any:
        shape = tf.image.extract_jpeg_shape(encoded)
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape, tf.zeros([1, 0, 4]), min_object_covered=0.1, aspect_ratio_range=(3 / 4, 4 / 3),
            area_range=(0.08, 1.0), max_attempts=10, use_image_if_no_bounding_boxes=True)
        window = tf.stack([begin[0], begin[1], size[0], size[1]])
        x = tf.image.decode_and_crop_jpeg(encoded, window, channels=3)
        x = tf.image.resize(x, [IMAGE_SIZE, IMAGE_SIZE])
        x = tf.image.random_flip_left_right(x)
        return (x - mean) / std

    if kind == "tfrecord":
        files = tf.data.Dataset.list_files(str(root / "train-*"), shuffle=True)
        records = files.interleave(tf.data.TFRecordDataset, cycle_length=SHARDS,
                                   num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)

        def example(record: Any) -> Any:
            f = tf.io.parse_single_example(record, {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                                                    "image/class/label": tf.io.FixedLenFeature([], tf.int64)})
            return image(f["image/encoded"]), tf.one_hot(f["image/class/label"], CLASSES)

        elements = records.shuffle(SHUFFLE_BUFFER)
    else:
        paths = sorted(str(p) for p in (root / "train").glob("*/*.JPEG"))
        labels = [int(Path(p).parent.name[1:]) for p in paths]

        def example(path: Any, label: Any) -> Any:  # type: ignore[misc]
            return image(tf.io.read_file(path)), tf.one_hot(label, CLASSES)

        elements = tf.data.Dataset.from_tensor_slices((paths, labels)).shuffle(len(paths))
    batches = elements.map(example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    # epochs repeated whole, as the worker's iterator over a round's epochs does
    return batches.batch(BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE).repeat()


def _dataset(kind: str, root: Path) -> Any:
    """The source opened as a normal (non-deterministic) run opens it."""
    from worker.data import load_dataset

    return load_dataset("imagenet-tfrecord" if kind == "tfrecord" else "imagenet-folder", str(root),
                        image_size=IMAGE_SIZE, num_classes=CLASSES, deterministic=False,
                        cache_dir=str(root.parent / "cache"))


def our_pipeline(kind: str, root: Path) -> Any:
    """The worker's tf.data training pipeline."""
    return _dataset(kind, root).train(BATCH, seed=1, drop_remainder=True).repeat()


def nontf_pipeline(kind: str, root: Path) -> Iterator[Any]:
    """The worker's training pipeline without TensorFlow, epochs repeated whole."""
    return _dataset(kind, root).numpy_train(BATCH, seed=1, drop_remainder=True).repeat()


PIPELINES: dict[str, Callable[[str, Path], Any]] = {
    "tf.data": our_pipeline, "plain": plain_pipeline, "nontf": nontf_pipeline}


def images_per_cpu_second(make: Callable[[], Any], batches: int, warmup: int = WARMUP_BATCHES) -> tuple[float, float]:
    """(images per CPU-second, images per wall second) over `batches` batches after `warmup`
    (autotuning settles, the buffers fill), then waits for the pipeline's threads to stop."""
    iterator = iter(make())
    for _ in range(warmup):
        next(iterator)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(batches):
        next(iterator)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    del iterator
    _quiesce()
    return batches * BATCH / cpu, batches * BATCH / wall


def _quiesce(idle_share: float = 0.05, poll_s: float = 0.3, limit_s: float = 20.0) -> None:
    """Wait until this process is idle: a pipeline's threads outlive its iterator for a while
    (the batches in flight), and their CPU would be counted against the next measurement."""
    gc.collect()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        cpu = time.process_time()
        time.sleep(poll_s)
        if time.process_time() - cpu < idle_share * poll_s:
            return
    print(f"data_bench: the process did not go idle within {limit_s:.0f} s; measuring on", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rotations of the pipelines per source")
    parser.add_argument("--batches", type=int, default=30, help=f"timed batches of {BATCH} per measurement")
    parser.add_argument("--images", type=int, default=1024, help="synthetic JPEGs written")
    parser.add_argument("--warmup", type=int, default=WARMUP_BATCHES, help="untimed batches per measurement")
    parser.add_argument("--short", action="store_true", help="3 rounds of 20 batches on 512 images")
    args = parser.parse_args(argv)
    if args.short:
        args.rounds, args.batches, args.images = 3, 20, 512
    if min(args.rounds, args.batches) < 1 or args.warmup < 0 or args.images < BATCH:
        parser.error(f"--rounds and --batches must be >= 1, --warmup >= 0, --images >= {BATCH}")
    with_tf = importlib.util.find_spec("tensorflow") is not None
    names = list(PIPELINES) if with_tf else ["nontf"]
    if with_tf:
        import tensorflow as tf

        version = f"TensorFlow {tf.__version__}"
    else:
        version = "no TensorFlow: the pipeline without it alone"
    print(f"data_bench: {os.cpu_count()} CPUs visible, {version}, batch {BATCH}, "
          f"{args.rounds} rounds x {args.batches} batches", flush=True)
    figures: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="aiperf-data-bench-") as tmp:
        images = synthetic_jpegs(args.images)
        print(f"{len(images)} JPEGs of 500x375, mean {statistics.mean(map(len, images)) / 1024:.0f} KiB", flush=True)
        records, folder = write_sources(Path(tmp), images)
        for kind, root in (("tfrecord", records), ("folder", folder)):
            figures[kind] = _measure_source(kind, root, names, args)
    _report(figures, with_tf)


def _measure_source(kind: str, root: Path, names: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Each pipeline's median images per CPU-second and wall second, and the ratios' medians and spreads."""
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for r in range(args.rounds):
        # the order rotates: no pipeline always pays for going first (a cold file cache, the
        # previous one's threads winding down)
        for name in names[r % len(names):] + names[:r % len(names)]:
            runs[name].append(images_per_cpu_second(lambda name=name: PIPELINES[name](kind, root),
                                                     args.batches, args.warmup))
    cpu = {n: statistics.median(x[0] for x in v) for n, v in runs.items()}
    wall = {n: statistics.median(x[1] for x in v) for n, v in runs.items()}
    out: dict[str, Any] = {"cpu": cpu, "ratios": {}}
    for figure, over, under in (("vs_plain", "tf.data", "plain"), ("nontf", "nontf", "tf.data")):
        if over in runs and under in runs:
            pairs = sorted(o[0] / u[0] for o, u in zip(runs[over], runs[under]))
            out["ratios"][figure] = (statistics.median(pairs), pairs[0], pairs[-1])
    parts = [f"{n} {cpu[n]:6.1f} images/CPU-s ({wall[n]:6.1f}/s wall)" for n in names]
    labels = {"vs_plain": "tf.data/plain", "nontf": "nontf/tf.data"}
    parts += [f"{labels[k]} {m:.3f}x (rounds {lo:.3f}-{hi:.3f}x)" for k, (m, lo, hi) in out["ratios"].items()]
    slowest = min(cpu.values())
    print(f"{kind:>8}: " + "; ".join(parts) + f"; one H100 ({H100_IMAGES_PER_S} images/s) needs "
          f"{H100_IMAGES_PER_S / slowest:.1f} fully busy cores at the slowest rate", flush=True)
    return out


def _report(figures: dict[str, dict[str, Any]], with_tf: bool) -> None:
    """The RESULT line: each ratio at its worse source, with that source's figures."""
    fields = []
    if with_tf:
        kind = min(figures, key=lambda k: figures[k]["ratios"]["vs_plain"][0])
        cpu = figures[kind]["cpu"]
        fields += [f"data_ratio_vs_plain={figures[kind]['ratios']['vs_plain'][0]:.3f}",
                   f"images_per_cpu_second={cpu['tf.data']:.1f}", f"plain_images_per_cpu_second={cpu['plain']:.1f}",
                   f"cores_per_h100={H100_IMAGES_PER_S / cpu['tf.data']:.1f}"]
        kind = min(figures, key=lambda k: figures[k]["ratios"]["nontf"][0])
        fields.append(f"data_ratio_nontf_vs_tfdata={figures[kind]['ratios']['nontf'][0]:.3f}")
    else:
        kind = min(figures, key=lambda k: figures[k]["cpu"]["nontf"])
    nontf = figures[kind]["cpu"]["nontf"]
    fields += [f"nontf_images_per_cpu_second={nontf:.1f}", f"nontf_cores_per_h100={H100_IMAGES_PER_S / nontf:.1f}"]
    print("RESULT " + " ".join(fields))


if __name__ == "__main__":
    main()
