"""worker.jax_memory on plain JAX programs (no Keras: the test process runs Keras on TensorFlow)."""

from __future__ import annotations

from typing import Any

import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from worker import jax_memory  # noqa: E402
from worker.jax_steps import is_out_of_memory  # noqa: E402


class Device:
    """A device's memory_stats as a GPU reports them (the CPU reports none)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit

    def memory_stats(self) -> dict[str, Any] | None:
        return None if self.limit is None else {"bytes_limit": self.limit, "bytes_in_use": 0}


def compiled_matmul(n: int) -> Any:
    spec = jax.ShapeDtypeStruct((n, n), jnp.float32)
    f = jax.jit(lambda a, b: jnp.tanh(a @ b) + a)
    return f.lower(spec, spec).compile()


def test_the_plan_counts_arguments_outputs_and_temporaries_less_what_reuses_a_donated_argument():
    stats = compiled_matmul(256).memory_analysis()
    assert stats.argument_size_in_bytes == 2 * 256 * 256 * 4
    assert jax_memory.planned_bytes(compiled_matmul(256)) == (stats.argument_size_in_bytes + stats.output_size_in_bytes
                                                            + stats.temp_size_in_bytes - stats.alias_size_in_bytes)
    assert jax_memory.planned_bytes(compiled_matmul(512)) > 3 * jax_memory.planned_bytes(compiled_matmul(256))


def test_the_limit_is_the_smallest_devices_and_none_where_a_device_reports_none():
    assert jax_memory.device_limit([Device(8 << 30), Device(6 << 30)]) == 6 << 30
    assert jax_memory.device_limit([Device(8 << 30), Device(None)]) is None
    assert jax_memory.device_limit(jax.local_devices()) is None  # the CPU


def test_a_step_over_the_limit_is_an_out_of_memory_error_with_both_figures():
    compiled = compiled_matmul(256)
    needed = jax_memory.planned_bytes(compiled)
    jax_memory.check_fits(compiled, [Device(needed)], 256, "training step")  # exactly fits
    jax_memory.check_fits(compiled, [Device(None)], 256, "training step")   # nothing to check against
    with pytest.raises(jax_memory.PlannedOutOfMemory, match="training step at 256 images needs .* GiB per device") as err:
        jax_memory.check_fits(compiled, [Device(needed - 1)], 256, "training step")
    assert is_out_of_memory(err.value)
    assert not is_out_of_memory(RuntimeError("out of memory"))  # a message alone is not XLA's error


class Planned:
    """A compiled step's memory_analysis as XLA reports it: 2 GiB of arguments (weights, optimizer
    state, the batch), 8 GiB more for 100 images (82 MiB each, about ResNet-50's at 224 px)."""

    def memory_analysis(self) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(argument_size_in_bytes=2 << 30, output_size_in_bytes=0,
                               temp_size_in_bytes=8 << 30, alias_size_in_bytes=0)


def test_a_step_over_the_limit_says_which_batch_per_device_would_fit():
    # (6 GiB - 2 GiB fixed) / (8 GiB / 100 images) = 50 images on the mesh, split over its devices
    with pytest.raises(jax_memory.PlannedOutOfMemory, match="needs 10.0 GiB per device, the device has 6.0") as one:
        jax_memory.check_fits(Planned(), [Device(6 << 30)], 100, "training step")
    assert one.value.batch_size_that_fits == 50
    with pytest.raises(jax_memory.PlannedOutOfMemory) as two:
        jax_memory.check_fits(Planned(), [Device(6 << 30), Device(8 << 30)], 100, "training step")
    assert two.value.batch_size_that_fits == 25
    with pytest.raises(jax_memory.PlannedOutOfMemory) as none:  # not even the arguments fit
        jax_memory.check_fits(Planned(), [Device(1 << 30)], 100, "training step")
    assert none.value.batch_size_that_fits == 0
