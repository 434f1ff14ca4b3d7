"""Seeded backward / wiring bugs must fail layer 2's correctness question; the correctly
wired twin must pass; a bug hidden by FP8 noise passes impact but fails correctness."""

from __future__ import annotations

import pytest
from seeded_bugs.layer2 import BUGS, CORRECT, HIDDEN_BY_QUANTIZATION, layer_with

from fp8check.layers.moe import run_layer2

CASES = ["hot-expert-t64-e8-k2-s0", "dead-experts-t64-e8-k2-s0"]


def _run(gmm):
    return run_layer2("pallas", "ci", layer_impl=layer_with(gmm), variants=("fp8",),
                      cases=CASES)


def test_correct_wiring_passes():
    for r in _run(CORRECT):
        assert r["passed"] and r["error"] is None, r["failed"]


@pytest.mark.parametrize("name", sorted(BUGS))
def test_bug_fails_correctness(name):
    for r in _run(BUGS[name]):
        assert r["error"] is None
        correctness = [n for n in r["failed"] if r["criteria"][n]["question"] == "correctness"]
        assert correctness, (name, r["case"])
        if name in HIDDEN_BY_QUANTIZATION:
            impact = [n for n in r["failed"] if r["criteria"][n]["question"] == "impact"]
            assert impact == [], (name, r["case"], impact)
