"""A kernel's claims as one object (`fp8check.contracts.claims`): every claim the gate's
command line declares, the asserts declare too, and it reaches the criteria as the same
claims object on both paths; a claim that is none is a one-line ValueError wherever it is
declared."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fp8check import testing
from fp8check.cli import parser
from fp8check.commands.gate import options
from fp8check.config import GateConfig
from fp8check.contracts import (
    ACCUMS,
    NUMPY_DTYPES,
    OUT_DTYPES,
    QUANT_BLOCKS,
    ClaimError,
    KernelSpec,
    MatmulClaims,
    QuantizerClaims,
    claims_for,
    contract_of,
)
from fp8check.gate.declarations import CLAIM_FLAGS, BareDeclarations
from fp8check.gate.kernels import load_kernels
from fp8check.gate.plan import make_plan
from fp8check.inputs.cases import build_suite
from fp8check.layers.op import ProblemCache, validate_case
from fp8check.profiles import get_profile
from fp8check.references.gmm import PROMOTION_INTERVALS
from fp8check.references.quant import FP8_FORMATS, RECIPES
from fp8check.references.quant_approx import APPROX_RECIPES, MAX_DIVISION_ULPS
from fp8check.testing.asserts import matmul_claims
from fp8check.testing.replay_record import ReplayRecord

SMOKE = build_suite("smoke", 0)
# a smoke case whose group sizes are multiples of 128, so that every m_align declares it
ALIGNED = dataclasses.replace(SMOKE[0], id="aligned-128", group_sizes=(128, 0, 128, 0))
PROBLEMS = ProblemCache(capacity=4)
PROFILE = get_profile("strict")

# What the gate's parser takes besides the claims: what a bare function is and the
# backward kernels layers 2 and 3 build around it.
NOT_CLAIMS = {"contract", "framework", "tgmm", "dgrad"}

KERNELS = '''
import numpy as np

def gmm(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=np.float32):
    return np.zeros((lhs_q.shape[0], rhs_q.shape[2]), out_dtype)

def quantizer(x):
    return x, x
'''


def _gate_parser() -> argparse.ArgumentParser:
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["gate"]


def _declaration_actions() -> dict[str, argparse.Action]:
    """The gate's options that declare something of a bare function (the fields of
    `BareDeclarations`, which the command line fills by dest), by dest."""
    fields = {f.name for f in dataclasses.fields(BareDeclarations)}
    return {a.dest: a for a in _gate_parser()._actions if a.dest in fields}


def test_every_declaration_flag_is_a_claim_flag():
    """Each option of the gate that declares something of a bare function is a claim
    flag (`CLAIM_FLAGS`: what the parametrisation below enumerates) or one of
    NOT_CLAIMS; each claim flag is an option of the parser and names a claim."""
    actions = _declaration_actions()
    by_dest = {f.dest: f for f in CLAIM_FLAGS}
    assert set(actions) == set(by_dest) | NOT_CLAIMS
    claims = ({f.name for f in dataclasses.fields(MatmulClaims)}
              | {f.name for f in dataclasses.fields(QuantizerClaims)})
    for dest, flag in by_dest.items():
        assert flag.flag in actions[dest].option_strings, flag
        assert flag.claim in claims, flag


def _texts(claim: str, action: argparse.Action) -> list[Any]:
    """The valid values of the option `action` that declares `claim`, as the command
    line spells them: its choices, else the claim's domain from the claim types."""
    if action.choices is not None:
        return list(action.choices)
    if isinstance(action, argparse.BooleanOptionalAction):
        return [True, False]
    return {
        "accum": list(ACCUMS),
        "out_dtypes": [",".join(c) for r in range(1, len(OUT_DTYPES) + 1)
                       for c in itertools.combinations(OUT_DTYPES, r)],
        "m_align": ["1", "64", "128"],
        "hopper_interval": [str(i) for i in PROMOTION_INTERVALS],
        "recipe": list(RECIPES),
        "block": [f"{r}x{c}" for r, c in QUANT_BLOCKS],
        "fmt": list(FP8_FORMATS),
        "division_ulps": [str(n) for n in range(MAX_DIVISION_ULPS + 1)],
    }[claim]


def _companions(claim: str, text: Any) -> list[str]:
    """What a declaration needs beside it: a quantizer's contract and recipe; the Hopper
    recipe for an interval; a recipe that divides for approximate division."""
    if claim in {f.name for f in dataclasses.fields(MatmulClaims)}:
        return ["--accum", "deepgemm-hopper"] if claim == "hopper_interval" else []
    recipe = [] if claim == "recipe" else ["--recipe", APPROX_RECIPES[0]]
    return ["--contract", "quantizer", *recipe]


def _declarations() -> Iterator[Any]:
    actions = _declaration_actions()
    for flag in CLAIM_FLAGS:
        action = actions[flag.dest]
        for text in _texts(flag.claim, action):
            if isinstance(text, bool):
                argv = [flag.flag if text else f"--no-{flag.flag[2:]}"]
            else:
                argv = [flag.flag, str(text)]
            yield pytest.param(flag.claim, argv + _companions(flag.claim, text),
                               id=" ".join(argv))


class _Reached(Exception):
    """Raised by the criteria's stand-in: the claims they were handed."""


@pytest.fixture
def reached(monkeypatch) -> list[Any]:
    """The claims each call of the output criteria got (gate and asserts), the criteria
    themselves replaced by a stand-in that records them and stops."""
    got: list[Any] = []

    def matmul(out, prob, profile, m, *, claims, plots=None):
        got.append(claims)
        raise _Reached

    def quantizer(values, scales, x, claims, m):
        got.append(claims)
        raise _Reached

    for module in ("fp8check.layers.op.validate", "fp8check.testing.engine"):
        monkeypatch.setattr(f"{module}.output_criteria", matmul)
    for module in ("fp8check.layers.op.validate", "fp8check.testing.asserts"):
        monkeypatch.setattr(f"{module}.quantizer_output_criteria", quantizer)
    return got


def _gate_spec(tmp_path: Path, argv: list[str]) -> tuple[KernelSpec, BareDeclarations]:
    """The kernel the gate loads from the command line `argv` (a bare numpy function):
    parsed, planned and loaded as `fp8check gate` does, and its declarations."""
    (tmp_path / "k.py").write_text(KERNELS)
    contract = "quantizer" if "quantizer" in argv else "gmm-fp8"
    target = f"{tmp_path / 'k.py'}:{'quantizer' if contract == 'quantizer' else 'gmm'}"
    args = _gate_parser().parse_args(["--kernel", target, "--framework", "numpy",
                                      *(["--contract", "gmm-fp8"] if contract != "quantizer"
                                        else []), *argv])
    opts = options(args)
    plan, _ = make_plan(opts, GateConfig(layers=(1,)))
    (spec,) = load_kernels(plan).specs
    return spec, opts.bare


@pytest.mark.parametrize(("claim", "argv"), list(_declarations()))
def test_every_cli_declaration_reaches_the_criteria_through_the_asserts(
        tmp_path, reached, claim, argv):
    """Each value of each claim flag the gate takes: the gate's kernel (parsed, planned
    and loaded from the command line) and the asserts declaring the same claims by keyword
    (`assert_gmm_matches` and `GateCase.assert_matches`, or `assert_quantizer_matches`)
    hand the criteria equal claims, which hold the declared value."""
    spec, bare = _gate_spec(tmp_path, argv)
    declared = bare.declared()
    if isinstance(spec.claims, MatmulClaims):
        case = next(c for c in [ALIGNED, *SMOKE]
                    if spec.matmul_claims.skip_reason(c.out_dtype, c.group_sizes, c.m) is None)
        prob = PROBLEMS.get("gmm-fp8", case)[0]
        validate_case(spec, case, PROFILE, prob)
        lq, rq = prob.quantized
        out = np.zeros(prob.exact.shape, NUMPY_DTYPES[prob.out_dtype])
        with pytest.raises(_Reached):
            testing.assert_gmm_matches(out, lq, rq, prob.args[-1], **declared)
        gate_case = testing.GateCase(case, suite="smoke", _problems=PROBLEMS)
        with pytest.raises(_Reached):
            gate_case.assert_matches(out, **declared)
        assert len(reached) == 3
    else:
        validate_case(spec, SMOKE[0], PROFILE)
        x = np.zeros((128, 256), np.float32)
        block = next(f.default for f in dataclasses.fields(QuantizerClaims) if f.name == "block")
        with pytest.raises(_Reached):
            testing.assert_quantizer_matches(x, x, x, **{"block": block, **declared})
        assert len(reached) == 2
    assert all(c == spec.claims for c in reached), (spec.claims, reached)
    assert getattr(spec.claims, claim) == declared[claim]


@pytest.mark.parametrize("interval", [32, 64])
def test_the_asserts_declare_a_promotion_interval(interval):
    """`hopper_interval` reaches the criteria from an assert (it once stopped short of
    them): a Hopper tensor core promoting every `interval` K elements passes declared so,
    and fails bit-exactness judged as promoting every 128."""
    case = next(c for c in SMOKE if not c.exact_partials)  # the tensor core truncates
    prob = PROBLEMS.get("gmm-fp8", case)[0]
    lq, rq = prob.quantized
    out = prob.accum_ref("deepgemm-hopper", prob.out_dtype, interval)
    res = testing.assert_gmm_matches(out, lq, rq, prob.args[-1], accum="deepgemm-hopper",
                                     hopper_interval=interval)
    assert res.metrics["hopper_interval"] == interval
    with pytest.raises(AssertionError, match="bit_exact"):
        testing.assert_gmm_matches(out, lq, rq, prob.args[-1], accum="deepgemm-hopper")


def test_a_claims_object_and_keywords_make_one_claims_object():
    """An assert's `claims` argument (e.g. its KernelSpec's) with keywords over it: the
    keywords replace those claims, the others stay the object's."""
    base = MatmulClaims(accum="tokamax", acc_unit_roundoff=2.0**-23)
    assert matmul_claims(base, {"accum": "deepgemm"}) == MatmulClaims(
        accum="deepgemm", acc_unit_roundoff=2.0**-23, flushes_subnormals=False)
    case = next(c for c in SMOKE if c.exact_partials)
    prob = PROBLEMS.get("gmm-fp8", case)[0]
    lq, rq = prob.quantized
    out = prob.accum_ref("deepgemm", prob.out_dtype)
    res = testing.assert_gmm_matches(out, lq, rq, prob.args[-1], claims=base, accum="deepgemm")
    assert res.metrics["bit_exact_accum"] == "deepgemm"


@pytest.mark.parametrize(("make", "claim"), [
    (lambda: MatmulClaims(accum="kahan"), "accum"),
    (lambda: MatmulClaims(accum="exact"), "accum"),
    (lambda: MatmulClaims(acc_unit_roundoff=0.0), "acc_unit_roundoff"),
    (lambda: MatmulClaims(acc_unit_roundoff=True), "acc_unit_roundoff"),
    (lambda: MatmulClaims(hopper_interval=48, accum="deepgemm-hopper"), "hopper_interval"),
    (lambda: MatmulClaims(hopper_interval=64), "hopper_interval"),
    (lambda: MatmulClaims(hopper_interval=64, accum="deepgemm-blackwell"), "hopper_interval"),
    (lambda: MatmulClaims(flushes_subnormals=1), "flushes_subnormals"),
    (lambda: MatmulClaims(out_dtypes=()), "out_dtypes"),
    (lambda: MatmulClaims(out_dtypes=("f16",)), "out_dtypes"),
    (lambda: MatmulClaims(m_align=0), "m_align"),
    (lambda: MatmulClaims(m_align=1.5), "m_align"),
    (lambda: MatmulClaims(deterministic="yes"), "deterministic"),
    (lambda: QuantizerClaims("deepgem"), "recipe"),
    (lambda: QuantizerClaims("deepgemm", block=(64, 64)), "block"),
    (lambda: QuantizerClaims("deepgemm", block=(1, 128, 1)), "block"),
    (lambda: QuantizerClaims("deepgemm", fmt="e4m3"), "fmt"),
    (lambda: QuantizerClaims("deepgemm", in_dtype="f16"), "in_dtype"),
    (lambda: QuantizerClaims("transformer-engine", division_ulps=2), "division_ulps"),
    (lambda: QuantizerClaims("deepseek-v3", division_ulps=-1), "division_ulps"),
    (lambda: QuantizerClaims("deepgemm", partial_blocks=None), "partial_blocks"),
    (lambda: claims_for(contract_of("gmm"), {"accum": "deepgemm"}), "accum"),
])
def test_a_claim_that_is_none_is_a_one_line_value_error(make, claim):
    with pytest.raises(ClaimError) as e:
        make()
    assert isinstance(e.value, ValueError) and e.value.claim == claim
    assert str(e.value).startswith(f"{claim} ") and "\n" not in str(e.value)


@pytest.mark.parametrize(("call", "match"), [
    (lambda o, lq, rq, gs: testing.assert_gmm_matches(o, lq, rq, gs, accum="kahan"),
     "accum 'kahan': expected one of"),
    (lambda o, lq, rq, gs: testing.assert_gmm_matches(o, lq, rq, gs, hopper_interval=64),
     "hopper_interval 64: 32, 64 or 128, and only with deepgemm-hopper"),
    (lambda o, lq, rq, gs: testing.assert_gmm_matches(o, lq, rq, gs, interval=64),
     "interval: not a claim of MatmulClaims"),
    (lambda o, lq, rq, gs: testing.assert_gmm_matches(o, lq, rq, gs, out_dtypes=("bf16",)),
     "the kernel's claims exclude this output: out dtype f32"),
    (lambda o, lq, rq, gs: testing.assert_gmm_matches(o, lq, rq, gs, m_align=128),
     "the kernel's claims exclude this output: group sizes not multiples"),
    (lambda o, lq, rq, gs: testing.assert_tgmm_matches(o, lq.values, rq.values[0], gs,
                                                       accum="deepgemm"),
     "accum 'deepgemm': only meaningful for gmm-fp8"),
    (lambda o, lq, rq, gs: testing.assert_quantizer_matches(
        lq.values, lq.scales, o, (1, 128), "transformer-engine", division_ulps=1),
     "division_ulps 1: division_ulps applies to the recipes"),
    (lambda o, lq, rq, gs: testing.assert_quantizer_matches(
        lq.values, lq.scales, o, (1, 128), "deepgemm", in_dtype="bf16"),
     "x is f32, but the quantizer declares in_dtype bf16"),
])
def test_the_asserts_refuse_a_bad_claim_in_one_line(call, match):
    case = SMOKE[0]  # f32 output, group sizes (51, 152, 0, 53)
    prob = PROBLEMS.get("gmm-fp8", case)[0]
    lq, rq = prob.quantized
    out = np.zeros(prob.exact.shape, np.float32)
    with pytest.raises(ValueError, match=match) as e:
        call(out, lq, rq, prob.args[-1])
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("argv", "message"), [
    (["--accum", "kahan"], "--accum 'kahan': expected one of deepgemm, "),
    (["--hopper-interval", "64"], "--hopper-interval 64: 32, 64 or 128, and only with"),
    (["--accum", "deepgemm-hopper", "--hopper-interval", "48"], "--hopper-interval 48: "),
    (["--m-align", "0"], "--m-align 0: must be an integer >= 1"),
    (["--division-ulps", "2"], "--division-ulps declare a quantizer"),
    (["--contract", "quantizer", "--recipe", "deepgemm", "--accum", "deepgemm"],
     "--accum declare a matmul kernel, not a quantizer"),
    (["--contract", "gmm", "--accum", "deepgemm"],
     "--accum 'deepgemm': only meaningful for gmm-fp8"),
])
def test_the_gate_refuses_a_bad_claim_in_one_line(tmp_path, capsys, argv, message):
    from fp8check.cli import main

    (tmp_path / "k.py").write_text(KERNELS)
    contract = [] if "--contract" in argv else ["--contract", "gmm-fp8"]
    assert main(["gate", "--kernel", f"{tmp_path / 'k.py'}:gmm", "--framework", "numpy",
                 *contract, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_flushes_subnormals_resolves_once_by_framework():
    """None is the framework's default, settled once: jax flushes, numpy and torch keep
    IEEE subnormals, an assert (no framework) too; a declared value stays; unresolved
    claims do not reach the criteria."""
    assert MatmulClaims().resolved("jax").flushes is True
    assert MatmulClaims().resolved("numpy").flushes is False
    assert MatmulClaims().resolved("torch").flushes is False
    assert MatmulClaims().resolved(None).flushes is False
    assert MatmulClaims(flushes_subnormals=False).resolved("jax").flushes is False
    assert MatmulClaims(flushes_subnormals=True).resolved("numpy").flushes is True
    with pytest.raises(ValueError, match="not resolved"):
        _ = MatmulClaims().flushes

    def fn(*a, **k):
        return None

    assert KernelSpec("j", "gmm", "jax", fn).claims == MatmulClaims(flushes_subnormals=True)
    case = testing.GateCase(SMOKE[0], framework="jax")
    assert case.claims.flushes_subnormals is True


def test_a_gate_case_repro_repeats_its_claims_as_flags():
    case = testing.GateCase(SMOKE[0], framework="torch", kernel="k.py:gmm",
                            claims=MatmulClaims(accum="deepgemm-hopper", hopper_interval=64,
                                                out_dtypes=("bf16",), m_align=128))
    cmd = case.gate_command()
    for part in ("--accum deepgemm-hopper", "--hopper-interval 64", "--out-dtypes bf16",
                 "--m-align 128", "--framework torch"):
        assert part in cmd, cmd
    assert "--ftz" not in cmd  # the framework's default is not repeated


def test_replay_records_keep_the_claims(tmp_path):
    """A record saves the claims the criteria got and loads them equal; a file written
    before the claims were one object (its options flat, None where not taken) loads
    with the claims it held."""
    claims = MatmulClaims(accum="deepgemm-hopper", hopper_interval=32, flushes_subnormals=True,
                          out_dtypes=("bf16",))
    arrays = {"out": np.zeros((2, 2), np.float32)}
    path = ReplayRecord("gmm", arrays, "strict", claims).save(tmp_path)
    loaded = ReplayRecord.load(path)
    assert (loaded.profile, loaded.claims) == ("strict", claims)
    quant = QuantizerClaims("deepseek-v3", (128, 128), "e5m2", division_ulps=2)
    assert ReplayRecord.load(ReplayRecord("quantizer", arrays, None, quant).save(
        tmp_path)).claims == quant

    import json

    old = {"kind": "gmm", "dtypes": {"out": "float32"}, "options": {
        "accum": "deepgemm", "profile": "strict", "acc_unit_roundoff": 2.0**-24,
        "block": None, "recipe": None, "fmt": None, "flushes_subnormals": None,
        "division_ulps": None}}
    np.savez(tmp_path / "old.npz", __meta__=np.array(json.dumps(old)),
             out=np.zeros((2, 2), np.float32).view(np.uint32))
    loaded = ReplayRecord.load(tmp_path / "old.npz")
    assert loaded.claims == MatmulClaims(accum="deepgemm")
    assert loaded.claims.resolved(None).flushes is False  # as the asserts replay it
