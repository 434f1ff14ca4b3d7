"""Layers 2 and 3 around a user's kernels (`--kernel FILE:FWD --tgmm --dgrad`): plain torch
and JAX kernels (tests/data/user_layers) pass through the CLI, a dgrad on the wrong expert
fails layer 2 naming its criteria, without a backward kernel the reference bf16 backward
runs and the results say so, bad flag combinations are exit 2; the pieces fp8check builds
around the kernels (the torch deepgemm quantizer, the bf16 reference grouped matmuls) are
checked bit for bit against the references."""

from __future__ import annotations

import json
import re
import shlex
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fp8check.cli import main
from fp8check.inputs.testdata import DISTRIBUTIONS
from fp8check.layers.moe import SUITES as LAYER2_SUITES
from fp8check.layers.training import SUITES as LAYER3_SUITES
from fp8check.references import dgrad, quantize, tgmm

USER_LAYERS = Path(__file__).parent / "data" / "user_layers"
TORCH = str(USER_LAYERS / "torch_kernels.py")
JAX = str(USER_LAYERS / "jax_kernels.py")


def _gate(tmp_path, capsys, *args: str) -> tuple[int, str, dict | None]:
    out = tmp_path / "g.json"
    rc = main(["gate", *args, "--suite", "smoke", "--no-progress", "--json", str(out)])
    err = capsys.readouterr().err
    return rc, err, json.loads(out.read_text()) if out.exists() else None


def _layer_results(doc, layer):
    return [r for r in doc["results"] if r["layer"] == layer]


@pytest.fixture()
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no pyproject here: built-in defaults
    return tmp_path


def _expect_passing(doc, kernel, framework):
    smoke2 = [s.case_id(0) for s in LAYER2_SUITES["smoke"]]
    [tc] = LAYER3_SUITES["smoke"][framework]
    got = [(r["layer"], r["kernel"], r["case"]) for r in doc["results"]]
    assert got == ([(2, f"{kernel}-moe-fp8", c) for c in smoke2]
                   + [(3, f"{kernel}-train-fp8", tc.case_id(0))])
    for r in doc["results"]:
        assert r["passed"] is True and r["error"] is None, (r["case"], r["failed"], r["error"])
    for r in _layer_results(doc, 2):
        assert {c["question"] for c in r["criteria"].values()} == {"correctness", "impact"}
        assert r["metrics"]["st_sqnr_db.dx"] >= 40 and r["metrics"]["st_sqnr_db.wi"] >= 40
    [train] = _layer_results(doc, 3)
    assert set(train["metrics"]["curves"]) == {"fp8", "bf16", "f32"}
    assert "own bf16 grouped matmul" in train["metrics"]["baseline_note"]


def test_torch_kernels_with_their_backward_pass_layers_2_and_3(here, capsys):
    rc, err, doc = _gate(here, capsys, "--kernel", f"{TORCH}:gmm_fp8", "--tgmm",
                         f"{TORCH}:tgmm", "--dgrad", f"{TORCH}:dgrad", "--contract",
                         "gmm-fp8", "--framework", "torch", "--layers", "2,3")
    assert rc == 0, err
    _expect_passing(doc, f"{TORCH}:gmm_fp8", "torch")
    for r in doc["results"]:
        assert r["metrics"]["backward"] == f"dgrad: {TORCH}:dgrad; tgmm: {TORCH}:tgmm"
        assert r["metrics"]["forward"].endswith(
            "output f32 or bf16 (as the kernel returns it, without out_dtype), rounded to bf16 "
            "by the layer")
    assert "reference" not in err


def test_jax_kernels_with_their_backward_pass_layers_2_and_3(here, capsys):
    rc, err, doc = _gate(here, capsys, "--kernel", f"{JAX}:gmm_fp8", "--tgmm", f"{JAX}:tgmm",
                         "--dgrad", f"{JAX}:dgrad", "--contract", "gmm-fp8", "--framework",
                         "jax", "--layers", "2,3")
    assert rc == 0, err
    _expect_passing(doc, f"{JAX}:gmm_fp8", "jax")
    assert all(r["metrics"]["backward"] == f"dgrad: {JAX}:dgrad; tgmm: {JAX}:tgmm"
               for r in doc["results"])


def test_a_bf16_forward_is_the_bf16_layer_and_the_bf16_training_run(here, capsys):
    rc, err, doc = _gate(here, capsys, "--kernel", f"{TORCH}:gmm_bf16", "--tgmm",
                         f"{TORCH}:tgmm", "--dgrad", f"{TORCH}:dgrad", "--contract", "gmm",
                         "--framework", "torch", "--layers", "2,3")
    assert rc == 0, err
    [tc] = LAYER3_SUITES["smoke"]["torch"]
    assert [(r["layer"], r["kernel"], r["case"]) for r in doc["results"]] == (
        [(2, f"{TORCH}:gmm_bf16-moe-bf16", s.case_id(0)) for s in LAYER2_SUITES["smoke"]]
        + [(3, f"{TORCH}:gmm_bf16-train-bf16", tc.case_id(0))])  # no fp8 run: no seed test
    for r in _layer_results(doc, 2):
        assert r["passed"] is True and r["criteria"]["sqnr_db.out"]["limit"] == 35.0
        assert r["metrics"]["forward"].startswith(f"{TORCH}:gmm_bf16 on bf16 operands")
    [train] = _layer_results(doc, 3)
    assert train["passed"] is True and train["metrics"]["baseline"] == "f32"
    assert set(train["metrics"]["curves"]) == {"bf16", "f32"}
    assert "baseline_note" not in train["metrics"]
    assert doc["environment"]["layer_kernels"] == {
        "forward": f"{TORCH}:gmm_bf16", "dgrad": f"{TORCH}:dgrad", "tgmm": f"{TORCH}:tgmm"}


def test_without_backward_kernels_the_reference_backward_runs_and_is_named(here, capsys):
    rc, err, doc = _gate(here, capsys, "--kernel", f"{TORCH}:gmm_fp8", "--contract",
                         "gmm-fp8", "--framework", "torch", "--layers", "2", "--report",
                         str(here / "r.html"))
    assert rc == 0, err
    assert "no --dgrad or --tgmm, so that backward is fp8check's bf16 reference" in err
    for r in doc["results"]:
        assert r["passed"] is True
        assert r["metrics"]["backward"].startswith("fp8check's bf16 reference")
        assert "not a backward kernel of yours" in r["metrics"]["backward"]
    html = (here / "r.html").read_text()
    assert html.count("not a backward kernel of yours") == len(doc["results"])
    # one of the two given: the other is named as the reference
    rc, err, doc = _gate(here, capsys, "--kernel", f"{TORCH}:gmm_fp8", "--tgmm",
                         f"{TORCH}:tgmm", "--contract", "gmm-fp8", "--framework", "torch",
                         "--layers", "2", "--case", LAYER2_SUITES["smoke"][0].case_id(0))
    assert rc == 0, err and "no --dgrad, so" in err
    [r] = doc["results"]
    assert r["metrics"]["backward"] == (f"dgrad: fp8check's bf16 reference (bf16 operands, "
                                        f"float32 accumulation) (none given); tgmm: "
                                        f"{TORCH}:tgmm")


def test_a_dgrad_on_the_wrong_expert_fails_layer_2_with_a_repro(here, capsys):
    rc, err, doc = _gate(here, capsys, "--kernel", f"{TORCH}:gmm_fp8", "--tgmm",
                         f"{TORCH}:tgmm", "--dgrad", f"{TORCH}:dgrad_wrong_expert",
                         "--contract", "gmm-fp8", "--framework", "torch", "--layers", "2")
    assert rc == 1
    results = _layer_results(doc, 2)
    assert len(results) == len(LAYER2_SUITES["smoke"])
    for r in results:
        assert r["passed"] is False and r["error"] is None
        # the input gradient is wrong, and through it the upstream weight gradient (wi);
        # the wo gradient and the forward are right
        assert {"st_sqnr_db.dx", "st_sqnr_db.wi"} <= set(r["failed"]), r["failed"]
        assert not {"st_sqnr_db.out", "st_sqnr_db.wo", "st_routing"} & set(r["failed"])
        assert r["metrics"]["st_sqnr_db.dx"] < 20
    fails = [ln for ln in err.splitlines() if ln.startswith("FAIL ")]
    repros = [ln.split("repro: ", 1)[1] for ln in err.splitlines() if "repro: " in ln]
    assert len(fails) == len(repros) == len(results)
    assert all("st_sqnr_db.dx" in ln for ln in fails)
    # the repro reruns that one case with the same kernels
    argv = shlex.split(repros[0])
    assert argv[argv.index("--dgrad") + 1] == f"{TORCH}:dgrad_wrong_expert"
    assert argv[argv.index("--tgmm") + 1] == f"{TORCH}:tgmm"
    out = here / "again.json"
    assert main(argv[1:] + ["--no-progress", "--json", str(out)]) == 1
    [again] = json.loads(out.read_text())["results"]
    assert again["case"] == results[0]["case"] and again["failed"] == results[0]["failed"]


@pytest.mark.parametrize("args,message", [
    (["--kernel", "pallas", "--tgmm", f"{TORCH}:tgmm", "--layers", "2"],
     "--tgmm goes with one --kernel FILE.py:NAME of yours"),
    (["--kernel", f"{TORCH}:gmm_fp8", "--dgrad", f"{TORCH}:dgrad", "--contract", "gmm-fp8",
      "--framework", "torch", "--layers", "1"], "layers [1] run neither"),
    (["--kernel", f"{TORCH}:gmm_fp8", "--contract", "gmm-fp8", "--layers", "2"],
     "pass --contract and --framework"),
    (["--kernel", f"{TORCH}:tgmm", "--contract", "tgmm", "--framework", "torch", "--layers",
      "2"], "contract gmm-fp8 or gmm; --contract is tgmm"),
    (["--kernel", f"{TORCH}:gmm_fp8", "--contract", "gmm-fp8", "--framework", "numpy",
      "--layers", "3"], "in jax or torch; --framework is numpy"),
    (["--kernel", f"{TORCH}:gmm_fp8", "--kernel", f"{TORCH}:dgrad", "--contract", "gmm-fp8",
      "--framework", "torch", "--layers", "2"], "one forward kernel; --kernel names 2"),
    (["--kernel", f"{TORCH}:gmm_fp8", "--dgrad", f"{TORCH}:no_such", "--contract", "gmm-fp8",
      "--framework", "torch", "--layers", "2"], "has no attribute 'no_such'"),
])
def test_bad_flag_combinations_are_exit_2_in_one_line(here, capsys, args, message):
    rc = main(["gate", *args, "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    [line] = err.strip().splitlines()
    assert line.startswith("fp8check: error: ") and message in line, line


# --- what fp8check builds around the kernels, against the references ---------------------


def _adversarial(rng, shape):
    """Normal values, then in column block 0 a zero row (a 1x128 block whose amax is below
    the 1e-4 floor), a huge and a tiny row, and in column block 1 a block of amax 448
    (scale 1) holding values on rounding midpoints of the e4m3 grid (ties to even)."""
    x = rng.standard_normal(shape).astype(np.float32)
    x[..., 0, :128] = 0
    x[..., 1, :128] *= 1e30
    x[..., 2, :128] *= 1e-30
    x[..., 3, 128:133] = [448.0, 13.5, -9.5, 10.5, 0.0068359375]
    return x


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("block,shape", [((1, 128), (8, 256)), ((128, 128), (3, 256, 384))])
def test_torch_quantizer_is_the_deepgemm_reference_bit_for_bit(block, shape, dtype):
    import torch

    from fp8check.contracts import to_framework, to_numpy
    from fp8check.layers.moe import torch_grouped

    rng = np.random.default_rng(zlib.crc32(repr((block, shape, np.dtype(dtype).name)).encode()))
    # the suites' own distributions (ties on the fp8 grid, near-max, zero blocks, ...) and
    # the hand-made extremes
    drawn = [make(rng, shape) for make in DISTRIBUTIONS.values()]
    for x in (*drawn, _adversarial(rng, shape)):
        x = x.astype(dtype)
        q, s = torch_grouped.quantize(to_framework(x, "torch"), block)
        assert q.dtype == torch.float8_e4m3fn and s.dtype == torch.float32
        ref = quantize(x, block, "deepgemm")
        assert np.array_equal(to_numpy(q).view(np.uint8), ref.values.view(np.uint8))
        assert np.array_equal(to_numpy(s).view(np.uint32), ref.scales.view(np.uint32))


def _small_int_bf16(rng, shape):
    """Integers in [-8, 8] as bf16: every product and every partial sum of up to 2^17 of
    them is an integer below 2^24, so any float32 accumulation order is exact and the
    result equals the exact reference's."""
    return rng.integers(-8, 9, shape).astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_reference_bf16_grouped_matmuls_are_exact_on_exactly_summable_data(framework):
    from fp8check.contracts import to_framework, to_numpy
    from fp8check.layers.moe.user import _ops

    ops = _ops(framework)
    rng = np.random.default_rng(7)
    m, k, n = 40, 128, 256
    for sizes in ([10, 0, 25, 3], [0, 0, 40, 0], [5, 5, 5, 5]):  # the last leaves 20 rows out
        gs = np.array(sizes, np.int32)
        x, w, dy = (_small_int_bf16(rng, s) for s in ((m, k), (len(sizes), k, n), (m, n)))
        f = [to_framework(a, framework) for a in (x, w, dy, gs)]
        got_gmm = to_numpy(ops.bf16_gmm(f[0], f[1], f[3]))
        got_dgrad = to_numpy(ops.bf16_dgrad(f[2], f[1], f[3]))
        got_tgmm = to_numpy(ops.bf16_tgmm(f[0], f[2], f[3]))
        assert np.array_equal(got_gmm, dgrad(x, np.swapaxes(w, 1, 2), gs))
        assert np.array_equal(got_dgrad, dgrad(dy, w, gs))
        assert np.array_equal(got_tgmm, tgmm(x, dy, gs))
        rows = int(gs.sum())
        assert not got_gmm[rows:].any() and not got_dgrad[rows:].any()


def test_a_layer_1_rerun_does_not_repeat_the_backward_kernels():
    from fp8check.gate.declarations import BareDeclarations
    from fp8check.gate.repro import gate_command

    bare = BareDeclarations("gmm-fp8", "torch", tgmm="k.py:tgmm", dgrad="k.py:dgrad")
    one = shlex.split(gate_command("k.py:fwd", 1, suite="smoke", bare=bare))
    assert "--tgmm" not in one and "--dgrad" not in one and "--contract" in one
    for layer in (2, 3):
        cmd = shlex.split(gate_command("k.py:fwd", layer, suite="smoke", bare=bare))
        assert cmd[cmd.index("--tgmm") + 1] == "k.py:tgmm"
        assert cmd[cmd.index("--dgrad") + 1] == "k.py:dgrad"


# --- the doc's examples and the python API --------------------------------------------------

DOC = Path(__file__).parents[1] / "docs" / "layers-for-your-kernel.md"


def _doc_example(framework: str) -> tuple[str, list[str]]:
    """(the python source, the gate command's arguments) of the doc's `framework` example."""
    text = DOC.read_text().split(f"<!-- example: {framework} -->", 1)[1]
    (lang, source), (_, command) = re.findall(r"```(\w*)\n(.*?)```", text, re.S)[:2]
    assert lang == "python"
    return source, shlex.split(command.replace("\\\n", " "))  # the doc's line continuations


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_the_docs_examples_pass_layer_2_with_the_docs_command(here, capsys, framework):
    source, argv = _doc_example(framework)
    assert argv[:2] == ["fp8check", "gate"] and argv[argv.index("--framework") + 1] == framework
    [file] = {a.split(":")[0] for a in argv if a.endswith((":gmm_fp8", ":tgmm", ":dgrad"))}
    (here / file).write_text(source)
    # the doc's command, on layer 2's first smoke scenario (layers 1 and 3 run elsewhere)
    argv[argv.index("--layers") + 1] = "2"
    rc, err, doc = _gate(here, capsys, *argv[2:], "--case", LAYER2_SUITES["smoke"][0].case_id(0))
    assert rc == 0, err
    [r] = doc["results"]
    assert r["passed"] is True and r["metrics"]["backward"] == (
        f"dgrad: {file}:dgrad; tgmm: {file}:tgmm")


def _torch_kernels():
    from fp8check.contracts import load_target

    return {n: load_target(f"{TORCH}:{n}") for n in ("gmm_fp8", "tgmm", "dgrad",
                                                     "dgrad_wrong_expert")}


def test_assert_layers_pass_returns_and_records_the_layer_results():
    from fp8check.testing import add_listener, assert_layers_pass, remove_listener

    k = _torch_kernels()
    seen: list = []
    add_listener(seen.append)
    try:
        results = assert_layers_pass(k["gmm_fp8"], framework="torch", tgmm=k["tgmm"],
                                     dgrad=k["dgrad"], layers=(2,))
    finally:
        remove_listener(seen.append)
    assert seen == results and len(results) == len(LAYER2_SUITES["smoke"])
    assert all(r.passed and r.kernel == "gmm_fp8-moe-fp8" for r in results)
    assert results[0].metrics["backward"] == "dgrad: dgrad; tgmm: tgmm"


def test_assert_layers_pass_names_the_failing_criteria_and_the_gate_command():
    from fp8check.testing import assert_layers_pass

    k = _torch_kernels()
    case = LAYER2_SUITES["smoke"][0].case_id(0)
    with pytest.raises(AssertionError) as info:
        assert_layers_pass(k["gmm_fp8"], framework="torch", tgmm=k["tgmm"],
                           dgrad=k["dgrad_wrong_expert"], layers=(2,),
                           kernel=f"{TORCH}:gmm_fp8")
    text = str(info.value)
    assert text.startswith(f"{len(LAYER2_SUITES['smoke'])} of {len(LAYER2_SUITES['smoke'])} "
                           f"layer results failed")
    assert f"gmm_fp8-moe-fp8 {case}: " in text and "st_sqnr_db.dx " in text
    assert "must be >= 40" in text
    assert f"fp8check gate --kernel {TORCH}:gmm_fp8 --contract gmm-fp8 --framework torch" in text
    with pytest.raises(ValueError, match="subset of"):
        assert_layers_pass(k["gmm_fp8"], framework="torch", layers=(1,))
    with pytest.raises(ValueError, match="framework"):
        assert_layers_pass(k["gmm_fp8"])


def test_layers_from_the_config_narrow_the_run_and_say_why():
    from fp8check.config import GateConfig
    from fp8check.gate.declarations import BareDeclarations
    from fp8check.gate.plan import GateOptions, make_plan

    cfg = GateConfig(layers=(1, 2, 3), kernels=(f"{TORCH}:gmm_fp8",))
    numpy_bare = BareDeclarations(contract="gmm-fp8", framework="numpy")
    plan, notice = make_plan(GateOptions(bare=numpy_bare), cfg)
    assert plan.layers == (1,) and plan.dropped == (2, 3) and plan.layer_kernel is None
    assert notice is not None and "in jax or torch; --framework is numpy" in notice
    torch_bare = BareDeclarations(contract="gmm-fp8", framework="torch")
    plan, notice = make_plan(GateOptions(bare=torch_bare), cfg)
    assert plan.layers == (1, 2, 3) and plan.layer_kernel == f"{TORCH}:gmm_fp8"
    assert notice is not None and "no --dgrad or --tgmm" in notice
    # with a family beside it, the family runs and the user's kernel is said to be left out
    cfg = GateConfig(layers=(1, 2), kernels=("pallas", f"{TORCH}:gmm_fp8"))
    plan, notice = make_plan(GateOptions(bare=numpy_bare), cfg)
    assert plan.layers == (1, 2) and plan.families == ("pallas",) and plan.layer_kernel is None
    assert notice is not None and "layers 2 and 3 skip your kernels" in notice


def test_the_users_training_runs_in_shard_1_and_layer_2_shards_by_case():
    from fp8check.config import GateConfig
    from fp8check.gate.declarations import BareDeclarations
    from fp8check.gate.plan import GateOptions, make_plan
    from fp8check.gate.runner import _layer_cases

    bare = BareDeclarations(contract="gmm-fp8", framework="torch")
    cfg = GateConfig(layers=(2, 3), kernels=(f"{TORCH}:gmm_fp8",), suite="ci")
    ids = [s.case_id(0) for s in LAYER2_SUITES["ci"]]
    for shard, layer3, layer2 in (("1/2", None, ids[0::2]), ("2/2", [], ids[1::2])):
        plan, _ = make_plan(GateOptions(bare=bare, shard=shard), cfg)
        assert _layer_cases(plan, 3, None) == layer3
        assert _layer_cases(plan, 2, None) == layer2


def test_a_kernelspec_forward_is_checked_when_it_loads(here, capsys):
    (here / "specs.py").write_text(
        "from fp8check.contracts import KernelSpec\n"
        "TGMM = KernelSpec('my-tgmm', 'tgmm', 'torch', fn=lambda *a: None)\n"
        "NUMPY = KernelSpec('my-gmm', 'gmm-fp8', 'numpy', fn=lambda *a: None)\n")
    for attr, message in (("TGMM", "contract gmm-fp8 or gmm; my-tgmm is tgmm"),
                          ("NUMPY", "in jax or torch; my-gmm is a numpy kernel")):
        assert main(["gate", "--kernel", f"specs.py:{attr}", "--layers", "2"]) == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("fp8check: error: ") and message in line, line
