"""The one ProblemCache: built once per (contract, case), build time reported once (to the
first result that asks, also when the gate's worker prepared it before the kernel's
clock started), failures cached, capacity kept."""

from __future__ import annotations

import pytest

from fp8check.inputs.cases import build_suite
from fp8check.layers.op import ProblemCache

CASES = build_suite("smoke", 0)[:3]


def test_prepared_problem_reports_its_build_time_once():
    cache = ProblemCache(capacity=4)
    cache.prepare("gmm-fp8", CASES[0])
    prob, built = cache.get("gmm-fp8", CASES[0])
    assert built > 0
    again, built_again = cache.get("gmm-fp8", CASES[0])
    assert again is prob and built_again == 0.0
    cache.prepare("gmm-fp8", CASES[0])  # cached: nothing rebuilt, nothing to report
    assert cache.get("gmm-fp8", CASES[0]) == (prob, 0.0)


def test_capacity_evicts_the_oldest_and_its_unreported_time():
    cache = ProblemCache(capacity=1)
    cache.prepare("gmm-fp8", CASES[0])
    cache.prepare("gmm-fp8", CASES[1])  # evicts case 0 before its time was reported
    first, built = cache.get("gmm-fp8", CASES[1])
    assert built > 0
    rebuilt, built0 = cache.get("gmm-fp8", CASES[0])  # rebuilt: its own new time
    assert built0 > 0 and rebuilt is not first


def test_a_failed_build_is_cached_and_raised_every_time():
    cache = ProblemCache()
    cache.prepare("no-such-contract", CASES[0])  # never raises
    for _ in range(2):
        with pytest.raises(ValueError):
            cache.get("no-such-contract", CASES[0])
    with pytest.raises(ValueError, match="capacity"):
        ProblemCache(capacity=0)
