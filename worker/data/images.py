"""Image operations of the tf.data pipelines: decode, crop, resize, flip and normalise (graph functions).

The ImageNet kinds (TFRecord and folder) share `imagenet_train_image` and
`imagenet_eval_image`; every kind normalises with `normalise_image`. The
normalisation constants are defined here and the crop rules in `crops`, for
both pipelines (`opencv_images` is the one without TensorFlow).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable

import numpy as np

from worker.data.base import tensorflow
from worker.data.crops import CENTRAL_FRACTION, CROP_AREA_RANGE, CROP_ASPECT_RANGE, CROP_ATTEMPTS, MIN_OBJECT_COVERED

if TYPE_CHECKING:  # pragma: no cover - typing only
    import tensorflow as tf
    from tensorflow import Tensor  # the closures below shadow `tf` with the lazily imported module

# Per-channel normalisation on the 0..255 scale.
IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
CIFAR10_MEAN = (0.4914 * 255, 0.4822 * 255, 0.4465 * 255)
CIFAR10_STD = (0.2470 * 255, 0.2435 * 255, 0.2616 * 255)


def normalise_image(image: tf.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> tf.Tensor:
    """``(image - mean) / std`` per channel, for one image ``[h, w, c]`` or a batch of them.

    Computed as ``(image - offset) * scale`` against constants of the image's own
    shape: TensorFlow's CPU kernels broadcast a per-channel vector over an image
    slowly (element by element, the inner dimension being 3), and that cost about
    a third of an ImageNet image's CPU time in the input pipeline; operands of the
    same shape are streamed (benchmarks/data_bench.py, docs/benchmarks.md).
    """
    tf = tensorflow()
    image = tf.cast(image, tf.float32)
    height, width = image.shape[-3:-1] if image.shape.rank and image.shape.rank >= 3 else (None, None)
    if height is None or width is None:  # size known only at run time
        return (image - tf.constant(mean, tf.float32)) / tf.constant(std, tf.float32)
    offset, scale = normalisation_constants((height, width, len(mean)), tuple(mean), tuple(std))
    return (image - tf.constant(offset)) * tf.constant(scale)


@functools.lru_cache(maxsize=16)
def normalisation_constants(shape: tuple[int, ...], mean: tuple[float, ...],
                             std: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The per-channel mean and 1/std spread over `shape` (``[h, w, c]``)."""
    offset = np.broadcast_to(np.asarray(mean, np.float32), shape).copy()
    scale = np.broadcast_to(1.0 / np.asarray(std, np.float64), shape).astype(np.float32)
    offset.flags.writeable = scale.flags.writeable = False
    return offset, scale


def imagenet_train_image(encoded: tf.Tensor, seed: tf.Tensor, size: int) -> tf.Tensor:
    """Random-sized crop, resize to `size`, random horizontal flip, normalise."""
    tf = tensorflow()
    seeds = tf.random.experimental.stateless_split(seed, 2)
    image = _decode_crop(encoded, _random_window(seeds[0]))
    image = tf.image.resize(image, [size, size], method="bilinear")
    image = tf.image.stateless_random_flip_left_right(image, seeds[1])
    image = normalise_image(image, IMAGENET_MEAN, IMAGENET_STD)
    return tf.ensure_shape(image, [size, size, 3])


def imagenet_eval_image(encoded: tf.Tensor, size: int) -> tf.Tensor:
    """Central crop, resize to `size`, normalise."""
    tf = tensorflow()
    image = _decode_crop(encoded, _central_window)
    image = tf.image.resize(image, [size, size], method="bilinear")
    image = normalise_image(image, IMAGENET_MEAN, IMAGENET_STD)
    return tf.ensure_shape(image, [size, size, 3])


def _decode_crop(encoded: tf.Tensor, window: Callable[[tf.Tensor], tf.Tensor]) -> tf.Tensor:
    """Decode the part ``[top, left, height, width] = window(image shape)`` (JPEGs decode only that part)."""
    tf = tensorflow()

    def jpeg() -> Tensor:
        crop = window(tf.image.extract_jpeg_shape(encoded))
        return tf.image.decode_and_crop_jpeg(encoded, crop, channels=3)

    def other() -> Tensor:
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        crop = window(tf.shape(image))
        # 3 channels, not -1: the count stays static, and `normalise_image` needs it
        return tf.slice(image, [crop[0], crop[1], 0], [crop[2], crop[3], 3])

    return tf.cond(tf.io.is_jpeg(encoded), jpeg, other)


def _random_window(seed: tf.Tensor) -> Callable[[tf.Tensor], tf.Tensor]:
    """An Inception-style random-sized crop window."""
    tf = tensorflow()

    def window(shape: Tensor) -> Tensor:
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            shape,
            bounding_boxes=tf.zeros([1, 0, 4], tf.float32),
            seed=seed,
            min_object_covered=MIN_OBJECT_COVERED,
            aspect_ratio_range=CROP_ASPECT_RANGE,
            area_range=CROP_AREA_RANGE,
            max_attempts=CROP_ATTEMPTS,
            use_image_if_no_bounding_boxes=True,
        )
        return tf.stack([begin[0], begin[1], size[0], size[1]])

    return window


def _central_window(shape: tf.Tensor) -> tf.Tensor:
    """The central square of CENTRAL_FRACTION of the shorter side."""
    tf = tensorflow()
    height, width = shape[0], shape[1]
    side = tf.maximum(tf.cast(tf.cast(tf.minimum(height, width), tf.float32) * CENTRAL_FRACTION, tf.int32), 1)
    return tf.stack([(height - side) // 2, (width - side) // 2, side, side])
