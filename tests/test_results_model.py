"""The result model: a criterion's relation decides it, nothing unmeasured passes, and
documents round-trip."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fp8check.results import CaseResult, Criterion, holds, jsonable

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@given(finite, finite)
def test_relations_mean_what_they_say(value, limit):
    assert holds(value, "<=", limit) is (value <= limit)
    assert holds(value, ">=", limit) is (value >= limit)
    assert holds(value, "|x|<=", limit) is (abs(value) <= limit)
    assert holds(value, "==", limit) is (value == limit)


@pytest.mark.parametrize("relation", ["<=", ">=", "|x|<=", "=="])
@pytest.mark.parametrize("value", [None, math.nan, np.float32("nan")])
def test_a_value_that_was_not_measured_never_passes(relation, value):
    assert not Criterion.check("c", "correctness", value, relation, 1.0).passed


def test_infinite_values_fail_upper_limits_and_pass_lower_ones():
    assert not Criterion.check("r", "correctness", math.inf, "<=", 1.0).passed
    assert not Criterion.check("z", "correctness", -math.inf, "|x|<=", 3.0).passed
    assert Criterion.check("s", "impact", math.inf, ">=", 20.0).passed


def test_unknown_relation_is_a_value_error():
    with pytest.raises(ValueError, match="unknown relation"):
        holds(1.0, "<", 2.0)


def test_verdict_prints_the_relation():
    assert Criterion.check("s", "impact", 18.5, ">=", 20.0).verdict() == "18.5, must be >= 20"
    assert Criterion.check("z", "correctness", -4.25, "|x|<=", 3.0).verdict() == (
        "|-4.25|, must be <= 3")
    assert Criterion.check("f", "correctness", 3, "==", 0).verdict() == "3, must be 0"


def test_case_result_round_trips_and_decides():
    crit = [Criterion.check("bound_ratio", "correctness", np.float64(0.5), "<=", 1.0,
                            meaning="m", n_bad=0, bad_means="b", worst={"index": [1, 2]}),
            Criterion.check("bias_z", "correctness", float("nan"), "|x|<=", 3.0)]
    res = CaseResult(kernel="k", layer=1, case="c", passed=None, criteria=crit,
                     metrics={"x": np.float32(1.5), "t": (1, 2)})
    res.decide()
    assert res.passed is False and res.failed_criteria == ["bias_z"]
    back = CaseResult.from_dict(res.to_dict())
    assert back.to_dict() == res.to_dict()
    assert back.criteria[0].relation == "<=" and back.criteria[1].value == "nan"
    res.error = "boom"
    res.criteria = crit[:1]
    res.decide()
    assert res.passed is False  # an error fails even when every criterion passed


def test_layer_must_be_an_integer_layer():
    with pytest.raises(ValueError, match="layer"):
        CaseResult(kernel="k", layer="op", case="c", passed=True)


def test_jsonable_has_no_numpy_and_no_non_finite_floats():
    out = jsonable({"a": np.float32(2.5), "b": [np.int64(3), math.inf], "c": (np.bool_(True),)})
    assert out == {"a": 2.5, "b": [3, "inf"], "c": [True]}
    assert type(out["b"][0]) is int
