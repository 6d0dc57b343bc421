"""Image operations of the input pipelines (worker/data/images.py): normalisation and its cost."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

tf = pytest.importorskip("tensorflow")

from worker.data.images import (  # noqa: E402
    CIFAR10_MEAN,
    CIFAR10_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    imagenet_eval_image,
    imagenet_train_image,
    normalise_image,
)


def reference(image: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    return (image.astype(np.float64) - np.asarray(mean)) / np.asarray(std)


@settings(max_examples=40, deadline=None)
@given(height=st.integers(1, 12), width=st.integers(1, 12), batch=st.sampled_from([None, 1, 3]),
       seed=st.integers(0, 2**32 - 1), imagenet=st.booleans())
def test_normalisation_is_the_per_channel_standard_score(height, width, batch, seed, imagenet):
    mean, std = (IMAGENET_MEAN, IMAGENET_STD) if imagenet else (CIFAR10_MEAN, CIFAR10_STD)
    shape = (height, width, 3) if batch is None else (batch, height, width, 3)
    image = np.random.default_rng(seed).uniform(0, 255, size=shape).astype(np.float32)
    got = normalise_image(tf.constant(image), mean, std).numpy()
    assert got.shape == shape and got.dtype == np.float32
    np.testing.assert_allclose(got, reference(image, mean, std), rtol=1e-5, atol=1e-5)


def test_normalisation_of_an_image_whose_size_is_known_only_at_run_time():
    image = np.arange(5 * 7 * 3, dtype=np.float32).reshape(5, 7, 3)
    normalise = tf.function(lambda x: normalise_image(x, IMAGENET_MEAN, IMAGENET_STD),
                            input_signature=[tf.TensorSpec([None, None, 3], tf.float32)])
    np.testing.assert_allclose(normalise(image).numpy(), reference(image, IMAGENET_MEAN, IMAGENET_STD),
                               rtol=1e-5, atol=1e-5)


def test_a_single_channel_image_is_spread_over_the_three_channels_as_before():
    image = np.full((4, 4, 1), 128, np.uint8)
    got = normalise_image(tf.constant(image), IMAGENET_MEAN, IMAGENET_STD).numpy()
    assert got.shape == (4, 4, 3)
    np.testing.assert_allclose(got[0, 0], reference(np.float32([128, 128, 128]), IMAGENET_MEAN, IMAGENET_STD),
                               rtol=1e-5)


def _broadcast_arithmetic(graph: tf.Graph, size: int) -> list[str]:
    """Arithmetic ops producing a [size, size, c] image from an operand that is not [size, size, 3]."""
    found = []
    for op in graph.get_operations():
        out = op.outputs[0].shape if op.outputs else None
        if op.type in ("Sub", "Mul", "RealDiv", "AddV2") and out.rank == 3 and out.as_list()[:2] == [size, size]:
            if any(t.shape.rank is None or t.shape.as_list() != [size, size, 3] for t in op.inputs):
                found.append(f"{op.type} {[t.shape.as_list() for t in op.inputs]}")
    return found


@pytest.mark.parametrize("train", [True, False])
def test_imagenet_images_are_normalised_without_a_per_channel_broadcast(train):
    # Broadcasting a 3-vector over an image cost about a third of an image's CPU time in
    # the pipeline (benchmarks/data_bench.py); a lost static channel count (the JPEG/other
    # cond) had silently brought it back.
    size = 32
    if train:
        fn = tf.function(lambda e, s: imagenet_train_image(e, s, size),
                         input_signature=[tf.TensorSpec([], tf.string), tf.TensorSpec([2], tf.int64)])
    else:
        fn = tf.function(lambda e: imagenet_eval_image(e, size), input_signature=[tf.TensorSpec([], tf.string)])
    graph = fn.get_concrete_function().graph
    assert _broadcast_arithmetic(graph, size) == []
    # the check itself sees a broadcast when there is one
    plain = tf.function(lambda x: (x - tf.constant(IMAGENET_MEAN)) / tf.constant(IMAGENET_STD),
                        input_signature=[tf.TensorSpec([size, size, 3], tf.float32)])
    assert len(_broadcast_arithmetic(plain.get_concrete_function().graph, size)) == 2
