"""Structure of the HTML report (`fp8check.reports.html`) and `fp8check report`.

The document is built from real layer-1 results (numpy seeded kernels on one small case)
plus layer-2 / layer-3 / tiling-search entries in the gate's JSON format with fresh
random values."""

from __future__ import annotations

import base64
import functools
import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from seeded_bugs.catalog import kernel

from fp8check import results
from fp8check.cli import main
from fp8check.inputs.cases import build_suite
from fp8check.inputs.coverage import suite_coverage
from fp8check.layers.op import build_problem, validate_case
from fp8check.profiles import get_profile
from fp8check.reports import html as report_html
from fp8check.reports.plotdata import plot_data

CASE = build_suite("smoke", 0)[1]
KERNELS = ("numpy-fp8-deepgemm", "bug-dropped-residual-tile", "bug-truncating-bf16-cast")


def _layer2_result(rng: np.random.Generator, kernel: str, passed: bool) -> dict:
    experts = 4
    m = {"group_sizes": [int(v) for v in rng.integers(0, 40, experts)]}
    crit = {}
    for prefix, limit in (("sqnr_db", 21.0), ("st_sqnr_db", 40.0)):
        for t in ("out", "dx", "router", "wi", "wo"):
            v = float(limit + rng.uniform(1, 20)) if passed or t != "dx" else limit - 5.0
            m[f"{prefix}.{t}"] = v
            crit[f"{prefix}.{t}"] = {"question": "impact" if prefix == "sqnr_db" else
                                     "correctness", "value": v, "limit": limit,
                                     "passed": v >= limit}
        for t in ("wi", "wo"):
            m[f"{prefix}.{t}.expert"] = [float(limit + rng.uniform(1, 9)) if g else None
                                         for g in m["group_sizes"]]
    failed = [n for n, c in crit.items() if not c["passed"]]
    return {"kernel": kernel, "layer": 2, "case": f"balanced-s{int(rng.integers(100))}",
            "passed": not failed, "metrics": m, "criteria": crit, "failed": failed,
            "skipped": None, "error": None,
            "repro": f"fp8check gate --layers 2 --kernel {kernel.split('-')[0]} --case x",
            "seconds": float(rng.uniform(0.1, 2))}


def _layer3_result(rng: np.random.Generator) -> dict:
    steps = 40
    f32 = 3 * np.exp(-np.arange(steps) / 10) + 1
    curves = {"f32": f32.tolist(), "bf16": (f32 + rng.normal(0, 1e-3, steps)).tolist(),
              "fp8": (f32 + 0.02 + rng.normal(0, 5e-3, steps)).tolist()}
    return {"kernel": "pallas-train", "layer": 3, "case": "tiny-s0", "passed": True,
            "metrics": {"curves": curves, "grad_snr": (25 + rng.normal(0, 1, steps)).tolist()},
            "criteria": {}, "failed": [], "skipped": None, "error": None, "repro": None,
            "seconds": 1.0}


def _tune(rng: np.random.Generator) -> dict:
    rounds = []
    for r in range(3):
        # The layout of `fp8check.tune.output.tune_section`: candidates of every phase,
        # and the best so far per phase.
        cands = [{"phase": ("fwd", "tgmm")[i % 2], "tiling": [128, 128 * (i + 1), 256],
                  "status": "accepted" if i < 2 else "rejected",
                  "reason": None if i < 2 else "VMEM over budget",
                  "cost_model_us": float(rng.uniform(50, 100)), "speedup": float(1 + rng.random())}
                 for i in range(4)]
        rounds.append({"round": r, "candidates": cands,
                       "best": {"fwd": cands[0], "tgmm": cands[1]}})
    return {"rounds": rounds, "fitness": "cost-model (not measured)"}


@functools.cache
def _layer1_results() -> tuple:
    prob = build_problem("gmm-fp8", CASE)
    out = []
    for name in KERNELS:
        res = validate_case(kernel(name), CASE, get_profile("strict"), prob, plots=plot_data)
        if res.passed is False:
            res.repro = f"fp8check gate --kernel {name} --case {CASE.id}"
        out.append(res)
    return tuple(out)


def report_document(seed: int = 0, *, extra_layers: bool = True) -> dict:
    """A gate JSON document: real layer-1 results (one passing, two failing kernels) and,
    with `extra_layers`, a passing and a failing layer-2 result, a layer-3 result and a
    tiling search."""
    rs = list(_layer1_results())
    specs = [kernel(n) for n in KERNELS]
    env = results.environment(specs, suite="smoke", seed=seed, profile="strict",
                              backend="auto", load_errors={})
    doc = json.loads(json.dumps(results.document(rs, results.tally(rs, {}), env)))
    if extra_layers:
        rng = np.random.default_rng(seed)
        doc["results"] += [_layer2_result(rng, "pallas-moe-fp8", True),
                           _layer2_result(rng, "triton-moe-fp8", False), _layer3_result(rng)]
        doc["tune"] = _tune(rng)
    return doc


class _Page(HTMLParser):
    """Tags, attributes, ids and text of a page, in document order."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        if data.strip():
            self.text.append(data.strip())


@functools.cache
def _rendered(seed: int = 0) -> tuple[dict, str]:
    doc = report_document(seed)
    return doc, report_html.render_html(doc)


def test_report_is_self_contained():
    _, page = _rendered()
    p = _Page(page)
    names = [t for t, _ in p.tags]
    assert "script" not in names and "link" not in names and "iframe" not in names
    imgs = [a for t, a in p.tags if t == "img"]
    assert len(imgs) >= 5
    for tag, attrs in p.tags:
        for key in ("src", "href"):
            v = attrs.get(key)
            if v is not None:
                assert v.startswith(("data:", "#")), f"<{tag} {key}={v[:60]}> leaves the file"
    for a in imgs:
        head, data = a["src"].split(",", 1)
        assert head == "data:image/png;base64"
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    ids = [a["id"] for _, a in p.tags if "id" in a]
    assert len(ids) == len(set(ids))
    for _, a in p.tags:  # every in-page link has its target
        if a.get("href", "").startswith("#"):
            assert a["href"][1:] in ids


def test_failures_come_first_with_their_repro():
    doc, page = _rendered()
    failing = [r for r in doc["results"] if r["passed"] is False]
    assert len(failing) >= 3
    fail_pos = page.index('id="failures"')
    assert fail_pos < page.index('id="layer-1"') and fail_pos < page.index('id="layer-2"')
    for r in failing:
        repro = r["repro"]
        assert repro and repro.replace('"', "&#34;") in page
        card = page.index(f"{r['kernel']} · layer")
        assert card < page.index('id="layer-1"')
    for r in doc["results"]:
        if r["passed"]:
            assert f"{r['kernel']} · layer" not in page  # passing cases are not failure cards


def test_summary_matrix_covers_kernels_and_layers():
    doc, page = _rendered()
    matrix = report_html.summary_matrix(doc["results"])
    assert matrix["layers"] == [1, 2, 3]
    assert {r["kernel"] for r in matrix["rows"]} == {r["kernel"] for r in doc["results"]}
    cells = {(row["kernel"], lay): c for row in matrix["rows"] for lay, c in row["cells"].items()}
    for r in doc["results"]:
        c = cells[(r["kernel"], r["layer"])]
        assert c["passed"] + c["failed"] + c["skipped"] == 1  # one case per kernel and layer
        assert (c["failed"] == 1) == (r["passed"] is False)
        assert c["seconds"] == pytest.approx(r["seconds"])
        if r["failed"]:
            assert c["worst"]["passed"] is False and c["worst"]["name"] in r["failed"]
    for lay in ("1 · single op", "2 · MoE layer", "3 · training"):
        assert f"layer {lay}" in page


def test_worst_criterion_follows_the_limit_direction():
    rng = np.random.default_rng(11)
    for _ in range(50):
        upper = {"value": float(rng.uniform(0, 1)), "relation": "<=", "limit": 1.0}  # ratio
        lower = {"value": float(rng.uniform(20, 60)), "relation": ">=", "limit": 20.0}  # SQNR
        for c in (upper, lower):
            c["passed"] = bool(c["value"] <= 1.0) if c is upper else bool(c["value"] >= 20)
        r = {"case": "c", "criteria": {"ratio": upper, "sqnr": lower,
                                       "exact": {"value": 0, "relation": "==", "limit": 0,
                                                 "passed": True}}}
        want = "ratio" if (1 - upper["value"]) < (lower["value"] - 20) / 20 else "sqnr"
        assert report_html.worst_criterion([r])["name"] == want
        lower.update(value=19.0, passed=False)
        assert report_html.worst_criterion([r])["name"] == "sqnr"


def test_environment_and_tune_are_rendered():
    doc, page = _rendered()
    text = " ".join(_Page(page).text)
    for name, version in doc["environment"]["packages"].items():
        assert name in text and (version is None or version in text)
    assert f"seed {doc['environment']['seed']}" in text.replace("seed <b>", "seed ")
    for rd in doc["tune"]["rounds"]:
        assert f"round {rd['round']}" in text
        for phase, b in rd["best"].items():  # every phase's best so far in the heading
            assert f"{phase} <code>{b['tiling']}</code>" in page
    assert "cost-model (not measured)" in text
    assert text.count("VMEM over budget") == sum(
        c["reason"] == "VMEM over budget" for rd in doc["tune"]["rounds"] for c in rd["candidates"])


def test_report_without_optional_sections():
    doc = report_document(extra_layers=False)
    page = report_html.render_html(doc)
    assert 'id="tune"' not in page and 'id="layer-2"' not in page
    assert 'id="layer-1"' in page


def test_coverage_section_shows_what_the_run_looked_at():
    doc, page = _rendered()
    text = " ".join(_Page(page).text)
    assert "coverage" in {a.get("id") for _, a in _Page(page).tags}
    # the run checked one smoke case at layer 1: its shape, and none of the others'
    cov = suite_coverage([CASE])
    assert "What this gate looked at" in text and "From the 1 case(s) of suite smoke" in text
    facts = dict(cov.facts)
    assert f"K x N ({CASE.aspect}) {CASE.k}x{CASE.n}" in text
    assert facts["distributions"] == f"{CASE.distribution} ×1" and facts["distributions"] in text
    assert cov.not_covered and all(f"{name} NOT covered" in text for name in cov.not_covered)
    other = next(c for c in build_suite("smoke", 0) if c.aspect != CASE.aspect)
    assert f"{other.k}x{other.n}" not in text.replace(f"{CASE.k}x{CASE.n}", "")


@pytest.mark.parametrize(("change", "says"), [
    ("skip", "No case of suite smoke ran at layer 1"),
    ("drop", "No case of suite smoke ran at layer 1"),
    ("suite", "names no built-in suite"),
])
def test_coverage_section_when_nothing_known_ran(change, says):
    doc = report_document(extra_layers=False)
    if change == "skip":  # a skipped case was not looked at
        for r in doc["results"]:
            r.update(passed=None, skipped="out dtype not declared", criteria={}, failed=[])
    elif change == "drop":
        doc["results"] = []
    else:
        doc["environment"]["suite"] = "my-own-cases"
    cov = report_html.gate_coverage(doc)
    assert cov is None if change == "suite" else cov is not None and cov.n_cases == 0
    text = " ".join(_Page(report_html.render_html(doc)).text)
    assert says in text


def test_report_command_rebuilds_the_gate_report(tmp_path, capsys):
    doc, page = _rendered()
    src = tmp_path / "results.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / "report.html"
    assert main(["report", str(src), "-o", str(out)]) == 0
    assert out.read_text() == page


@pytest.mark.parametrize("content, why", [
    (None, "results.json: no such file"), ("{not json", "not JSON"),
    ('{"results": []}', "not a gate"),
    ('{"event": "start", "environment": {}}\n',
     "results.json:1: environment: missing key 'python'"),
])
def test_report_command_bad_input_is_one_line_exit_2(tmp_path, capsys, content, why):
    src = tmp_path / "results.json"
    if content is not None:
        src.write_text(content)
    assert main(["report", str(src), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and why in err[0]
    assert not (tmp_path / "r.html").exists()


def test_gate_writes_the_report(tmp_path, monkeypatch):
    # away from the repository's [tool.fp8check], whose json and junit defaults would
    # overwrite fp8check-out/ (the `make gate` run's)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "gate.html"
    kernels = Path(__file__).parent / "seeded_bugs" / "kernels.py"
    rc = main(["gate", "--kernel", f"{kernels}:naive_dequantized",
               "--contract", "gmm-fp8", "--framework", "numpy", "--out-dtypes", "f32,bf16",
               "--suite", "smoke",
               "--case", CASE.id, "--no-progress", "--report", str(out),
               "--jsonl", str(tmp_path / "g.jsonl")])
    assert rc == 0
    page = out.read_text()
    assert "PASS" in page and CASE.id in page and "data:image/png;base64" in page


def test_figures_rendered_in_worker_processes_are_the_same_pngs():
    """The report renders its figures in a process pool when it has many: the PNGs are
    byte for byte those of a serial rendering, in the results' order."""
    rs = [r for r in report_document(1)["results"] if not r.get("skipped")]
    serial = report_html.figures(rs, workers=1)
    assert sum(f is not None for f in serial) == len(rs)
    assert report_html.figures(rs, workers=2) == serial


def test_layer3_grad_snr_is_drawn_at_the_steps_it_was_sampled(tmp_path, capsys):
    """grad_snr is sampled every few steps (`grad_snr_steps`): the figure puts each value
    at its step, on the loss curves' axis; a steps list of another length is bad input."""
    from fp8check.reports.plots import layer3_figure

    r = _layer3_result(np.random.default_rng(3))
    steps = list(range(0, 40, 5))
    r["metrics"]["grad_snr"] = r["metrics"]["grad_snr"][:len(steps)]
    r["metrics"]["grad_snr_steps"] = steps
    snr_ax = layer3_figure(r).axes[2]
    (line,) = snr_ax.get_lines()
    assert list(line.get_xdata()) == steps
    doc = report_document(extra_layers=False)
    r["metrics"]["grad_snr_steps"] = steps[:-1]
    doc["results"].append(r)
    src = tmp_path / "g.json"
    src.write_text(json.dumps(doc))
    assert main(["report", str(src), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "metrics.grad_snr: expected 7 items (grad_snr_steps), got 8" in err[0]


def test_log_axis_labels_are_matplotlibs_in_plain_text():
    """The report's log-axis tick labels say what matplotlib's own (mathtext) labels say,
    in plain text with superscript exponents: decades, non-decade minor ticks, symlog's
    negative and zero ticks; and the ULP bins' powers of two likewise."""
    from matplotlib.ticker import LogFormatterSciNotation

    from fp8check.reports import plots

    mine = plots._PlainLogFormatter(10, labelOnlyBase=False)
    theirs = LogFormatterSciNotation(10, labelOnlyBase=False)
    for x, want in ((1e-3, "10⁻³"), (1.0, "10⁰"), (1e6, "10⁶"), (2e-3, "2×10⁻³"),
                    (-100.0, "−10²"), (0.0, "0"), (5e12, "5×10¹²")):
        assert mine(x) == want, (x, theirs(x))
        assert theirs(x).startswith("$"), theirs(x)  # what it replaces is mathtext
    assert [plots._ulp_label(v, False) for v in (0, 1, 2, 8, 1024)] == [
        "0", "1", "2¹", "2³", "2¹⁰"]
    assert plots._ulp_label(1 << 20, True) == "≥2²⁰"
