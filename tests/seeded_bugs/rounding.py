"""Seeded bugs of directed rounding (issue 38): a blockwise FP8 GMM that rounds toward
+inf, toward -inf or toward zero at one stage, and its round-to-nearest twins in each
declared accumulation order.

`RoundingGmm` is `BlockwiseGmm` with every rounding spelled out: the block partial
P = RN32(exact 128-term dot product), the recipe's scale step, its accumulation step and
the output cast.  A bug rounds one stage in a fixed direction (a wrong rounding-mode
intrinsic: `__fmul_ru`, `__fmaf_rz`, `cvt.rp.f32.f64`, `__float2bfloat16_rd`); everything
else stays round-to-nearest-even.  Directed roundings are exact, not approximations:

* the stage's exact value is held as a float64 pair hi + lo (lo the exact remainder:
  sa*sb and s*P of two float32 are exact in float64; an fma's sum is split exactly by
  TwoSum; the partial P of e4m3 codes is exact in float64, `references.gmm`'s docstring);
* r = RN32(hi) is the float32 nearest hi, and the exact sign of (hi + lo) - r is the sign
  of the float64 sum (hi - r) + lo: hi - r is exact (Sterbenz: r and hi are within a
  factor 2, or r is 0), and a rounded float64 sum has the exact sum's sign;
* the directed result is r or its float32 neighbour on that side: |hi + lo - r| is at most
  half a float32 gap plus |lo| (<= half a float64 ulp of hi), less than one gap.
  `tests/test_directed_rounding.py` checks every mode against `fractions.Fraction`.

Recipes (`references.gmm`; S = sa*sb, all float32):

===========  =======================  ======================
recipe       scale step               accumulation step
===========  =======================  ======================
deepgemm     S' = R(sa*sb)            acc = R(S'*P + acc)
cublas       T = R(P*sa)              acc = R(T*sb + acc)
tokamax      T = R(R(P*sa)*sb)        acc = R(T + acc)
exact        P*S, no rounding         double-double sum, RN once at the end
             (P unrounded)
===========  =======================  ======================

The bugs are the deepgemm recipe with one stage directed, declaring no accumulation (the
hard case: no bit-exact reference; only the error's sign can tell).  Which criterion must
see them: rounding toward +inf or -inf at the partials or the accumulation shifts every
output one way (signed `bias_z_signed`); the scale product sa*sb is positive, so rounding
it up or down scales every term's magnitude (up: away from zero, down and toward zero:
toward zero), which the magnitude `bias_z` sees, and so does it toward zero at the
partials and the accumulation.  The output cast differs only on bf16 outputs (a float32
output is the accumulator itself); it is caught there the same way.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from fp8check.contracts import ACCUMS, KernelSpec
from fp8check.references.exact import fma_f32
from fp8check.references.exact import two_product as exact_two_product
from seeded_bugs.catch import Catch, named, seeded
from seeded_bugs.kernels import BF16, QB, BlockwiseGmm, spec

Direction = Literal["nearest", "up", "down", "zero"]
Stage = Literal["partial", "scale", "accumulate", "cast"]
RECIPES = ("deepgemm", "cublas", "tokamax", "exact")

_INF32 = np.float32(np.inf)


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(s, e): s = RN64(a + b), s + e == a + b exactly (Knuth), elementwise; e = 0 where s
    is not finite."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = a + b
        bb = s - a
        e = (a - (s - bb)) + (b - bb)
    return s, np.where(np.isfinite(s), e, 0.0)


def two_product(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(p, e): p = RN64(a*b), p + e == a*b exactly (`references.exact.two_product`, Dekker;
    |a|, |b| < 2^995 and no underflow, which the gate's operands satisfy), elementwise;
    e = 0 where p is not finite."""
    p, e = exact_two_product(a, b)
    return p, np.where(np.isfinite(p), e, 0.0)


def round_f32(hi: np.ndarray, lo: np.ndarray | float, direction: Direction) -> np.ndarray:
    """float64 hi + lo (exactly; |lo| <= half a float64 ulp of hi, e.g. a TwoSum pair)
    rounded to float32 in `direction` (module docstring: why it is exact).  NaN and Inf
    pass through as RN32 gives them."""
    hi = np.asarray(hi, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        r = hi.astype(np.float32)
    if direction == "nearest" and np.isscalar(lo) and lo == 0:
        return r  # one RNE cast of an exact float64 value
    with np.errstate(over="ignore", invalid="ignore"):
        d = (hi - r.astype(np.float64)) + lo  # sign of (hi + lo) - r, exactly
    if direction == "nearest":
        # RN32(hi) is RN32(hi + lo) unless hi is a float32 midpoint and lo pushes off it
        # (a float32 midpoint is a float64 value, and RN64 never crosses one).
        side = np.nextafter(r, np.where(hi > r, _INF32, -_INF32))
        with np.errstate(invalid="ignore"):
            mid = (r != hi) & (2.0 * (hi - r) == side.astype(np.float64) - r)
            move = mid & (np.sign(np.asarray(lo) + 0.0 * hi) == np.sign(hi - r))
        return np.where(move, side, r)
    with np.errstate(invalid="ignore"):
        step = {"up": d > 0, "down": d < 0, "zero": ((r > 0) & (d < 0)) | ((r < 0) & (d > 0))}
    target = {"up": _INF32, "down": -_INF32, "zero": np.float32(0)}[direction]
    return np.where(step[direction], np.nextafter(r, target), r)


def round_bf16(x: np.ndarray, direction: Direction) -> np.ndarray:
    """float32 x rounded to bfloat16 in `direction`: RNE, or on the bits (bf16 is the top
    half of a float32): truncation is toward zero, truncation plus one unit in the last
    place where a dropped bit is set is away from zero."""
    x = np.ascontiguousarray(x, np.float32)
    if direction == "nearest":
        return x.astype(BF16)
    bits = x.view(np.uint32)
    trunc = bits & np.uint32(0xFFFF0000)
    away = np.where(bits & np.uint32(0xFFFF), trunc + np.uint32(0x10000), trunc)
    negative = (bits >> np.uint32(31)).astype(bool)
    chosen = {"zero": trunc, "up": np.where(negative, trunc, away),
              "down": np.where(negative, away, trunc)}[direction]
    return chosen.astype(np.uint32).view(np.float32).astype(BF16)  # exact: low half zero


class RoundingGmm(BlockwiseGmm):
    """`BlockwiseGmm` in `recipe` (RECIPES) with RN32 of the exact partials, rounding
    `direction` at `stage` (None: round-to-nearest everywhere, a correct kernel)."""

    def __init__(self, recipe: str = "deepgemm", stage: Stage | None = None,
                 direction: Direction = "nearest") -> None:
        if recipe not in RECIPES or (recipe == "exact" and stage not in (None, "cast")):
            raise ValueError(f"RoundingGmm: recipe {recipe!r} with stage {stage!r}")
        self.recipe, self.stage, self.direction = recipe, stage, direction

    def _mode(self, stage: Stage) -> Direction:
        return self.direction if stage == self.stage else "nearest"

    def partial(self, a_blk, b_blk):
        # exact in float64 (module docstring); RN32 once, as a tensor core's output is
        p = np.ascontiguousarray(a_blk, np.float64) @ np.ascontiguousarray(b_blk, np.float64)
        return p if self.recipe == "exact" else round_f32(p, 0.0, self._mode("partial"))

    def scale(self, lhs_scale, rhs_scale, rows, g, kb):
        """(sa [rows, 1], sb [1, N]) float32: the recipe combines them in `accumulate`."""
        return lhs_scale[rows, kb][:, None], np.repeat(rhs_scale[g, kb], QB)[None, :]

    def _times(self, a, b) -> np.ndarray:
        """R(a*b) of float32 a, b at the scale step (the float64 product is exact)."""
        return round_f32(a.astype(np.float64) * b.astype(np.float64), 0.0, self._mode("scale"))

    def _fma(self, a, b, c) -> np.ndarray:
        """R(a*b + c) of float32 a, b, c at the accumulation step, one rounding."""
        if self._mode("accumulate") == "nearest":
            return fma_f32(a, b, c)
        hi, lo = two_sum(a.astype(np.float64) * b.astype(np.float64), c.astype(np.float64))
        return round_f32(hi, lo, self.direction)

    def new_acc(self, rows, n):
        if self.recipe == "exact":  # a double-double (sum, remainder) pair
            return np.zeros((2, rows, n), np.float64)
        return np.zeros((rows, n), np.float32)

    def accumulate(self, acc, s, p):
        sa, sb = s
        if self.recipe == "deepgemm":
            return self._fma(self._times(sa, sb), p, acc)
        if self.recipe == "cublas":
            return self._fma(self._times(p, sa), sb, acc)
        if self.recipe == "tokamax":
            return self._fma(self._times(self._times(p, sa), sb), np.float32(1), acc)
        # exact: the term P*sa*sb (P and sa*sb exact in float64) as a TwoProduct pair added
        # to (sum, remainder) by TwoSum; only the remainders' float64 sum rounds (~2^-100
        # relative), and on the suites' exact-partials cases nothing rounds at all.
        t, t_lo = two_product(p.astype(np.float64), sa.astype(np.float64) * sb)
        total, e = two_sum(acc[0], t)
        return np.stack([total, acc[1] + (e + t_lo)])

    def finish(self, acc):
        if self.recipe != "exact":
            return acc
        hi, lo = two_sum(acc[0], acc[1])  # |lo| <= half a float64 ulp of hi: round_f32's input
        return round_f32(hi, lo, "nearest")

    def cast(self, out, dtype):
        if dtype == BF16:
            return round_bf16(out, self._mode("cast"))
        return out.astype(dtype)


def _twin(recipe: str) -> KernelSpec:
    """The correct (round-to-nearest) kernel of `recipe`, declaring it where a kernel
    can (`contracts.ACCUMS`: "exact" is a reference, not a declarable recipe)."""
    return spec(f"numpy-fp8-rn-{recipe}", RoundingGmm(recipe),
                accum=recipe if recipe in ACCUMS else None)


STAGES: tuple[Stage, ...] = ("partial", "scale", "accumulate", "cast")
DIRECTIONS: tuple[Direction, ...] = ("up", "down", "zero")


def _bug(stage: Stage, direction: Direction) -> tuple[KernelSpec, Catch]:
    """The deepgemm kernel rounding `direction` at `stage`, and the criterion that must
    catch it (module docstring): the magnitude bias toward zero and at the scale step
    (sa*sb > 0: any direction scales every term's magnitude), else the signed bias."""
    criterion = "bias_z" if direction == "zero" or stage == "scale" else "bias_z_signed"
    return (spec(f"bug-round-{direction}-{stage}", RoundingGmm("deepgemm", stage, direction)),
            Catch("ci", criterion))


CORRECT = named(*(_twin(r) for r in RECIPES))
BUGS = seeded(*(_bug(stage, d) for stage in STAGES for d in DIRECTIONS))
