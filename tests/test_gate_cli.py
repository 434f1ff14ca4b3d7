"""`fp8check gate` end to end on the smoke suite: exit codes, JSON / JSONL / JUnit / HTML
outputs, one-line repro commands that reproduce, bad usage, lazy built-in registry."""

import json
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fp8check import registry
from fp8check.cli import main

TESTS = Path(__file__).parent
KERNELS_FILE = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from seeded_bugs.kernels import BUGS, CORRECT

good = CORRECT["numpy-fp8-deepgemm"]
truncating = BUGS["bug-truncating-bf16-cast"].spec
naive = CORRECT["numpy-fp8-naive"].fn


def good_factory(backend):
    import dataclasses
    return dataclasses.replace(good, name="good-builtin")
"""


@pytest.fixture()
def kernels(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no pyproject here: built-in defaults
    path = tmp_path / "my_kernels.py"
    path.write_text(KERNELS_FILE)
    return path


def _gate(*args):
    return main(["gate", "--no-progress", "--suite", "smoke", *args])


def test_pass_and_fail_with_all_outputs(kernels, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    rc = _gate("--kernel", f"{kernels}:good", "--kernel", f"{kernels}:truncating",
               "--json", str(out / "g.json"), "--junit", str(out / "g.xml"),
               "--report", str(out / "g.html"))
    assert rc == 1
    err = capsys.readouterr().err
    doc = json.loads((out / "g.json").read_text())
    assert doc["version"] == 2
    results = doc["results"]
    good = [r for r in results if r["kernel"] == "numpy-fp8-deepgemm"]
    bad = [r for r in results if r["kernel"] == "bug-truncating-bf16-cast"]
    assert good and all(r["passed"] for r in good) and all(r["repro"] is None for r in good)
    failing = [r for r in bad if r["passed"] is False]
    # the smoke suite's bf16 cases catch the truncation; the f32 cases do not involve it
    assert failing and all("-bf16-" in r["case"] for r in failing)
    for r in results:
        assert {"kernel", "layer", "case", "passed", "metrics", "repro"} <= set(r)
        assert r["layer"] == 1
        assert all(c["relation"] in ("<=", ">=", "|x|<=", "==") and c["meaning"]
                   for c in r["criteria"].values())
        # where the time went: the phases are parts of the result's own seconds
        assert r["skipped"] is None
        assert {"kernel", "metrics"} <= set(r["timing"]) <= {"reference", "kernel", "metrics"}
        assert sum(r["timing"].values()) == pytest.approx(r["seconds"], abs=2e-3)
    # each case's references are built once, by the first kernel of the contract
    for case in {r["case"] for r in results}:
        assert sum("reference" in r["timing"] for r in results if r["case"] == case) == 1
    for r in failing:
        assert r["repro"].startswith("fp8check gate --kernel ") and "--case " + r["case"] in r[
            "repro"]
        assert "\n" not in r["repro"] and r["repro"] in err
    env = doc["environment"]
    assert env["packages"]["numpy"] and env["seed"] == 0 and env["suite"] == "smoke"
    assert env["kernels"]["numpy-fp8-deepgemm"]["backend"] == "cpu"
    assert "fidelity_fixes" in env["kernels"]["numpy-fp8-deepgemm"]
    assert doc["summary"]["n_failed"] == len(failing) and doc["summary"]["passed"] is False

    lines = [json.loads(x) for x in (out / "g.jsonl").read_text().splitlines()]
    assert lines[0]["event"] == "start" and lines[0]["planned"] == len(results)
    assert lines[0]["environment"] == env
    assert [x["case"] for x in lines[1:-1]] == [r["case"] for r in results]
    assert lines[-1] == {"event": "end", "n_results": len(results)}
    from fp8check.results import read_document

    streamed = read_document(out / "g.jsonl")  # the stream reads as the document it became
    assert streamed["results"] == results and streamed["summary"] == doc["summary"]
    assert read_document(out / "g.json") == doc

    junit = ET.parse(out / "g.xml").getroot()
    assert len(junit.findall(".//testcase")) == len(results)
    assert len(junit.findall(".//failure")) == len(failing)

    html = (out / "g.html").read_text()
    assert "FAIL" in html and failing[0]["case"] in html and "<script" not in html

    # the repro command reproduces exactly that failure
    argv = shlex.split(failing[0]["repro"])[1:]
    rc = main([*argv, "--no-progress", "--json", str(out / "r.json")])
    again = json.loads((out / "r.json").read_text())["results"]
    assert rc == 1 and [r["case"] for r in again] == [failing[0]["case"]]
    assert again[0]["metrics"]["bias_z"] == failing[0]["metrics"]["bias_z"]


def test_a_plain_function_runs_every_out_dtype_unless_narrowed(kernels, tmp_path, capsys):
    """No silent halving: a bare function (here one that takes out_dtype) runs on the
    suite's f32 and bf16 cases; --out-dtypes f32 narrows it, and the summary says how many
    were skipped and why."""
    rc = _gate("--kernel", f"{kernels}:naive", "--contract", "gmm-fp8", "--framework", "numpy",
               "--json", str(tmp_path / "all.json"))
    doc = json.loads((tmp_path / "all.json").read_text())
    assert rc == 0 and doc["summary"]["n_skipped"] == 0
    assert {r["metrics"]["out_dtype"] for r in doc["results"]} == {"f32", "bf16"}
    capsys.readouterr()
    rc = _gate("--kernel", f"{kernels}:naive", "--contract", "gmm-fp8", "--framework", "numpy",
               "--out-dtypes", "f32", "--json", str(tmp_path / "p.json"))
    doc = json.loads((tmp_path / "p.json").read_text())
    skipped = [r for r in doc["results"] if r["passed"] is None]
    assert rc == 0 and skipped
    reason = ("out dtype bf16 not among the kernel's declared out dtypes f32 "
              "(--out-dtypes)")
    assert all(r["skipped"] == reason for r in skipped)
    out = capsys.readouterr().out
    assert f"  {len(skipped)} skipped: {kernels}:naive: {reason}\n" in out


def test_a_fail_line_is_one_line_whatever_the_kernel_raised(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "raising.py").write_text(
        "def gmm(*args, **kwargs):\n    raise ValueError('first line\\nsecond line')\n")
    rc = _gate("--kernel", f"{tmp_path / 'raising.py'}:gmm", "--contract", "gmm-fp8",
               "--framework", "numpy", "--case", "wi-m256-k512-n256-g4-zero-middle-fp8-ties-f32-s0")
    err = capsys.readouterr().err.splitlines()
    [fail] = [i for i, line in enumerate(err) if line.startswith("FAIL ")]
    assert rc == 1 and err[fail].endswith("first line")
    assert err[fail + 1].lstrip().startswith("repro: fp8check gate")


def test_a_run_that_checked_nothing_fails(kernels, tmp_path, capsys):
    # a bare function declared f32-only on one bf16 case: its only result is skipped
    rc = _gate("--kernel", f"{kernels}:naive", "--contract", "gmm-fp8", "--framework", "numpy",
               "--out-dtypes", "f32", "--case", "wo-m256-k512-n768-g4-residues-fp8-ties-bf16-s0",
               "--json", str(tmp_path / "p.json"))
    summary = json.loads((tmp_path / "p.json").read_text())["summary"]
    assert (summary["n_results"], summary["n_skipped"], summary["passed"]) == (1, 1, False)
    assert rc == 1
    assert "every result was skipped: nothing was checked" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--profile", "off"], "never off"),
        (["--suite", "nightly"], "invalid choice"),
        (["--layers", "1,x"], "--layers"),
        (["--layers", "5"], "this build has layers"),
        (["--kernel", "no_such_kernel"], "unknown kernel 'no_such_kernel'; built-ins: "),
        (["--kernel", "pallsa"], "unknown kernel 'pallsa'; built-ins: pallas-fp8, "),
        (["--kernel", "pallsa"], ", families: pallas, triton (a kernel of your own: "
                                 "FILE.py:NAME or module:NAME, see docs/contract.md)"),
        (["--kernel", "numpy:matmul", "--contract", "quantizer", "--framework", "numpy",
          "--recipe", "deepgem"], "--recipe 'deepgem': expected one of deepgemm, "),
        (["--kernel", "numpy:matmul", "--contract", "quantizer", "--framework", "numpy",
          "--block", "128x128x1"], "--block '128x128x1': expected one of 1x128, 128x128, "
                                   "128x1"),
        (["--kernel", "numpy:matmul", "--contract", "quantizer", "--framework", "numpy",
          "--recipe", "deepgemm", "--fmt", "e4m3"], "--fmt 'e4m3': expected one of e4m3fn, e5m2"),
        (["--kernel", "numpy:matmul", "--contract", "gmm-fp8", "--framework", "numpy",
          "--recipe", "deepgemm", "--fmt", "e5m2"],
         "--recipe, --fmt declare a quantizer: they need --contract quantizer"),
        (["--kernel", "numpy:matmul", "--contract", "quantizer", "--framework", "numpy"],
         "declare its recipe (the gate's --recipe)"),
        (["--kernel", "numpy:matmul"], "--contract and --framework"),
        (["--kernel", "numpy:matmul", "--contract", "gmm", "--framework", "numpy",
          "--out-dtypes", "f16"], "must be a non-empty subset of ('f32', 'bf16')"),
        (["--kernel", "pallas-fp8", "--backend", "warp"], "invalid choice"),
        (["--case", "wi-nope"], "no case"),
    ],
)
def test_bad_usage_exits_2_with_one_line(kernels, capsys, args, msg):
    assert main(["gate", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and msg in err and "Traceback" not in err


def test_config_from_pyproject_of_cwd(kernels, tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text('[tool.fp8check]\nprofile = "off"\n')
    assert main(["gate", "--kernel", f"{kernels}:good"]) == 2
    assert "never off" in capsys.readouterr().err


def test_python_dash_m_entry_point(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "fp8check", "gate", "--profile", "off"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "never off" in proc.stderr and "Traceback" not in proc.stderr


def test_builtin_registry_is_lazy_and_reports_broken_families(kernels, tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "BUILTIN_KERNELS", {
        "good-builtin": f"{kernels}:good_factory",
        "missing-family": "fp8check.kernels.no_such_family.specs:factory",
    })
    specs, errors = registry.load_builtins()
    assert [s.name for s in specs] == ["good-builtin"]
    assert "missing-family" in errors and "\n" not in errors["missing-family"]
    # in this process: worker processes would not see the patched registry
    rc = main(["gate", "--no-progress", "--no-isolate", "--suite", "smoke", "--json",
               str(tmp_path / "b.json")])
    doc = json.loads((tmp_path / "b.json").read_text())
    assert rc == 1  # every case passed, but a built-in kernel could not be validated
    assert doc["summary"]["n_failed"] == 0 and "missing-family" in doc["summary"][
        "kernel_load_errors"]
    # naming the broken kernel explicitly is bad input
    assert main(["gate", "--kernel", "missing-family"]) == 2


def test_jsonl_lines_are_on_disk_before_the_stream_closes(tmp_path):
    from fp8check.results import JsonlStream

    stream = JsonlStream(tmp_path / "s.jsonl")
    stream.write({"case": "a", "passed": True})
    # a crash now would lose nothing: the line is already in the file
    assert json.loads((tmp_path / "s.jsonl").read_text()) == {"case": "a", "passed": True}
    stream.close()


def test_internal_error_exits_3_with_the_traceback_in_a_named_file(monkeypatch, tmp_path,
                                                                   capsys):
    """A ValueError from a bug inside fp8check is not the user's bad input: exit 3, one
    line naming the file that holds the traceback (never 0, 1 or 2)."""
    from fp8check.gate import session

    def broken_tally(*args, **kwargs):
        raise ValueError("a bug in the tally")

    monkeypatch.setattr(session.documents, "tally", broken_tally)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    rc = main(["gate", "--no-progress", "--suite", "smoke", "--kernel", "pallas-quantizer",
               "--layers", "1", "--jsonl", str(tmp_path / "s.jsonl")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3
    line = err[-1]
    assert line.startswith("fp8check: internal error: ValueError: a bug in the tally")
    path = line.rsplit("traceback in ", 1)[1].rstrip(")")
    text = open(path).read()
    assert "Traceback" in text and "broken_tally" in text and path.startswith(str(tmp_path))


def test_results_of_a_version_1_document_are_read_as_version_2(tmp_path):
    """`fp8check report` and `merge` read documents written before layer ids were
    integers: layer "op" is layer 1 and criteria have no recorded relation."""
    from fp8check.results import read_json, results_of
    from tests.test_documents import make_document

    written = make_document([])  # a version-1 summary and environment were the same
    v1 = {"version": 1, "summary": written["summary"],
          "environment": written["environment"], "results": [
              {"kernel": "k", "layer": "op", "case": "c", "passed": False, "metrics": {},
               "criteria": {"bound_ratio": {"question": "correctness", "value": 2.0,
                                            "limit": 1.0, "passed": False}},
               "failed": ["bound_ratio"], "skipped": None, "error": None, "repro": "x",
               "seconds": 0.5}]}
    del v1["summary"]["complete"]
    p = tmp_path / "v1.json"
    p.write_text(json.dumps(v1))
    doc = read_json(p)
    assert doc["version"] == 2 and doc["results"][0]["layer"] == 1
    (res,) = results_of(doc)
    crit = res.criteria[0]
    assert res.layer == 1 and crit.relation is None and crit.passed is False
    assert crit.verdict() == "2 (limit 1)"
    p.write_text(json.dumps({**v1, "version": 7}))
    with pytest.raises(ValueError, match="version 7"):
        read_json(p)
