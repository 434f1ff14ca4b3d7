"""Seeded backward / wiring bugs must fail layer 2's correctness question; the correctly
wired twin must pass; a bug hidden by FP8 noise passes impact but fails correctness.
The same four bugs are seeded in both families' layers (seeded_bugs.layer2 for Pallas,
seeded_bugs.layer2_triton for Triton)."""

from __future__ import annotations

import importlib

import pytest
from seeded_bugs.layer2_table import HIDDEN_BY_QUANTIZATION

from fp8check.layers.moe import run_layer2

CASES = ["hot-expert-t64-e8-k2-s0", "dead-experts-t64-e8-k2-s0"]
FAMILIES = {"pallas": "seeded_bugs.layer2", "triton": "seeded_bugs.layer2_triton"}
BUG_NAMES = ["dgrad-transposed", "dw-expert-rolled", "quantized-residuals",
             "tgmm-boundary-leak"]


def _bugs(family: str):
    return importlib.import_module(FAMILIES[family])


def _run(family: str, gmm):
    return run_layer2(family, "ci", layer_impl=_bugs(family).layer_with(gmm),
                      variants=("fp8",), cases=CASES)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_both_families_seed_the_same_bugs(family):
    assert sorted(_bugs(family).BUGS) == BUG_NAMES


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_correct_wiring_passes(family):
    for r in _run(family, _bugs(family).CORRECT):
        assert r["passed"] and r["error"] is None, r["failed"]


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("name", BUG_NAMES)
def test_bug_fails_correctness(family, name):
    mod = _bugs(family)
    for r in _run(family, mod.BUGS[name]):
        assert r["error"] is None, r["error"]
        correctness = [n for n in r["failed"] if r["criteria"][n]["question"] == "correctness"]
        assert correctness, (family, name, r["case"])
        if name in HIDDEN_BY_QUANTIZATION:
            impact = [n for n in r["failed"] if r["criteria"][n]["question"] == "impact"]
            assert impact == [], (family, name, r["case"], impact)
