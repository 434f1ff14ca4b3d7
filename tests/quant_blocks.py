"""Adversarial quantizer inputs shared by the oracle and peer-port tests."""

import numpy as np

_E4M3_MAX = 448.0


def amax_near_powers_of_two(exponents, ulps: int = 9) -> np.ndarray:
    """float32 amaxes whose RN(amax/448) is each float32 from `ulps` below to `ulps` above
    2^k, for each k: the float32 next to RN(448 s) (the product is exact in float64) that
    divides back to s, or RN(448 s) itself where none does (the tests check the reach)."""
    pow2 = (np.asarray(exponents, np.int64) + 127) << 23
    target = (pow2[:, None] + np.arange(-ulps, ulps + 1)[None, :]).ravel()
    s = target.astype(np.uint32).view(np.float32)
    base = (s.astype(np.float64) * _E4M3_MAX).astype(np.float32).view(np.int32)
    amax = base.view(np.float32).copy()
    for step in (2, -2, 1, -1, 0):  # the last assignment wins: prefer the nearest
        c = (base + step).view(np.float32)
        hit = (c / np.float32(_E4M3_MAX)).astype(np.float32) == s
        amax[hit] = c[hit]
    return amax


def blocks(rng, amaxes: np.ndarray, rows: int) -> np.ndarray:
    """[rows, 128 * len(amaxes)] float32: column block j has amax amaxes[j] (one entry +-a),
    the rest uniform in [-a, a] with a value just under a (near the fp8 max), fp8-subnormal
    and float32-subnormal values, and a zero."""
    a = np.repeat(amaxes.astype(np.float32), 128)[None, :]
    x = (rng.uniform(-1, 1, (rows, a.shape[1])) * a).astype(np.float32)
    x[:, 1::128] = (a[:, 1::128] * np.float32(1 - 2.0**-20)).astype(np.float32)
    x[:, 2::128] = (a[:, 2::128] * np.float32(2.0**-14)).astype(np.float32)
    x[:, 3::128] = np.float32(1e-40) * rng.choice([-1, 1], (rows, len(amaxes)))
    x[:, 4::128] = 0.0
    r = rng.integers(0, rows, len(amaxes))
    x[r, np.arange(len(amaxes)) * 128 + 5] = a[0, ::128] * rng.choice([-1, 1], len(amaxes))
    return x
