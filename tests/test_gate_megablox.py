"""Bring-your-own example: jax megablox gmm (bf16, Pallas interpret mode on the CPU)."""

import json

import ml_dtypes
import numpy as np

from fp8check.cli import main
from fp8check.contracts import call_kernel
from fp8check.kernels.adapters.megablox import megablox_bf16


def test_adapter_pads_rows_and_matches_a_float32_matmul():
    spec = megablox_bf16("interpret")
    assert (spec.contract, spec.framework, spec.backend) == ("gmm", "jax", "interpret")
    rng = np.random.default_rng(0)
    m, k, n = 200, 256, 128  # m not a multiple of the 128-row tile
    lhs = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    rhs = rng.standard_normal((3, k, n)).astype(ml_dtypes.bfloat16)
    gs = np.array([70, 0, 100], np.int32)
    out = call_kernel(spec, (lhs, rhs, gs), "f32")
    assert out.shape == (m, n) and out.dtype == np.float32
    a, b = lhs.astype(np.float64), rhs.astype(np.float64)
    want = np.concatenate([a[:70] @ b[0], a[70:170] @ b[2]])
    np.testing.assert_allclose(out[:170], want, rtol=1e-5, atol=1e-4)


def test_megablox_passes_smoke(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(["gate", "--kernel", "megablox-bf16", "--suite", "smoke", "--no-progress",
               "--json", "m.json"])
    doc = json.loads((tmp_path / "m.json").read_text())
    assert rc == 0 and doc["summary"]["n_passed"] == len(doc["results"]) > 0
    assert doc["environment"]["kernels"]["megablox-bf16"]["backend"] == "interpret"


def test_megablox_fails_when_handed_wrong_group_sizes():
    """The same third-party kernel, wired with group sizes shifted by one expert (a
    metadata bug in the caller), fails every smoke case it runs on."""
    import dataclasses

    from fp8check.inputs import cases
    from fp8check.layers.op import build_problem, validate_case
    from fp8check.profiles import get_profile

    good = megablox_bf16("interpret")

    def shifted(lhs, rhs, group_sizes, out_dtype):
        return good.fn(lhs, rhs, np.roll(np.asarray(group_sizes), 1), out_dtype)

    bad = dataclasses.replace(good, name="megablox-shifted-groups", fn=shifted)
    verdicts = []
    for case in cases.build_suite("smoke"):
        if bad.matmul_claims.skip_reason(case.out_dtype, case.group_sizes, case.m) is None:
            prob = build_problem("gmm", case)
            res_good = validate_case(good, case, get_profile("strict"), prob)
            res_bad = validate_case(bad, case, get_profile("strict"), prob)
            assert res_good.passed, res_good.failed_criteria
            verdicts.append((res_bad.passed, res_bad.failed_criteria))
    assert verdicts and all(not passed and "bound_ratio" in failed for passed, failed in verdicts)
