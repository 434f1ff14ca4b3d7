"""The layer-1 plot-data summary (`fp8check.reports.plotdata`): bounded, and true to the
full arrays it summarises (checked against brute force and against seeded bugs whose
failure location is known)."""

from __future__ import annotations

import functools
import json

import matplotlib.colors
import numpy as np
import pytest
from seeded_bugs.catalog import kernel as seeded_kernel

from fp8check.contracts import MatmulClaims
from fp8check.inputs.cases import build_suite
from fp8check.layers.op import build_problem, validate_case
from fp8check.measures import metrics
from fp8check.profiles import get_profile
from fp8check.reports import plotdata
from fp8check.reports.plotdata import plot_data

SMOKE = build_suite("smoke", 0)
RESIDUES = SMOKE[1]  # group sizes (1, 64, 64, 127): every group ends in a partial tile
ZERO_MIDDLE = SMOKE[0]  # an empty group between two others


@functools.cache
def _result(kernel: str, case_index: int) -> dict:
    spec = seeded_kernel(kernel)
    case = SMOKE[case_index]
    res = validate_case(spec, case, get_profile("strict"), build_problem(spec.contract, case),
                         plots=plot_data)
    return json.loads(json.dumps(res.to_dict()))  # exactly what the report reads


def test_ulp_histogram_matches_brute_force_on_random_distances():
    rng = np.random.default_rng(7)
    for _ in range(20):
        ulps = rng.integers(0, 1 << int(rng.integers(1, 40)), size=int(rng.integers(1, 500)))
        ulps[rng.random(ulps.size) < 0.05] = metrics.ULP_NAN
        over = rng.random(ulps.size) < rng.random()
        h = plotdata.ulp_histogram(ulps, over)
        finite = ulps[ulps != metrics.ULP_NAN]
        finite_over = over[ulps != metrics.ULP_NAN]
        assert h["nan"] == ulps.size - finite.size
        edges = h["edges"]
        assert edges[:2] == [0, 1]
        assert all(b == 2 * a for a, b in zip(edges[1:], edges[2:], strict=False))
        for i, lo in enumerate(edges):
            hi = edges[i + 1] if i + 1 < len(edges) else np.inf
            in_bin = (finite >= lo) & (finite < hi)
            assert h["counts"][i] == np.count_nonzero(in_bin)
            assert h["over"][i] == np.count_nonzero(in_bin & finite_over)
        # the open last bin starts above every distance but the largest power-of-two range
        assert finite.size == 0 or finite.max() < 2 * edges[-1]


def _ranked(v: np.ndarray) -> np.ndarray:
    """v with NaN as +inf, sorted: the order worst_indices ranks by."""
    return np.sort(np.where(np.isnan(v), np.inf, v))


def test_worst_indices_are_the_largest_values_by_brute_force():
    rng = np.random.default_rng(11)
    block, count = plotdata.WORST_BLOCK, plotdata.N_WORST
    arrays = [
        np.zeros(3 * block + 5),  # every value tied
        rng.integers(0, 3, size=10 * block + 1).astype(float),  # ties across blocks
        np.full(count - 1, 2.0), np.arange(count, dtype=float),  # no more than count
        rng.random(count + 1), rng.random(block - 1),  # one short block
    ]
    for _ in range(20):
        a = rng.lognormal(size=int(rng.integers(1, 40 * block)))
        a[rng.random(a.size) < 1e-4] = np.nan
        a[rng.random(a.size) < 1e-4] = np.inf
        arrays.append(a)
    # the largest values all in one block, then all in the short last block
    arrays.append(np.concatenate([np.ones(block), rng.random(5 * block)]))
    arrays.append(np.concatenate([rng.random(5 * block), np.full(7, 9.0)]))
    for a in arrays:
        idx = plotdata.worst_indices(a.reshape(-1, 1), count)
        k = min(count, a.size)
        assert idx.size == k and np.unique(idx).size == k
        np.testing.assert_array_equal(_ranked(a[idx]), _ranked(a)[a.size - k:])


def test_sampled_points_hold_the_worst_and_a_uniform_rest():
    rng = np.random.default_rng(12)
    ratio = rng.random((300, 1000))
    ratio[rng.integers(300), rng.integers(1000)] = np.nan
    idx = plotdata.sample_indices(ratio)
    assert idx.size == plotdata.MAX_POINTS == np.unique(idx).size
    picked = ratio.ravel()[idx]
    top = _ranked(ratio.ravel())[-plotdata.N_WORST:]
    np.testing.assert_array_equal(_ranked(picked)[-plotdata.N_WORST:], top)
    rest = _ranked(picked)[:-plotdata.N_WORST]
    # the rest is a uniform sample of U(0, 1) values, not more of the largest
    assert 0.3 < float(np.median(rest)) < 0.7


def test_tile_max_matches_brute_force_and_stays_bounded():
    rng = np.random.default_rng(3)
    for rows, cols in [(1, 1), (7, 300), (256, 768), (2048, 256), (1000, 129)]:
        a = rng.lognormal(size=(rows, cols))
        a[rng.random(a.shape) < 0.001] = np.nan
        t = plotdata.tile_max(a)
        grid = np.array(t["max"])
        assert grid.shape[0] <= plotdata.MAX_TILES and grid.shape[1] <= plotdata.MAX_TILES
        tr, tc = t["row_tile"], t["col_tile"]
        for i in range(grid.shape[0]):
            for j in range(grid.shape[1]):
                block = a[i * tr:(i + 1) * tr, j * tc:(j + 1) * tc]
                want = np.inf if np.isnan(block).any() else block.max()
                assert grid[i, j] == pytest.approx(want, rel=1e-3)


def test_correct_kernel_summary_is_bounded_and_consistent_with_the_gate():
    r = _result("numpy-fp8-pairwise", 1)
    p, m = r["metrics"]["plots"], r["metrics"]
    assert r["passed"] is True
    assert len(json.dumps(p, separators=(",", ":"))) < 20_000
    assert sum(p["ulp_hist"]["counts"]) + p["ulp_hist"]["nan"] == p["err_vs_ab"]["n_elements"]
    assert p["err_vs_ab"]["n_elements"] == sum(m["group_sizes"]) * RESIDUES.n
    assert len(p["err_vs_ab"]["points"]) == plotdata.MAX_POINTS
    tiles = np.array(p["bound_tiles"]["max"], dtype=float)
    assert tiles.max() == pytest.approx(m["bound_ratio_max"], rel=1e-3)
    # the ulp histogram's top bin agrees with the gate's scalar maximum
    hist = p["ulp_hist"]
    nonzero = [e for e, c in zip(hist["edges"], hist["counts"], strict=True) if c]
    assert nonzero[-1] <= m["ulp_max_vs_exact"] < 2 * max(nonzero[-1], 1)
    # the worst element is always among the sampled points
    assert max(pt[2] for pt in p["err_vs_ab"]["points"]) == pytest.approx(
        m["bound_ratio_max"], rel=1e-3)


def _bf16_case() -> int:
    index = next(i for i, c in enumerate(SMOKE) if c.out_dtype == "bf16")
    assert SMOKE[index].k > 128  # several K blocks: gamma_n |A||B| alone is not the bound
    return index


@pytest.mark.parametrize("kernel", ["numpy-fp8-pairwise", "bug-bf16-accumulator",
                                    "numpy-fp8-hopper", "bug-hopper-declared-f32"])
def test_err_vs_ab_points_are_above_their_bound_exactly_when_over_it(kernel):
    """On a bf16 case, the bound each point carries is the criterion's: err > bound
    exactly for the points whose ratio is > 1, on the rounded numbers the figure draws;
    it is err / ratio where both are finite and nonzero, and it holds the output's
    rounding (the old line gamma_n |A||B| had nearly every passing point above it) and,
    for a kernel declaring the Hopper accumulator, its truncation term (the same kernel
    declared as float32 fails)."""
    r = _result(kernel, _bf16_case())
    p = r["metrics"]["plots"]["err_vs_ab"]
    pts = np.array(p["points"], dtype=float)
    ab, err, ratio, bound = pts.T
    np.testing.assert_array_equal(err > bound, ratio > 1)
    assert np.count_nonzero(ratio > 1) == 0 if r["passed"] else np.count_nonzero(ratio > 1) > 0
    assert r["passed"] == ("bound_ratio" not in r["failed"])
    both = (err > 0) & np.isfinite(ratio)
    assert np.count_nonzero(both) > 50
    np.testing.assert_allclose(bound[both], err[both] / ratio[both], rtol=2e-3)
    # half a bf16 ulp of the output dominates gamma_n |A||B| for most elements
    assert np.median(bound / (p["gamma"] * ab)) > 2
    if r["passed"]:
        assert np.mean(err > p["gamma"] * ab) > 0.5  # what the old bound line showed


def test_bound_figure_draws_each_point_under_its_mark_iff_within_bound():
    """The drawn figure: every blue point is at or below the bound mark at its |A||B|,
    every red point above it (a failing bf16 case has both)."""
    from matplotlib.figure import Figure

    from fp8check.reports.plots import plot_err_vs_ab

    data = _result("bug-bf16-accumulator", _bf16_case())["metrics"]["plots"]["err_vs_ab"]
    ax = Figure().subplots()
    plot_err_vs_ab(ax, data)
    by_label = {c.get_label(): np.asarray(c.get_offsets()) for c in ax.collections}
    marks = by_label["each element's bound"]
    within, over = by_label["within bound"], by_label["over the bound"]
    assert len(marks) == len(data["points"]) == len(within) + len(over)
    assert len(within) and len(over)
    for pts, above in ((within, False), (over, True)):
        for x, y in pts:
            mark = marks[marks[:, 0] == x][:, 1]
            assert mark.size, "no bound mark at a point's |A||B|"
            assert np.all(y > mark) if above else np.any(y <= mark)


def test_ulp_view_of_a_passing_case_is_all_within_the_bound():
    """A correct kernel in another valid order is millions of ULPs from the exact value
    on a nearly cancelling f32 element; its ULP view marks no bin over the bound and says
    every element is within it.  A failing kernel's bins count the same elements as the
    bound_ratio criterion's n_bad."""
    from matplotlib.figure import Figure

    from fp8check.reports.plots import BAD, plot_ulp_hist

    good = _result("numpy-fp8-pairwise", 0)
    assert good["passed"] and good["metrics"]["ulp_max_vs_exact"] > 1 << 20
    hist = good["metrics"]["plots"]["ulp_hist"]
    assert sum(hist["over"]) == hist["nan"] == 0
    ax = Figure().subplots()
    plot_ulp_hist(ax, hist)
    red = [b for b in ax.patches if b.get_facecolor()[:3] == matplotlib.colors.to_rgb(BAD)
           and b.get_height() > 0]
    assert red == []
    assert ax.get_legend().get_title().get_text() == f"all {sum(hist['counts'])} within the bound"
    bad = _result("bug-bf16-accumulator", 0)
    hist = bad["metrics"]["plots"]["ulp_hist"]
    assert sum(hist["over"]) + hist["nan"] == bad["criteria"]["bound_ratio"]["n_bad"] > 0


def test_residual_rows_are_where_the_dropped_residual_tile_bug_fails():
    p = _result("bug-dropped-residual-tile", 1)["metrics"]["plots"]["bound_tiles"]
    gs = np.array(RESIDUES.group_sizes)
    starts = np.concatenate([[0], np.cumsum(gs)[:-1]])
    assert p["group_starts"] == starts.tolist()
    want = [[int(s + g // 128 * 128), int(s + g)]
            for s, g in zip(starts, gs, strict=True) if g % 128]
    assert p["residual_rows"] == want
    grid = np.array(p["max"], dtype=float)
    tr = p["row_tile"]
    residual = np.zeros(p["rows"], bool)
    for a, b in want:
        residual[a:b] = True
    for i, row in enumerate(grid):
        rows = residual[i * tr:(i + 1) * tr]
        if rows.all():
            assert row.max() > 1, f"tile row {i} is all residual rows, yet within the bound"
        elif not rows.any():
            assert row.max() <= 1, f"tile row {i} has no residual row, yet over the bound"


def test_tgmm_empty_group_bug_shows_in_group_sqnr_and_ulp_nan():
    r = _result("bug-tgmm-empty-group-nan", 0)
    p = r["metrics"]["plots"]
    empty = [i for i, g in enumerate(ZERO_MIDDLE.group_sizes) if g == 0]
    assert empty
    for i in empty:
        assert float(p["group_sqnr"]["vs_exact"][i]) == -np.inf
    for i, g in enumerate(ZERO_MIDDLE.group_sizes):
        if g:
            assert float(p["group_sqnr"]["vs_exact"][i]) > 100  # only float32 rounding
    assert p["ulp_hist"]["nan"] == len(empty) * ZERO_MIDDLE.k * ZERO_MIDDLE.n
    assert p["bound_tiles"]["row_axis"] == "group x K row"


def test_gmm_empty_group_has_no_sqnr():
    p = _result("numpy-fp8-deepgemm", 0)["metrics"]["plots"]["group_sqnr"]
    for g, imp, ex in zip(ZERO_MIDDLE.group_sizes, p["impact"], p["vs_exact"], strict=True):
        assert (imp is None) == (g == 0) and (ex is None) == (g == 0)
        if g:
            assert 20 < float(imp) < float(ex)  # quantization noise >> accumulation noise


def test_an_output_with_every_group_empty_still_gets_its_figure():
    """sum(group_sizes) == 0: nothing is compared, and the figure says so instead of
    failing on an empty tile grid."""
    from fp8check.layers.op import gmm_fp8_problem, output_criteria
    from fp8check.profiles import get_profile
    from fp8check.references import quantize
    from fp8check.reports.plots import case_figure, to_data_uri

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 256), dtype=np.float32)
    w = rng.standard_normal((2, 256, 128), dtype=np.float32)
    prob = gmm_fp8_problem(quantize(x), quantize(w, (128, 128)), np.zeros(2, np.int32), "f32",
                           unquantized=(x, w))
    m: dict = {}
    output_criteria(np.zeros((8, 128), np.float32), prob, get_profile("strict"), m,
                    claims=MatmulClaims(flushes_subnormals=False), plots=plot_data)
    plots = m["plots"]
    assert plots["bound_tiles"]["rows"] == 0 and plots["group_sqnr"]["impact"] == [None, None]
    fig = case_figure({"layer": "op", "metrics": {"plots": plots}, "criteria": {}})
    assert "no rows compared" in [t.get_text() for t in fig.axes[2].texts][0]
    assert to_data_uri(fig).startswith("data:image/png;base64,")


def test_a_document_written_before_the_bound_was_kept_still_reads_and_draws():
    """Points of three numbers and a histogram without `over` (older documents) pass the
    schema and draw, saying that the per-element verdicts are not in the document."""
    import copy

    from fp8check.reports.plots import case_figure
    from fp8check.results import schema

    old = copy.deepcopy(_result("bug-bf16-accumulator", 0))
    p = old["metrics"]["plots"]
    p["err_vs_ab"]["points"] = [pt[:3] for pt in p["err_vs_ab"]["points"]]
    del p["ulp_hist"]["over"]
    schema.check(old, schema.RESULT, "old.json")
    fig = case_figure(old)
    ulp_ax, err_ax = fig.axes[0], fig.axes[1]
    assert "no per-bin verdict in this document" in [t.get_text() for t in ulp_ax.texts]
    labels = [t.get_text() for t in err_ax.get_legend().get_texts()]
    assert any("no per-element bound" in label for label in labels)
    assert "each element's bound" not in labels
