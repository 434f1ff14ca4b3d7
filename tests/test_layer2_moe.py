"""Layer 2 on the real kernels: the Pallas layers on the ci scenarios, the Triton layers
on the smoke scenarios (interpret mode is slow), result format, bad input."""

from __future__ import annotations

import numpy as np
import pytest

import fp8check.kernels.triton  # noqa: F401  (sets TRITON_INTERPRET before triton loads)
from fp8check.layers.moe import SUITES, TENSORS, make_inputs, run_layer2
from fp8check.references.moe import route_numpy

GATE_KEYS = {"kernel", "layer", "case", "passed", "metrics", "criteria", "failed", "skipped",
             "error", "repro", "seconds"}


@pytest.fixture(scope="module")
def pallas_ci():
    return run_layer2("pallas", "ci")


def _check_results(results, family, suite):
    ids = [s.case_id(0) for s in SUITES[suite]]
    assert [r["kernel"] for r in results] == (
        [f"{family}-moe-fp8"] * len(ids) + [f"{family}-moe-bf16"] * len(ids))
    for r in results:
        assert set(r) == GATE_KEYS and r["layer"] == 2 and r["case"] in ids
        assert r["error"] is None, r["error"]
        assert r["passed"] is True and r["failed"] == [], (r["case"], r["failed"])
        assert r["repro"] is None  # the gate names the rerun command of a failure
        m = r["metrics"]
        for t in TENSORS:
            assert f"sqnr_db.{t}" in m and f"st_sqnr_db.{t}" in m and f"cosine.{t}" in m
        assert len(m["sqnr_db.wi.expert"]) == m["experts"]
        questions = {c["question"] for c in r["criteria"].values()}
        assert questions == {"correctness", "impact"}


def test_pallas_layers_pass_ci(pallas_ci):
    _check_results(pallas_ci, "pallas", "ci")
    by_case = {(r["kernel"], r["case"]): r["metrics"] for r in pallas_ci}
    dead = by_case[("pallas-moe-fp8", "dead-experts-t64-e8-k2-s0")]
    assert [dead["group_sizes"][g] for g in (1, 4, 7)] == [0, 0, 0]
    assert [dead["sqnr_db.wi.expert"][g] for g in (1, 4, 7)] == [None, None, None]
    hot = by_case[("pallas-moe-fp8", "hot-expert-t64-e8-k2-s0")]
    assert hot["group_sizes"][0] == 64  # every token picks the hot expert
    assert "router_note" in by_case[("pallas-moe-fp8", "top1-t128-e4-k1-s0")]


def test_fp8_costs_precision_that_bf16_does_not(pallas_ci):
    # The two questions measure different things: FP8 and bf16 layers are both correct
    # (straight-through SQNR high) but FP8's impact is far larger than bf16's.
    fp8 = [r["metrics"] for r in pallas_ci if r["kernel"].endswith("fp8")]
    bf16 = [r["metrics"] for r in pallas_ci if r["kernel"].endswith("bf16")]
    for a, b in zip(fp8, bf16, strict=True):
        assert a["sqnr_db.out"] + 10 < b["sqnr_db.out"]
        assert a["st_sqnr_db.dx"] > a["sqnr_db.dx"] + 10


def test_triton_layers_pass_smoke():
    _check_results(run_layer2("triton", "smoke"), "triton", "smoke")


def test_scenarios_route_as_named():
    for sc in SUITES["ci"]:
        inp = make_inputs(sc, 0)
        experts, logits = route_numpy(inp)
        counts = np.bincount(experts.ravel(), minlength=sc.experts)
        assert counts.sum() == sc.tokens * sc.top_k
        assert not np.any(counts[list(sc.dead)])
        if sc.top_k < sc.experts:  # routing never hinges on a near tie
            assert np.min(logits[:, sc.top_k - 1] - logits[:, sc.top_k]) >= 1e-3
    tiny = make_inputs(SUITES["ci"][3], 0)
    assert np.bincount(route_numpy(tiny)[0].ravel()).max() < 8  # residual rows only


def test_a_raising_layer_is_a_failed_result():
    def broken(inp, variant):
        raise RuntimeError("kernel exploded")

    (r,) = run_layer2("pallas", "smoke", layer_impl=broken, variants=("fp8",),
                      cases=["balanced-t64-e4-k2-s0"])
    assert r["passed"] is False and r["error"] == "RuntimeError: kernel exploded"


@pytest.mark.parametrize("kwargs,match", [
    ({"family": "cuda"}, "family"), ({"suite": "nightly"}, "suite"),
    ({"profile": "off"}, "never off"), ({"variants": ("fp4",)}, "variants"),
    ({"cases": ["nope"]}, "unknown layer-2 case"),
])
def test_bad_usage_is_a_value_error(kwargs, match):
    args = {"family": "pallas"} | kwargs
    with pytest.raises(ValueError, match=match):
        run_layer2(**args)
