"""What the third-party adapters' tests share: a gmm-fp8 problem on which the reference
accumulation recipes give different bits, so that matching one of them pins it."""

import ml_dtypes
import numpy as np

from fp8check.contracts import NUMPY_DTYPES, KernelSpec, call_kernel
from fp8check.layers.op.criteria import same_bits
from fp8check.references.gmm import gmm
from fp8check.references.quant import QTensor

RECIPES = ("tokamax", "cublas", "deepgemm")


def assert_recipe_bit_for_bit(spec: KernelSpec, recipe: str, seed: int) -> None:
    """`spec` (a gmm-fp8 kernel) equals `references.gmm(accum=recipe)` bit for bit on both
    output dtypes, on a problem where, in float32, `recipe` differs from the other RECIPES
    (rounded to bf16 the recipes' one-ulp differences mostly vanish: bf16 is checked for
    equality only).

    The gate's exact-partial cases have power-of-two (ue8m0) scales, on which every recipe
    gives the same bits; here the scales are not powers of two and the fp8 values small
    integers (|P| <= 128 * 16 < 2^24: every block partial exact in f32 in any order), so
    the recipes differ in their rounding of the scale step alone.  Groups are uneven, one
    empty, one of a single row, and sum(group_sizes) < M."""
    rng = np.random.default_rng(seed)
    m, k, n, gs = 200, 512, 256, np.array([70, 0, 1, 100, 17], np.int32)
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
                for r in RECIPES}
        assert got.dtype == NUMPY_DTYPES[out] and got.shape == (m, n)
        assert same_bits(got[:rows], want[recipe]), (spec.name, recipe, out)
        if out == "f32":
            assert all(not same_bits(want[recipe], want[r]) for r in RECIPES if r != recipe)
