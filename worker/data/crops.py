"""The crops of both pipelines: their constants, and the ImageNet kinds' windows in numpy.

Training takes an Inception-style random-sized crop; validation the central
square. The tf.data pipeline computes the windows with TensorFlow's ops
(`worker.data.images`); the pipeline without TensorFlow with the functions
here, which follow the same rules: those of TensorFlow's
``sample_distorted_bounding_box`` kernel with no bounding boxes, the whole
image standing for the object (``GenerateRandomCrop`` and the overlap check).
Its random numbers come from the caller as uniform floats in [0, 1), so a
window is a function of the image's size and those numbers.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover - typing only
    import numpy as np

# Validation keeps the central 87.5% of the shorter side (224 out of 256).
CENTRAL_FRACTION = 0.875
# Training crops: Inception-style random-sized crop.
CROP_AREA_RANGE = (0.08, 1.0)
CROP_ASPECT_RANGE = (3 / 4, 4 / 3)
# A crop must keep this share of the object, here the whole image: with an area range starting
# at 0.08 this is what really bounds the smallest crop (TensorFlow's rule, kept on both paths).
MIN_OBJECT_COVERED = 0.1
CROP_ATTEMPTS = 10  # tries before falling back to the whole image

# The in-memory kinds translate a training image by up to this share of its side (pad and crop back).
TRANSLATION_SHARE = 8  # a side's 1/8


def translation_pad(size: int) -> int:
    """The zero padding of each side before the in-memory kinds' random crop: 1/8 of `size`, at least 1."""
    return max(size // TRANSLATION_SHARE, 1)


# Uniform floats one training window uses: four per attempt (aspect ratio, height, top, left).
DRAWS_PER_ATTEMPT = 4
WINDOW_DRAWS = CROP_ATTEMPTS * DRAWS_PER_ATTEMPT

Window = tuple[int, int, int, int]  # (top, left, height, width)


def central_window(height: int, width: int) -> Window:
    """The central square of CENTRAL_FRACTION of the shorter side (the product truncated; exact in
    double precision for any image side, as TensorFlow's float32 product is below 2^21 pixels)."""
    side = max(int(min(height, width) * CENTRAL_FRACTION), 1)
    return (height - side) // 2, (width - side) // 2, side, side


def random_window(height: int, width: int, draws: Sequence[float] | np.ndarray) -> Window:
    """An Inception-style random-sized crop of an image ``height`` x ``width``.

    `draws`: at least WINDOW_DRAWS uniform floats in [0, 1), four per attempt. The
    first attempt whose crop satisfies the area, aspect and coverage rules wins;
    after CROP_ATTEMPTS failures the window is the whole image. The arithmetic is
    TensorFlow's in double precision where it has float32 (the windows differ only
    where a float32 rounding decides a tie); plain floats keep the interpreter lock
    for 4 us a window where numpy's float32 scalars took 18.
    """
    if height <= 0 or width <= 0:
        return 0, 0, height, width
    low, high = CROP_ASPECT_RANGE
    image_area = float(width * height)
    for attempt in range(CROP_ATTEMPTS):
        u = draws[attempt * DRAWS_PER_ATTEMPT:(attempt + 1) * DRAWS_PER_ATTEMPT]
        window = _crop(height, width, float(u[0]) * (high - low) + low, u[1:])
        if window is None:
            continue
        area = float(window[2] * window[3])
        if area >= 1 and area / image_area >= MIN_OBJECT_COVERED:
            return window
    return 0, 0, height, width


def _crop(height: int, width: int, aspect: float, u: Sequence[float] | np.ndarray) -> Window | None:
    """One attempt at a crop of `aspect` (width / height); `u`: 3 uniform floats (height, top, left)."""
    min_area = CROP_AREA_RANGE[0] * width * height
    max_area = CROP_AREA_RANGE[1] * width * height
    h = round(math.sqrt(min_area / aspect))
    max_h = round(math.sqrt(max_area / aspect))
    if round(max_h * aspect) > width:
        # the largest height whose rounded width still fits
        max_h = int((width + 0.5 - 1e-7) / aspect)
        if round(max_h * aspect) > width:
            max_h -= 1
    max_h = min(max_h, height)
    h = min(h, max_h)
    if h < max_h:
        h += _below(u[0], max_h - h + 1)
    w = round(h * aspect)
    area = w * h
    if area < min_area:  # rounding took it just under: one row more
        h += 1
        w = round(h * aspect)
        area = w * h
    if area > max_area:  # or just over: one row fewer
        h -= 1
        w = round(h * aspect)
        area = w * h
    if area < min_area or area > max_area or w > width or h > height or w <= 0 or h <= 0:
        return None
    top = _below(u[1], height - h) if h < height else 0
    left = _below(u[2], width - w) if w < width else 0
    return top, left, h, w


def _below(u: float, n: int) -> int:
    """A uniform integer in [0, n) from a uniform float in [0, 1)."""
    return min(int(u * n), n - 1)
