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
