"""The production check's one pass (`references.forward_refs.gmm_references`: the recipe,
the exact value and |A||B| from one pass over the exact partials, on each integer-digit
path this CPU runs: AMX int8 tiles, AVX512-VNNI) gives the bits of
`gmm(..., accum)`, `gmm(..., np.float64, "exact")` and `abs_product` on adversarial
operands: every e4m3 value, +-448 columns, all-zero blocks, sums that cancel to zero,
scales over many binades, empty groups, rows past the last group, N not a multiple of 16;
elements the certified rounding cannot decide take the exact fallback with the same bits;
operands the pass does not take (NaN codes, non-finite scales, tensor-core recipes, e5m2)
give the same results through gmm_and_exact."""

import ml_dtypes
import numpy as np
import pytest

from fp8check.references import QTensor, abs_product, gmm, quantize
from fp8check.references import forward_refs as fr
from tests.test_partials_paths import PATHS, _adversarial, _bits

# (M, K, N, G); the last's N is 23 of the windowed path's column groups (48 columns), the
# last ragged
SHAPES = [(300, 256, 128, 4), (45, 2048, 256, 3), (1, 128, 128, 1), (37, 384, 200, 3),
          (9, 128, 40, 2), (700, 256, 150, 2), (70, 256, 1100, 2)]


def _cancelling(lhs: QTensor, rhs: QTensor) -> None:
    """Rows 0-3 of lhs: K block 1 the negation of block 0 with block 0's scale, the rest
    zero, and every expert's K block 1 equal to its block 0 with its scales: those rows'
    exact values are zero, reached from nonzero terms."""
    if lhs.values.shape[1] < 256:
        return
    a, b = lhs.values.view(np.uint8), rhs.values.view(np.uint8)
    a[:4, 128:256] = a[:4, :128] ^ 0x80
    a[:4, 256:] = 0
    lhs.scales[:4, 1] = lhs.scales[:4, 0]
    b[:, 128:256] = b[:, :128]
    rhs.scales[:, 1] = rhs.scales[:, 0]


def _want(lhs, rhs, gs, out_dtype, accum):
    return (gmm(lhs, rhs, gs, out_dtype, accum), gmm(lhs, rhs, gs, np.float64, "exact"),
            abs_product(lhs, rhs, gs))


def _check(got, want) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(_bits(g), _bits(w))


@pytest.mark.parametrize("accum", ["deepgemm", "cublas", "tokamax"])
@pytest.mark.parametrize("out_dtype", [np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_one_pass_gives_the_three_references(accum, out_dtype, shape, monkeypatch, pass_path):
    lhs, rhs, gs = _adversarial(np.random.default_rng(), *shape)
    lhs.values.view(np.uint8)[4::5, -128:] = 0x80  # -0: all-zero blocks
    _cancelling(lhs, rhs)
    want = _want(lhs, rhs, gs, out_dtype, accum)
    passes = []
    real = fr._undecided
    monkeypatch.setattr(fr, "_undecided", lambda *a: passes.append(1) or real(*a))
    got = fr.gmm_references(lhs, rhs, gs, out_dtype, accum)
    assert passes  # the C pass ran
    _check(got, want)
    if shape[1] >= 256:
        assert not got[1][:4].any()


def test_rhs_residuals_in_one_later_column_group(pass_path):
    """rhs codes near 448 everywhere (no residual of the windowed digit) but a few tiny
    ones (exponent 1, far below their column's window) in one column of the 13th column
    group of 48, K block 1 only: the residuals' terms reach that group's columns alone,
    with the same bits."""
    rng = np.random.default_rng()
    lhs, rhs, gs = _adversarial(rng, 40, 256, 1100, 2)
    b = rhs.values.view(np.uint8)
    b[:] = rng.integers(0x70, 0x78, b.shape) | rng.choice([0, 0x80], b.shape)
    b[:, 130:140, 528 + 48 + 7] = 0x09  # 2^-6 * 1.125 against 256..448
    want = _want(lhs, rhs, gs, np.float32, "deepgemm")
    _check(fr.gmm_references(lhs, rhs, gs, np.float32, "deepgemm"), want)


@pytest.mark.parametrize("shape", SHAPES[:4])
def test_undecided_elements_take_the_exact_fallback(shape, monkeypatch, pass_path):
    """Every element sent to the superaccumulator fallback (`_exact_at`) as if the
    certified rounding could not decide it: the same bits."""
    lhs, rhs, gs = _adversarial(np.random.default_rng(), *shape)
    _cancelling(lhs, rhs)
    want = _want(lhs, rhs, gs, np.float32, "deepgemm")
    monkeypatch.setattr(fr, "_undecided", lambda flags: np.nonzero(np.ones_like(flags)))
    _check(fr.gmm_references(lhs, rhs, gs, np.float32, "deepgemm"), want)


class _PoisonedEmpty:
    """numpy with `empty` filled with 0xFF bytes (NaN in every float dtype): an element
    the pass leaves unwritten shows."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def empty(shape, dtype=float):
        a = np.empty(shape, dtype)
        a.view(np.uint8).fill(0xFF)
        return a


@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[3], SHAPES[5], SHAPES[6]])
def test_every_element_is_written(shape, monkeypatch, pass_path):
    """The outputs and the pass's buffers are allocated unset (`np.empty`, not zeros that
    would cost a pass): with them filled with NaN bytes, the same bits, the rows past the
    last group zero."""
    lhs, rhs, gs = _adversarial(np.random.default_rng(), *shape)
    want = _want(lhs, rhs, gs, ml_dtypes.bfloat16, "cublas")
    monkeypatch.setattr(fr, "np", _PoisonedEmpty())
    got = fr.gmm_references(lhs, rhs, gs, ml_dtypes.bfloat16, "cublas")
    _check(got, want)
    assert gs.sum() < lhs.shape[0] and not any(a[gs.sum():].any() for a in got)


def test_buffers_reused_with_stale_bytes_give_the_same_bits(pass_path):
    """Successive calls into one `Buffers` (the production check's chunks): each call's
    outputs are the references of its own operands, bit for bit, though the memory
    holds NaN bytes and an earlier, larger call's values; the rows past its last group
    zero; the memory is reused, not reallocated."""
    rng = np.random.default_rng()
    buffers = fr.Buffers()
    big = _adversarial(rng, 300, 256, 200, 3)
    _check(fr.gmm_references(*big, np.float32, "deepgemm", buffers=buffers),
           _want(*big, np.float32, "deepgemm"))
    for name, dtype in (("recipe", np.float32), ("exact", np.float64), ("abs_ab", np.float64),
                        ("flags", np.uint8)):
        buffers.take(name, (300, 200), dtype).view(np.uint8)[::2] = 0xFF  # every other row
    lhs, rhs, gs = _adversarial(rng, 37, 384, 200, 3)
    assert gs.sum() < lhs.shape[0]
    got = fr.gmm_references(lhs, rhs, gs, np.float32, "cublas", buffers=buffers)
    _check(got, _want(lhs, rhs, gs, np.float32, "cublas"))
    assert not any(a[gs.sum():].any() for a in got)
    assert np.shares_memory(got[1], buffers.take("exact", (1, 1), np.float64))


@pytest.mark.parametrize("fault", ["nan-code", "inf-scale", "hopper", "blackwell", "e5m2",
                                   "no-digit-path"])
def test_other_operands_give_the_same_results(fault, monkeypatch):
    """Where the pass does not apply: gmm_and_exact and abs_product's bits, NaN and Inf
    included."""
    lhs, rhs, gs = _adversarial(np.random.default_rng(), 37, 256, 130, 3)
    accum = {"hopper": "deepgemm-hopper", "blackwell": "deepgemm-blackwell"}.get(fault,
                                                                              "deepgemm")
    if fault == "nan-code":
        lhs.values.view(np.uint8)[2, 5] = 0x7F
    if fault == "inf-scale":
        rhs.scales[0, 1, 0] = np.inf
    if fault == "e5m2":
        rng = np.random.default_rng()
        lhs = quantize(rng.standard_normal((37, 256)).astype(np.float32), (1, 128), fmt="e5m2")
        rhs = quantize(rng.standard_normal((3, 256, 130)).astype(np.float32), (128, 128),
                       fmt="e5m2")
    if fault == "no-digit-path":
        for module in PATHS.values():
            monkeypatch.setattr(module, "AVAILABLE", False)
    want = _want(lhs, rhs, gs, ml_dtypes.bfloat16, accum)
    monkeypatch.setattr(fr, "_undecided",
                        lambda *a: pytest.fail("the C pass ran where it does not apply"))
    _check(fr.gmm_references(lhs, rhs, gs, ml_dtypes.bfloat16, accum), want)


@pytest.mark.parametrize("place", ["lhs-in-a-group", "rhs-late-columns", "rhs-unused-expert",
                                   "lhs-past-the-groups"])
def test_the_pass_finds_nan_codes_itself(place, monkeypatch, pass_path):
    """The C pass checks the codes it reads for NaN as it makes their digits: one in a
    group's lhs rows or in its rhs (here in the second column block of the pass) gives
    gmm_and_exact's bits, NaN included; one in codes no output depends on (an empty
    group's expert, rows past the last group) leaves the pass's own results, the same
    bits as the references."""
    lhs, rhs, gs = _adversarial(np.random.default_rng(), 37, 256, 300, 4)
    assert gs[1] == gs[3] == 0 and gs[2] > 1 and gs.sum() < 37
    a, b = lhs.values.view(np.uint8), rhs.values.view(np.uint8)
    if place == "lhs-in-a-group":
        a[gs[0] + 1, 200] = 0xFF
    if place == "rhs-late-columns":
        b[2, 130, 290] = 0x7F
    if place == "rhs-unused-expert":
        b[1, 5, 7] = 0x7F
    if place == "lhs-past-the-groups":
        a[-1, 3] = 0xFF
    want = _want(lhs, rhs, gs, np.float32, "deepgemm")
    seen = _flags_of_the_pass(monkeypatch)
    _check(fr.gmm_references(lhs, rhs, gs, np.float32, "deepgemm"), want)
    nan_read = place in ("lhs-in-a-group", "rhs-late-columns")
    assert bool(seen) != nan_read and np.isnan(want[0]).any() == nan_read


def _flags_of_the_pass(monkeypatch) -> list[np.ndarray]:
    """The C pass's undecided flags, one array a call, as the pass hands them over."""
    seen: list[np.ndarray] = []
    real = fr._undecided
    monkeypatch.setattr(fr, "_undecided", lambda flags: seen.append(flags.copy()) or real(flags))
    return seen


def test_the_certified_rounding_flags_ties_and_decides_the_rest(monkeypatch, pass_path):
    """A float64 rounding tie (1 + 2^-53, from two K blocks' scales) is flagged and takes
    the fallback; a value 2^-62 off it, and quantized random operands (all but a few
    elements), are decided in the pass; every result has the exact recipe's bits."""
    a, b = np.zeros((1, 256), np.float32), np.zeros((1, 256, 16), np.float32)
    a[0, [0, 128, 129]] = 1
    b[0, [0, 128], :] = 1
    b[0, 129, 1] = 2.0**-9  # column 1: 1 + 2^-53 + 2^-62, not a tie
    fp8 = ml_dtypes.float8_e4m3fn
    lhs = QTensor(a.astype(fp8), np.array([[1, 2.0**-27]], np.float32), (1, 128), "e4m3fn",
                  "deepgemm")
    rhs = QTensor(b.astype(fp8), np.array([[[1], [2.0**-26]]], np.float32), (128, 128),
                  "e4m3fn", "deepgemm")
    gs = np.array([1])
    flags = _flags_of_the_pass(monkeypatch)
    got = fr.gmm_references(lhs, rhs, gs, np.float32, "deepgemm")
    _check(got, _want(lhs, rhs, gs, np.float32, "deepgemm"))
    assert got[1][0, 0] == 1 and got[1][0, 1] == 1 + 2.0**-52
    assert flags[0][0, 0] == 1 and flags[0][0, 1] == 0
    rng = np.random.default_rng()
    lhs = quantize(rng.standard_normal((300, 512), dtype=np.float32))
    rhs = quantize(rng.standard_normal((2, 512, 96), dtype=np.float32), (128, 128))
    gs = np.array([170, 130])
    flags.clear()
    _check(fr.gmm_references(lhs, rhs, gs, np.float32, "deepgemm"),
           _want(lhs, rhs, gs, np.float32, "deepgemm"))
    assert sum(f.sum() for f in flags) < 0.01 * 300 * 96


def test_metric_rows_reject_an_output_they_cannot_read():
    """`gmm_metric_rows` reads the output under test in the C pass: another dtype, shape or
    a strided view is a one-line ValueError, not a misread."""
    lhs, rhs, gs = _adversarial(np.random.default_rng(), 40, 256, 96, 2)
    out = gmm(lhs, rhs, gs)
    for bad in (out.astype(np.float64), out[:-1], np.asfortranarray(out), out[:, ::2]):
        with pytest.raises(ValueError, match="gmm_metric_rows: out must be C-contiguous"):
            fr.gmm_metric_rows(lhs, rhs, gs, bad, "deepgemm", gamma=1e-3, floor=0.0)
