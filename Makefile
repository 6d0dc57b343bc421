# Everything a fresh machine needs is installed here (both backends: TensorFlow and JAX on the
# CPU): `make test` and `make demo` create .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed

.PHONY: install install-export test demo protos bench clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[worker,jax,test]'
	touch $(STAMP)

install: $(STAMP)

# The `export` extra (mlperf-logging, for `aiperf export --format mllog`) into the same
# editable install: a plain `pip install '.[export]'` in .venv would replace the editable
# install with a copy of today's source.
install-export: $(STAMP)
	$(PY) -m pip install -q -e '.[worker,jax,test,export]'

# Lint first (ruff: pyproject.toml's [tool.ruff]), then types (mypy, strict on aiperf/, master/,
# worker/ and aiperf_cli/: [tool.mypy]; without .mypy_cache 17 s of CPU, 20 s on two idle cores and
# 50 s on two shared by a load of 8; 2 s with it), then the suite in TEST_JOBS processes (one file per
# process at a time: module fixtures are built once; in the order tests/conftest.py gives, its longest
# files first), then the tests marked `exclusive` alone, since they compare two timings of this machine.
# Exit status 5 is pytest's "no test selected" (PYTEST_ARGS naming files without such tests).
# A `-m` in PYTEST_ARGS replaces each phase's own: use `-k`, or run pytest directly, to select.
TEST_JOBS ?= 2
test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m pytest -q -ra -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder -m "not exclusive" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(PY) -m pytest -q -ra -m exclusive $(PYTEST_ARGS) || [ $$? -eq 5 ]

demo: $(STAMP)
	$(VENV)/bin/aiperf demo $(DEMO_ARGS)

# Regenerate the gRPC/protobuf Python code from protos/*.proto.
protos: $(STAMP)
	$(PY) -m aiperf.api.generate

# Every benchmarks/*_bench.py with its short options (BENCH_ARGS=--full: their defaults;
# BENCH_ARGS="--only idle,data"), then one table: figure, baseline, ratio, goal (docs/benchmarks.md).
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[worker,jax,test,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks.summary --run --logs bench-logs $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache bench-logs
