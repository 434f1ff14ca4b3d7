"""The integer-digit paths of the e4m3 gmm reference (`fp8check.references.intdot`: AMX
int8 tiles, AVX512-VNNI int16 dot products): exact partials against exact rationals,
results independent of the row split, K = 0, a forked child.  A path this CPU lacks is
skipped, saying so (test_amx.py and test_vnni.py require each wherever the CPU has it;
their bit-identity with the float64 BLAS path is in test_partials_paths.py, and the
rational-oracle recipe tests of test_gmm_reference.py run through the fastest one)."""

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from fp8check.references import amx, intdot, vnni
from tests.oracle import E4M3_CODES, e4m3_partials_rn32

CODES = np.array(E4M3_CODES, np.uint8)
E4M3 = ml_dtypes.float8_e4m3fn
PATHS = pytest.mark.parametrize(
    "module", [pytest.param(m, id=m.__name__.rsplit(".", 1)[1],
                            marks=pytest.mark.skipif(not m.AVAILABLE,
                                                     reason=f"path {m.STATUS}"))
               for m in (amx, vnni)])


@PATHS
@pytest.mark.parametrize("rows", [1, 19, 48])
def test_partials_are_the_exact_dot_products(module, rows):
    """One K block with unit scales: deepgemm's fma(1, P, 0) is the partial RN32(P)
    itself, against the rational oracle; rows of the largest magnitude and digit sums
    (+-448, 0.9375) next to random codes."""
    rng = np.random.default_rng()
    n = 48
    a = rng.choice(CODES, (rows, 128))
    b = rng.choice(CODES, (128, n))
    a[0], b[:, 0] = 0x7E, 0xFE  # 448 x -448 throughout: -128 * 448^2
    a[-1, ::2], b[::3, -1] = 0x37, 0x37
    out = np.empty((rows, n), np.float32)
    module.PATH.gmm(a, np.ones((rows, 1), np.float32), b[None], np.ones((1, 1, 1), np.float32),
             np.array([0, rows]), "deepgemm", out)
    np.testing.assert_array_equal(out, np.float32(e4m3_partials_rn32(a, b)))


@PATHS
@pytest.mark.parametrize("rows, parts", [(1, None), (19, 3), (48, 5)])
def test_exact_partials_are_the_exact_dot_products(module, rows, parts):
    """The exact recipe's float64 partials, two K blocks, N not a multiple of 16, against
    exact rationals (each partial is exact in float64), whatever the row split; the
    largest magnitudes and digit sums (+-448, 0.9375) next to random codes."""
    from fractions import Fraction

    rng = np.random.default_rng()
    n = 37
    a = rng.choice(CODES, (rows, 256))
    b = rng.choice(CODES, (256, n))
    a[0], b[:, 0] = 0x7E, 0xFE
    a[-1, ::2], b[::3, -1] = 0x37, 0x37
    got = module.PATH.exact_partials(a, module.PATH.pack_rhs(b), n, parts)
    av, bv = (x.view(E4M3).astype(np.float64) for x in (a, b))
    assert got.shape == (2, rows, n)
    for kb in range(2):
        blk = slice(128 * kb, 128 * (kb + 1))
        for i in range(rows):
            for j in range(n):
                want = sum((Fraction(x) * Fraction(y) for x, y in zip(av[i, blk], bv[blk, j],
                                                                      strict=True)),
                           Fraction(0))
                assert Fraction(float(got[kb, i, j])) == want, (kb, i, j)
    # into the front of a reused buffer (left with other values): the same bits, nothing
    # written past the result
    scratch = np.full(got.size + 5, np.nan)
    again = module.PATH.exact_partials(a, module.PATH.pack_rhs(b), n, parts, scratch=scratch)
    assert np.shares_memory(again, scratch) and np.isnan(scratch[got.size:]).all()
    np.testing.assert_array_equal(again.view(np.uint64), got.view(np.uint64))


@PATHS
def test_exact_partials_refuse_a_short_or_wrong_scratch(module):
    a, b = np.zeros((3, 128), np.uint8), module.PATH.pack_rhs(np.zeros((128, 20), np.uint8))
    for bad in (np.empty(3 * 20 - 1), np.empty(3 * 20, np.float32), np.empty((3, 20))):
        with pytest.raises(ValueError, match="scratch must be flat contiguous float64"):
            module.PATH.exact_partials(a, b, 20, scratch=bad)


@PATHS
@pytest.mark.parametrize("parts", [2, 3, 7])
def test_result_does_not_depend_on_the_row_split(module, parts):
    """Shares cut inside groups, between them and past empty ones give the bits of one
    share (every recipe, rows outside the groups left alone)."""
    rng = np.random.default_rng()
    m, k, n = 90, 512, 200
    a = rng.choice(CODES, (m, k))
    sa = np.exp2(rng.integers(-10, 10, (m, k // 128))).astype(np.float32)
    b = rng.choice(CODES, (4, k, n))
    sb = rng.uniform(0.5, 1, (4, k // 128, 2)).astype(np.float32)
    offsets = np.array([0, 30, 30, 71, 85])
    for recipe in intdot.RECIPE_CODES:
        outs = []
        for p in (1, parts):
            out = np.full((m, n), np.nan, np.float32)
            module.PATH.gmm(a, sa, b, sb, offsets, recipe, out, parts=p)
            outs.append(out)
        assert np.isnan(outs[1][85:]).all() and not np.isnan(outs[1][:85]).any()
        np.testing.assert_array_equal(outs[1].view(np.uint32), outs[0].view(np.uint32))


@PATHS
def test_k_zero_overwrites_the_group_rows_with_zeros(module):
    out = np.full((9, 20), np.nan, np.float32)
    module.PATH.gmm(np.zeros((9, 0), np.uint8), np.zeros((9, 0), np.float32),
             np.zeros((2, 0, 20), np.uint8), np.zeros((2, 0, 1), np.float32),
             np.array([0, 3, 7]), "deepgemm", out, parts=2)
    assert (out[:7] == 0).all() and np.isnan(out[7:]).all()


@pytest.mark.parametrize("sizes", [[30, 0, 41, 14], [0, 0, 5, 0], [1] * 40, [800, 1, 1, 1],
                                   [0, 0]])
@pytest.mark.parametrize("parts", [1, 2, 3, 8])
def test_row_shares_cover_the_groups_at_panel_starts(sizes, parts):
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    cuts = intdot.row_shares(offsets, parts)
    assert cuts.shape == (parts + 1,) and cuts[0] == 0 and cuts[-1] == offsets[-1]
    assert (np.diff(cuts) >= 0).all()
    g = np.searchsorted(offsets, cuts[1:-1], side="right") - 1  # each inner cut's group
    assert ((cuts[1:-1] - offsets[g]) % 8 == 0).all()  # at one of its 8-row panels
    # Balanced: a share holds the panels whose cost-so-far falls in its even slice, so
    # it costs less than the slice plus its last unit (a group's first panel: 2) plus
    # the rhs packing of a group it starts inside (1).
    panels = -(-np.diff(offsets) // 8)
    total = panels.sum() + (panels > 0).sum()
    for r0, r1 in zip(cuts[:-1], cuts[1:], strict=True):
        rows = np.clip(offsets[1:], r0, r1) - np.clip(offsets[:-1], r0, r1)
        cost = (-(-rows // 8)).sum() + (rows > 0).sum()
        assert cost < total / parts + 3


_FORK_SCRIPT = """
import multiprocessing
import sys
import numpy as np, ml_dtypes
from fp8check.references import QTensor, gmm
rng = np.random.default_rng()
codes = np.array([c for c in range(256) if c & 0x7F != 0x7F], np.uint8)
e4m3 = ml_dtypes.float8_e4m3fn
lhs = QTensor(rng.choice(codes, (20, 128)).view(e4m3), np.ones((20, 1), np.float32),
              (1, 128), "e4m3fn", "deepgemm")
rhs = QTensor(rng.choice(codes, (1, 128, 64)).view(e4m3), np.ones((1, 1, 1), np.float32),
              (128, 128), "e4m3fn", "deepgemm")
gs = np.array([20], np.int32)
from fp8check.references.gmm import PARTIALS
assert PARTIALS == sys.argv[1], PARTIALS
want = gmm(lhs, rhs, gs)  # the parent's thread pool now exists
with multiprocessing.get_context("fork").Pool(1) as pool:
    got = pool.apply_async(gmm, (lhs, rhs, gs)).get(timeout=60)
assert (got.view(np.uint32) == want.view(np.uint32)).all()
print("ok")
"""


@PATHS
def test_a_forked_child_computes_too(module):
    """The thread pool does not survive fork; a child forked after the parent used the
    path must still get its result (not wait forever on the parent's threads).  In a
    fresh interpreter: forking a test worker that has loaded JAX is unsafe in itself."""
    env = dict(os.environ, FP8CHECK_AMX="1" if module is amx else "0")
    done = subprocess.run([sys.executable, "-c", _FORK_SCRIPT, module.STATUS], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
