"""Third-party adapter: tokamax's FP8 ragged dot (Mosaic-TPU Pallas kernel, interpret mode
on the CPU), gated on the smoke suite at layers 0 and 1 (docs/peers-kernels.md)."""

import json

import ml_dtypes
import numpy as np

from fp8check.cli import main
from fp8check.contracts import NUMPY_DTYPES, call_kernel
from fp8check.kernels.adapters.tokamax import tokamax_fp8
from fp8check.layers.op.criteria import same_bits
from fp8check.references.gmm import gmm
from fp8check.references.quant import QTensor


def test_tokamax_passes_smoke_and_compiles_for_tpu_without_fma(tmp_path, monkeypatch):
    """Layer 1: every smoke case passes, bit for bit under accum "tokamax" where the block
    partials are exact.  Layer 0: the kernel compiles for v5e, v6e and v5p, and no LLO has
    a fused multiply-add, which is what makes its scale step "tokamax" on the chip."""
    monkeypatch.chdir(tmp_path)
    rc = main(["gate", "--kernel", "tokamax-fp8", "--suite", "smoke", "--layers", "0,1",
               "--no-progress", "--json", "t.json"])
    doc = json.loads((tmp_path / "t.json").read_text())
    assert rc == 0 and doc["summary"]["passed"]
    env = doc["environment"]["kernels"]["tokamax-fp8"]
    assert (env["backend"], env["accum"]) == ("interpret", "tokamax")
    op = [r for r in doc["results"] if r["layer"] == 1]
    native = [r for r in doc["results"] if r["layer"] == 0]
    assert op and all(r["passed"] for r in op)
    exact = [r for r in op if r["metrics"]["exact_partials"]]
    assert exact and all(r["criteria"]["bit_exact"]["passed"] for r in exact)
    assert {r["case"].rsplit("-", 1)[1] for r in native} == {"v5e", "v6e", "v5p"}
    assert all(r["passed"] and r["metrics"]["llo_fused_multiply_add"] is False
               for r in native)


def test_its_recipe_is_tokamax_bit_for_bit_where_the_recipes_differ():
    """The gate's exact-partial cases have power-of-two (ue8m0) scales, on which every
    recipe gives the same bits; here the scales are not powers of two and the fp8 values
    small integers (|P| <= 128 * 16 < 2^24: every block partial exact in f32, in any
    order), so the three recipes differ and the kernel must match "tokamax" alone."""
    spec = tokamax_fp8("interpret")
    rng = np.random.default_rng(23)
    m, k, n, gs = 200, 512, 256, np.array([70, 0, 100, 17], np.int32)
    fp8 = ml_dtypes.float8_e4m3fn
    lhs = QTensor(rng.integers(-4, 5, (m, k)).astype(np.float32).astype(fp8),
                  rng.uniform(0.01, 3.0, (m, k // 128)).astype(np.float32), (1, 128),
                  "e4m3fn", "deepgemm")
    rhs = QTensor(rng.integers(-4, 5, (gs.size, k, n)).astype(np.float32).astype(fp8),
                  rng.uniform(0.01, 3.0, (gs.size, k // 128, n // 128)).astype(np.float32),
                  (128, 128), "e4m3fn", "deepgemm")
    rows = int(gs.sum())
    for out in ("f32", "bf16"):
        got = call_kernel(spec, (lhs.values, lhs.scales, rhs.values, rhs.scales, gs), out)
        want = {r: gmm(lhs, rhs, gs, out_dtype=NUMPY_DTYPES[out], accum=r)[:rows]
                for r in ("tokamax", "cublas", "deepgemm")}
        assert got.dtype == NUMPY_DTYPES[out] and got.shape == (m, n)
        assert same_bits(got[:rows], want["tokamax"]), out
        assert not same_bits(want["tokamax"], want["cublas"]), out
        assert not same_bits(want["tokamax"], want["deepgemm"]), out


def test_adapters_run_only_when_named():
    """A gate that names no kernel runs the project's kernels and megablox, not the
    opt-in third-party adapters (whose packages are the `adapters` extra)."""
    from fp8check import registry

    assert "tokamax-fp8" in registry.BUILTIN_KERNELS
    assert set(registry.OPT_IN_KERNELS) <= set(registry.BUILTIN_KERNELS)
    default = registry.default_kernels()
    assert "megablox-bf16" in default and not set(registry.OPT_IN_KERNELS) & set(default)
