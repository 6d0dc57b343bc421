"""A synthetic ImageNet-shaped dataset in the worker's ``imagenet-folder`` layout.

``root/train/<class>/*.JPEG`` and ``root/val/<class>/*.JPEG``: smooth colour
fields with a class-dependent tint and some noise, encoded as JPEG with OpenCV,
written by every CPU of the machine. They exercise the real input path (file
reads, JPEG decode, random crops, resize) at ImageNet's shape; a model cannot
learn much from them, which no figure of benchmarks/gpu_e2e.py needs. An
existing tree with the same parameters (root/synthetic.json) is reused.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np


def _write_class(job: tuple[str, int, int, int, int, int]) -> int:
    """One class folder of one split; the bytes written."""
    folder, label, count, side, classes, seed = job
    import cv2

    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    tint = np.array([(label * 37) % 256, (label * 91) % 256, (label * 53) % 256], dtype=np.float32)
    ramp = np.linspace(0.0, 1.0, side, dtype=np.float32)
    written = 0
    for i in range(count):
        field = np.outer(ramp, ramp[::-1])[..., None] * rng.uniform(0, 255, 3).astype(np.float32)
        image = 0.5 * field + 0.5 * tint + rng.normal(0, 6, (side, side, 3)).astype(np.float32)
        ok, data = cv2.imencode(".JPEG", np.clip(image, 0, 255).astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 90])
        if not ok:
            raise RuntimeError(f"OpenCV could not encode {folder}/{i}")
        Path(folder, f"img_{i:05d}.JPEG").write_bytes(data.tobytes())
        written += len(data)
    return written


def write_dataset(root: Path, classes: int, train_images: int, val_images: int, side: int) -> dict[str, Any]:
    """Write (or reuse) the tree; what it holds and how long writing took."""
    params = {"classes": classes, "train_images": train_images, "val_images": val_images, "side": side}
    marker = root / "synthetic.json"
    if marker.exists() and json.loads(marker.read_text()) == params:
        return {**params, "reused": True}
    start = time.monotonic()
    jobs = []
    for split, total, salt in (("train", train_images, 0), ("val", val_images, 1)):
        for c in range(classes):
            count = total // classes + (1 if c < total % classes else 0)
            if count or split == "train":
                jobs.append((str(root / split / f"n{c:08d}"), c, max(count, 1 if split == "train" else 0),
                             side, classes, c * 2 + salt))
    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        written = sum(pool.map(_write_class, jobs, chunksize=max(1, len(jobs) // (4 * (os.cpu_count() or 1)))))
    marker.write_text(json.dumps(params))
    return {**params, "bytes": written, "seconds": round(time.monotonic() - start, 1), "reused": False}
