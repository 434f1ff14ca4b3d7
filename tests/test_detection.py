"""The detection benchmark's core (`benchmarks/detection.py`) on a tiny catalog: one seeded
bug and one correct variant over two smoke cases, one of which the bug cannot see.  The
counts are checked against what the bug does: it drops every group's partial last row
tile, so it fails the case with residual rows and passes the one of whole 128-row tiles."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from seeded_bugs.catch import Catch, SeededBug
from seeded_bugs.kernels import BUGS, CORRECT

from fp8check.inputs.cases import build_suite
from fp8check.results.model import CaseResult, Criterion

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import detection  # noqa: E402

BUG, GOOD = "bug-dropped-residual-tile", "numpy-fp8-deepgemm"


def _two_cases(seed: int) -> list:
    """A smoke case with residual rows, and the same values on whole 128-row tiles (a
    new id: its references are its own)."""
    residues = next(c for c in build_suite("smoke", seed) if c.pattern == "residues")
    g, m = residues.g, residues.m
    whole = [0] * g
    whole[0], whole[-1] = 128, m - 128
    assert all(s % 128 == 0 for s in whole) and sum(whole) == m
    whole_tiles = dataclasses.replace(residues, id=residues.id + "-whole-tiles",
                                      group_sizes=tuple(whole))
    return [residues, whole_tiles]


@pytest.fixture(scope="module")
def results():
    kernels = {BUG: BUGS[BUG].spec, GOOD: CORRECT[GOOD]}
    return detection.run_kernels(kernels, _two_cases, seeds=[0])


def test_a_catch_on_one_case_is_counted_as_resting_on_one_case(results):
    bugs = {BUG: SeededBug(BUGS[BUG].spec, Catch("smoke", "bound_ratio"))}
    sc = detection.score("smoke", bugs, [GOOD], results, [0], {0: 2})
    residues, whole_tiles = results[BUG][0]
    assert residues.passed is False and whole_tiles.passed is True
    assert (sc.n_caught, len(sc.bugs), sc.missed) == (1, 1, {})
    assert sc.catching_cases == {BUG: {0: 1}} and sc.single_case == {BUG: [0]}
    # dropping whole row tiles puts many elements over the bound, not one
    assert sc.single_element == {}
    assert (sc.n_false_alarm_runs, sc.n_correct_runs, sc.false_alarms) == (0, 1, [])
    assert sc.passed


def test_a_bug_failing_another_criterion_is_missed(results):
    bugs = {BUG: SeededBug(BUGS[BUG].spec, Catch("smoke", "bit_exact"))}
    sc = detection.score("smoke", bugs, [GOOD], results, [0], {0: 2})
    assert sc.n_caught == 0 and sc.missed == {BUG: [0]} and not sc.passed


def test_a_failing_correct_variant_is_a_false_alarm(results):
    # the bug filed as a correct variant, on purpose
    sc = detection.score("smoke", {}, [BUG, GOOD], results, [0], {0: 2})
    assert (sc.n_false_alarm_runs, sc.n_correct_runs) == (1, 2)
    [(kernel, seed, case, why)] = sc.false_alarms
    assert (kernel, seed, case) == (BUG, 0, results[BUG][0][0].case)
    assert "bound_ratio" in why and not sc.passed


def test_closest_to_each_threshold_comes_from_the_correct_runs(results):
    sc = detection.score("smoke", {}, [GOOD], results, [0], {0: 2})
    every = [(r.case, c) for r in results[GOOD][0] for c in r.criteria]
    ratios = [c.value for _, c in every if c.name == "bound_ratio"]
    assert sc.closest["bound_ratio"].value == max(ratios) <= 1
    assert sc.closest["bound_ratio"].kernel == GOOD
    sqnr = [(c.value - c.limit) for _, c in every if c.name == "impact_sqnr_db"]
    if sqnr:  # impact is gated on this case's distribution
        assert sc.closest["impact_sqnr_db"].value == min(sqnr) > 0
    else:
        assert "impact_sqnr_db" not in sc.closest
    assert abs(sc.closest["bias_z"].value) <= 4  # strict profile's |bias_z| limit


def _result(n_bad: int, case: str) -> CaseResult:
    crit = Criterion.check("bound_ratio", "correctness", 3.0, "<=", 1.0, n_bad=n_bad)
    return CaseResult(kernel="b", layer=1, case=case, passed=False, criteria=[crit])


@pytest.mark.parametrize(("n_bads", "single"), [((1,), True), ((1, 1), True),
                                                ((1, 2), False), ((5,), False)])
def test_single_element_catches(n_bads, single):
    """Single element: n_bad == 1 on every case that catches the bug."""
    res = {"b": {3: [_result(n, f"c{i}") for i, n in enumerate(n_bads)]}}
    bugs = {"b": SeededBug(BUGS[BUG].spec, Catch("ci", "bound_ratio"))}
    sc = detection.score("ci", bugs, [], res, [3], {3: len(n_bads)})
    assert sc.single_element == ({"b": [3]} if single else {})
    assert sc.single_case == ({"b": [3]} if len(n_bads) == 1 else {})


def test_no_case_is_no_catch():
    """A filter that leaves no case catches nothing: the gate fails, never passes empty."""
    bugs = {BUG: SeededBug(BUGS[BUG].spec, Catch("smoke", "bound_ratio"))}
    sc = detection.detect_suite("smoke", bugs, {}, [0], case_filter="no-such-case")
    assert sc.n_cases == {0: 0} and sc.missed == {BUG: [0]} and not sc.passed


def test_bad_arguments_exit_2(capsys):
    for argv in (["--seeds", "0"], ["--suites", "nosuch"], ["--case-filter", "("]):
        with pytest.raises(SystemExit) as e:
            detection.main(argv)
        assert e.value.code == 2


def test_seed_shards_merge_into_the_table_of_their_seeds(results):
    """`--merge`: the scores of two runs over other seeds, through their JSON, join into
    one table: seeds, per-seed catches, misses and false alarms of both, the closest
    values the more extreme; the same seed twice is bad input."""
    bugs = {BUG: SeededBug(BUGS[BUG].spec, Catch("smoke", "bound_ratio"))}
    a = detection.score("smoke", bugs, [GOOD], results, [0], {0: 2})
    b = detection.from_dict(a.to_dict())  # seed 0 read back, then relabelled seed 1
    b.seeds, b.n_cases = [1], {1: 2}
    b.catching_cases = {BUG: {1: 0}}
    b.missed, b.single_case = {BUG: [1]}, {}
    b.false_alarms = [(GOOD, 1, "c", "bias_z")]
    b.closest = {"bias_z": detection.Closest("bias_z", "max_abs", 5.5, GOOD, "c", 1)}
    m = detection.merged([detection.from_dict(a.to_dict()), b])
    assert m.seeds == [0, 1] and m.catching_cases == {BUG: {0: 1, 1: 0}}
    assert m.missed == {BUG: [1]} and m.single_case == {BUG: [0]}
    assert (m.n_false_alarm_runs, m.n_correct_runs) == (1, 2) and not m.passed
    assert m.closest["bias_z"].value == 5.5 and m.closest["bias_z"].seed == 1
    assert m.closest["bound_ratio"] == a.closest["bound_ratio"]
    with pytest.raises(ValueError, match="seed 0 appears twice"):
        detection.merged([a, a])
