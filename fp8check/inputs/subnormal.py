"""Operands whose matmul outputs and partial sums lie in the float32 subnormal range, and
on which every valid float32 evaluation order is exact.

`subnormal_inputs(rng, m, k, n, g)` returns float32 x [M,K], w [G,K,N], dy [M,N].  Quantized
with `SUBNORMAL_RECIPE` (transformer-engine-pow2: no amax floor, unlike DeepGEMM's 1e-4,
so the scales follow the data down) the scales are exactly sa = 2^-66 (every 1x128 block
of x) and sb = 2^-65 (every 128x128 block of w), sa sb = 2^-131, and the fp8 values are
x / sa and w / sb exactly.  Construction, per K block of 128:

* one position p_a carries +-448 sa in every row of x (the block's amax), and w is zero
  in row p_a; another position p_b carries +-448 sb in every column of w, and x is zero
  in column p_b.  So the quantization is exact and the amax terms contribute 0.
* every other value is i 2^-3 2^-j times the scale, i an integer in [-16, 16] (|q| <= 2,
  an e4m3 value: at most 4 significant bits, exponent >= -9) and j a "shrink" in [0, 6]
  per row of x, per (expert, column) of w and per column of dy: it spreads the outputs
  down to the smallest subnormals.

Why every valid order of gmm-fp8 and gmm is exact: an output (i, c) sums K terms
sa sb qa qb with qa qb a multiple of 2^-(6 + ja + jb) of magnitude <= 4 2^-(ja + jb), so
every term and every partial sum is a multiple of L = 2^-(137 + ja + jb) below
K 4 2^-(131 + ja + jb) < 2^24 L (for K < 2^28): a float32 (subnormal or not), exact.
Every other product a valid order forms is exact too: RN(sa sb) = 2^-131 (a subnormal
power of two), sa qa and sb qb are normal with <= 4 significant bits, a 128-wide fp8
partial P_b is a multiple of 2^-(6 + ja + jb) below 2^11, and 2^-131 P_b is again a
multiple of L below 2^24 L.  The bf16 operands of gmm (x.astype(bf16)) are exact (<= 4
significant bits), and a product of two is x w itself, a multiple of L: exact.
tgmm (x^T dy per group, over the group's rows): dy = i 2^-3 2^-jd sb; a term with
k != p_a is a multiple of 2^-(143 + jd) (ja <= 6) below 4 2^-(131 + jd), and M_g of them
stay below 2^24 2^-(143 + jd) when M_g < 1024 (`subnormal_inputs` checks m < 1024); the
column k = p_a has terms 7 i 2^-(128 + jd), M_g 112 of those units stay below 2^24.
Outputs span about 2^-149 .. 2^-119 (tgmm's p_a columns reach 2^-112).
"""

from __future__ import annotations

import numpy as np

from fp8check.references.quant import BLOCK

SUBNORMAL_DIST = "subnormal"
"""The distribution name of the subnormal family's cases."""
SUBNORMAL_RECIPE = "transformer-engine-pow2"
"""Its quantization recipe: power-of-two scales with no amax floor."""
SA, SB = 2.0**-66, 2.0**-65  # the block scales the data quantizes to; SA * SB = 2^-131
_AMAX_Q = 448.0  # e4m3fn's largest finite value: the amax element of every block
_SMALL_INT, _SMALL_EXP, _SHRINK_MAX = 16, -3, 6
_MAX_ROWS = 1024  # tgmm's exactness needs M_g < 1024 (module docstring)


def subnormal_inputs(rng: np.random.Generator, m: int, k: int, n: int,
                     g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x [M,K], w [G,K,N], dy [M,N]) float32 of the subnormal family (module docstring).
    ValueError when m >= 1024 (tgmm would not be exact) or a K block is narrower than 2."""
    if m >= _MAX_ROWS:
        raise ValueError(f"subnormal_inputs: m must be < {_MAX_ROWS}, got {m}")
    if k % BLOCK == 1:
        raise ValueError("subnormal_inputs: the last K block needs at least 2 columns")
    x = _small(rng, (m, k)) * _shrink(rng, (m, 1))
    w = _small(rng, (g, k, n)) * _shrink(rng, (g, 1, n))
    dy = _small(rng, (m, n)) * _shrink(rng, (1, n))
    for b0 in range(0, k, BLOCK):
        p_a, p_b = b0 + rng.choice(min(BLOCK, k - b0), size=2, replace=False)
        x[:, p_a] = _AMAX_Q * rng.choice((-1.0, 1.0), size=m)
        w[:, p_a, :] = 0.0
        w[:, p_b, :] = _AMAX_Q * rng.choice((-1.0, 1.0), size=(g, n))
        x[:, p_b] = 0.0
    # Powers of two: the products with SA, SB are exact in float64 and in float32.
    return ((x * SA).astype(np.float32), (w * SB).astype(np.float32),
            (dy * SB).astype(np.float32))


def _small(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    ints = rng.integers(-_SMALL_INT, _SMALL_INT + 1, size=shape)
    return np.ldexp(ints.astype(np.float64), _SMALL_EXP)


def _shrink(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return np.exp2(-rng.integers(0, _SHRINK_MAX + 1, size=shape).astype(np.float64))
