"""Loss-curve comparison shared by layer 3 (training here) and layer 4 (logs of runs
elsewhere): a candidate curve (FP8) against a baseline (BF16), and the seed statistics.

Gaps are relative and signed, (candidate - baseline) / |baseline|: positive means the
candidate's loss is higher (worse).  Metrics (all on the steps both curves have):

* `gap` per step, raw and EMA-smoothed (`ema`, factor `EMA_BETA`); gated on max |EMA gap|
  (a single noisy batch must not decide, a sustained drift must);
* `auc_gap`: relative gap of the trapezoidal area under the curves over the common steps
  (Megatron's CI holds FP8 within 1% of BF16 on it);
* `final_gap`: relative gap of the mean loss over the last `FINAL_FRAC` of the steps;
* divergence: the first non-finite loss, and spikes: a loss above the line fitted to the
  previous `SPIKE_WINDOW` losses (the trend of a falling curve is not noise) by more than
  `spike_k` times the robust spread of that fit's residuals (1.4826 * MAD, floored at
  `SPIKE_REL_FLOOR` of the prediction so a flat curve's zero spread cannot flag noise).
  Only the candidate's spikes that the baseline does not share are gated: a spike in both
  is the data, not the kernel.  Shared means that within one step the baseline's score
  reaches `SPIKE_SHARED_FRAC` of the threshold and at least 1 / `SPIKE_SHARED_RATIO` of
  the candidate's.  Both models see the same batch, and a hard batch that lifts the
  candidate 8-11 spreads often lifts the baseline "only" 5.6-8, while the FP8 model may
  respond up to twice as strongly (16.6 against 8.1 spreads; measured on the full suite,
  16 correct Pallas runs of 1000 steps): an exact second detection, or a fixed margin,
  would turn the data's spikes into false alarms.  The ratio keeps a kernel's spike far
  above a mild baseline rise (noise reaches half the threshold by chance) a new spike;
* gradient SNR trend (layer 3): robust (Theil-Sen) slope of the SNR (dB) over steps, in
  dB per 100 steps, with Kendall's p-value;
* across seeds (`seed_test`): a one-sided paired t-test on the per-seed AUC gaps.

`LIMITS` holds each profile's thresholds; layers 3 and 4 use the same ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fp8check.logs import LogOptions, read_log
from fp8check.results.model import Criterion

EMA_BETA = 0.9
FINAL_FRAC = 0.1
SPIKE_WINDOW = 10
SPIKE_REL_FLOOR = 1e-3
SPIKE_SHARED_FRAC = 0.5
SPIKE_SHARED_RATIO = 3.0
SEED_ALPHA = 0.05


@dataclass(frozen=True)
class CurveLimits:
    """Thresholds of one profile.  Gaps are relative (0.01 = 1%), SNR in dB."""

    max_auc_gap: float
    max_final_gap: float
    max_ema_gap: float
    spike_k: float
    min_grad_snr_db: float  # median over the sampled steps (layer 3 only)
    max_snr_drop_db: float  # fitted SNR decline over the run (layer 3 only)


# strict: Megatron's 1% AUC rule; the final loss (a tenth of the steps, noisier) and the
# worst EMA-smoothed step get 2% and 3%.  Measured on the ci schedule (Pallas, seeds 0-2),
# correct FP8 kernels give |AUC gap| <= 3.1e-4, |final gap| <= 1.3e-3, max |EMA gap| <=
# 4e-3 and a median gradient SNR of 28-29 dB against f32 (bf16 kernels: ~46 dB); single
# samples dip to ~15 dB where a token's top-k flips between the two models.  explore
# doubles the gaps and takes 5 dB off the SNR floor.
LIMITS: dict[str, CurveLimits] = {
    "strict": CurveLimits(max_auc_gap=0.01, max_final_gap=0.02, max_ema_gap=0.03,
                          spike_k=8.0, min_grad_snr_db=20.0, max_snr_drop_db=6.0),
    "explore": CurveLimits(max_auc_gap=0.02, max_final_gap=0.04, max_ema_gap=0.06,
                           spike_k=8.0, min_grad_snr_db=15.0, max_snr_drop_db=10.0),
}


def get_limits(profile: str) -> CurveLimits:
    """The curve limits of `profile` (ValueError for an unknown one, or for "off")."""
    from fp8check.profiles import get_profile

    get_profile(profile)
    if profile not in LIMITS:
        raise ValueError(f"profile {profile!r} has no curve limits; expected one of "
                         f"{', '.join(LIMITS)}")
    return LIMITS[profile]


@dataclass(frozen=True)
class Curve:
    """A loss curve: strictly increasing integer steps and float64 losses (NaN / inf kept:
    they are what divergence detection looks for)."""

    steps: np.ndarray
    loss: np.ndarray
    label: str = ""
    notes: tuple[str, ...] = ()

    @staticmethod
    def of(loss: Sequence[float], label: str = "", steps: Sequence[int] | None = None
           ) -> Curve:
        """A curve from values (steps 0, 1, ... unless given)."""
        y = np.asarray([float(v) for v in loss], np.float64)
        s = np.arange(len(y)) if steps is None else np.asarray(steps, np.int64)
        return make_curve(s, y, label)


def make_curve(steps: np.ndarray, loss: np.ndarray, label: str = "") -> Curve:
    """A `Curve` from raw (step, loss) records in log order.  A step logged twice (a
    restarted run) keeps its last value and is noted; steps are sorted."""
    steps, loss = np.asarray(steps), np.asarray(loss, np.float64)
    if steps.shape != loss.shape or steps.ndim != 1:
        raise ValueError(f"{label or 'curve'}: steps and losses must be 1-D and equally long")
    if steps.size == 0:
        raise ValueError(f"{label or 'curve'}: no (step, loss) records")
    if not np.all(np.equal(np.mod(steps, 1), 0)):
        raise ValueError(f"{label or 'curve'}: steps must be integers")
    steps = steps.astype(np.int64)
    last = {int(s): i for i, s in enumerate(steps)}  # last occurrence wins
    dup = len(steps) - len(last)
    order = sorted(last)
    notes = (f"{dup} repeated steps: kept the last value of each",) if dup else ()
    return Curve(np.asarray(order, np.int64), loss[[last[s] for s in order]], label, notes)


@dataclass(frozen=True)
class Alignment:
    """Two curves on their common steps, and the steps only one of them has."""

    steps: np.ndarray
    cand: np.ndarray
    base: np.ndarray
    only_cand: list[int]
    only_base: list[int]


def align(cand: Curve, base: Curve) -> Alignment:
    """Restrict both curves to the steps they share (ValueError when there are < 2)."""
    common, ic, ib = np.intersect1d(cand.steps, base.steps, return_indices=True)
    if common.size < 2:
        raise ValueError(f"curves {cand.label!r} and {base.label!r} share {common.size} "
                         f"steps; need at least 2 to compare")
    return Alignment(common, cand.loss[ic], base.loss[ib],
                     [int(s) for s in np.setdiff1d(cand.steps, common)],
                     [int(s) for s in np.setdiff1d(base.steps, common)])


def ema(x: np.ndarray, beta: float = EMA_BETA) -> np.ndarray:
    """Bias-corrected exponential moving average (Adam-style: the first value is not
    damped toward 0); NaN propagates."""
    out = np.empty(len(x))
    acc = 0.0
    for i, v in enumerate(np.asarray(x, np.float64)):
        acc = beta * acc + (1 - beta) * v
        out[i] = acc / (1 - beta ** (i + 1))
    return out


def auc(steps: np.ndarray, y: np.ndarray) -> float:
    """Trapezoidal area under y over `steps` (loss x steps)."""
    return float(np.trapezoid(np.asarray(y, np.float64), np.asarray(steps, np.float64)))


def rel_gap(cand: np.ndarray | float, base: np.ndarray | float) -> np.ndarray | float:
    """(cand - base) / |base|, elementwise."""
    return (np.asarray(cand, np.float64) - base) / np.abs(base)


def first_nonfinite(y: np.ndarray) -> int | None:
    """Index of the first NaN / inf in y, or None."""
    bad = np.flatnonzero(~np.isfinite(y))
    return int(bad[0]) if bad.size else None


def spike_scores(y: np.ndarray, window: int = SPIKE_WINDOW) -> np.ndarray:
    """Per step i, how far y[i] lies above the straight line fitted to the previous
    `window` values (extrapolated to i), in robust spreads of that fit's residuals (module
    docstring); NaN for the first `window` steps, a non-finite y[i] or fewer than
    window // 2 finite values before it."""
    y = np.asarray(y, np.float64)
    out = np.full(len(y), np.nan)
    for i in range(window, len(y)):
        x = np.arange(i - window, i, dtype=np.float64)
        hist = y[i - window:i]
        ok = np.isfinite(hist)
        if ok.sum() < window // 2 or not np.isfinite(y[i]):
            continue
        slope, icpt = np.polyfit(x[ok], hist[ok], 1)
        resid = hist[ok] - (slope * x[ok] + icpt)
        pred = slope * i + icpt
        spread = max(1.4826 * float(np.median(np.abs(resid - np.median(resid)))),
                     SPIKE_REL_FLOOR * abs(pred))
        out[i] = (y[i] - pred) / spread
    return out


def new_spikes(cand: np.ndarray, base: np.ndarray, k: float) -> tuple[list[int], list[int],
                                                                      list[int]]:
    """(candidate spikes, baseline spikes, candidate spikes the baseline does not share)
    as indices into the two aligned curves: shared when, within one step, the baseline's
    score reaches `SPIKE_SHARED_FRAC` * k and the candidate's score over
    `SPIKE_SHARED_RATIO` (module docstring)."""
    sc, sb = spike_scores(cand), spike_scores(base)
    with np.errstate(invalid="ignore"):
        sp_c, sp_b = np.flatnonzero(sc > k), np.flatnonzero(sb > k)
        near = [sb[max(0, i - 1):i + 2] for i in sp_c]
        new = [int(i) for i, b in zip(sp_c, near, strict=True)
               if not np.any(b >= max(SPIKE_SHARED_FRAC * k, sc[i] / SPIKE_SHARED_RATIO))]
    return [int(i) for i in sp_c], [int(i) for i in sp_b], new


def final_window(n: int) -> int:
    """How many trailing steps the final loss averages: FINAL_FRAC of them, at least 1."""
    return max(1, int(round(n * FINAL_FRAC)))


@dataclass
class CurveComparison:
    """Metrics (JSON-ready) and gated criteria (question "training") of a candidate
    curve against a baseline."""

    metrics: dict[str, Any] = field(default_factory=dict)
    criteria: list[Criterion] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.criteria)

    @property
    def named(self) -> dict[str, Criterion]:
        """The criteria by name."""
        return {c.name: c for c in self.criteria}


def compare(cand: Curve, base: Curve, limits: CurveLimits) -> CurveComparison:
    """The loss-curve metrics and checks of `cand` against `base` (module docstring)."""
    al = align(cand, base)
    res = CurveComparison()
    m = res.metrics
    n = len(al.steps)
    m.update(steps_compared=n, first_step=int(al.steps[0]), last_step=int(al.steps[-1]),
             only_candidate_steps=al.only_cand, only_baseline_steps=al.only_base,
             notes=list(cand.notes + base.notes))
    div_c, div_b = first_nonfinite(al.cand), first_nonfinite(al.base)
    m["candidate_nonfinite_step"] = None if div_c is None else int(al.steps[div_c])
    m["baseline_nonfinite_step"] = None if div_b is None else int(al.steps[div_b])
    res.criteria.append(Criterion.check(
        "finite", "training", m["candidate_nonfinite_step"], "==", None,
        meaning="first step where the candidate's loss is not finite (None: none)"))
    sp_c, sp_b, sp_new = new_spikes(al.cand, al.base, limits.spike_k)
    new = [int(al.steps[i]) for i in sp_new]
    m.update(candidate_spikes=[int(al.steps[i]) for i in sp_c],
             baseline_spikes=[int(al.steps[i]) for i in sp_b], new_spikes=new)
    res.criteria.append(Criterion.check("new_spikes", "training", len(new), "==", 0,
                                        meaning="loss spikes the baseline does not have"))
    gap = np.asarray(rel_gap(al.cand, al.base))
    gap_ema = np.asarray(rel_gap(ema(al.cand), ema(al.base)))
    m["gap"], m["gap_ema"] = gap.tolist(), gap_ema.tolist()
    max_ema = float(np.max(np.abs(gap_ema))) if np.all(np.isfinite(gap_ema)) else math.inf
    m["max_abs_gap"] = float(np.max(np.abs(gap))) if np.all(np.isfinite(gap)) else math.inf
    m["max_abs_gap_ema"] = max_ema
    m["mean_gap"] = float(np.mean(gap))
    auc_gap = float(rel_gap(auc(al.steps, al.cand), auc(al.steps, al.base)))
    w = final_window(n)
    final_gap = float(rel_gap(np.mean(al.cand[-w:]), np.mean(al.base[-w:])))
    m.update(auc_gap=auc_gap, final_gap=final_gap, final_window=w)
    for name, value, limit, meaning in (
            ("auc_gap", auc_gap, limits.max_auc_gap, "relative gap of the areas under the "
                                                     "loss curves"),
            ("final_gap", final_gap, limits.max_final_gap, "relative gap of the final losses"),
            ("max_abs_gap_ema", max_ema, limits.max_ema_gap, "largest relative gap of the "
                                                             "smoothed losses")):
        # abs(inf) <= limit is false and abs(nan) <= limit too: a diverged run fails
        res.criteria.append(Criterion.check(name, "training", value, "|x|<=", limit,
                                            meaning=meaning))
    return res


@dataclass(frozen=True)
class Trend:
    """Robust line through (step, value): Theil-Sen slope per 100 steps, the two-sided
    p-value of Kendall's tau (is there a monotone trend at all), and the fitted change
    from the first to the last step (negative = decline)."""

    slope_per_100: float
    p_value: float
    fitted_change: float


def trend(steps: Sequence[int], values: Sequence[float]) -> Trend:
    """`Trend` of values over steps; NaN for < 3 points or non-finite values (a -inf SNR
    is a diverged gradient, caught elsewhere).  Theil-Sen, not least squares: a gradient
    SNR sample dips by 15-20 dB where a token's top-k flips between the two models, and
    one such sample at the end of a run must not read as a decline."""
    from scipy import stats

    x, y = np.asarray(steps, np.float64), np.asarray(values, np.float64)
    if len(x) < 3 or not np.all(np.isfinite(y)):
        return Trend(math.nan, math.nan, math.nan)
    slope = float(stats.theilslopes(y, x).slope)
    p = float(stats.kendalltau(x, y).pvalue) if np.ptp(y) > 0 else 1.0
    return Trend(slope * 100, p, slope * float(x[-1] - x[0]))


@dataclass(frozen=True)
class SeedVerdict:
    """Across seeds, is FP8 worse than BF16 beyond seed noise?

    `verdict`: "fp8-worse" (the paired one-sided t-test rejects "no worse" at `alpha` and
    the mean AUC gap exceeds the profile's limit), "fp8-worse-within-limit" (significant
    but small), "within-seed-noise" (not significant), or "too-few-seeds" (< 2).
    `seed_noise` is the baseline's spread across seeds (std / mean of its AUCs): the scale
    the per-seed gaps are to be read against.
    """

    verdict: str
    n_seeds: int
    mean_gap: float
    t_stat: float
    p_value: float
    seed_noise: float
    alpha: float = SEED_ALPHA


def seed_test(gaps: Sequence[float], base_aucs: Sequence[float], limit: float,
              alpha: float = SEED_ALPHA) -> SeedVerdict:
    """H0: the per-seed relative AUC gaps (FP8 vs BF16, same seed, same data) have mean
    <= 0; one-sided one-sample t-test (equivalent to the paired test of the AUCs)."""
    from scipy import stats

    g = np.asarray(gaps, np.float64)
    b = np.asarray(base_aucs, np.float64)
    noise = float(np.std(b, ddof=1) / abs(np.mean(b))) if len(b) > 1 else math.nan
    if len(g) < 2:
        return SeedVerdict("too-few-seeds", len(g), float(np.mean(g)) if len(g) else math.nan,
                           math.nan, math.nan, noise, alpha)
    if not np.all(np.isfinite(g)):
        return SeedVerdict("fp8-worse", len(g), math.inf, math.inf, 0.0, noise, alpha)
    if np.all(g == g[0]):  # zero variance: the t-statistic is undefined
        t, p = (math.inf, 0.0) if g[0] > 0 else (math.nan, 1.0)
    else:
        r = stats.ttest_1samp(g, 0.0, alternative="greater")
        t, p = float(r.statistic), float(r.pvalue)
    mean = float(np.mean(g))
    if p < alpha:
        verdict = "fp8-worse" if mean > limit else "fp8-worse-within-limit"
    else:
        verdict = "within-seed-noise"
    return SeedVerdict(verdict, len(g), mean, t, p, noise, alpha)


# --- loading curves: the log readers of `fp8check.logs` ---------------------------------


def load_curve(spec: str, label: str | None = None, opts: LogOptions | None = None) -> Curve:
    """The loss curve of the log `spec` (PATH, or a gate result file's PATH@SELECTOR with
    the selector "[FAMILY/][CASE/]fp8|bf16|f32"), in any format `fp8check.logs` reads
    (detected, or `opts.fmt`; `opts` also names the step / loss key and the run).  The
    reader's notes (format, non-finite losses) come first in the curve's notes."""
    rec = read_log(spec, opts)
    curve = make_curve(rec.steps, rec.loss, label or spec)
    return replace(curve, notes=(f"read as {rec.fmt}",) + rec.notes + curve.notes)
