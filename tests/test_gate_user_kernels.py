"""A user's own kernel through `fp8check gate`: kernel files importing their siblings (in
the worker processes too) and repros that rerun from where they were printed; FAIL lines
that say why (criterion, value, limit, worst element); bare quantizers declared from the
command line; `fp8check list`'s families."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fp8check.cli import main

TESTS = Path(__file__).parent
FP8CHECK = Path(sys.executable).parent / "fp8check"  # the console script, as a user runs it
SEEDED = f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"


def _gate(*args):
    return main(["gate", "--no-progress", "--suite", "smoke", *args])


# One FAIL line as the Sink prints it for a failing bound_ratio (the first criterion to fail
# on a kernel whose outputs are finite but wrong).
FAIL_BOUND = re.compile(
    r"^FAIL (?P<kernel>\S+) (?P<case>\S+): bound_ratio (?P<value>\S+) "
    r"\(limit <= (?P<limit>\S+)\); (?P<n_bad>\d+) elements over the bound; "
    r"worst element: group (?P<g>\d+) \(rows "
    r"(?P<r0>\d+)-(?P<r1>\d+)\), row (?P<row>\d+) of the group, N tile (?P<tile>\d+) \(n "
    r"(?P<n0>\d+)-(?P<n1>\d+)\), index \((?P<i>\d+), (?P<j>\d+)\), value (?P<out>\S+), "
    r"reference (?P<ref>\S+?)(?:; also failed: (?P<also>.*))?$")


def test_a_fail_line_says_which_criterion_by_how_much_and_where(tmp_path, monkeypatch,
                                                                capsys):
    """The seeded bug that skips every group's last partial 128-row tile: each FAIL line
    names bound_ratio with its value and limit (those of the JSON result), how many
    elements are over, and a worst element that is a zero (a dropped row) in the dropped
    residual rows of its group, located consistently with the case's group sizes."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bugs.py").write_text(
        SEEDED + "from seeded_bugs.kernels import BUGS\n"
        "dropped = BUGS['bug-dropped-residual-tile'].spec\n")
    rc = _gate("--kernel", "bugs.py:dropped", "--no-isolate", "--json", "r.json")
    err = capsys.readouterr().err.splitlines()
    results = {r["case"]: r for r in json.loads(Path("r.json").read_text())["results"]}
    fails = [i for i, line in enumerate(err) if line.startswith("FAIL ")]
    assert rc == 1 and len(fails) == len(results)  # every smoke case has residual rows
    for i in fails:
        m = FAIL_BOUND.match(err[i])
        assert m, err[i]
        assert err[i + 1] == f"  repro: {results[m['case']]['repro']}"
        res = results[m["case"]]
        crit = res["criteria"]["bound_ratio"]
        assert f"{crit['value']:.4g}" == m["value"] and float(m["limit"]) == crit["limit"]
        assert int(m["n_bad"]) == crit["n_bad"] > 0
        assert [c for c in res["failed"] if c != "bound_ratio"] == (
            m["also"].split(", ") if m["also"] else [])
        gs = np.asarray(res["metrics"]["group_sizes"])
        g, row, idx_row, col = int(m["g"]), int(m["row"]), int(m["i"]), int(m["j"])
        start = int(gs[:g].sum())
        assert (int(m["r0"]), int(m["r1"])) == (start, start + gs[g] - 1)
        assert idx_row == start + row and 0 <= row < gs[g]
        assert row >= gs[g] // 128 * 128  # in the residual tile the bug drops
        assert int(m["tile"]) == col // 128 and int(m["n0"]) == col // 128 * 128
        assert float(m["out"]) == 0.0 and float(m["ref"]) != 0.0
        assert crit["worst"]["index"] == [idx_row, col]


def test_a_kernel_file_importing_a_sibling_runs_in_workers_and_its_repro_reruns(tmp_path):
    """Run as a user would: the console script, no PYTHONPATH, kernel files in another
    directory than the working one, isolation on (the kernels load in spawned workers).
    The kernel imports its sibling `bug_helper`.  The printed repro, run from the
    directory it was printed in, reproduces the failure."""
    kdir, work = tmp_path / "kernels", tmp_path / "work"
    kdir.mkdir()
    work.mkdir()
    (kdir / "bug_helper.py").write_text(
        SEEDED + "from seeded_bugs.kernels import DroppedResidualTile\n"
        "gmm = DroppedResidualTile()\n")
    (kdir / "kern.py").write_text("from bug_helper import gmm as _gmm\n\n\n"
                                  "def gmm_fp8(*args, **kwargs):\n"
                                  "    return _gmm(*args, **kwargs)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    case = "wo-m256-k512-n768-g4-residues-fp8-ties-bf16-s0"
    cmd = [str(FP8CHECK), "gate", "--no-progress", "--suite", "smoke", "--kernel",
           "../kernels/kern.py:gmm_fp8", "--contract", "gmm-fp8", "--framework", "numpy",
           "--case", case, "--json", "first.json"]
    first = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True,
                           timeout=600)
    assert first.returncode == 1, first.stderr
    [res] = json.loads((work / "first.json").read_text())["results"]
    assert res["error"] is None, res["error"]
    assert res["failed"][0] == "bound_ratio"
    printed = [line.split("repro: ", 1)[1] for line in first.stderr.splitlines()
               if line.startswith("  repro: ")]
    assert printed == [res["repro"]]
    argv = shlex.split(printed[0])
    assert argv[0] == "fp8check"
    again = subprocess.run([str(FP8CHECK), *argv[1:], "--no-progress", "--json",
                            "again.json"], cwd=work, env=env, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 1, again.stderr
    [rerun] = json.loads((work / "again.json").read_text())["results"]
    assert (rerun["case"], rerun["failed"]) == (case, res["failed"])
    assert rerun["criteria"]["bound_ratio"]["value"] == res["criteria"]["bound_ratio"]["value"]


QUANTIZER_FILE = SEEDED + "from seeded_bugs.kernels import quantize_deepgemm\n"


@pytest.mark.parametrize("recipe, passes", [("deepgemm", True),
                                            ("deepgemm-ue8m0", False)])
def test_a_plain_quantizer_is_declared_from_the_command_line(tmp_path, monkeypatch, recipe,
                                                             passes):
    """A deepgemm quantizer passes declared as deepgemm and fails declared as
    deepgemm-ue8m0 (power-of-two scales); the repro repeats the
    declarations."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quant.py").write_text(QUANTIZER_FILE)
    rc = _gate("--kernel", "quant.py:quantize_deepgemm", "--contract", "quantizer",
               "--framework", "numpy", "--recipe", recipe, "--block", "1x128", "--fmt",
               "e4m3fn", "--no-isolate", "--json", "q.json")
    results = json.loads(Path("q.json").read_text())["results"]
    verdicts = {r["criteria"]["quantizer_bit_exact"]["passed"] for r in results}
    assert rc == (0 if passes else 1)
    assert verdicts == {passes} if passes else False in verdicts
    for r in results:
        if r["passed"] is False:
            assert f"--recipe {recipe} --block 1x128 --fmt e4m3fn" in r["repro"]


def test_list_shows_the_kernel_families(capsys):
    assert main(["list", "--suite", "smoke"]) == 0
    out = capsys.readouterr().out
    assert "kernel families" in out
    assert re.search(r"^  pallas +pallas-fp8, ", out, re.M)
    assert re.search(r"^  triton +triton-fp8, ", out, re.M)


def test_quantizer_only_cases_run_for_quantizers_alone(tmp_path, monkeypatch, capsys):
    """`fp8check list` marks the ci suite's quantizer-only cases; `--case` reruns one on a
    quantizer (a result in the JSON, the partial block checked bit for bit); named for a
    gmm-fp8 kernel it is bad usage (exit 2), never a green gate that checked nothing."""
    from fp8check.inputs.cases import build_suite

    quant = [c.id for c in build_suite("ci", 0) if c.quantizer_only]
    assert main(["list", "--suite", "ci"]) == 0
    listed = [ln for ln in capsys.readouterr().out.splitlines() if "quantizer only" in ln]
    assert sorted(ln.split()[0] for ln in listed) == sorted(quant)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quant.py").write_text(QUANTIZER_FILE)
    rc = main(["gate", "--no-progress", "--suite", "ci", "--kernel",
               "quant.py:quantize_deepgemm", "--contract", "quantizer", "--framework",
               "numpy", "--recipe", "deepgemm", "--no-isolate", "--case", quant[0],
               "--json", "q.json", "--report", "q.html"])
    [res] = json.loads(Path("q.json").read_text())["results"]
    assert rc == 0 and res["case"] == quant[0] and res["passed"] is True
    assert quant[0] in Path("q.html").read_text()
    rc = main(["gate", "--no-progress", "--suite", "ci", "--kernel", "pallas-fp8",
               "--layers", "1", "--no-isolate", "--case", quant[0]])
    assert rc == 2
    assert "is for quantizer kernels only" in capsys.readouterr().err


def test_a_quantizer_declaring_no_partial_blocks_is_skipped_and_reported(tmp_path,
                                                                         monkeypatch):
    """partial_blocks=False (torchao's quantizers assert K % 128 == 0): the quantizer-only
    case is a skipped result with the reason, never a pass; alone it fails the gate."""
    from fp8check.inputs.cases import build_suite

    quant = next(c.id for c in build_suite("ci", 0) if c.quantizer_only)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "q.py").write_text(SEEDED + (
        "import dataclasses\nfrom seeded_bugs.kernels import CORRECT\n"
        "spec = CORRECT['numpy-quantizer']\n"
        "SPEC = dataclasses.replace(spec, name='whole-blocks-only', claims=dataclasses.replace("
        "spec.quantizer_claims, partial_blocks=False))\n"))
    rc = main(["gate", "--no-progress", "--suite", "ci", "--kernel", "q.py:SPEC",
               "--no-isolate", "--case", quant, "--json", "q.json"])
    [res] = json.loads(Path("q.json").read_text())["results"]
    assert rc == 1 and res["passed"] is None
    assert "partial_blocks=False" in res["skipped"]
