"""Tolerance profiles of the gate: staged, never off.

Two questions are gated separately and never mixed:

* **correctness** (kernel vs the bit-exact reference on the same quantized operands): the
  same in every profile, because a bug is a bug during a search too.
  - `bound_ratio` <= 1: |out - exact| within Higham's a-priori float32 bound plus half an
    output ulp; any valid accumulation order passes.
  - `error_ratio` <= 2: the kernel's error is at most twice a naive same-precision
    implementation's (FlashAttention's criterion; the naive one sums float32 products in
    K order, `layers.op.naive_matmul`, the same on every machine, unlike a BLAS sgemm).
  - `|bias_z|` <= 6 and `|bias_z_signed|` <= 6: the error's direction, as a sign test.
    Each compared element scores the side of RN(exact) its output lands on (+1, 0, -1;
    against the declared model for deepgemm-hopper), times sign(exact) for `bias_z`
    (toward -, away from + zero: truncation) and as it is for `bias_z_signed` (toward
    -inf -, +inf +: a directed rounding mode, whose errors cancel in `bias_z` on
    mixed-sign data while it shifts every output one way; `metrics.bias_z`, unit
    "sign").  The statistic is the t of the per-(row, N tile) cluster means (elements of
    one row and tile share their scales' roundings), on the normal scale.  Why 6 keeps
    correct kernels passing: round-to-nearest lands on either side of the exact value
    alike, so every cluster mean has expectation 0; the means are bounded in [-1, 1] and
    independent, and the suites' outputs have hundreds to thousands of clusters, so t is normal to
    within Berry-Esseen's O(1/sqrt(N)) and P(|t| > 6) ~ 2e-9 per criterion (a gate run
    checks ~10^2 outputs: ~10^-7 per run).  A directed rounding leans one way wherever
    it rounds: on the ci suite, each seeded bug of `tests/seeded_bugs/rounding.py` (each
    direction at each stage) fails 6 to 14 of the 29 cases on every one of 5 seeds, while
    the round-to-nearest twins (every accumulation order, the Hopper model) stay at
    |z| <= 3.2 (docs/testing.md's table).  Signs, not the errors' sizes: weighted by
    size, one cancellation element with a huge relative error dominates (|t| 3.5 for a
    kernel rounding its scales up, whose clusters lean up 94% of the time; 43 as a sign
    test).
* **quantization impact** (FP8 result vs the unquantized float64 reference): SQNR in dB,
  calc_diff and allclose(atol, rtol), on a staged schedule:
  `strict` (early and final stage: SQNR >= 27 dB, calc_diff <= 1e-3, allclose(atol 1e-1,
  rtol 5e-2) failing on <= 2% of elements) and `explore` (mid-search: SQNR >= 20 dB,
  calc_diff <= 5e-3, atol 1 / rtol 2e-1 on <= 5%).  All three are computed on output rows
  normalised by the reference row's RMS (atol is in units of it): per-token quantization
  makes the row the unit, and a global SQNR on rows spanning e^+-6 is decided by a few rows.
  torchao gates blockwise FP8 GEMM outputs at 28 dB; the report also gives the band
  (>30 good, 20-30 acceptable, <20 at risk).  28 dB sits on the format's own floor: e4m3
  keeps 3 mantissa bits, a relative rounding error of RMS ~2^-3/sqrt(12) x 0.72 ~ 0.026
  per operand (31.7 dB), two operands ~28.7 dB.  Measured with a correct kernel on the ci
  suite over seeds 0-5, the worst gated case is 28.36 dB (lognormal-rows): 28 dB would
  leave a correct kernel 0.4 dB from failing on some other seed, so strict gates at 27 dB
  (1.4 dB under the worst seen) and still fails any quantizer that loses a bit (~6 dB).
  calc_diff ~ 1/(2 SQNR) for small noise, so 1e-3 and 5e-3 restate 27 and 20 dB;
  measured <= 7.1e-4.  allclose failed on at most 1.1% of elements (many-scales).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from fp8check.subnormal_data import SUBNORMAL_DIST


@dataclass(frozen=True)
class Profile:
    """Thresholds of one stage.  Units: dB for SQNR, output units for atol."""

    name: str
    max_bound_ratio: float
    max_error_ratio: float
    max_abs_bias_z: float
    max_abs_bias_z_signed: float
    min_sqnr_db: float
    max_calc_diff: float
    impact_atol: float
    impact_rtol: float
    # fraction of elements allowed outside allclose(atol, rtol) against the unquantized
    # reference: quantization error is a distribution, a few elements sit in its tail.
    impact_max_fail_frac: float


PROFILES: dict[str, Profile] = {
    "strict": Profile(
        name="strict",
        max_bound_ratio=1.0,
        max_error_ratio=2.0,
        max_abs_bias_z=6.0,
        max_abs_bias_z_signed=6.0,
        min_sqnr_db=27.0,
        max_calc_diff=1e-3,
        impact_atol=1e-1,
        impact_rtol=5e-2,
        impact_max_fail_frac=2e-2,
    ),
    "explore": Profile(
        name="explore",
        max_bound_ratio=1.0,
        max_error_ratio=2.0,
        max_abs_bias_z=6.0,
        max_abs_bias_z_signed=6.0,
        min_sqnr_db=20.0,
        max_calc_diff=5e-3,
        impact_atol=1.0,
        impact_rtol=2e-1,
        impact_max_fail_frac=5e-2,
    ),
}


# Distributions built to find kernel bugs at the quantizer's worst case: their impact is a
# property of the data, so it is measured and reported but not gated.
IMPACT_REPORT_ONLY: dict[str, str] = {
    "fp8-ties": "every value sits on an e4m3 rounding tie by construction (worst-case "
                "quantization error); impact reported, not gated",
    SUBNORMAL_DIST: "outputs in the float32 / bf16 subnormal range keep only a few significant "
                 "bits (bf16 rounds them to multiples of 2^-133), so the output's own "
                 "rounding dominates the error against the unquantized value; this case "
                 "checks arithmetic, impact reported, not gated",
    "quantizer-boundary": "every value but each block's amax sits within a float32 ulp of "
                          "an e4m3 rounding boundary by construction (worst-case "
                          "quantization error); impact reported, not gated",
}


# Noise deviations a relative loss gap may reach before it counts: the curve criteria's
# limit (`fp8check.curves`) and the drift a comparison of two runs allows a curve's gap.
GAP_Z = 3.0


@dataclass(frozen=True)
class Drift:
    """How much closer to its limit a criterion's value may move between a baseline run
    and a later run of the same kernel, case and seed before `fp8check compare` calls it a
    regression: by at most max(`rel` x |baseline value|, `abs`, `noise_z` x the two runs'
    combined standard error, read from the metric `noise`), in the criterion's unit.
    "Closer to its limit" follows the criterion's relation: up for "<=", down for ">=",
    away from 0 for "|x|<=".  A criterion with relation "==" (a flag, a count that must
    be 0) has no drift: only its verdict is compared.  `why` is the rationale."""

    rel: float = 0.0
    abs: float = 0.0
    noise: str | None = None
    noise_z: float = GAP_Z
    why: str = ""


# Deterministic kernels give the same values on the same case and seed, so any move is the
# change under review; the thresholds are what a reviewer must see, sized above what an
# accumulation-order change (any valid order, or a non-deterministic kernel's run-to-run
# order) makes of a correct kernel.  Keys are criterion names or fnmatch patterns; the
# first that matches applies (`drift_of`).
DRIFT: dict[str, Drift] = {
    "bound_ratio": Drift(rel=0.5, why=(
        "the worst element's error over its a-priori bound: a maximum over elements, so a "
        "valid reordering moves it; half again as large is the least worth a review, and a "
        "doubled error is caught")),
    "error_ratio": Drift(rel=0.25, why=(
        "the kernel's RMS error over a naive float32 kernel's: a mean over every element, "
        "steadier than a maximum; a quarter more error is the least worth a review")),
    "bias_z": Drift(abs=4.0, why=(
        "a sign test, N(0, 1) for any round-to-nearest kernel whatever its order, so two "
        "correct runs differ by N(0, 2): 4 is 2.8 of its deviations (0.5% a comparison)")),
    "bias_z_signed": Drift(abs=4.0, why="as bias_z"),
    "auc_gap": Drift(noise="auc_gap_se", why=(
        "the loss curves' relative AUC gap: judged against the gap's own noise (its "
        "standard error, as the curve criteria judge it), GAP_Z deviations of the two "
        "runs' combined error")),
    "final_gap": Drift(noise="final_gap_se", why="as auc_gap, of the final losses"),
    "*_db*": Drift(abs=1.0, why=(
        "an SQNR or SNR in dB (layer 1's quantization impact, layer 2's SQNRs, layer 3's "
        "gradient SNR), set by the quantization more than by the order of the sums: 1 dB "
        "(26% more noise power) is a changed quantization; a lost bit costs 6 dB")),
    "*": Drift(rel=0.25, why=(
        "any other ordered criterion (a native compile's resources, a count with a "
        "limit): a quarter worse than the baseline")),
}


def drift_of(criterion: str) -> Drift:
    """The `DRIFT` entry of the criterion called `criterion` (the first key matching it)."""
    return next(d for key, d in DRIFT.items() if fnmatch.fnmatchcase(criterion, key))


# The share of a layer-1 result's outputs bit-equal to the correctly rounded exact value
# (its ULP histogram's 0 bin) may fall by at most this much (absolute: 0.05 = 5 points of
# share, over thousands of outputs a case).  An accumulation order of another precision
# (pairwise instead of sequential sums) moves it too: such a change is for a reviewer to see.
EXACT_FRACTION_DRIFT = 0.05


def sqnr_band(sqnr_db: float) -> str:
    """The usual reading of an SQNR: good (>30 dB), acceptable (20-30), at-risk (< 20)."""
    if sqnr_db > 30.0:
        return "good"
    if sqnr_db >= 20.0:
        return "acceptable"
    return "at-risk"


def get_profile(name: str) -> Profile:
    """The profile called `name`.  There is deliberately no way to switch checks off."""
    if name in PROFILES:
        return PROFILES[name]
    if name in ("off", "none", "disabled"):
        raise ValueError(
            f"profile {name!r}: profiles are staged, never off; use explore for a search"
        )
    raise ValueError(f"unknown profile {name!r}; expected one of {', '.join(PROFILES)}")
