"""Layer 3 on the Triton family (interpret mode is slow: the 8-step smoke schedule, a
wiring check) and the cross-framework contract: same initialisation and data, so the two
families' models agree at step 0."""

from __future__ import annotations

import numpy as np
import pytest

import fp8check.kernels.triton  # noqa: F401  (sets TRITON_INTERPRET before triton loads)
from fp8check.layers.moe import family_matmuls
from fp8check.layers.training import SUITES, iter_layer3, layer3_size
from fp8check.layers.training.jax_model import make_grad_fn as jax_grad_fn
from fp8check.layers.training.model import init_params
from fp8check.layers.training.task import make_task


def test_triton_smoke_passes_and_matches_pallas_at_step0():
    out = [r.to_dict() for r in iter_layer3("triton", "smoke")]
    [tc] = SUITES["smoke"]["torch"]
    assert [r["kernel"] for r in out] == ["triton-train-fp8", "triton-train-bf16"]
    assert len(out) == layer3_size("smoke")
    for r in out:
        assert r["passed"] is True and r["error"] is None, r["failed"]
        assert r["case"] == tc.case_id(0) and r["layer"] == 3
        assert "learned_fraction" not in r["criteria"] and "learned_note" in r["metrics"]
    curves = out[0]["metrics"]["curves"]
    assert all(len(c) == tc.schedule.steps for c in curves.values())
    assert curves["fp8"][-1] < curves["fp8"][0]  # 8 steps already move the loss down
    task = make_task()
    tokens, targets = task.batch(0, 0, tc.schedule.tokens)
    for v in ("fp8", "bf16"):
        pallas = family_matmuls("pallas").variant(v)
        loss, grads = jax_grad_fn(tc.model, pallas)(init_params(tc.model, 0), tokens, targets)
        assert curves[v][0] == pytest.approx(loss, rel=2e-3), v
        assert np.all(np.isfinite(grads["b0.wi"]))
