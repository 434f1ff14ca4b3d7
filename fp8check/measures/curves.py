"""Loss-curve comparison shared by layer 3 (training here) and layer 4 (logs of runs
elsewhere): a candidate curve (FP8) against a baseline (BF16), and the seed statistics.

Gaps are relative and signed, (candidate - baseline) / |baseline|: positive means the
candidate's loss is higher (worse).  Metrics (all on the steps both curves have):

Every criterion is judged against the runs' own noise, so that two runs differing only
by noise pass and a real difference fails at stated rates (`benchmarks/curves.py`
measures both on synthetic pairs: false alarms <= 1% per criterion, detection >= 95% of a
2% gap after warm-up and of a 10-sigma spike).  The noise level (`noise_rel`) is the
robust deviation of one loss value about the trend, relative to the loss, from the
second differences around each step (1.4826 * MAD / sqrt(6) over `NOISE_WINDOW` of them).

* `gap` per step, raw and EMA-smoothed (`ema`, factor `EMA_BETA`); gated on the largest
  |EMA gap| among the steps where it exceeds `EMA_GAP_Z` deviations of the smoothed gap
  that noise alone makes (`ema_var_factor`; the bias-corrected EMA of the first steps
  averages few values): a single noisy batch must not decide, a sustained drift must.
  4.5 deviations: the maximum over up to a few hundred effectively independent EMA
  values;
* `auc_gap`: relative gap of the trapezoidal area under the curves over the common steps
  (Megatron's CI holds FP8 within 1% of BF16 on it);
* `final_gap`: relative gap of the mean loss over the last `FINAL_FRAC` of the steps;
  both gated at the profile's limit or `GAP_Z` (3) standard errors of the gap under the
  runs' noise, the larger: a short noisy log cannot tell 2% from noise, and must not
  fail for it (two-sided normal tail at 3: 0.27%);
* divergence: the first non-finite loss, and spikes: a loss above the least-squares
  quadratic through the `SPIKE_HALF` losses on each side (the curving trend of a falling
  loss is not a spike) by more than `spike_k` deviations of that residual under the
  run's own noise level at that step (`spike_scores`: white noise scores N(0, 1); the
  level leaves out the differences containing the step, so a spike cannot hide itself).
  6 deviations: a 10-sigma spike scores ~9.3, and 1000 steps of Gaussian noise exceed 6
  with probability ~1e-6.  Only the candidate's spikes that the baseline does not share
  are gated: a spike in both is the data, not the kernel.  Shared means that within one
  step the baseline's score reaches `SPIKE_SHARED_FRAC` of the threshold and at least
  1 / `SPIKE_SHARED_RATIO` of the candidate's (the FP8 model may respond to a hard batch
  up to twice as strongly as the BF16 one; the ratio keeps a kernel's spike far above a
  mild baseline rise a new spike);
* gradient SNR trend (layer 3): robust (Theil-Sen) slope of the SNR (dB) over steps, in
  dB per 100 steps, with Kendall's p-value;
* across seeds (`seed_test`): a one-sided paired t-test on the per-seed AUC gaps; gated
  (layer 3) only when significant and beyond the AUC limit, so its false-alarm rate is
  below alpha.

Each profile's thresholds are `fp8check.profiles.CurveLimits`; layers 3 and 4 use the same
ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fp8check.logs import LogOptions, read_log
from fp8check.profiles import GAP_Z, CurveLimits, get_profile
from fp8check.results.model import Criterion

EMA_BETA = 0.9
FINAL_FRAC = 0.1
SPIKE_HALF = 8
SPIKE_CLEAN_Z = 4.0
SPIKE_REL_FLOOR = 1e-4
NOISE_WINDOW = 200
NOISE_MIN = 12
EMA_GAP_Z = 4.5
SPIKE_SHARED_FRAC = 0.5
SPIKE_SHARED_RATIO = 3.0
SEED_ALPHA = 0.05


def get_limits(profile: str) -> CurveLimits:
    """The curve limits of `profile` (`fp8check.profiles`; ValueError for an unknown one,
    or for "off")."""
    return get_profile(profile).curves


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


def trapezoid_weights(steps: np.ndarray) -> np.ndarray:
    """w with auc(steps, y) == sum(w * y) (the trapezoid rule's weight of each step)."""
    x = np.asarray(steps, np.float64)
    w = np.zeros(len(x))
    d = np.diff(x) / 2
    w[:-1] += d
    w[1:] += d
    return w


def rel_gap(cand: np.ndarray | float, base: np.ndarray | float) -> np.ndarray | float:
    """(cand - base) / |base|, elementwise."""
    return (np.asarray(cand, np.float64) - base) / np.abs(base)


def first_nonfinite(y: np.ndarray) -> int | None:
    """Index of the first NaN / inf in y, or None."""
    bad = np.flatnonzero(~np.isfinite(y))
    return int(bad[0]) if bad.size else None


def noise_rel(y: np.ndarray, window: int = NOISE_WINDOW, relative: bool = True
              ) -> np.ndarray:
    """Per step i, the run's own noise level there, relative to the loss: the standard
    deviation of one loss value about the curve's trend over |loss|, estimated robustly
    from the relative second differences (y[j-1] - 2 y[j] + y[j+1]) / |y[j]| (a locally
    straight trend cancels; white noise of relative deviation s gives differences of
    deviation s * sqrt(6)) as 1.4826 * MAD / sqrt(6) over the `window` or so differences
    around i, leaving out the three that contain y[i] (so a spike never raises its own
    noise level, and a spike score is linear in y[i]).  Relative, because a loss's noise
    scales with it: early steps at 10 nats are noisier than late ones at 2;
    `relative=False` measures a series near 0 (a gap) in its own units.  NaN where fewer
    than `NOISE_MIN` finite differences are at hand (a short curve)."""
    y = np.asarray(y, np.float64)
    n = len(y)
    if n < 5:
        return np.full(n, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        d2 = y[2:] - 2 * y[1:-1] + y[:-2]  # d2[j]: centred on y[j + 1]
        if relative:
            d2 = d2 / np.abs(y[1:-1])
    h = window // 2 + 1
    pad = np.full(h + 1, np.nan)
    wins = np.lib.stride_tricks.sliding_window_view(np.concatenate([pad, d2, pad]),
                                                    2 * h + 1)[:n].copy()
    wins[:, h - 1:h + 2] = np.nan  # row i: d2[i-1-h .. i-1+h]; these three contain y[i]
    med = _row_median(wins)
    mad = _row_median(np.abs(wins - med[:, None]))
    ok = np.sum(np.isfinite(wins), axis=1) >= NOISE_MIN
    return np.where(ok, 1.4826 * mad / math.sqrt(6), np.nan)


def _row_median(a: np.ndarray) -> np.ndarray:
    """The median of each row's finite values (NaN for a row without one); one sort, not
    numpy's per-row loop for rows with NaN."""
    fin = np.isfinite(a)
    srt = np.sort(np.where(fin, a, np.inf), axis=1)
    k = fin.sum(axis=1)
    lo = np.take_along_axis(srt, np.maximum((k - 1) // 2, 0)[:, None], axis=1)[:, 0]
    hi = np.take_along_axis(srt, np.minimum(k // 2, a.shape[1] - 1)[:, None], axis=1)[:, 0]
    with np.errstate(invalid="ignore"):
        return np.where(k > 0, (lo + hi) / 2, np.nan)


def _filled(sigma: np.ndarray) -> np.ndarray:
    """`sigma` with its unmeasured steps given the median measured level (0 everywhere
    when none is measured: a curve too short to measure its noise is judged on the
    profile's limits alone)."""
    ok = np.isfinite(sigma)
    return np.where(ok, sigma, float(np.median(sigma[ok])) if ok.any() else 0.0)


def _fit_coefs(half: int) -> np.ndarray:
    """Row p (0 .. 2 half): weights c over a window of 2 half + 1 values, c[p] = 0, with
    sum(c * window) the least-squares quadratic through the other 2 half values evaluated
    at position p (p = half: interpolated from `half` values on each side; at a curve's
    ends, p moves toward the window's edge)."""
    n = 2 * half + 1
    rows = []
    for p in range(n):
        x = np.array([j - p for j in range(n) if j != p], np.float64)
        row = np.linalg.pinv(np.stack([np.ones_like(x), x, x * x], axis=1))[0]
        rows.append(np.insert(row, p, 0.0))
    return np.asarray(rows)


def spike_scores(y: np.ndarray, sigma: np.ndarray | None = None,
                 half: int = SPIKE_HALF) -> np.ndarray:
    """Per step i, how far y[i] lies above the least-squares quadratic through the 2 half
    values around it (`half` on each side, fewer on one side at a curve's ends), evaluated
    at i (a curving trend is no spike), in units of that residual's noise: the run's
    relative noise level at i (`noise_rel`, or `sigma`) times |fitted value| times
    sqrt(1 + sum c^2) (c: the fit's weights; 1.07 inside the curve, 1.32 at its ends),
    floored at `SPIKE_REL_FLOOR` of the fitted value (a noiseless curve's zero noise must
    not turn rounding into spikes).  White noise scores N(0, 1).  The fit's end weights
    are negative, so a big spike would lower the fit `half` steps away and score a ghost
    there: values scoring above `SPIKE_CLEAN_Z` are replaced by their fit in the other
    steps' windows, and every step is scored again.  NaN where a value of the window is
    not finite, the noise is not measured, or the curve is shorter than 2 half + 1
    steps."""
    y = np.asarray(y, np.float64)
    if len(y) < 2 * half + 1:
        return np.full(len(y), np.nan)
    sig = noise_rel(y) if sigma is None else sigma
    score, fit = _fit_scores(y, sig, half)
    with np.errstate(invalid="ignore"):
        out = score > SPIKE_CLEAN_Z
    if out.any():  # a big spike in a neighbour's window must not make that one a spike
        score = _fit_scores(y, sig, half, np.where(out, fit, y))[0]
    return score


def _fit_scores(y: np.ndarray, sig: np.ndarray, half: int, around: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """(scores, fitted values) of `spike_scores` in one pass: each y[i] against the fit
    through the values `around` it (default y; a step's own value never enters its fit)."""
    n, w = len(y), 2 * half + 1
    coefs = _fit_coefs(half)
    start = np.clip(np.arange(n) - half, 0, n - w)
    pos = np.arange(n) - start
    src = y if around is None else around
    fit = np.sum(np.lib.stride_tricks.sliding_window_view(src, w)[start] * coefs[pos], axis=1)
    lever = np.sqrt(1 + np.sum(coefs[pos] ** 2, axis=1))
    spread = np.maximum(sig * lever, SPIKE_REL_FLOOR) * np.abs(fit)
    with np.errstate(invalid="ignore"):
        return (y - fit) / spread, fit


def new_spikes(cand: np.ndarray, base: np.ndarray, k: float,
               sigmas: tuple[np.ndarray, np.ndarray] | None = None
               ) -> tuple[list[int], list[int], list[int]]:
    """(candidate spikes, baseline spikes, candidate spikes the baseline does not share)
    as indices into the two aligned curves: shared when, within one step, the baseline's
    score reaches `SPIKE_SHARED_FRAC` * k and the candidate's score over
    `SPIKE_SHARED_RATIO` (module docstring).  `sigmas`: the two curves' `noise_rel`,
    when the caller has them."""
    sig_c, sig_b = sigmas or (None, None)
    sc, sb = spike_scores(cand, sig_c), spike_scores(base, sig_b)
    with np.errstate(invalid="ignore"):
        sp_c, sp_b = np.flatnonzero(sc > k), np.flatnonzero(sb > k)
        near = [sb[max(0, i - 1):i + 2] for i in sp_c]
        new = [int(i) for i, b in zip(sp_c, near, strict=True)
               if not np.any(b >= max(SPIKE_SHARED_FRAC * k, sc[i] / SPIKE_SHARED_RATIO))]
    return [int(i) for i in sp_c], [int(i) for i in sp_b], new


def ema_var_factor(n: int, beta: float = EMA_BETA) -> np.ndarray:
    """Per step i, Var(ema(x)[i]) / Var(x) for white noise x: the bias-corrected EMA's
    weights (1 - beta) beta^(i - j) / (1 - beta^(i + 1)) squared and summed.  1 at the
    first step (the EMA is the value), (1 - beta) / (1 + beta) in the long run."""
    i = np.arange(n, dtype=np.float64)
    return ((1 - beta) ** 2 * (1 - beta ** (2 * (i + 1))) / (1 - beta ** 2)
            / (1 - beta ** (i + 1)) ** 2)


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
    noise_c, noise_b = noise_rel(al.cand), noise_rel(al.base)
    sp_c, sp_b, sp_new = new_spikes(al.cand, al.base, limits.spike_k, (noise_c, noise_b))
    new = [int(al.steps[i]) for i in sp_new]
    m.update(candidate_spikes=[int(al.steps[i]) for i in sp_c],
             baseline_spikes=[int(al.steps[i]) for i in sp_b], new_spikes=new)
    res.criteria.append(Criterion.check("new_spikes", "training", len(new), "==", 0,
                                        meaning="loss spikes the baseline does not have"))
    gap = np.asarray(rel_gap(al.cand, al.base))
    ema_c, ema_b = ema(al.cand), ema(al.base)
    gap_ema = np.asarray(rel_gap(ema_c, ema_b))
    m["gap"], m["gap_ema"] = gap.tolist(), gap_ema.tolist()
    finite = bool(np.all(np.isfinite(gap_ema)))
    m["max_abs_gap"] = float(np.max(np.abs(gap))) if np.all(np.isfinite(gap)) else math.inf
    m["max_abs_gap_ema"] = float(np.max(np.abs(gap_ema))) if finite else math.inf
    m["mean_gap"] = float(np.mean(gap))
    # The gap's own noise (not the runs'): noise the two runs share (the same batches in
    # the same order) cancels in it, and only what differs between them is noise to it.
    sig_g = _filled(noise_rel(gap, relative=False))
    var = (sig_g * al.base) ** 2  # of one step's loss difference
    with np.errstate(invalid="ignore", divide="ignore"):
        m["noise_rel"] = [float(np.median(_filled(noise_c))), float(np.median(_filled(noise_b)))]
        m["gap_noise"] = float(np.median(sig_g))
        wt = trapezoid_weights(al.steps)
        se_auc = float(np.sqrt(np.sum(wt ** 2 * var)) / abs(np.sum(wt * al.base)))
        w = final_window(n)
        se_final = float(np.sqrt(np.sum(var[-w:])) / w / abs(np.mean(al.base[-w:])))
        band = EMA_GAP_Z * np.sqrt(ema_var_factor(n) * var) / np.abs(ema_b)
        beyond = np.abs(gap_ema) > band
    auc_gap = float(rel_gap(auc(al.steps, al.cand), auc(al.steps, al.base)))
    final_gap = float(rel_gap(np.mean(al.cand[-w:]), np.mean(al.base[-w:])))
    ema_excess = (float(np.max(np.abs(gap_ema[beyond]), initial=0.0)) if finite
                  else math.inf)
    m.update(auc_gap=auc_gap, final_gap=final_gap, final_window=w, auc_gap_se=se_auc,
             final_gap_se=se_final, ema_gap_beyond_noise=ema_excess)
    for name, value, limit, meaning in (
            ("auc_gap", auc_gap, max(limits.max_auc_gap, GAP_Z * se_auc),
             f"relative gap of the areas under the loss curves (limit: the profile's or "
             f"{GAP_Z:g} noise deviations of the gap, the larger)"),
            ("final_gap", final_gap, max(limits.max_final_gap, GAP_Z * se_final),
             f"relative gap of the final losses (limit: the profile's or {GAP_Z:g} noise "
             f"deviations of the gap, the larger)"),
            ("max_abs_gap_ema", ema_excess, limits.max_ema_gap,
             f"largest relative gap of the smoothed losses among the steps where it exceeds "
             f"{EMA_GAP_Z:g} noise deviations (0: none)")):
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
    reader's notes (format, non-finite losses) come first in the curve's notes, each
    prefixed with the label."""
    rec = read_log(spec, opts)
    curve = make_curve(rec.steps, rec.loss, label or spec)
    notes = (f"read as {rec.fmt}",) + rec.notes + curve.notes
    return replace(curve, notes=tuple(f"{curve.label}: {n}" for n in notes))
