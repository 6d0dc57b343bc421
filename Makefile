# Everything a fresh machine needs is installed here: `make test` and `make demo`
# create .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test demo protos bench clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[worker,test]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -ra $(PYTEST_ARGS)

demo: $(STAMP)
	$(VENV)/bin/aiperf demo $(DEMO_ARGS)

# Regenerate the gRPC/protobuf Python code from protos/*.proto.
protos: $(STAMP)
	$(PY) -m aiperf.api.generate

bench: $(STAMP)
	for b in benchmarks/*_bench.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
