"""Layer 3 on the Pallas family's ci schedule: the model learns toward the task's known
achievable loss in all three precisions, FP8 tracks bf16, the result format the gate
streams, the seeded training-drift bug (passes layer 2, fails layer 3), bad input."""

from __future__ import annotations

import numpy as np
import pytest
from seeded_bugs import layer3 as bug3

from fp8check.layers.moe import run_layer2
from fp8check.layers.training import SUITES, iter_layer3, layer3_size
from fp8check.layers.training.model import ModelConfig
from fp8check.layers.training.optimizer import Schedule
from fp8check.layers.training.task import make_task

GATE_KEYS = {"kernel", "layer", "case", "passed", "metrics", "criteria", "failed", "skipped",
             "error", "repro", "seconds"}
[TC] = SUITES["ci"]["jax"]


@pytest.fixture(scope="module")
def pallas_ci():
    return [r.to_dict() for r in iter_layer3("pallas", "ci")]


def test_results_are_what_the_gate_streams(pallas_ci):
    seeds = list(range(TC.seeds))
    assert len(pallas_ci) == layer3_size("ci") == 2 * TC.seeds + 1
    expect = [(f"pallas-train-{v}", TC.case_id(s)) for s in seeds for v in ("fp8", "bf16")]
    expect.append(("pallas-train-fp8", TC.seeds_case_id(0)))
    assert [(r["kernel"], r["case"]) for r in pallas_ci] == expect
    for r in pallas_ci:
        assert set(r) == GATE_KEYS and r["layer"] == 3 and r["error"] is None
        assert r["passed"] is True and r["failed"] == [], (r["kernel"], r["case"], r["failed"])
        assert r["repro"] is None  # the gate names the rerun command of a failure
    for r in pallas_ci[:-1]:
        m = r["metrics"]
        assert set(m["curves"]) == {"fp8", "bf16", "f32"}
        assert all(len(c) == TC.schedule.steps and all(isinstance(v, float) for v in c)
                   for c in m["curves"].values())
        assert m["grad_snr_steps"] == list(range(0, TC.schedule.steps, TC.schedule.snr_every))
        assert len(m["grad_snr"]) == len(m["grad_snr_steps"])
        assert {"slope_db_per_100_steps", "p_value"} <= set(m["grad_snr_trend"])
    assert pallas_ci[-1]["metrics"]["verdict"] in ("within-seed-noise",
                                                   "fp8-worse-within-limit")


def test_every_precision_learns_toward_the_achievable_loss(pallas_ci):
    h = make_task().entropy_rate
    assert 1.0 < h < np.log(ModelConfig().vocab) - 0.5  # the task is learnable, not trivial
    for r in pallas_ci[:-1:2]:
        assert r["metrics"]["achievable_loss"] == pytest.approx(h)
        for name, c in r["metrics"]["curves"].items():
            first, last = c[0], float(np.mean(c[-6:]))
            assert first > h + 1.5, name  # starts near log V + 1/2
            assert last < first - 0.6 * (first - h), (name, first, last, h)
            assert last > h - 0.05  # a batch mean cannot beat the entropy rate by much


def test_precisions_differ_but_fp8_tracks_bf16(pallas_ci):
    for r in pallas_ci[:-1:2]:
        c = {k: np.asarray(v) for k, v in r["metrics"]["curves"].items()}
        assert c["f32"][0] == pytest.approx(c["bf16"][0], rel=1e-3)  # same init and batch
        assert not np.array_equal(c["fp8"], c["bf16"])  # the kernels do run
        assert np.max(np.abs(c["fp8"] / c["bf16"] - 1)) < 0.03
        snr = r["metrics"]["grad_snr_median_db"]
        bf16_snr = next(x for x in pallas_ci if x["kernel"] == "pallas-train-bf16"
                        and x["case"] == r["case"])["metrics"]["grad_snr_median_db"]
        assert 20 < snr < bf16_snr - 10  # FP8 costs gradient precision that bf16 does not


def test_training_drift_bug_passes_layer2_and_fails_layer3():
    l2 = run_layer2("pallas", "ci", layer_impl=bug3.layer2_impl, variants=("fp8",))
    assert all(r["passed"] for r in l2), [(r["case"], r["failed"]) for r in l2]
    out = [r.to_dict() for r in iter_layer3("pallas", "ci", model_impl=bug3.model_impl)]
    *per_seed, seeds = out
    for fp8, bf16 in zip(per_seed[::2], per_seed[1::2], strict=True):
        assert bf16["passed"] and bf16["kernel"] == "pallas-train-bf16"
        assert fp8["passed"] is False and fp8["error"] is None
        assert {"auc_gap", "grad_snr_median_db"} <= set(fp8["failed"]), fp8["failed"]
        assert fp8["metrics"]["final_gap"] > fp8["metrics"]["auc_gap"] > 0.01
        gap = np.asarray(fp8["metrics"]["gap_ema"])
        assert gap[-1] > 2 * np.mean(gap[: len(gap) // 3]) > 0  # it drifts: the gap grows
    assert seeds["metrics"]["verdict"] == "fp8-worse" and seeds["failed"] == ["seed_test_fp8_worse"]


def test_a_raising_model_is_a_failed_result_not_a_crash():
    def broken(cfg, variant):
        def grad_fn(params, tokens, targets):
            raise RuntimeError("kernel exploded")
        return grad_fn

    out = list(iter_layer3("pallas", "smoke", model_impl=broken))
    assert len(out) == layer3_size("smoke") == 2
    assert all(r.passed is False and "kernel exploded" in r.error for r in out)


def test_case_selection_and_bad_input():
    assert layer3_size("ci", [TC.case_id(1)]) == 2
    assert layer3_size("ci", framework="torch") == 2 * SUITES["ci"]["torch"][0].seeds + 1
    # A case of the Pallas schedule selects nothing in the Triton family (no error).
    assert layer3_size("ci", [TC.case_id(1)], framework="torch") == 0
    assert list(iter_layer3("triton", "ci", cases=[TC.case_id(1)])) == []
    assert layer3_size("ci", [TC.seeds_case_id(0)]) == 2 * TC.seeds + 1
    for kwargs in ({"family": "cuda"}, {"suite": "nightly"}, {"profile": "off"},
                   {"cases": ["markov-nope"]}):
        args = {"family": "pallas", "suite": "ci"} | kwargs
        with pytest.raises(ValueError):
            next(iter_layer3(args.pop("family"), **args))
    with pytest.raises(ValueError):
        Schedule(steps=0)
    with pytest.raises(ValueError):
        ModelConfig(d_model=100)


def test_suite_schedules():
    assert all(tc.schedule.steps >= 50 for tcs in SUITES["ci"].values() for tc in tcs)
    assert all(tc.schedule.steps == 1000 for tcs in SUITES["full"].values() for tc in tcs)
    assert SUITES["full"]["jax"][0].seeds >= TC.seeds >= 2
    # full trains every family on the Markov task and on real text too
    for fam, tcs in SUITES["full"].items():
        assert [tc.task for tc in tcs] == ["markov", "text"], fam
        assert all(tc.seeds >= 2 for tc in tcs), fam
    sizes = {fam: sum(2 * tc.seeds + 1 for tc in tcs) for fam, tcs in SUITES["full"].items()}
    assert layer3_size("full") == max(sizes.values())
    assert layer3_size("full", framework="jax") == sizes["jax"]
