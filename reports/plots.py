"""matplotlib figures of gate results (no pyplot, no display: safe on headless machines
and in notebooks, whatever backend they chose).

Every `plot_*` function draws on a given Axes from the gate's JSON data (a result's
`metrics`, or its `metrics["plots"]` summary from `fp8check.reports.plotdata`), so the
notebooks compose them freely; the `*_figure` functions build the report's figures and
`to_data_uri` turns a figure into an inline PNG.  Values arrive as JSON gives them: inf and
nan may be the strings "inf" / "nan", None marks a missing value.
"""

from __future__ import annotations

import base64
import io
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatterSciNotation
from PIL import Image

# 1240 px wide at this dpi: the report's content column at a 1280 px window.
FIG_DPI = 80
FIG_WIDTH_IN = 15.5
BAD, GOOD, NEUTRAL, ALT = "#b00020", "#1f77b4", "#777777", "#ff7f0e"
IMPACT_AXIS_MAX_DB = 80.0
SQNR_BANDS = (20.0, 30.0)  # dB: < 20 at risk, 20-30 acceptable, > 30 good (profiles.py)
_PALETTE_COLOURS = 128
# Titles at a fixed height (matplotlib's default, which these axes' decorations never
# push up): left to matplotlib, placing one measures every tick label, a tenth of a
# report figure's drawing time.
TITLE_Y = 1.0
# tiling-search candidate statuses drawn as accepted (anything else: rejected, grey)
ACCEPTED_STATUSES = ("ok", "pass", "passed", "accepted")


_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_MATH_LABEL = re.compile(r"\$\\mathdefault\{(.*)\}\$")


def _power(base: int, exponent: int) -> str:
    """base^exponent as plain text with a superscript exponent ("2³", "10⁻⁴")."""
    return f"{base}{str(exponent).translate(_SUPERSCRIPT)}"


class _PlainLogFormatter(LogFormatterSciNotation):
    """matplotlib's log-axis tick labels (10^k at the decades, c x 10^k between them, the
    same ticks labelled) as plain text with superscript exponents: drawn without
    mathtext, whose parsing took a quarter of a report figure's drawing time."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        label = super().__call__(x, pos)
        math_label = _MATH_LABEL.fullmatch(label)
        if math_label is None:
            return label
        body = re.sub(r"\^\{(-?\d+)\}", lambda e: e.group(1).translate(_SUPERSCRIPT),
                      math_label.group(1).replace(r"\times", "×"))
        return "\N{MINUS SIGN}" + body[1:] if body.startswith("-") else body


def _plain_log_ticks(ax: Axes, *axes: str, minor: bool = True) -> None:
    """The named axes' ("x", "y") log-scale tick labels as `_PlainLogFormatter`s, with the
    arguments matplotlib's log scale gives its own (base 10; minor labels when `minor`)."""
    for name in axes:
        axis = ax.xaxis if name == "x" else ax.yaxis
        axis.set_major_formatter(_PlainLogFormatter(10))
        if minor:
            axis.set_minor_formatter(_PlainLogFormatter(10, labelOnlyBase=False))


def num(v: Any) -> float:
    """A JSON number (or "inf" / "nan" / None) as a float; None -> nan."""
    return math.nan if v is None else float(v)


def to_data_uri(fig: Figure) -> str:
    """The figure as a `data:image/png;base64,...` URI (palette PNG: plots have few
    colours, so an adaptive palette keeps them sharp at a fraction of the size)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=FIG_DPI)
    buf.seek(0)
    img = Image.open(buf).convert("RGB").quantize(colors=_PALETTE_COLOURS)
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii")


# --- layer 1 panels ----------------------------------------------------------------------


def _ulp_label(lo: int, last: bool) -> str:
    """Bin label by its lower edge: 0, 1, 2^1, 2^2, ... (">=" on the open last bin)."""
    text = str(lo) if lo < 2 else _power(2, lo.bit_length() - 1)
    return ("≥" + text) if last else text


def plot_ulp_hist(ax: Axes, hist: dict[str, Any]) -> None:
    """Bars of the ULP distance to the correctly rounded exact value, each bin split into
    its elements within the error bound and those over it (red; NaN always red).  ULPs are
    not gated (a valid summation order lands far from a nearly cancelling exact value), so
    the colour is the bound's verdict; the panel says how many elements are over it.  A
    document without per-bin verdicts (`over`, written before they were kept) is drawn
    grey and says so."""
    edges, counts = hist["edges"], list(hist["counts"])
    over = hist.get("over")
    labels = [_ulp_label(lo, i == len(edges) - 1) for i, lo in enumerate(edges)]
    nan = int(hist.get("nan") or 0)
    x = np.arange(len(labels) + (1 if nan else 0))
    if nan:
        labels.append("NaN")
    if over is None:
        ax.bar(x, [*counts, nan][:len(x)], color=NEUTRAL)
        ax.text(0.98, 0.97, "no per-bin verdict in this document", transform=ax.transAxes,
                ha="right", va="top", fontsize=7)
    else:
        within = [*(c - o for c, o in zip(counts, over, strict=True)), 0][:len(x)]
        bad = [*over, nan][:len(x)]
        ax.bar(x, within, color=GOOD, label="within the bound")
        ax.bar(x, bad, bottom=within, color=BAD, label="over the bound")
        n_over, n_all = sum(bad), sum(counts) + nan
        note = (f"all {n_all} within the bound" if n_over == 0
                else f"{n_over} of {n_all} over the bound")
        legend = ax.legend(fontsize=7, loc="upper right", title=note, title_fontsize=7.5)
        legend.get_title().set_color("k" if n_over == 0 else BAD)
    ax.set_yscale("symlog", linthresh=1)
    _plain_log_ticks(ax, "y", minor=False)  # symlog's minor ticks carry no labels
    step = max(1, math.ceil(len(labels) / 12))  # at most ~12 labels fit under the panel
    ax.set_xticks(x[::step], labels[::step], fontsize=7)
    ax.set_xlabel("ULPs to RN(exact) (bin from its lower edge)")
    ax.set_ylabel("elements")
    ax.set_title("ULP distance to RN(exact), not gated", fontsize=10, y=TITLE_Y)


def plot_err_vs_ab(ax: Axes, data: dict[str, Any]) -> None:
    """|out - exact| against |A||B| (log-log) with each element's error bound as a black
    mark at its |A||B|: the bound the criterion applies (`metrics.error_bound`: gamma_n
    |A||B| plus half an ulp of the output, the float64 slack and any declared accumulator
    term), so a point is above its mark exactly when it is over the bound (red).  The
    dotted line is the accumulation term gamma_n |A||B| alone.  Exact elements (err 0) are
    drawn on the bottom edge, NaN / Inf outputs as triangles on the top edge.  Points
    without their bound (documents written before it was kept) get the line only."""
    rows = [[num(v) for v in pt] for pt in data["points"]]
    if not rows:
        ax.text(0.5, 0.5, "no elements", ha="center", transform=ax.transAxes)
        return
    has_bound = all(len(r) == 4 for r in rows)
    pts = np.array([r[:4] if has_bound else r[:3] for r in rows], dtype=float)
    ab, err, ratio = pts[:, 0], pts[:, 1], pts[:, 2]
    bound = pts[:, 3] if has_bound else np.empty(0)
    bad_out = ~np.isfinite(err)  # NaN / Inf outputs: drawn as triangles on the top edge
    shown = np.concatenate([err[(err > 0) & ~bad_out], bound[bound > 0]])
    floor = shown.min() / 4 if shown.size else 1e-12  # below every bound (all are > 0)
    ceiling = shown.max() * 4 if shown.size else 1.0
    ab_pos = ab[ab > 0]
    ab_floor = ab_pos.min() / 4 if ab_pos.size else 1e-12
    x = np.maximum(ab, ab_floor)
    y = np.where(bad_out, ceiling, np.where(err > 0, err, floor))
    over = ~(ratio <= 1) & ~bad_out  # a NaN ratio counts as over the bound
    fine = ~over & ~bad_out
    ax.scatter(x[fine], y[fine], s=6, color=GOOD, alpha=0.6, label="within bound")
    if over.any():
        ax.scatter(x[over], y[over], s=10, color=BAD, label="over the bound")
    if bad_out.any():
        ax.scatter(x[bad_out], y[bad_out], s=18, marker="^", color=BAD,
                   label=f"NaN/Inf output ({int(bad_out.sum())})")
    if has_bound:
        ax.scatter(x, bound, s=14, marker="_", color="k", linewidths=0.8,
                   label="each element's bound")
    lo, hi = x.min(), x.max() * 1.5
    xs = np.geomspace(lo, hi if hi > lo else lo * 10, 50)
    gamma = data["gamma"]
    ax.plot(xs, gamma * xs, color="k", lw=1, ls=":" if has_bound else "-",
            label=f"γ|A||B|, γ={gamma:.2g}" + ("" if has_bound else " (no per-element bound "
                                                 "in this document)"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_ticks(ax, "x", "y")
    ax.set_ylim(floor / 2, ceiling * 2)
    ax.set_xlabel("|A||B|")
    ax.set_ylabel("|out - exact|")
    ax.set_title(f"error vs |A||B| ({len(pts)} of {data['n_elements']} elements)", fontsize=10,
                 y=TITLE_Y)
    ax.legend(fontsize=7, loc="upper left")


def plot_bound_tiles(ax: Axes, tiles: dict[str, Any], *, colorbar: bool = True) -> None:
    """Heatmap of the max bound ratio per (row tile x N tile), log scale centred on 1;
    dashed lines at group starts, residual rows (a group's partial last 128-row tile)
    bracketed in magenta on the left."""
    grid = np.array([[num(v) for v in row] for row in tiles["max"]], dtype=float)
    if grid.size == 0:  # every group empty: no output row is compared
        ax.text(0.5, 0.5, "no rows compared (all groups empty)", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
        return
    grid = np.where(np.isnan(grid), np.inf, grid)
    finite = np.isfinite(grid)
    logr = np.log10(np.maximum(np.where(finite, grid, 1e6), 1e-6))
    vmax = max(1.0, float(np.max(np.abs(logr))))
    tr, tc = tiles["row_tile"], tiles["col_tile"]
    nr, nc = grid.shape
    im = ax.imshow(logr, cmap="RdBu_r", norm=TwoSlopeNorm(0.0, -vmax, vmax), aspect="auto",
                   interpolation="nearest", extent=(0, nc * tc, nr * tr, 0))
    if colorbar:
        cb = ax.figure.colorbar(im, ax=ax, fraction=0.05, pad=0.02)
        cb.ax.set_title("log10", fontsize=7, y=TITLE_Y)
        cb.ax.tick_params(labelsize=7)
    for r0 in tiles["group_starts"][1:]:
        ax.axhline(r0, color="white", lw=2.2)  # white under black: visible on any colour
        ax.axhline(r0, color="k", lw=1, ls="--")
    for r0, r1 in tiles["residual_rows"]:
        ax.plot([0, 0], [r0, r1], color="magenta", lw=6, solid_capstyle="butt", clip_on=False)
    if (~finite).any():
        ys, xs = np.nonzero(~finite)
        ax.scatter((xs + 0.5) * tc, (ys + 0.5) * tr, marker="x", color="k", s=12)
    ax.set_xlim(0, tiles["cols"])
    ax.set_ylim(tiles["rows"], 0)
    ax.set_xlabel(f"N ({tc}-column tiles)")
    ax.set_ylabel(f"{tiles['row_axis']} ({tr}-row tiles)")
    ax.set_title("bound ratio (red > 1; x: NaN/Inf)", fontsize=10, y=TITLE_Y)


def _bars_with_inf(ax: Axes, x: np.ndarray, vals: Sequence[Any], width: float, colour: str,
                   label: str, top: float) -> None:
    """Bars of dB values; inf drawn to `top` with "=" (exact), None / nan as "empty"."""
    v = np.array([num(a) for a in vals], dtype=float)
    shown = np.where(np.isposinf(v), top, np.nan_to_num(v, nan=0.0, neginf=0.0))
    ax.bar(x, shown, width, color=colour, label=label)
    for xi, vi in zip(x, v, strict=True):
        if np.isposinf(vi):
            ax.text(xi, top, "=", ha="center", va="bottom", fontsize=8)
        elif np.isfinite(vi) and len(x) <= 8:  # few bars: print the value (0 dB is no bar)
            ax.text(xi, max(vi, 0.0), f"{vi:.0f}", ha="center", va="bottom", fontsize=6)
        elif np.isnan(vi):
            ax.text(xi, 0, "empty", ha="center", va="bottom", fontsize=7, rotation=90)
        elif np.isneginf(vi):
            ax.text(xi, 0, "NaN", ha="center", va="bottom", fontsize=7, color=BAD)


def plot_group_sqnr(ax: Axes, gs: dict[str, Any], limit: float | None = None) -> None:
    """Per-group SQNR (dB): vs the unquantized reference (the quantization impact) and vs
    the exact value of the quantized problem (accumulation only); `limit` the gate's."""
    n = len(gs["group_sizes"])
    x = np.arange(n)
    vals = [num(v) for v in gs["impact"] + gs["vs_exact"]]
    finite = [v for v in vals if math.isfinite(v)]
    top = max([*finite, limit or 0.0, 40.0]) * 1.05
    _bars_with_inf(ax, x - 0.2, gs["impact"], 0.4, ALT, "vs unquantized (impact)", top)
    _bars_with_inf(ax, x + 0.2, gs["vs_exact"], 0.4, GOOD, "vs exact (accumulation)", top)
    if limit is not None:
        ax.axhline(limit, color=BAD, lw=1, ls="--", label=f"gate {limit:g} dB")
    ax.set_xticks(x, [f"g{i}\n{s}" for i, s in enumerate(gs["group_sizes"])], fontsize=7)
    ax.set_ylim(min(0.0, *finite) if finite else 0.0, top * 1.5)  # headroom for the legend
    ax.set_ylabel("SQNR dB")
    ax.set_title("per-group SQNR (group / rows)", fontsize=10, y=TITLE_Y)
    ax.legend(fontsize=6.5, loc="upper right")


def _limit(result: dict[str, Any], criterion: str) -> float | None:
    c = result.get("criteria", {}).get(criterion)
    return None if c is None or c.get("limit") is None else num(c["limit"])


def case_figure(result: dict[str, Any]) -> Figure | None:
    """The four layer-1 panels of one result; None when it carries no plot data
    (quantizer cases, errors, skipped cases)."""
    p = result.get("metrics", {}).get("plots")
    if not p:
        return None
    fig = Figure(figsize=(FIG_WIDTH_IN, 3.3))
    axes = fig.subplots(1, 4, gridspec_kw={"width_ratios": [1.1, 1.2, 1.2, 1.1]})
    plot_ulp_hist(axes[0], p["ulp_hist"])
    plot_err_vs_ab(axes[1], p["err_vs_ab"])
    plot_bound_tiles(axes[2], p["bound_tiles"])
    plot_group_sqnr(axes[3], p["group_sqnr"], _limit(result, "impact_sqnr_db"))
    # fixed margins: tight_layout costs a second full draw per figure
    fig.subplots_adjust(left=0.045, right=0.99, bottom=0.2, top=0.9, wspace=0.36)
    return fig


# --- layer 2 ------------------------------------------------------------------------------


LAYER2_TENSORS = ("out", "dx", "router", "wi", "wo")


def plot_layer2_tensors(ax: Axes, result: dict[str, Any]) -> None:
    """SQNR per output / gradient: vs the exact float64 layer (impact) and vs the same
    operands (straight-through correctness), with each question's limit."""
    m = result["metrics"]
    x = np.arange(len(LAYER2_TENSORS))
    impact = [m.get(f"sqnr_db.{t}") for t in LAYER2_TENSORS]
    st = [m.get(f"st_sqnr_db.{t}") for t in LAYER2_TENSORS]
    vals = [num(v) for v in impact + st if v is not None]
    top = max([v for v in vals if math.isfinite(v)] + [60.0]) * 1.1
    _bars_with_inf(ax, x - 0.2, impact, 0.4, ALT, "vs exact layer (impact)", top)
    _bars_with_inf(ax, x + 0.2, st, 0.4, GOOD, "vs same operands (correctness)", top)
    for name, colour in (("sqnr_db.dx", ALT), ("st_sqnr_db.dx", GOOD)):
        lim = _limit(result, name)
        if lim is not None:
            ax.axhline(lim, color=colour, lw=1, ls="--")
    ax.set_xticks(x, [f"d{t}" if t != "out" else t for t in LAYER2_TENSORS])
    ax.set_ylim(0, top * 1.35)  # headroom for the legend
    ax.set_ylabel("SQNR dB")
    ax.set_title("per tensor (dashed: gradient limits)", fontsize=10, y=TITLE_Y)
    ax.legend(fontsize=7, loc="upper right")


def plot_layer2_experts(ax: Axes, result: dict[str, Any]) -> None:
    """Per-expert SQNR of the wi and wo gradients (impact and correctness); experts that
    received no tokens are marked on the axis."""
    m = result["metrics"]
    for prefix, style in (("sqnr_db", "o-"), ("st_sqnr_db", "s:")):
        for tensor, colour in (("wi", ALT), ("wo", GOOD)):
            per = m.get(f"{prefix}.{tensor}.expert")
            if per is None:
                continue
            v = np.array([num(a) for a in per], dtype=float)
            what = "impact" if prefix == "sqnr_db" else "st"
            ax.plot(np.arange(len(v)), np.where(np.isfinite(v), v, np.nan), style,
                    color=colour, ms=4, label=f"d{tensor} {what}")
    sizes = m.get("group_sizes", [])
    for e, size in enumerate(sizes):
        if size == 0:
            ax.axvline(e, color=NEUTRAL, lw=6, alpha=0.3)
    lim = _limit(result, "sqnr_db.wi.min_expert")
    if lim is not None:
        ax.axhline(lim, color=BAD, lw=1, ls="--", label=f"impact limit {lim:g} dB")
    ax.set_xticks(np.arange(len(sizes)), [f"e{e}\n{s}" for e, s in enumerate(sizes)],
                  fontsize=7)
    ax.set_ylabel("SQNR dB")
    ax.set_title("per expert (expert / tokens; grey: no tokens)", fontsize=10, y=TITLE_Y)
    ax.legend(fontsize=7, loc="lower right", ncol=2)


def layer2_figure(result: dict[str, Any]) -> Figure | None:
    """Gradient SNR per tensor and per expert of one layer-2 result."""
    if not any(k.startswith("sqnr_db.") for k in result.get("metrics", {})):
        return None
    fig = Figure(figsize=(FIG_WIDTH_IN, 3.3))
    axes = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.6]})
    plot_layer2_tensors(axes[0], result)
    plot_layer2_experts(axes[1], result)
    fig.tight_layout()
    return fig


# --- layer 3 ------------------------------------------------------------------------------


def plot_loss_curves(ax: Axes, curves: dict[str, Sequence[Any]]) -> None:
    """Loss per step of each precision (fp8 / bf16 / f32, whichever are present)."""
    colours = {"fp8": BAD, "bf16": GOOD, "f32": "k"}
    for name, losses in curves.items():
        v = np.array([num(a) for a in losses], dtype=float)
        ax.plot(np.arange(len(v)), v, color=colours.get(name), lw=1.2, label=name)
    ax.set_ylabel("loss")
    ax.legend(fontsize=8)
    ax.set_title("training loss", fontsize=10, y=TITLE_Y)


def plot_loss_gap(ax: Axes, curves: dict[str, Sequence[Any]]) -> None:
    """fp8 minus each higher precision, per step (0 = no gap)."""
    if "fp8" not in curves:
        return
    fp8 = np.array([num(a) for a in curves["fp8"]], dtype=float)
    for name in ("bf16", "f32"):
        if name in curves:
            other = np.array([num(a) for a in curves[name]], dtype=float)
            n = min(len(fp8), len(other))
            ax.plot(np.arange(n), fp8[:n] - other[:n], lw=1, label=f"fp8 - {name}")
    ax.axhline(0, color=NEUTRAL, lw=0.8)
    ax.set_ylabel("loss gap")
    ax.legend(fontsize=8)


def plot_grad_snr(ax: Axes, trend: Sequence[Any] | dict[str, Sequence[Any]],
                  steps: Sequence[int] | None = None) -> None:
    """Gradient SNR (dB): one series, or one per named tensor, at the training `steps` it
    was sampled at (`metrics["grad_snr_steps"]`, one per value); None: one value a step."""
    series = trend if isinstance(trend, dict) else {"grad SNR": trend}
    for name, vals in series.items():
        v = np.array([num(a) for a in vals], dtype=float)
        ax.plot(np.arange(len(v)) if steps is None else np.asarray(steps), v, lw=1,
                label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("grad SNR dB")
    ax.legend(fontsize=8, ncol=3)


def layer3_figure(result: dict[str, Any]) -> Figure | None:
    """Loss curves, the FP8 gap underneath and the gradient-SNR trend of a layer-3 result."""
    m = result.get("metrics", {})
    curves = m.get("curves")
    if not curves:
        return None
    trend = m.get("grad_snr")
    rows = 3 if trend else 2
    fig = Figure(figsize=(FIG_WIDTH_IN * 0.7, 2.2 * rows))
    axes = fig.subplots(rows, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1, 1][:rows]})
    plot_loss_curves(axes[0], curves)
    plot_loss_gap(axes[1], curves)
    if trend:
        plot_grad_snr(axes[2], trend, m.get("grad_snr_steps"))
    fig.tight_layout()
    return fig


# --- report-level figures -----------------------------------------------------------------


def impact_overview_figure(results: Sequence[dict[str, Any]]) -> Figure | None:
    """Quantization impact of every layer-1 case: row-normalised SQNR per kernel, on the
    bands (< 20 dB at risk, 20-30 acceptable, > 30 good); failed cases in red."""
    pts = [(r["kernel"], num(r["metrics"]["impact_sqnr_db"]), r["passed"] is False)
           for r in results if "impact_sqnr_db" in r.get("metrics", {})]
    if not pts:
        return None
    kernels = sorted({k for k, _, _ in pts})
    fig = Figure(figsize=(FIG_WIDTH_IN, 0.45 * len(kernels) + 1.2))
    ax = fig.subplots()
    ax.axvspan(0, SQNR_BANDS[0], color=BAD, alpha=0.08)
    ax.axvspan(SQNR_BANDS[0], SQNR_BANDS[1], color=ALT, alpha=0.08)
    vals = [v for _, v, _ in pts if math.isfinite(v)]
    # FP8 lives at 20-60 dB; bf16 / exact inputs reach 140 dB or inf: clip those to the
    # right edge (drawn as ">") so the FP8 spread stays readable.
    right = min(max([*vals, SQNR_BANDS[1]]) + 5, IMPACT_AXIS_MAX_DB)
    ax.axvspan(SQNR_BANDS[1], right, color="green", alpha=0.06)
    for i, k in enumerate(kernels):
        for clipped in (False, True):
            mine = [(min(max(v, 0.0), right), bad) for kk, v, bad in pts
                    if kk == k and (v >= right) == clipped]
            ax.scatter([v for v, _ in mine], [i] * len(mine), marker=">" if clipped else "o",
                       c=[BAD if bad else GOOD for _, bad in mine], s=18)
    ax.set_yticks(np.arange(len(kernels)), kernels)
    ax.set_xlim(0, right)
    ax.set_xlabel("row-normalised SQNR vs unquantized reference (dB)")
    ax.set_title("quantization impact per case (bands: <20 at risk, 20-30 acceptable, >30 good;"
                 f" >: above {right:g} dB)",
                 fontsize=10, y=TITLE_Y)
    fig.tight_layout()
    return fig


def tune_figure(tune: dict[str, Any]) -> Figure | None:
    """Tiling search: speedup over the tk=128 baseline of every candidate per round (grey:
    rejected or inaccurate) and the best so far of each phase (rounds carry
    `best = {phase: candidate}`)."""
    rounds = tune.get("rounds") or []
    if not rounds:
        return None
    fig = Figure(figsize=(FIG_WIDTH_IN * 0.6, 3.0))
    ax = fig.subplots()
    best: dict[str, list[tuple[int, float]]] = {}
    for rd in rounds:
        r = rd["round"]
        for c in rd.get("candidates", []):
            s = c.get("speedup")
            if s is None:
                continue
            ok = c.get("status") in ACCEPTED_STATUSES
            ax.scatter(r, num(s), s=12, color=GOOD if ok else NEUTRAL, alpha=0.8 if ok else 0.4)
        for phase, b in (rd.get("best") or {}).items():
            if b and b.get("speedup") is not None:
                best.setdefault(phase, []).append((r, num(b["speedup"])))
    for phase, pts in best.items():
        ax.plot(*zip(*pts, strict=True), "-o", ms=4, label=f"best {phase}")
    ax.set_xlabel("round")
    ax.set_ylabel("speedup vs tk=128 baseline")
    ax.set_title("tiling search (grey: rejected candidates)", fontsize=10, y=TITLE_Y)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
