"""Suite-wide pytest configuration: the hypothesis profiles, and the fixture that runs a
test on each integer-digit path of the e4m3 gmm reference (`pass_path`).

fp8check's own `fp8check-ci` profile is the default (`fp8check.inputs.hypothesis_profiles`):
derandomized, so every run of the suite draws the same examples and a failure reproduces
anywhere; no example database, no deadline (the CPU interpreters are slow and their
timing varies).  Set HYPOTHESIS_PROFILE=fp8check-dev for a randomized search with the
example database when hunting bugs locally.
"""

import os
from pathlib import Path

import pytest
from hypothesis import settings

from fp8check.config import load_config
from fp8check.gate.plan import jsonl_path
from fp8check.inputs.hypothesis_profiles import CI_PROFILE
from tests.test_partials_paths import PATHS, _only

settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", CI_PROFILE))

# The sample user suite is run by tests/test_plugin_user_example.py through pytester (as a
# user's own run, in a subprocess), not collected as part of this one.
collect_ignore = ["user_example"]


@pytest.fixture(params=sorted(PATHS))
def pass_path(request, monkeypatch):
    """Each integer-digit path in turn as the one the gmm reference and the production
    check's pass run on (skipped where this CPU lacks it)."""
    _only(request.param, monkeypatch)
    return request.param


def _gate_outputs() -> dict[Path, int | None]:
    """The files `make gate` writes (the repository's [tool.fp8check] paths), with their
    modification times (None when absent)."""
    root = Path(__file__).resolve().parents[1]
    cfg = load_config(root)
    paths = [root / p for p in (cfg.json, cfg.junit, cfg.report) if p]
    paths.append(root / jsonl_path(cfg))
    return {p: p.stat().st_mtime_ns if p.exists() else None for p in paths}


@pytest.fixture(autouse=True, scope="session")
def _gate_outputs_untouched():
    """A test that runs the gate from the repository root inherits [tool.fp8check]'s
    output paths and would overwrite the user's `make gate` report: fail the run if one
    does (run such tests in tmp_path)."""
    before = _gate_outputs()
    yield
    changed = sorted(str(p) for p, t in _gate_outputs().items() if t != before[p])
    assert not changed, f"the test run wrote the gate's own outputs: {', '.join(changed)}"
