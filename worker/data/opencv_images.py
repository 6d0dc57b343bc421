"""Image operations of the pipeline without TensorFlow: decode, crop, resize, flip and normalise.

OpenCV decodes (libjpeg-turbo, PNG, BMP, GIF) and resizes; numpy normalises.
Each function writes one prepared image, float32 ``[size, size, 3]``, into an
output slice, so a batch is assembled without a copy. OpenCV and numpy release
the GIL in this work, so threads prepare images in parallel.

The same operations as `worker.data.images` (the tf.data pipeline): the crop
windows follow the same rules (`worker.data.crops`), the resize is bilinear
with half-pixel centres and no antialiasing (``cv2.INTER_LINEAR``, as
``tf.image.resize``), the normalisation uses the same constants. What differs
(docs/spec.md, "Input pipelines"): the JPEG DCT (TensorFlow's default is
libjpeg's fast integer DCT, OpenCV's the accurate one) and, for decoded images,
the resize of 8-bit pixels in fixed point where TensorFlow resizes in float.
EXIF orientation is ignored, as TensorFlow does.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from worker.data.crops import WINDOW_DRAWS, central_window, random_window, translation_pad
from worker.data.images import IMAGENET_MEAN, IMAGENET_STD, normalisation_constants
from worker.data.spec import DatasetError

# Uniform floats one ImageNet training image uses: its crop window, then the flip.
IMAGENET_DRAWS = WINDOW_DRAWS + 1
# One in-memory training image: the two offsets of its crop, then the flip.
ARRAY_DRAWS = 3


@functools.lru_cache(maxsize=1)
def opencv() -> Any:
    """The `cv2` module, imported on first use; its own thread pool off (our threads run it)."""
    import cv2

    cv2.setNumThreads(1)
    return cv2


def decode(encoded: bytes, where: str) -> np.ndarray:
    """An encoded image -> uint8 RGB ``[h, w, 3]``; ``DatasetError`` naming `where`."""
    cv2 = opencv()
    image: np.ndarray | None = cv2.imdecode(np.frombuffer(encoded, np.uint8),
                                            cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION)
    if image is None:
        raise DatasetError(f"{where}: image fails to decode (damaged, truncated or not an image)")
    if image.shape[0] < 1 or image.shape[1] < 1:
        raise DatasetError(f"{where}: image is empty")
    return image


def check_decodes(encoded: bytes, where: str) -> None:
    """Decode one image; raise ``DatasetError`` naming `where` if it fails or is empty."""
    decode(encoded, where)


def imagenet_train_into(encoded: bytes, draws: np.ndarray, size: int, out: np.ndarray, where: str) -> None:
    """Random-sized crop, resize to `size`, random horizontal flip, normalise; into `out`.

    `draws`: IMAGENET_DRAWS uniform floats in [0, 1) (the window's, then the flip's).
    """
    image = decode(encoded, where)
    top, left, height, width = random_window(image.shape[0], image.shape[1], draws)
    _resized_into(image[top:top + height, left:left + width], size, draws[WINDOW_DRAWS] < 0.5, out)


def imagenet_eval_into(encoded: bytes, size: int, out: np.ndarray, where: str) -> None:
    """Central crop, resize to `size`, normalise; into `out`."""
    image = decode(encoded, where)
    top, left, height, width = central_window(image.shape[0], image.shape[1])
    _resized_into(image[top:top + height, left:left + width], size, False, out)


def _resized_into(crop: np.ndarray, size: int, flip: bool, out: np.ndarray) -> None:
    cv2 = opencv()
    image = cv2.resize(crop, (size, size), interpolation=cv2.INTER_LINEAR)
    if flip:
        image = cv2.flip(image, 1)
    normalise_into(image, IMAGENET_MEAN, IMAGENET_STD, out)


def normalise_into(image: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...], out: np.ndarray) -> None:
    """``(image - mean) * (1 / std)`` per channel into `out` (float32 ``[..., h, w, 3]``), with the
    constants of the tf.data path: the same float32 results.

    8-bit pixels go through a table of the 256 results per channel (one pass, ``cv2.LUT``: a
    quarter of the time of numpy's subtract and multiply on an ImageNet image); other pixels
    through the constants spread over the image's shape (no broadcast over the channels).
    """
    if image.dtype == np.uint8 and image.shape[-1] == 3 and out.flags.c_contiguous:
        rows = out.reshape(-1, out.shape[-2], 3)
        opencv().LUT(image.reshape(rows.shape), _normalisation_table(tuple(mean), tuple(std)), dst=rows)
        return
    offset, scale = normalisation_constants(tuple(out.shape[-3:]), tuple(mean), tuple(std))
    np.subtract(image, offset, out=out, dtype=np.float32)
    np.multiply(out, scale, out=out)


@functools.lru_cache(maxsize=8)
def _normalisation_table(mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """``[256, 1, 3]`` float32: the normalised value of each 8-bit level in each channel."""
    offset, scale = normalisation_constants((1, 1, 3), mean, std)
    levels = np.arange(256, dtype=np.float32).reshape(256, 1, 1)
    return np.ascontiguousarray((levels - offset) * scale)


def prepare_arrays_into(images: np.ndarray, size: int, mean: tuple[float, ...], std: tuple[float, ...],
                        out: np.ndarray) -> None:
    """In-memory images ``[n, h, w, c]`` (c 1 or 3) -> resized to `size` (bilinear, in float) and
    normalised into `out` ``[n, size, size, 3]``; a grey image is spread over the three channels."""
    if images.shape[1:3] == (size, size):
        normalise_into(images if images.dtype == np.uint8 else _rgb(np.asarray(images, np.float32)),
                       mean, std, out)
        return
    cv2 = opencv()
    for image, target in zip(images, out):
        resized = cv2.resize(np.asarray(image, np.float32), (size, size), interpolation=cv2.INTER_LINEAR)
        normalise_into(_rgb(resized.reshape(size, size, -1)), mean, std, target)


def _rgb(images: np.ndarray) -> np.ndarray:
    return np.broadcast_to(images, images.shape[:-1] + (3,)) if images.shape[-1] == 1 else images


def translate_into(prepared: np.ndarray, draws: np.ndarray, flip: bool, out: np.ndarray) -> None:
    """The in-memory kinds' training augmentation of one prepared image ``[s, s, 3]`` into `out`:
    zero-pad by `translation_pad(s)` on every side, crop s x s at a random offset, flip if `flip`
    and the third draw is below 0.5. `draws`: ARRAY_DRAWS uniform floats in [0, 1)."""
    size = prepared.shape[0]
    pad = translation_pad(size)
    dy, dx = (min(int(u * (2 * pad + 1)), 2 * pad) - pad for u in draws[:2])
    out.fill(0.0)
    src_y, dst_y = slice(max(dy, 0), size + min(dy, 0)), slice(max(-dy, 0), size - max(dy, 0))
    src_x, dst_x = slice(max(dx, 0), size + min(dx, 0)), slice(max(-dx, 0), size - max(dx, 0))
    out[dst_y, dst_x] = prepared[src_y, src_x]
    if flip and draws[2] < 0.5:
        out[:] = out[:, ::-1].copy()
