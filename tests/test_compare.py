"""`fp8check compare` and `gate --baseline`: what moved between two gate runs
(`fp8check.results.compare`), the Markdown summary and the report's regression view.

Synthetic documents (random values, built with the library's own document writer) pin
the rules; the end-to-end tests run the gate on a kernel whose error doubled between two
runs (`tests/data/compare/kernels.py`) and on a built-in kernel run twice."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fp8check.profiles import DRIFT, GAP_Z, drift_of
from fp8check.reports.markdown import summary_markdown
from fp8check.results import CaseResult, Criterion, documents
from fp8check.results.compare import compare

HERE = Path(__file__).parent
KERNELS = HERE / "data" / "compare" / "kernels.py"


def _result(kernel: str, case: str, criteria: list[Criterion], *, layer: int = 1,
            metrics: dict[str, Any] | None = None) -> CaseResult:
    r = CaseResult(kernel=kernel, layer=layer, case=case, passed=None, criteria=criteria,
                   metrics=metrics or {})
    r.decide()
    return r


def _doc(results: list[CaseResult], **env_changes: Any) -> dict[str, Any]:
    env = documents.environment([], suite="ci", seed=0, profile="strict", backend="auto",
                                load_errors={})
    env.update(layers=[1], shard="1/1", **env_changes)
    return documents.document(results, documents.tally(results, {}), env)


def _random_doc(rng: np.random.Generator, n: int = 6) -> dict[str, Any]:
    results = []
    for i in range(n):
        crit = [Criterion.check("bound_ratio", "correctness", float(rng.uniform(0.01, 0.45)),
                                "<=", 1.0),
                Criterion.check("error_ratio", "correctness", float(rng.uniform(0.2, 1.9)),
                                "<=", 2.0),
                Criterion.check("bias_z", "correctness", float(rng.normal()), "|x|<=", 6.0),
                Criterion.check("impact_sqnr_db", "impact", float(rng.uniform(27, 40)), ">=",
                                27.0),
                Criterion.check("finite", "correctness", 0, "==", 0)]
        hist = {"0": int(rng.integers(1000, 5000)), "1": int(rng.integers(1000, 5000))}
        results.append(_result(f"k{i % 2}", f"case-{i}", crit,
                               metrics={"ulp_histogram_vs_exact": hist}))
    return _doc(results)


def _set(doc: dict[str, Any], i: int, name: str, value: Any) -> dict[str, Any]:
    """A copy of `doc` whose result i has criterion `name` at `value`."""
    out = copy.deepcopy(doc)
    out["results"][i]["criteria"][name]["value"] = value
    return out


@pytest.mark.parametrize("seed", range(3))
def test_a_run_compared_with_itself_moves_nothing(seed: int) -> None:
    doc = _random_doc(np.random.default_rng(seed))
    cmp = compare(doc, copy.deepcopy(doc))
    assert not cmp.regressed and cmp.improvements == [] and cmp.new == []
    assert cmp.n_compared == len(doc["results"])
    assert cmp.verdict().startswith("NO REGRESSION")


@pytest.mark.parametrize("seed", range(3))
def test_a_doubled_bound_ratio_is_a_regression_under_its_limit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = _random_doc(rng)
    i = int(rng.integers(len(base["results"])))
    v = base["results"][i]["criteria"]["bound_ratio"]["value"]
    cmp = compare(base, _set(base, i, "bound_ratio", 2 * v))  # still under its limit 1
    assert cmp.regressed
    (m,) = cmp.regressions
    assert (m.kernel, m.case, m.what, m.base) == (
        base["results"][i]["kernel"], base["results"][i]["case"], "bound_ratio", v)


# (criterion, relation, baseline value, the direction in which the value gets worse)
RELATIONS = [("bound_ratio", "<=", 0.3, 1.0), ("error_ratio", "<=", 1.1, 1.0),
             ("bias_z", "|x|<=", -4.5, -1.0), ("bias_z_signed", "|x|<=", 5.0, 1.0),
             ("impact_sqnr_db", ">=", 31.0, -1.0), ("sqnr_db.wi.min_expert", ">=", 30.0, -1.0),
             ("shared_bytes", "<=", 65536.0, 1.0)]


@pytest.mark.parametrize("name,relation,value,worse", RELATIONS)
def test_a_move_beyond_the_drift_toward_the_limit_regresses(
        name: str, relation: str, value: float, worse: float) -> None:
    """Just inside the drift: nothing; just past it toward the limit: a regression; as
    far the other way: an improvement.  The direction follows the relation."""
    d = drift_of(name)
    allowed = max(d.rel * abs(value), d.abs)
    assert allowed > 0
    crit = [Criterion.check(name, "q", value, relation, 1e9 if relation != ">=" else 0.0)]
    base = _doc([_result("k", "c", crit)])
    inside, past, back = (value + worse * allowed * f for f in (0.99, 1.01, -1.01))
    assert not compare(base, _set(base, 0, name, inside)).regressions
    assert compare(base, _set(base, 0, name, past)).regressions[0].what == name
    better = compare(base, _set(base, 0, name, back))
    assert not better.regressions and better.improvements[0].what == name


def test_the_drift_table_names_a_rationale_for_every_entry() -> None:
    assert "*" in DRIFT  # every criterion has a drift
    for key, d in DRIFT.items():
        assert d.why, key
        assert d.rel > 0 or d.abs > 0 or d.noise, key


def test_curve_gaps_are_judged_against_the_runs_noise() -> None:
    se_b, se_h = 0.001, 0.0015
    band = GAP_Z * math.hypot(se_b, se_h)

    def doc(gap: float, se: float) -> dict[str, Any]:
        crit = [Criterion.check("auc_gap", "training", gap, "|x|<=", 0.02)]
        return _doc([_result("k-train-fp8", "t", crit, layer=3,
                             metrics={"auc_gap_se": se})])

    assert not compare(doc(0.001, se_b), doc(0.001 + 0.95 * band, se_h)).regressed
    assert compare(doc(0.001, se_b), doc(0.001 + 1.05 * band, se_h)).regressed


def test_verdicts_results_and_criteria_that_appear_or_disappear() -> None:
    ok = [Criterion.check("bound_ratio", "c", 0.1, "<=", 1.0),
          Criterion.check("finite", "c", 0, "==", 0)]
    bad = [Criterion.check("bound_ratio", "c", 0.1, "<=", 1.0),
           Criterion.check("finite", "c", 3, "==", 0)]
    skipped = CaseResult(kernel="k", layer=1, case="s", passed=None, skipped="out dtype")
    base = _doc([_result("k", "a", ok), _result("k", "b", bad), _result("k", "c", ok),
                 _result("k", "d", ok), _result("gone", "e", ok), skipped])
    now_run = _result("k", "s", ok)
    head = _doc([_result("k", "a", bad), _result("k", "b", ok), _result("k", "c", ok[:1]),
                 CaseResult(kernel="k", layer=1, case="d", passed=None, skipped="why"),
                 _result("new", "e", ok), now_run])
    cmp = compare(base, head)
    got = {(m.case, m.what, m.base, m.head, m.kind) for m in cmp.regressions + cmp.improvements}
    assert got == {("a", "verdict", "passed", "failed", "regression"),
                   ("b", "verdict", "failed", "passed", "improvement"),
                   ("c", "finite", 0, None, "regression"),  # no longer checked
                   ("d", "verdict", "passed", "skipped", "regression"),
                   ("e", "result", "passed", None, "regression")}  # kernel "gone"
    assert sorted(cmp.new) == [("k", 1, "s"), ("new", 1, "e")]


def test_a_value_that_stops_being_finite_regresses() -> None:
    crit = [Criterion.check("error_ratio", "c", 0.8, "<=", 2.0)]
    base = _doc([_result("k", "c", crit)])
    nan = documents.parse_document(json.loads(json.dumps(_set(base, 0, "error_ratio", "nan"))),
                                   "head")
    assert compare(base, nan).regressions[0].how == "no longer finite"
    assert compare(nan, base).improvements[0].how == "finite again"


def test_the_share_of_exact_outputs_falling_regresses() -> None:
    crit = [Criterion.check("finite", "c", 0, "==", 0)]

    def doc(exact: int) -> dict[str, Any]:
        return _doc([_result("k", "c", crit, metrics={
            "ulp_histogram_vs_exact": {"0": exact, "1": 1000 - exact}})])

    assert not compare(doc(1000), doc(960)).regressed  # 4 points
    (m,) = compare(doc(1000), doc(600)).regressions  # 100% -> 60%
    assert (m.what, m.base, m.head) == ("exact_fraction", 1.0, 0.6)


@pytest.mark.parametrize("change,message", [
    ({"suite": "full"}, "suite differs: ci in base, full in head"),
    ({"seed": 3}, "seed differs: 0 in base, 3 in head"),
    ({"profile": "explore"}, "profile differs: strict in base, explore in head"),
    ({"result_ids": 2}, "result ids differ in scheme: 1 in base, 2 in head"),
    ({"shard": "2/4"}, "head is shard 2/4 of a run: merge the shards first"),
])
def test_runs_that_cannot_be_compared_are_named(change: dict[str, Any], message: str) -> None:
    base = _random_doc(np.random.default_rng(0))
    head = copy.deepcopy(base)
    head["environment"].update(change)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        compare(base, head, "base", "head")


def test_incomplete_runs_and_other_package_versions_cannot_be_compared() -> None:
    base = _random_doc(np.random.default_rng(0))
    head = copy.deepcopy(base)
    head["environment"]["packages"]["numpy"] = "0.0.1"
    with pytest.raises(ValueError, match="numpy version differs: .* in base, 0.0.1 in head"):
        compare(base, head, "base", "head")
    cut = copy.deepcopy(base)
    cut["summary"].update(complete=False, incomplete="the run stopped after 3 results")
    with pytest.raises(ValueError, match="base is incomplete .*stopped after 3"):
        compare(cut, base, "base", "head")


def test_the_summary_says_the_verdict_failures_and_regressions() -> None:
    base = _random_doc(np.random.default_rng(1))
    head = _set(base, 2, "bound_ratio", 0.999)
    head["results"][3]["criteria"]["finite"].update(value=4, passed=False)
    head["results"][3].update(passed=False, failed=["finite"], repro="fp8check gate --case x")
    head["summary"] = documents.tally(documents.results_of(head), {})
    md = summary_markdown(head, compare(base, head), report_link="out/gate.html",
                          report_name="gate.html")
    assert md.startswith("## fp8check gate: FAIL")
    assert "| k1 | 1 | case-3 | finite |" in md and "fp8check gate --case x" in md
    v = base["results"][2]["criteria"]["bound_ratio"]["value"]
    assert f"| case-2 | bound_ratio | {v:.4g} | 0.999 |" in md
    assert "[gate.html](out/gate.html)" in md
    assert summary_markdown(base).startswith("## fp8check gate: PASS")


# --- the command line, end to end ---------------------------------------------------------


def _fp8check(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fp8check", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_compare_rejects_bad_input_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    base = _random_doc(np.random.default_rng(0))
    head = copy.deepcopy(base)
    head["environment"]["seed"] = 1
    for name, doc in (("base.json", base), ("head.json", head)):
        documents.write_json(tmp_path / name, doc)
    (tmp_path / "junk.json").write_text("{}")
    for other, msg in (("head.json", "seed differs: 0 in base.json, 1 in head.json"),
                       ("junk.json", "junk.json: not a gate results document")):
        p = _fp8check("compare", "base.json", other, "--summary-md", "s.md", "--report",
                      "r.html", cwd=tmp_path)
        assert p.returncode == 2, p.stderr
        assert p.stderr.strip() == f"fp8check: error: {msg}" or msg in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "s.md").exists() and not (tmp_path / "r.html").exists()


@pytest.mark.slow
def test_a_kernel_whose_error_doubled_fails_compare_and_the_gate_baseline(
        tmp_path: Path) -> None:
    """The same kernel name, its error doubled (bound_ratio and error_ratio x2, every
    criterion still passing): `compare` exits 1 naming the criterion, the case and both
    values in the terminal, the report and the summary; `gate --baseline` fails the same
    way; the unchanged kernel compared with its own earlier run passes."""
    case = "wi-m256-k512-n256-g4-zero-middle-fp8-ties-f32-s0"
    gate = ("gate", "--suite", "smoke", "--layers", "1", "--case", case, "--no-progress")
    for variant in ("accurate", "doubled"):
        p = _fp8check(*gate, "--kernel", f"{KERNELS}:{variant}", "--json", f"{variant}.json",
                      cwd=tmp_path)
        assert p.returncode == 0, p.stdout + p.stderr  # both pass the gate
    base = documents.read_document(tmp_path / "accurate.json")
    head = documents.read_document(tmp_path / "doubled.json")
    b, h = (d["results"][0]["criteria"]["bound_ratio"]["value"] for d in (base, head))
    assert 1.8 * b < h < 2.2 * b and h < 1.0

    p = _fp8check("compare", "accurate.json", "doubled.json", "--report", "r.html",
                  "--summary-md", "s.md", cwd=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    shown = f"bound_ratio {b:.4g} -> {h:.4g}"
    line = next(x for x in p.stdout.splitlines() if "bound_ratio" in x)
    assert "regression" in line and case in line and shown in line
    md = (tmp_path / "s.md").read_text()
    assert f"| compare-demo | 1 | {case} | bound_ratio | {b:.4g} | {h:.4g} |" in md
    html = (tmp_path / "r.html").read_text()
    assert "REGRESSED" in html and case in html and f"{b:.4g}" in html and f"{h:.4g}" in html

    p = _fp8check(*gate, "--kernel", f"{KERNELS}:doubled", "--baseline", "accurate.json",
                  "--summary-md", "g.md", cwd=tmp_path)
    assert p.returncode == 1 and shown in p.stdout, p.stdout + p.stderr
    assert "## fp8check gate: FAIL" in (tmp_path / "g.md").read_text()
    p = _fp8check(*gate, "--kernel", f"{KERNELS}:accurate", "--baseline", "accurate.json",
                  cwd=tmp_path)
    assert p.returncode == 0 and "NO REGRESSION" in p.stdout, p.stdout + p.stderr


@pytest.mark.slow
def test_a_built_in_kernel_run_twice_shows_no_regression(tmp_path: Path) -> None:
    gate = ("gate", "--suite", "smoke", "--layers", "1", "--kernel", "pallas-fp8",
            "--kernel", "triton-quantizer", "--no-progress")
    for name in ("one", "two"):
        assert _fp8check(*gate, "--json", f"{name}.json", cwd=tmp_path).returncode == 0
    p = _fp8check("compare", "one.json", "two.json", "--json", "c.json", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    cmp = json.loads((tmp_path / "c.json").read_text())
    assert cmp["regressions"] == [] and cmp["improvements"] == [] and cmp["n_compared"] == 10
