"""Tolerance profiles of the gate: staged, never off; and the one table of limits.

Every limit the gate applies is here, per profile (`Profile`, with layer 2's `MoeLimits`
and layers 3-4's `CurveLimits`) or the same in every profile (module constants), each
with its source; layer 0's are the chips' (`fp8check.targets.chips`).  `limits_table` lists
them all, and `docs/limits.md` is generated from it (`python -m fp8check.profiles`).  The
drift `fp8check compare` allows each criterion between two runs is `DRIFT`.

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
    "sign").  The statistic is the mean sign's t with a two-way cluster-robust variance,
    rows and (group, N tile) as crossed clusters (`metrics.bias_z_crossed`: a row's
    elements share its lhs roundings, a group's rows in one N tile its rhs blocks'), on
    the normal scale.  Why 6 keeps correct kernels passing: round-to-nearest lands on
    either side of the exact value alike, so the mean sign has expectation 0 whatever the
    accumulation order, and the variance counts both ways in which roundings are shared;
    with hundreds of rows and tens of tiles t is close to normal, where P(|t| > 6) ~ 2e-9.
    A one-way clustering by (row, N tile) is not enough: a correct kernel that
    dequantizes its weights to float32 (each 128x128 block's products rounded once, alike
    over the block's columns) reached |z| 6.7 on a ci case with it.  A directed rounding
    leans every row and tile one way; the detection table over the ci suite and 5 seeds
    is in docs/testing.md.  Signs, not the errors' sizes: weighted by size, one
    cancellation element with a huge relative error dominates (|t| 3.5 for a kernel
    rounding its scales up, whose clusters lean up 94% of the time).
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
from collections.abc import Callable
from dataclasses import dataclass

from fp8check.inputs.subnormal import SUBNORMAL_DIST


@dataclass(frozen=True)
class MoeLimits:
    """Layer 2's quantization-impact floors: SQNR (dB) of an FP8 MoE layer's output and of
    every gradient against the exact float64 layer."""

    out_min_sqnr_db: float
    grad_min_sqnr_db: float


@dataclass(frozen=True)
class CurveLimits:
    """Layers 3 and 4's loss-curve limits.  Gaps are relative (0.01 = 1%), SNR in dB;
    `spike_k` in deviations of the run's own noise."""

    max_auc_gap: float
    max_final_gap: float
    max_ema_gap: float
    spike_k: float
    min_grad_snr_db: float  # median over the sampled steps (layer 3 only)
    max_snr_drop_db: float  # fitted SNR decline over the run (layer 3 only)


@dataclass(frozen=True)
class Profile:
    """Thresholds of one stage, layers 1 to 4.  Units: dB for SQNR, output units for atol.
    Layer 0's limits are the chips' (`fp8check.targets.chips`), the same in every profile."""

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
    moe: MoeLimits
    curves: CurveLimits


# Layer 2 (`fp8check.layers.moe.validate`): strict gates FP8 outputs at 23 dB and
# gradients at 21 dB, the figures torchao's MoE training tests gate FP8 grouped GEMMs with
# (~23 dB outputs, 21-29 dB gradients); explore 20 / 18 dB (20 dB, the common
# "acceptable" floor for FP8 training).
# Layers 3-4 (`fp8check.measures.curves`): strict is Megatron's 1% AUC rule; the final loss (a tenth
# of the steps, noisier) and the worst EMA-smoothed step get 2% and 3%.  On the ci
# schedule (Pallas, seeds 0-2) correct FP8 kernels give |AUC gap| <= 3.1e-4, |final gap|
# <= 1.3e-3, max |EMA gap| <= 4e-3 and a median gradient SNR of 28-29 dB against f32
# (bf16 kernels: ~46 dB); single samples dip to ~15 dB where a token's top-k flips between
# the two models.  explore doubles the gaps and takes 5 dB off the SNR floor.
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
        moe=MoeLimits(out_min_sqnr_db=23.0, grad_min_sqnr_db=21.0),
        curves=CurveLimits(max_auc_gap=0.01, max_final_gap=0.02, max_ema_gap=0.03,
                           spike_k=6.0, min_grad_snr_db=20.0, max_snr_drop_db=6.0),
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
        moe=MoeLimits(out_min_sqnr_db=20.0, grad_min_sqnr_db=18.0),
        curves=CurveLimits(max_auc_gap=0.02, max_final_gap=0.04, max_ema_gap=0.06,
                           spike_k=6.0, min_grad_snr_db=15.0, max_snr_drop_db=10.0),
    ),
}

# Limits the same in every profile (correctness, not a stage's tolerance).
# Layer 1, reported, not gated: the share of elements outside allclose(REF_ATOL, REF_RTOL)
# against the exact result (`ref_allclose_fail_frac`), a strict per-element check for
# readers used to allclose.  Near cancellation a valid accumulation order can exceed it,
# which is why the gate uses the rigorous bound instead.
REF_ATOL, REF_RTOL = 1e-3, 1e-2
# Layer 2, the kernel against the reference layer on the same quantized operands
# (`st_sqnr_db.*`): what remains is the backward's bf16 roundings (~53 dB each) and the
# rare element whose bf16 activation rounds to a neighbour of the reference's.  Correct
# kernels give >= 46.1 dB on every tensor and expert of the ci cases (seed 0, both
# families, fp8 and bf16 layers); 40 dB leaves 6 dB of margin, while every seeded wiring
# bug (tests/seeded_bugs/layer2.py) gives <= 33 dB on some tensor or expert.
ST_MIN_SQNR_DB = 40.0
# Layer 2, a bf16 layer's impact floor: a bf16 rounding is ~53 dB; a handful compound.
BF16_IMPACT_MIN_DB = 35.0
# Layer 3, sanity: the loss must close at least this share of the distance from its first
# value to the task's entropy rate (the best achievable loss).
MIN_LEARNED = 0.5


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
# limit (`fp8check.measures.curves`) and the drift a comparison of two runs allows a curve's gap.
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


@dataclass(frozen=True)
class LimitRow:
    """One row of the table of limits: criterion `criterion` of layer `layer` must stand in
    `relation` to `values` (per profile; one value when every profile has it) in `unit`;
    `source` says where the figure comes from."""

    layer: int
    criterion: str
    relation: str
    values: dict[str, float]
    unit: str
    source: str


def _per_profile(get: Callable[[Profile], float]) -> dict[str, float]:
    return {name: get(p) for name, p in PROFILES.items()}


def _same(value: float) -> dict[str, float]:
    return dict.fromkeys(PROFILES, value)


def limits_table() -> list[LimitRow]:
    """Every gated limit of layers 0 to 4 (layer 0's per chip, from `fp8check.targets.chips`),
    with its source; `docs/limits.md` is this table (`python -m fp8check.profiles`)."""
    from fp8check.targets.chips import TARGETS

    rows = [LimitRow(0, f"{res} ({name})", "<=", _same(lim.value), lim.unit, lim.source)
            for name, t in TARGETS.items() for res, lim in t.limits.items()]
    rows += [
        LimitRow(1, "bound_ratio", "<=", _per_profile(lambda p: p.max_bound_ratio),
                 "|error| / bound", "Higham's a-priori float32 bound plus half an output "
                 "ulp: any valid accumulation order passes"),
        LimitRow(1, "error_ratio", "<=", _per_profile(lambda p: p.max_error_ratio),
                 "RMS error / a naive float32 kernel's", "FlashAttention's criterion"),
        LimitRow(1, "bias_z", "|x|<=", _per_profile(lambda p: p.max_abs_bias_z),
                 "t of a sign test", "P(|t| > 6) ~ 2e-9 for round-to-nearest (module "
                 "docstring)"),
        LimitRow(1, "bias_z_signed", "|x|<=", _per_profile(lambda p: p.max_abs_bias_z_signed),
                 "t of a sign test", "as bias_z"),
        LimitRow(1, "impact_sqnr_db", ">=", _per_profile(lambda p: p.min_sqnr_db), "dB",
                 "e4m3's floor ~28.7 dB for two operands; the worst correct case seen "
                 "28.36 dB (module docstring); torchao gates at 28 dB"),
        LimitRow(1, "impact_calc_diff", "<=", _per_profile(lambda p: p.max_calc_diff),
                 "calc_diff", "~1 / (2 SQNR): restates the SQNR floor"),
        LimitRow(1, "impact_allclose", "<=", _per_profile(lambda p: p.impact_max_fail_frac),
                 "share of elements", "outside allclose(impact_atol, impact_rtol) on "
                 "RMS-normalised rows; measured at most 1.1% on a correct kernel"),
        LimitRow(2, "sqnr_db.out", ">=", _per_profile(lambda p: p.moe.out_min_sqnr_db), "dB",
                 "torchao's MoE training tests (~23 dB outputs)"),
        LimitRow(2, "sqnr_db.<gradient>, sqnr_db.<wi|wo>.min_expert", ">=",
                 _per_profile(lambda p: p.moe.grad_min_sqnr_db), "dB",
                 "torchao's MoE training tests (21-29 dB gradients)"),
        LimitRow(2, "sqnr_db.* of a bf16 layer", ">=", _same(BF16_IMPACT_MIN_DB), "dB",
                 "a bf16 rounding is ~53 dB; a handful compound"),
        LimitRow(2, "st_sqnr_db.*", ">=", _same(ST_MIN_SQNR_DB), "dB",
                 "correct kernels >= 46.1 dB on the ci cases; seeded wiring bugs <= 33 dB"),
        LimitRow(3, "auc_gap", "|x|<=", _per_profile(lambda p: p.curves.max_auc_gap),
                 "relative gap", f"Megatron's 1% AUC rule, or {GAP_Z:g} noise deviations of "
                 "the gap when larger"),
        LimitRow(3, "final_gap", "|x|<=", _per_profile(lambda p: p.curves.max_final_gap),
                 "relative gap", f"the final tenth of the steps, noisier; or {GAP_Z:g} noise "
                 "deviations"),
        LimitRow(3, "max_abs_gap_ema", "<=", _per_profile(lambda p: p.curves.max_ema_gap),
                 "relative gap", "the worst smoothed step beyond the gap's noise band"),
        LimitRow(3, "new_spikes: 0 spikes scoring above", ">",
                 _per_profile(lambda p: p.curves.spike_k), "noise deviations",
                 "a 10-sigma spike scores ~9.3; 1000 steps of noise exceed 6 rarely"),
        LimitRow(3, "grad_snr_median_db", ">=", _per_profile(lambda p: p.curves.min_grad_snr_db),
                 "dB", "correct FP8 kernels: 28-29 dB against f32 on the ci schedule"),
        LimitRow(3, "grad_snr_drop_db", "<=", _per_profile(lambda p: p.curves.max_snr_drop_db),
                 "dB", "fitted decline of the gradient SNR over the run"),
        LimitRow(3, "learned_fraction", ">=", _same(MIN_LEARNED), "share of the learnable loss",
                 "a run that did not learn says nothing about precision"),
    ]
    return rows


def limits_markdown() -> str:
    """`docs/limits.md`: the table of limits (`limits_table`) and the drift `fp8check
    compare` allows each criterion (`DRIFT`), as Markdown."""
    names = list(PROFILES)
    lines = ["# Limits", "",
             "Generated from `fp8check/profiles.py` by `python -m fp8check.profiles > "
             "docs/limits.md` (a test keeps them equal).  Layers 3 and 4 share the curve "
             "limits; layer 4 has no gradient SNR.", "",
             f"| layer | criterion | relation | {' | '.join(names)} | unit | source |",
             "|---|---|---|" + "---|" * len(names) + "---|---|"]
    for r in limits_table():
        values = " | ".join(_number(r.values[n]) for n in names)
        lines.append(f"| {r.layer} | `{_cell(r.criterion)}` | {_cell(r.relation)} | "
                     f"{values} | {_cell(r.unit)} | {_cell(r.source)} |")
    lines += ["", "## Drift between two runs (`fp8check compare`)", "",
              "How far a criterion may move toward its limit between a baseline run and a "
              "later one before it is a regression: max(rel x |baseline|, abs, noise_z x the "
              "runs' combined standard error); the first key matching the criterion's name "
              "applies.", "",
              "| criterion | rel | abs | noise | why |", "|---|---|---|---|---|"]
    for key, d in DRIFT.items():
        noise = f"{d.noise_z:g} x `{d.noise}`" if d.noise else ""
        lines.append(f"| `{key}` | {d.rel:g} | {d.abs:g} | {noise} | {_cell(d.why)} |")
    lines.append(f"| share of outputs equal to RN(exact) (layer 1) | | "
                 f"{EXACT_FRACTION_DRIFT:g} | | a fall of 5 points |")
    return "\n".join(lines) + "\n"


def _number(v: float) -> str:
    """A limit as the table shows it: whole numbers in full (bytes), others as %g."""
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def _cell(text: str) -> str:
    """`text` in a Markdown table cell: pipes escaped."""
    return text.replace("|", "\\|")


if __name__ == "__main__":
    print(limits_markdown(), end="")
