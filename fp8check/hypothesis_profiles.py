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
