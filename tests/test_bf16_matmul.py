"""The exact bf16 matmul on integer dot products (`references.bf16_matmul`, behind tgmm,
dgrad and plain gmm where the CPU has AMX or AVX512-VNNI), each of its kernels (AMX int8
tiles, VNNI int16 dot products) where this CPU runs it: bit for bit the value that exact
rationals, the term-by-term superaccumulator and the split path (the integer path off)
give, on data built against its window, its residual corrections, its fixed point and
its fallback."""

import os
import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fp8check.references import bf16_matmul, dgrad, matmul, tgmm
from fp8check.references.exact import precision_of
from tests import amx_emulation
from tests.test_exact_matmul import (
    BF16,
    FMT,
    OUT_DTYPES,
    _boundary_problem,
    _f32,
    _oracle,
    _same_bits,
)

EMULATED = "amx-int8-emulated"
"""amx_bf16.c on software tiles (tests/amx_emulation.py): its logic tested without AMX."""


@pytest.fixture(params=[*bf16_matmul.KERNELS, EMULATED])
def kernel(request, monkeypatch):
    """Each kernel in turn as the one exact_matmul runs (skipped where this CPU lacks it),
    and the AMX kernel on software tiles as "amx-int8"."""
    name = request.param
    if name == EMULATED:
        name = "amx-int8"
        emulated = amx_emulation.bf16_kernel()
        if isinstance(emulated, str):
            pytest.skip(f"no software AMX tiles here: {emulated}")
        monkeypatch.setitem(bf16_matmul.KERNELS, name, (emulated, ""))
    lib, why = bf16_matmul.KERNELS[name]
    if lib is None:
        pytest.skip(f"the {name} kernel is off here: {why}")
    with bf16_matmul.kernel(name):
        yield request.param


@pytest.fixture
def kernel_calls(monkeypatch, kernel):
    """The rows flagged in each product the kernel made, appended as it runs."""
    calls: list[np.ndarray] = []
    real = bf16_matmul.matmul

    def recorded(*args):
        flags = real(*args)
        calls.extend(flags)
        return flags

    monkeypatch.setattr(bf16_matmul, "matmul", recorded)
    return calls


def _split_path(a, b, dt):
    """exact_matmul with the integer path off: the split (or dense, or term) path."""
    with bf16_matmul.kernel(None):
        return matmul.exact_matmul(a, b, dt)


def _adversarial(rng, m, k, n):
    """bf16 a [m, k], b [k, n] (m, n >= 7): Gaussian values, a few scaled by 2^-15 ..
    2^-40 (residuals below their line's window, few enough for the integer path), a line of
    subnormals (2^-133 ..) and a few subnormals among normal values (residuals), an
    all-zero row and column, a row and a column near bf16's largest value (float32
    outputs overflow), exact cancellations, signed zeros."""
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    for x in (a, b.T):
        wide = rng.random(x.shape) < 0.005
        x[wide] *= np.exp2(-rng.integers(15, 41, wide.sum()))
        x[1] = rng.choice([-1, 1], k) * np.exp2(rng.integers(-133, -126, k))
        x[0, :2] = [2.0**-133, -(2.0**-127)]
        x[2] = 0.0
        x[2, 0] = -0.0
        x[3] = rng.choice([-1, 1], k) * rng.uniform(2.0e38, 3.3e38, k)  # bf16's max: 3.39e38
        x[4, :2] = [1.5, -1.5]
    a[5] = a[6]  # a row that cancels another's terms in the sum with b's sign flip below
    return a.astype(BF16), b.astype(BF16)


@pytest.mark.parametrize("m, k, n", [(37, 70, 29), (16, 64, 16), (50, 300, 33),
                                     (7, 1030, 40)])
def test_kernel_matches_the_superaccumulator_and_the_split_path(kernel_calls, m, k, n):
    """Sizes off the kernels' units (AMX: 16 rows and columns, 64 positions; VNNI: 8 rows,
    16 columns, 128 positions, and a half pair at odd lengths), C, Fortran and strided
    layouts of each operand; the kernel runs (no fallback) and corrects residuals."""
    rng = np.random.default_rng(m * k + n)
    a, b = _adversarial(rng, m, k, n)
    [((_, res_a), (_, res_b), _)] = bf16_matmul.operand_lines([(a, b)], bf16_matmul.WINDOW)
    assert res_a.any() and res_b.any()  # the correction runs
    layouts = [(a, b), (np.asfortranarray(a), np.asfortranarray(b)),
               (np.repeat(a, 2, axis=1)[:, ::2], np.repeat(b, 3, axis=0)[::3])]
    for dt in OUT_DTYPES:
        with np.errstate(over="ignore"):  # past float32's range: inf, as asked
            want = matmul.exact_matmul_terms(_f32(a), _f32(b), *precision_of(dt)).astype(dt)
        _same_bits(_split_path(a, b, dt), want)
        for x, y in layouts:
            _same_bits(matmul.exact_matmul(x, y, dt), want)
    assert len(kernel_calls) == 3 * len(OUT_DTYPES)


def test_kernel_on_rounding_boundaries_matches_rationals(kernel_calls):
    """Ties, near-ties broken far down, cancellation to subnormals, overflow (the rows of
    tests/test_exact_matmul.py's boundary problem): the elements the kernel leaves NaN (a
    term 2^-130 below its row's largest, past its fixed point) take the exact fallback and
    every element equals the rational oracle."""
    a, b = _boundary_problem(np.random.default_rng(7), BF16)
    for dt in OUT_DTYPES:
        _same_bits(matmul.exact_matmul(a, b, dt), _oracle(a, b, FMT[dt]))
    assert len(kernel_calls) == len(OUT_DTYPES)
    assert sum(int(f.sum()) for f in kernel_calls) > 0  # some elements were left to it


def test_kernel_small_adversarial_cases_match_rationals(kernel_calls):
    """Wide spreads, subnormals, zeros, values near bf16's max: against exact rationals."""
    rng = np.random.default_rng(21)
    a, b = _adversarial(rng, 9, 40, 7)
    for dt in OUT_DTYPES:
        _same_bits(matmul.exact_matmul(a, b, dt), _oracle(a, b, FMT[dt]))
    assert kernel_calls


def test_kernel_declines_what_it_cannot_carry(kernel_calls):
    """A non-finite value, or residuals too many for the correction, send exact_matmul to
    the paths below it (the same bits, tested there); a contraction past MAX_K too."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((20, 50)).astype(BF16)
    b = rng.standard_normal((50, 10)).astype(BF16)
    a[3, 4] = np.inf
    want = _split_path(a, b, np.float32)
    _same_bits(matmul.exact_matmul(a, b, np.float32), want)
    wide = (rng.standard_normal((20, 50)) * np.exp2(rng.integers(-60, 60, (20, 50))))
    _same_bits(matmul.exact_matmul(wide.astype(BF16), b, np.float32),
               _split_path(wide.astype(BF16), b, np.float32))
    assert not kernel_calls


def test_a_batch_takes_each_product_down_its_own_path(kernel_calls, monkeypatch):
    """`exact_matmuls` over products bound for different paths, in one batch: finite bf16
    (the kernel), an infinity in a (the split path, IEEE values), residuals too many for
    the correction, float32 operands (both the split path), an empty contraction (zeros):
    the kernel makes exactly the finite one, the split path exactly the other three, and
    each product's bits are those of its path alone (the rationals for the kernel's)."""
    split: list[tuple] = []
    real = matmul._split_matmul
    monkeypatch.setattr(matmul, "_split_matmul", lambda *p: split.append(p) or real(*p))
    rng = np.random.default_rng(8)
    fine, _ = _adversarial(rng, 40, 60, 9)  # 40 rows: the infinity's row of residuals
    # alone is within the correction's budget, so only finiteness declines that product
    b = rng.standard_normal((60, 9)).astype(BF16)
    inf = fine.copy()
    inf[4, 7] = -np.inf
    wide = (rng.standard_normal((40, 60)) * np.exp2(rng.integers(-60, 60, (40, 60))))
    wide = wide.astype(BF16)
    f32a, f32b = _f32(fine), _f32(b)
    products = [(fine, b), (inf, b), (wide, b), (f32a, f32b), (fine[:, :0], b[:0])]
    for dt in OUT_DTYPES:
        outs = [np.full((40, 9), np.nan, dt) for _ in products]
        split.clear()
        kernel_calls.clear()
        matmul.exact_matmuls([(x, y, o) for (x, y), o in zip(products, outs, strict=True)])
        assert len(kernel_calls) == 1 and len(split) == 3
        assert all(p[0] is x for p, x in zip(split, (inf, wide, f32a), strict=True))
        with np.errstate(over="ignore"):
            _same_bits(outs[0], _oracle(fine, b, FMT[dt]))
        for (x, y), o in zip(products[1:4], outs[1:4], strict=True):
            _same_bits(o, _split_path(x, y, dt))
        assert (outs[4] == 0).all()


def test_kernel_residual_terms_on_both_sides_of_the_unit(kernel_calls):
    """Residual columns and rows whose terms fall on t1's unit, just above and far below
    it (the kernel's int64 terms and its fixed point): b's residuals 2^-16 .. 2^-31 below
    their columns' largest, a's values at those positions from their row's largest down
    to residuals of their own (a2 b2 products), subnormals, zeros, values near bf16's max
    (float32 and bfloat16 outputs overflow); against the term-by-term superaccumulator."""
    rng = np.random.default_rng(31)
    m, k, n = 45, 150, 40
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    b[:, ::2] /= np.abs(b[:, ::2]).max(axis=0)  # columns' largest near 1: shifts known
    for j in range(0, n, 2):
        t = rng.integers(0, k, 2)
        b[t, j] = rng.choice([-1, 1], 2) * np.exp2(-16 - rng.integers(0, 16, 2))
        a[rng.integers(0, m, 6), t[0]] = rng.choice([-1, 1], 6) * np.exp2(
            rng.integers(-40, 2, 6))
    a[1, :] = np.exp2(rng.integers(-133, -126, k))  # subnormals
    a[2, :] = 0.0
    a[3, :] *= 2.0**125  # near bf16's max: sums past float32's
    b[:, 5] = 0.0
    a, b = a.astype(BF16), b.astype(BF16)
    for dt in OUT_DTYPES:
        with np.errstate(over="ignore"):
            want = matmul.exact_matmul_terms(_f32(a), _f32(b), *precision_of(dt)).astype(dt)
        _same_bits(matmul.exact_matmul(a, b, dt), want)
        _same_bits(matmul.exact_matmul(np.asfortranarray(a), np.asfortranarray(b), dt), want)
    assert len(kernel_calls) == 2 * len(OUT_DTYPES)


def test_kernel_sums_past_2_to_53_units(kernel_calls):
    """Values in [1.9, 2) of one sign: every digit integer near 2^23, t1 near 2^57 units,
    beyond float64's integers (the kernel takes those elements through its exact fixed
    point); one residual row too."""
    rng = np.random.default_rng(4)
    a = (1.9 + 0.099 * rng.random((20, 1030))).astype(BF16)
    b = (1.9 + 0.099 * rng.random((1030, 18))).astype(BF16)
    a[3, 5] = 2.0**-40
    for dt in OUT_DTYPES:
        want = matmul.exact_matmul_terms(_f32(a), _f32(b), *precision_of(dt)).astype(dt)
        _same_bits(matmul.exact_matmul(a, b, dt), want)
    assert len(kernel_calls) == len(OUT_DTYPES)


def _digit_extremes(rng, m, k, n, case):
    """bf16 a [m, k], b [k, n] whose balanced 12-bit digits (vnni_bf16.c) drive one of the
    int32 sums of the first 384 positions (a run of three K blocks) to its bound:
    "H": every value 255/128 at its line's largest exponent (h = 2040, l = 0), one sign;
    "L": every value but each line's last (its largest, 1.0) an odd significand 2^-4 down
    (l = -2048: the run's sum of l_a l_b is 384 * 2^22, and would reach 2^31 over 512);
    "M": a as "H", b as "L" (h_a l_b = -2040 * 2048 at each position)."""
    top = np.full((m, k), 255 / 128), np.full((k, n), 255 / 128)
    low = [rng.choice([-1, 1], shape) * (1 + (2 * rng.integers(0, 64, shape) + 1) / 128) / 16
           for shape in ((m, k), (k, n))]
    low[0][:, -1], low[1][-1, :] = 1.0, 1.0
    a, b = {"H": top, "L": low, "M": (top[0], low[1])}[case]
    return a.astype(BF16), b.astype(BF16)


@pytest.mark.parametrize("case", ["H", "L", "M"])
def test_kernel_digit_sums_at_their_bounds(kernel_calls, case):
    """Data that takes each int32 digit sum of a run of K blocks to its bound (no
    residuals; t1 past 2^53 units in the "H" case, the exact fixed point's), lines of 520
    positions (a run of three blocks and one of the rest): against the term-by-term
    superaccumulator."""
    a, b = _digit_extremes(np.random.default_rng(5), 9, 520, 17, case)
    [((_, res_a), (_, res_b), _)] = bf16_matmul.operand_lines([(a, b)], bf16_matmul.WINDOW)
    assert not res_a.any() and not res_b.any()
    for dt in OUT_DTYPES:
        want = matmul.exact_matmul_terms(_f32(a), _f32(b), *precision_of(dt)).astype(dt)
        _same_bits(matmul.exact_matmul(a, b, dt), want)
    assert len(kernel_calls) == len(OUT_DTYPES)


def test_tgmm_and_dgrad_on_the_kernel_equal_the_split_path(kernel_calls):
    """Groups of realistic size with an empty one and a residual row past the last group;
    Gaussian values with a few far below their lines (residuals)."""
    rng = np.random.default_rng(13)
    m, k, n = 600, 200, 90
    x, dy = rng.standard_normal((m, k)), rng.standard_normal((m, n))
    w = rng.standard_normal((3, k, n))
    for v in (x, dy, w):
        v[rng.random(v.shape) < 0.002] *= 2.0**-30
    x, dy, w = (v.astype(BF16) for v in (x, dy, w))
    gs = np.array([250, 0, 333], np.int32)
    for dt in OUT_DTYPES:
        got = tgmm(x, dy, gs, out_dtype=dt), dgrad(dy, w, gs, out_dtype=dt)
        with bf16_matmul.kernel(None):
            want = tgmm(x, dy, gs, out_dtype=dt), dgrad(dy, w, gs, out_dtype=dt)
        for g, v in zip(got, want, strict=True):
            _same_bits(g, v)
        assert (got[0][1] == 0).all() and (got[1][583:] == 0).all()
    assert len(kernel_calls) == 4 * len(OUT_DTYPES)


@pytest.mark.skipif(not bf16_matmul.AVAILABLE, reason=f"the integer bf16 path is "
                                                       f"{bf16_matmul.STATUS} here")
def test_switches_give_the_same_bits(tmp_path):
    """FP8CHECK_AMX=0 and FP8CHECK_VNNI=0 in a fresh process: the integer path is off and
    tgmm, dgrad give the bits they give here on it."""
    script = (
        "import sys, numpy as np\n"
        "from fp8check.references import bf16_matmul, dgrad, tgmm\n"
        "from tests.test_bf16_matmul import _switch_problem\n"
        "x, dy, w, gs = _switch_problem()\n"
        "print(bf16_matmul.STATUS)\n"
        "np.savez(sys.argv[1], *[f(*args, out_dtype=dt) for dt in ('float64', 'float32',"
        " 'bfloat16') for f, args in ((tgmm, (x, dy, gs)), (dgrad, (dy, w, gs)))])\n")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, FP8CHECK_AMX="0", FP8CHECK_VNNI="0", PYTHONPATH=os.pathsep.join(
        [str(root), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "off.npz"
    done = subprocess.run([sys.executable, "-c", script, str(out)], env=env, cwd=root,
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ("off (amx-int8: FP8CHECK_AMX=0; "
                                   "avx512-vnni: FP8CHECK_VNNI=0)")
    x, dy, w, gs = _switch_problem()
    off = np.load(out)
    here = [f(*args, out_dtype=dt) for dt in (np.float64, np.float32, ml_dtypes.bfloat16)
            for f, args in ((tgmm, (x, dy, gs)), (dgrad, (dy, w, gs)))]
    for i, got in enumerate(here):
        _same_bits(got, off[f"arr_{i}"].view(got.dtype))


def _switch_problem():
    rng = np.random.default_rng(17)
    x, dy = rng.standard_normal((300, 130)), rng.standard_normal((300, 70))
    w = rng.standard_normal((2, 130, 70))
    for v in (x, dy, w):
        v[rng.random(v.shape) < 0.003] *= 2.0**-25
    return (*(v.astype(BF16) for v in (x, dy, w)), np.array([120, 170], np.int32))


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("axis", [0, 1])
def test_operand_lines_against_their_definition(kernel, axis, layout):
    """Each line's largest exponent field (at least 1; zeros skipped) and its residual
    count, against numpy on the bits, with lines contiguous or side by side, lengths off
    the vector width and line counts off the kernel's blocks of lines; values spread over
    many binades (residuals in most lines) and Gaussian ones with a residual in one line
    of a later block (the residual pass skips the others); a NaN or an infinity clears the
    finite flag."""
    rng = np.random.default_rng(axis + 2 * len(layout))
    for shape, spread in [((37, 70), True), ((5, 1030), True), ((64, 32), True),
                          ((3, 33), True), ((600, 300), False)]:
        x = rng.standard_normal(shape) * (np.exp2(rng.integers(-30, 5, shape)) if spread
                                          else 2.0**-30)
        x[-3, -2] = 2.0**-60
        x = x.astype(BF16)
        x[0, :3] = 0.0
        x[1] = 0.0
        x[2, :2] = [2.0**-133, -(2.0**-126)]
        xs = x if layout == "C" else np.asfortranarray(x)
        e, res, finite = _lines(xs, axis)
        bits = (x if axis == 1 else x.T).view(np.uint16).astype(np.int64)
        ex, nz = np.maximum((bits >> 7) & 0xFF, 1), (bits & 0x7FFF) != 0
        want_e = np.where(nz, ex, 1).max(axis=1)
        np.testing.assert_array_equal(e, want_e)
        want_res = (nz & (want_e[:, None] - ex > bf16_matmul.WINDOW)).sum(axis=1)
        np.testing.assert_array_equal(res, want_res)
        assert want_res.any() and (spread or (want_res > 0).mean() < 0.05)
        assert finite
        for value in (np.nan, -np.inf):
            y = xs.copy(order="K")
            y[2, 1] = value
            assert not _lines(y, axis)[2]


def _lines(x, axis):
    """`bf16_matmul.operand_lines`' result for x's rows (axis=1) or columns (axis=0), the
    other operand a matching all-zero one: (E, residuals, finite)."""
    other = np.zeros(x.shape[::-1], BF16)
    a, b = (x, other) if axis == 1 else (other, x)
    [(*lines, finite)] = bf16_matmul.operand_lines([(a, b)], bf16_matmul.WINDOW)
    return (*lines[axis == 0], finite)


def test_kernel_choice_is_checked_and_restored():
    """`kernel(name)` refuses a name it does not know and a kernel this CPU cannot run
    (one line, ValueError); `kernel(None)` switches the path off, and each restores the
    kernel that ran before on leaving."""
    before = bf16_matmul.STATUS, bf16_matmul.AVAILABLE
    with pytest.raises(ValueError, match=r"the tpu kernel cannot run here: not one of"):
        with bf16_matmul.kernel("tpu"):
            pass
    for name, (lib, why) in bf16_matmul.KERNELS.items():
        if lib is None:
            with pytest.raises(ValueError,
                               match=re.escape(f"the {name} kernel cannot run here: {why}")):
                with bf16_matmul.kernel(name):
                    pass
    with bf16_matmul.kernel(None):
        assert not bf16_matmul.AVAILABLE and bf16_matmul.STATUS.startswith("off (")
    assert (bf16_matmul.STATUS, bf16_matmul.AVAILABLE) == before
