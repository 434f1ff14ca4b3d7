# Two entry points for a fresh machine (see README): `make gate` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup browser gate test lint ruff typecheck bench detection

setup: $(STAMP)

# Compiled bytecode is kept in .venv/pycache for every command run from here, even where
# the environment says PYTHONDONTWRITEBYTECODE (these machines do): otherwise each process
# compiles again the ~1900 modules of jax, torch, Triton and fp8check it imports (about
# 5 s a process), and the gate starts about twenty of them (its workers, the Triton
# compile processes, the report's).  uv installs without byte-compiling all 14000 files
# (about a minute); this compiles only what runs, once.  Nothing is written outside .venv.
export PYTHONPYCACHEPREFIX := $(CURDIR)/$(VENV)/pycache
unexport PYTHONDONTWRITEBYTECODE

# uv installs (parallel downloads, no byte-compiling; about 45 s against pip's two
# minutes), taking pip's find-links from pip's own configuration: this machine keeps its CPU
# torch wheel there.  torch first, pinned, so the CPU wheel on this machine's disk is taken
# rather than a CUDA build resolved through another package's requirement; then the project
# with every extra, each package at its version in constraints.txt.
FIND_LINKS := $(shell $(PY) -m pip config get global.find-links 2>/dev/null)
UV := $(BIN)/uv pip install -q --python $(BIN)/python $(addprefix --find-links ,$(FIND_LINKS))

$(STAMP): pyproject.toml constraints.txt Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q uv==0.13.9
	$(UV) torch==2.13.0
	$(UV) -c constraints.txt -e '.[jax,torch,tpu,tensorboard,adapters,test]'
	touch $(STAMP)

# Two workers, each with half the cores' threads, the long batches first (README); each
# holds jax and torch, ~4 GB.
GATE_JOBS ?= 2

gate: $(STAMP)
	$(BIN)/fp8check gate --jobs $(GATE_JOBS)  # [tool.fp8check] in pyproject.toml: fp8check-out/gate.html, .json, .xml

# The report's browser test needs Debian's chromium (the machines run as root).
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

test: lint browser
	$(BIN)/pytest -n 2 tests

lint: ruff typecheck

ruff: $(STAMP)
	$(BIN)/ruff check .

# mypy checks the installed layout, which the editable install's import hook hides from it:
# a tree of links fp8check/{fp8check's own files, references, kernels, reports} (pyproject's
# package-dir), rebuilt on each run; message paths are mapped back to the repository's.
MYPY_STAGE := build/mypy-stage

typecheck: $(STAMP)
	rm -rf $(MYPY_STAGE) && mkdir -p $(MYPY_STAGE)/fp8check
	ln -s $(CURDIR)/fp8check/* $(CURDIR)/references $(CURDIR)/kernels $(CURDIR)/reports \
		$(MYPY_STAGE)/fp8check/
	cd $(MYPY_STAGE) && MYPYPATH=. $(CURDIR)/$(BIN)/python -m mypy \
		--config-file $(CURDIR)/pyproject.toml --cache-dir $(CURDIR)/.mypy_cache \
		-p fp8check >mypy.out; rc=$$?; \
		sed -E 's#^fp8check/(references|kernels|reports)/#\1/#' mypy.out; exit $$rc

bench: $(STAMP)
	$(BIN)/python benchmarks/reference.py
	$(BIN)/python benchmarks/padding_memory.py
	$(BIN)/python benchmarks/gate.py
	$(BIN)/python benchmarks/native.py
	$(BIN)/python benchmarks/promotion_interval.py
	$(BIN)/python benchmarks/curves.py

# The detection score (docs/testing.md): every seeded bug and correct variant of
# tests/seeded_bugs/catalog.py over 5 seeds on every case of its suite; exit 1 when a bug
# is missed or a correct variant fails.  ci: every bug but int16 offsets, on every ci case.
# full: only its two production cases (M = 65536, streamed), where the int16-offsets bug
# and its correct twin run (each ~2.5 CPU-min a case and seed); full's other 209 cases
# take hours.  Not in `bench`.
detection: $(STAMP)
	$(BIN)/python benchmarks/detection.py --suites ci --json fp8check-out/detection-ci.json
	$(BIN)/python benchmarks/detection.py --suites full --case-filter production \
		--kernels 'int16|vectorised' --json fp8check-out/detection-production.json
