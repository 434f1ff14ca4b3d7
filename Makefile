# Two entry points for a fresh machine (see README): `make gate` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup browser gate test lint bench

setup: $(STAMP)

# torch first, pinned, so pip takes the CPU wheel on this machine's disk rather than
# resolving a CUDA build through another package's requirement.
$(STAMP): pyproject.toml Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,tpu]'
	touch $(STAMP)

gate: $(STAMP)
	$(BIN)/fp8check gate  # [tool.fp8check] in pyproject.toml: fp8check-out/gate.html, .json, .xml

# The report's browser test needs Debian's chromium (the machines run as root).
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

test: $(STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/pytest -n 2 tests

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python benchmarks/reference.py
	$(BIN)/python benchmarks/padding_memory.py
	$(BIN)/python benchmarks/gate.py
	$(BIN)/python benchmarks/native.py
	$(BIN)/python benchmarks/promotion_interval.py
