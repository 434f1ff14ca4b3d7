"""Hypothesis profiles registered by fp8check (importing this module registers them).

* `fp8check-ci`: derandomized (the same examples on every run and machine, so a CI
  failure reproduces anywhere), no example database, no deadline (the CPU interpreters
  are slow and their timing varies), a fixed `CI_MAX_EXAMPLES` per test unless the test
  sets its own, and the reproduction blob printed on failure.
* `fp8check-dev`: randomized, with hypothesis's example database on (failures found
  once are replayed first next time), no deadline, `DEV_MAX_EXAMPLES` per test.

Load one with `settings.load_profile("fp8check-ci")`, `pytest --hypothesis-profile
fp8check-dev` (the pytest plugin registers them before hypothesis reads the option), or
`HYPOTHESIS_PROFILE=fp8check-dev` where a conftest reads that variable (this repo's does).
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings

CI_PROFILE = "fp8check-ci"
DEV_PROFILE = "fp8check-dev"
CI_MAX_EXAMPLES = 100
DEV_MAX_EXAMPLES = 500


def register() -> None:
    """Register both profiles (idempotent); the parent is hypothesis's own default, so an
    earlier `load_profile` elsewhere cannot leak into them."""
    base = settings.get_profile("default")
    settings.register_profile(CI_PROFILE, parent=base, derandomize=True, database=None,
                              deadline=None, max_examples=CI_MAX_EXAMPLES, print_blob=True)
    settings.register_profile(DEV_PROFILE, parent=base, derandomize=False, deadline=None,
                              max_examples=DEV_MAX_EXAMPLES)


register()


# Example counts of the fuzz tests of the gate itself (tests/test_gate_fuzz*.py) under
# `fp8check-ci`; other profiles scale them by their max_examples over CI_MAX_EXAMPLES
# (`fp8check-dev`: five times as many).  Sized so that the fuzz files take about a minute
# of `make test` (pytest -n 2) on a two-core machine: an in-process argument vector or
# document costs milliseconds to a second (a gate run on one smoke case: ~1-2 s), a hostile
# kernel example (a gate subprocess whose crashed workers are respawned) ~10-30 s.
FUZZ_EXAMPLES = {
    "FUZZ_ARGV": 25,  # per sub-command: list, report, merge, curves
    "FUZZ_GATE_ARGV": 12,
    "FUZZ_TUNE_ARGV": 10,
    "FUZZ_DOCUMENTS": 15,
    "FUZZ_LOSS_LOGS": 40,
    "FUZZ_GATE_CURVES": 25,  # a gate document with layer-3 curves, mutated, through curves
    "FUZZ_CONFIG": 15,
    "FUZZ_HOSTILE_KERNELS": 3,
}


def fuzz_settings(kind: str, **kw: Any) -> settings:
    """The settings of fuzz test `kind` (a key of FUZZ_EXAMPLES): its example count scaled
    to the loaded profile, on top of that profile; `kw` adds settings (health checks)."""
    current = settings.default
    scale = (current.max_examples if current is not None else CI_MAX_EXAMPLES) / CI_MAX_EXAMPLES
    return settings(max_examples=max(1, round(FUZZ_EXAMPLES[kind] * scale)), **kw)
