"""Numpy kernels for testing the gate: correct variants that must pass and seeded bugs
that must fail the `ci` suite, one realistic bug each.

`BlockwiseGmm` is a tiled FP8 blockwise grouped matmul written the way a device kernel is
structured: groups in order, 128-row M tiles per group (the last one partial), K in
128-wide quantization blocks, per block a float32 partial P = tl.dot of the fp8 tiles,
then acc = fma(RN(sa*sb), P, acc) (the `deepgemm` recipe), finally an RNE cast.  Each bug
subclass overrides the one stage a real kernel gets wrong.  The fp8 partial P comes from
np.matmul in float32: its products are exact (e4m3 x e4m3 has 8 significant bits), its
128-term sum may round in BLAS's order, which is what a device's tensor core does too.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from fp8check.contracts import KernelSpec, MatmulClaims, QuantizerClaims
from fp8check.references.exact import fma_f32
from fp8check.references.mma import block_partial
from seeded_bugs.catch import Catch, named, seeded

TM = 128  # rows per M tile
QB = 128  # quantization block (K and N)
BF16 = np.dtype(ml_dtypes.bfloat16)
F8 = np.dtype(ml_dtypes.float8_e4m3fn)


class BlockwiseGmm:
    """Correct gmm-fp8 kernel (contract call: lhs_q, lhs_scale, rhs_q, rhs_scale, gs)."""

    acc_dtype = np.float32

    def __call__(self, lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=np.float32):
        a = lhs_q.astype(np.float32)
        b = rhs_q.astype(np.float32)
        m, k = a.shape
        out = np.zeros((m, b.shape[2]), self.acc_dtype)
        for g, r0, r1 in self.groups(np.asarray(group_sizes)):
            for t0 in self.tile_starts(r0, r1):
                t1 = min(t0 + TM, r1)
                rows = self.tile_rows(t0, t1, r1, m)
                acc = self.new_acc(len(rows), b.shape[2])
                for kb in self.k_blocks(k // QB):
                    cols = slice(kb * QB, (kb + 1) * QB)
                    p = self.partial(a[self.lhs_rows(rows, g)][:, cols], b[g, cols])
                    s = self.scale(lhs_scale, rhs_scale, self.lhs_rows(rows, g), g, kb)
                    acc = self.accumulate(acc, s, p)
                out[rows] = self.finish(acc)
        return self.cast(out, np.dtype(out_dtype))

    # -- stages ------------------------------------------------------------------------
    def groups(self, gs):
        """(group, first row, end row) of every group, in order."""
        ends = np.cumsum(gs)
        return [(g, int(ends[g] - gs[g]), int(ends[g])) for g in range(len(gs))]

    def tile_starts(self, r0, r1):
        return range(r0, r1, TM)

    def tile_rows(self, t0, t1, r1, m):
        """Output rows of the tile [t0, t1) of a group ending at r1."""
        return np.arange(t0, t1)

    def lhs_rows(self, rows, g):
        return rows

    def k_blocks(self, nkb):
        return range(nkb)

    def new_acc(self, rows, n):
        return np.zeros((rows, n), self.acc_dtype)

    def partial(self, a_blk, b_blk):
        # contiguous operands: numpy uses BLAS sgemm only on those
        return np.ascontiguousarray(a_blk) @ np.ascontiguousarray(b_blk)

    def scale(self, lhs_scale, rhs_scale, rows, g, kb):
        """RN(sa * sb) for the tile's rows and every output column: [rows, N] float32."""
        sa = lhs_scale[rows, kb][:, None]
        sb = np.repeat(rhs_scale[g, kb], QB)[None, :]
        return (sa * sb).astype(np.float32)

    def accumulate(self, acc, s, p):
        return fma_f32(s, p, acc)

    def finish(self, acc):
        """A tile's accumulator as stored in the acc_dtype output."""
        return acc

    def cast(self, out, dtype):
        return out.astype(dtype)


def spec(name: str, fn, **claims) -> KernelSpec:
    """A numpy gmm-fp8 kernel with the `claims` given by field name (`MatmulClaims`)."""
    return KernelSpec(name=name, contract="gmm-fp8", framework="numpy", fn=fn,
                      claims=MatmulClaims(**claims))


# --- correct variants ---------------------------------------------------------------------


class PairwiseOverK(BlockwiseGmm):
    """Correct: scaled block partials summed as a pairwise tree over K (another valid order)."""

    def __call__(self, lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=np.float32):
        a, b = lhs_q.astype(np.float32), rhs_q.astype(np.float32)
        out = np.zeros((a.shape[0], b.shape[2]), np.float32)
        for g, r0, r1 in self.groups(np.asarray(group_sizes)):
            rows = np.arange(r0, r1)
            terms = [
                self.scale(lhs_scale, rhs_scale, rows, g, kb)
                * (a[rows, kb * QB:(kb + 1) * QB] @ b[g, kb * QB:(kb + 1) * QB])
                for kb in range(a.shape[1] // QB)
            ]
            while len(terms) > 1:
                terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
                         for i in range(0, len(terms), 2)]
            out[rows] = terms[0]
        return out.astype(np.dtype(out_dtype))


class Float64Accumulator(BlockwiseGmm):
    """Correct: partials and scales accumulated in float64, one rounding to the output."""

    acc_dtype = np.float64

    def new_acc(self, rows, n):
        return np.zeros((rows, n), np.float64)

    def accumulate(self, acc, s, p):
        return acc + s.astype(np.float64) * p.astype(np.float64)


class HopperTensorCore(BlockwiseGmm):
    """Correct when it declares accum "deepgemm-hopper": each block's P is what the Hopper
    tensor core leaves (`mma.HOPPER_FP8`, chains of `interval` K elements from zero, the chains
    added in float32), then DeepGEMM's fma promotion, as DeepGEMM and the Triton kernel
    compute on sm_90."""

    def __init__(self, interval: int = 128) -> None:
        self.interval = interval

    def partial(self, a_blk, b_blk):
        a = np.ascontiguousarray(a_blk).astype(F8).view(np.uint8)  # exact: fp8 values
        b = np.ascontiguousarray(b_blk).astype(F8).view(np.uint8)
        p = np.zeros((a.shape[0], b.shape[1]), np.float32)
        for k0 in range(0, QB, self.interval):
            p += block_partial(a[:, k0:k0 + self.interval], b[k0:k0 + self.interval])
        return p


def naive_dequantized(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=np.float32):
    """Correct: dequantize both operands to float32, one float32 matmul per group."""
    a = lhs_q.astype(np.float32) * np.repeat(lhs_scale, QB, axis=1)
    b = rhs_q.astype(np.float32) * np.repeat(np.repeat(rhs_scale, QB, axis=1), QB, axis=2)
    out = np.zeros((a.shape[0], b.shape[2]), np.float32)
    start = 0
    for g, size in enumerate(np.asarray(group_sizes).tolist()):
        out[start:start + size] = a[start:start + size] @ b[g]
        start += size
    return out.astype(np.dtype(out_dtype))


# --- seeded bugs (gmm-fp8) ----------------------------------------------------------------


class ShiftedGroupStart(BlockwiseGmm):
    """Group boundary: every group after the first reads its lhs one row early (an
    exclusive prefix sum off by one), so its first row uses the previous group's data."""

    def lhs_rows(self, rows, g):
        return rows - 1 if g > 0 else rows


class DroppedResidualTile(BlockwiseGmm):
    """Residual rows: the last partial M tile of every group is skipped (tile count taken
    as M_g // 128 instead of ceil), so those rows stay zero."""

    def tile_starts(self, r0, r1):
        return range(r0, r0 + (r1 - r0) // TM * TM, TM)


class UnmaskedResidualStore(BlockwiseGmm):
    """Residual rows: the last partial tile loads and stores all 128 rows (no mask), and
    tiles run from the last group to the first (a device schedule may), so the spill
    overwrites the next group's first rows with this group's weights."""

    def groups(self, gs):
        return list(reversed(super().groups(gs)))

    def tile_rows(self, t0, t1, r1, m):
        return np.arange(t0, min(t0 + TM, m))


class EmptyGroupShift(BlockwiseGmm):
    """Zero-size groups: empty groups are compacted out of the metadata, and the compacted
    index is then used to pick the expert's weights, so every group after an empty one
    multiplies by the wrong expert."""

    def groups(self, gs):
        ends = np.cumsum(gs)
        nonempty = [g for g in range(len(gs)) if gs[g] > 0]
        return [(i, int(ends[g] - gs[g]), int(ends[g])) for i, g in enumerate(nonempty)]


class TransposedRhsScale(BlockwiseGmm):
    """Scale layout: the [K/128, N/128] weight scales are read as if N-major, flat index
    nb * KB + kb instead of kb * NB + nb."""

    def scale(self, lhs_scale, rhs_scale, rows, g, kb):
        kbs, nbs = rhs_scale.shape[1:]
        flat = rhs_scale[g].reshape(-1)
        sb = np.array([flat[(nb * kbs + kb) % flat.size] for nb in range(nbs)], np.float32)
        sa = lhs_scale[rows, kb][:, None]
        return (sa * np.repeat(sb, QB)[None, :]).astype(np.float32)


class StaleLhsScale(BlockwiseGmm):
    """Scale indexing: the lhs scale prefetch lags one K block (block kb uses kb - 1's)."""

    def scale(self, lhs_scale, rhs_scale, rows, g, kb):
        return super().scale(lhs_scale, rhs_scale, rows, g, max(kb - 1, 0))


class OneScalePerLargeTile(BlockwiseGmm):
    """Subchannel scales: a 512-wide K tile (4 subchannels) applies its first
    subchannel's scales to all four blocks."""

    def scale(self, lhs_scale, rhs_scale, rows, g, kb):
        return super().scale(lhs_scale, rhs_scale, rows, g, kb - kb % 4)


class Bf16Accumulator(BlockwiseGmm):
    """Accumulator precision: the running sum is kept in bf16 between K blocks."""

    def accumulate(self, acc, s, p):
        return fma_f32(s, p, acc).astype(BF16).astype(np.float32)


class TruncatingBf16Cast(BlockwiseGmm):
    """Output rounding: float32 -> bf16 by dropping the low 16 bits (truncation), not RNE."""

    def cast(self, out, dtype):
        if dtype != BF16:
            return out.astype(dtype)
        return (out.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32).astype(BF16)


class HopperTruncatingBf16Cast(HopperTensorCore, TruncatingBf16Cast):
    """A Hopper kernel (declares the tensor core) whose bf16 output cast truncates."""


class RandomKOrder(BlockwiseGmm):
    """Run-to-run non-determinism: K blocks are accumulated in a fresh random order on
    every call (as split-K with atomics would); each result is valid, the bits differ."""

    def k_blocks(self, nkb):
        return np.random.default_rng().permutation(nkb)


class ReusedAccumulator(BlockwiseGmm):
    """Stale memory: one accumulator buffer per tile height is reused across groups and
    never zeroed, so a group's tile starts from the previous group's sum."""

    def __call__(self, *args, **kw):
        self._buffers: dict[tuple[int, int], np.ndarray] = {}
        return super().__call__(*args, **kw)

    def new_acc(self, rows, n):
        return self._buffers.setdefault((rows, n), np.zeros((rows, n), np.float32))

    def accumulate(self, acc, s, p):
        acc[...] = fma_f32(s, p, acc)
        return acc


class DroppedLastKBlock(BlockwiseGmm):
    """K tail: the block loop stops one short (range(K // 128 - 1)), so the last K block's
    contribution is missing."""

    def k_blocks(self, nkb):
        return range(nkb - 1)


# --- tgmm ---------------------------------------------------------------------------------


def tgmm_f32(lhs, dy, group_sizes, out_dtype=np.float32):
    """Correct tgmm: dW_g = lhs_g^T dy_g, one float32 matmul per group, zeros if empty."""
    a, d = lhs.astype(np.float32), dy.astype(np.float32)
    out = np.zeros((len(group_sizes), a.shape[1], d.shape[1]), np.float32)
    start = 0
    for g, size in enumerate(np.asarray(group_sizes).tolist()):
        out[g] = a[start:start + size].T @ d[start:start + size]
        start += size
    return out.astype(np.dtype(out_dtype))


def tgmm_amax_normalised(lhs, dy, group_sizes, out_dtype=np.float32):
    """NaN from empty groups: dW_g is normalised by its amax for an FP8 wgrad epilogue
    (dW / amax * amax); an empty group has amax 0 and gets 0/0 = NaN."""
    out = tgmm_f32(lhs, dy, group_sizes, np.float32)
    with np.errstate(invalid="ignore"):
        amax = np.max(np.abs(out), axis=(1, 2), keepdims=True)
        out = out / amax * amax
    return out.astype(np.dtype(out_dtype))


def tgmm_spec(name: str, fn) -> KernelSpec:
    return KernelSpec(name=name, contract="tgmm", framework="numpy", fn=fn)


# --- quantizers ---------------------------------------------------------------------------


def quantize_deepgemm(x):
    """Correct 1x128 `deepgemm` quantizer: s = RN(max(amax, 1e-4) / 448),
    q = satfinite(x * RN(1/s)), all in float32."""
    return quantize_1x128(x, guard=True)


def quantize_no_amax_guard(x):
    """Quantizer bug: no amax floor, so an all-zero block gets s = 0, 1/s = inf and
    q = 0 * inf = NaN."""
    return quantize_1x128(x, guard=False)


def padded_blocks(x):
    """x [M, K] float32 as [M, ceil(K/128), 128] 1x128 blocks, a partial last block padded
    with zeros (which leave its amax as it is)."""
    m, k = x.shape
    return np.pad(x, ((0, 0), (0, -k % QB))).reshape(m, -1, QB)


def block_amax(x):
    """amax of every 1x128 block of x [M, K] over its valid elements: [M, ceil(K/128)]."""
    return np.max(np.abs(padded_blocks(x)), axis=2)


def quantize_1x128(x, guard: bool, amax_of=block_amax, divide: bool = False):
    """The 1x128 `deepgemm` quantizer with its stages as arguments (the seeded bugs vary
    them): `guard` the amax floor, `amax_of` the per-block amax, `divide` x / s instead of
    x * RN(1/s)."""
    x = np.asarray(x, np.float32)
    m, k = x.shape
    blocks = padded_blocks(x)
    amax = amax_of(x)
    if guard:
        amax = np.maximum(amax, np.float32(1e-4))
    s = (amax / np.float32(448.0)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        if divide:
            q = blocks / s[:, :, None]
        else:
            inv = (np.float32(1.0) / s).astype(np.float32)
            q = blocks * inv[:, :, None]
    q = np.clip(q, np.float32(-448), np.float32(448)).reshape(m, -1)[:, :k]
    return q.astype(ml_dtypes.float8_e4m3fn), s


def quantizer_spec(name: str, fn) -> KernelSpec:
    return KernelSpec(name=name, contract="quantizer", framework="numpy", fn=fn,
                      claims=QuantizerClaims("deepgemm", block=(1, 128)))


CORRECT = named(
    spec("numpy-fp8-deepgemm", BlockwiseGmm(), accum="deepgemm"),
    spec("numpy-fp8-pairwise", PairwiseOverK()),
    spec("numpy-fp8-f64acc", Float64Accumulator()),
    spec("numpy-fp8-naive", naive_dequantized),
    spec("numpy-fp8-hopper", HopperTensorCore(), accum="deepgemm-hopper"),
    tgmm_spec("numpy-tgmm", tgmm_f32),
    quantizer_spec("numpy-quantizer", quantize_deepgemm),
)

# Each bug with where it must fail: the ci suite, and a criterion among its failures.
BUGS = seeded(
    (spec("bug-shifted-group-start", ShiftedGroupStart()), Catch("ci", "bound_ratio")),
    (spec("bug-dropped-residual-tile", DroppedResidualTile()), Catch("ci", "bound_ratio")),
    (spec("bug-unmasked-residual-store", UnmaskedResidualStore()), Catch("ci", "bound_ratio")),
    (spec("bug-empty-group-shift", EmptyGroupShift()), Catch("ci", "bound_ratio")),
    (spec("bug-transposed-rhs-scale", TransposedRhsScale()), Catch("ci", "bound_ratio")),
    (spec("bug-stale-lhs-scale", StaleLhsScale()), Catch("ci", "bound_ratio")),
    (spec("bug-one-scale-per-512-tile", OneScalePerLargeTile()), Catch("ci", "bound_ratio")),
    (spec("bug-bf16-accumulator", Bf16Accumulator()), Catch("ci", "error_ratio")),
    (spec("bug-truncating-bf16-cast", TruncatingBf16Cast()), Catch("ci", "bias_z")),
    (spec("bug-random-k-order", RandomKOrder()), Catch("ci", "deterministic")),
    (spec("bug-reused-accumulator", ReusedAccumulator()), Catch("ci", "bound_ratio")),
    (spec("bug-dropped-last-k-block", DroppedLastKBlock()), Catch("ci", "bound_ratio")),
    # The tensor core's truncating partials, declared as float32 accumulation.
    (spec("bug-hopper-declared-f32", HopperTensorCore()), Catch("ci", "bound_ratio")),
    (spec("bug-hopper-truncating-bf16-cast", HopperTruncatingBf16Cast(),
          accum="deepgemm-hopper"), Catch("ci", "bias_z")),
    (tgmm_spec("bug-tgmm-empty-group-nan", tgmm_amax_normalised), Catch("ci", "finite")),
    (quantizer_spec("bug-quantizer-no-amax-guard", quantize_no_amax_guard),
     Catch("ci", "quantizer_bit_exact")),
)

# Named for `fp8check gate --kernel tests/seeded_bugs/kernels.py:NAME` (notebook 02's
# demo run): a correct kernel in another valid summation order, and a precision bug.
PAIRWISE = CORRECT["numpy-fp8-pairwise"]
BF16_ACCUMULATOR = BUGS["bug-bf16-accumulator"].spec
