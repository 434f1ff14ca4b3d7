"""Production-shape (streamed) cases of the `full` suite: the streamed layer-1 path gives the
in-memory path's values, the production cases are what they claim, and the int16 offset
bug is invisible below M = 32768."""

import dataclasses

import ml_dtypes
import numpy as np
import pytest
from seeded_bugs.production import BUGS, Int16GroupOffsets

from fp8check.contracts import MatmulClaims
from fp8check.inputs.cases import PRODUCTION_M, build_suite, case_inputs, find_case
from fp8check.layers.op import (
    gmm_fp8_problem,
    output_criteria,
    streamed_gmm_fp8_problem,
    streamed_output_criteria,
    validate_case,
)
from fp8check.layers.op import problem as problem_mod
from fp8check.profiles import get_profile
from fp8check.references import gmm, quantize

PROFILE = get_profile("strict")
CI = build_suite("ci", 0)


def _ci_case(pattern: str, out_dtype: str, exact: bool = False):
    return next(c for c in CI if c.pattern == pattern and c.out_dtype == out_dtype
                and c.exact_partials == exact)


def _problems(case):
    inp = case_inputs(case)
    lq = quantize(inp.x, (1, 128), case.recipe)
    rq = quantize(inp.w, (128, 128), case.recipe)
    gs = inp.group_sizes
    mem = gmm_fp8_problem(lq, rq, gs, case.out_dtype, exact_partials=case.exact_partials)
    return mem, streamed_gmm_fp8_problem(lq, rq, gs, case.out_dtype, case.exact_partials)


def _damaged(ref: np.ndarray, rows: int, rng: np.random.Generator) -> np.ndarray:
    """ref with garbage past `rows` (never compared), a few elements off by a few ulps,
    one far off and one NaN inside the compared rows."""
    out = ref.copy()
    out[rows:] = 1e30 if out.dtype == np.float32 else ml_dtypes.bfloat16(1e30)
    n = out.shape[1]
    for _ in range(5):
        i, j = rng.integers(rows), rng.integers(n)
        out[i, j] = np.nextafter(np.float32(out[i, j]), np.float32(np.inf)).astype(out.dtype)
    i, j = rng.integers(rows), rng.integers(n)
    out[i, j] = out[i, j] * 3 + 1
    i, j = rng.integers(rows), rng.integers(n)
    out[i, j] = np.nan
    return out


def _by_name(crit):
    return {c.name: c for c in crit}


CASES = [
    # bf16 output, an empty group and rows past the last group
    ("random1", "bf16", False),
    # float32, rows past the last group
    ("partial-sum", "f32", False),
    # exact partials: bit_exact applies
    ("zero-middle", "f32", True),
]


@pytest.mark.parametrize(("pattern", "out_dtype", "exact"), CASES)
@pytest.mark.parametrize("damage", [False, True])
def test_streamed_criteria_equal_in_memory(pattern, out_dtype, exact, damage):
    case = _ci_case(pattern, out_dtype, exact)
    gs = np.asarray(case.group_sizes)
    if pattern == "random1":
        assert (gs == 0).any() and gs.sum() < case.m
    if pattern == "partial-sum":
        assert gs.sum() < case.m
    mem, stream = _problems(case)
    out = mem.accum_ref("deepgemm", case.out_dtype).copy()
    if damage:
        out = _damaged(out, mem.rows, np.random.default_rng(len(case.id)))
    m_mem, m_str = {}, {}
    claims = MatmulClaims(accum="deepgemm", flushes_subnormals=False)
    c_mem = _by_name(output_criteria(out, mem, PROFILE, m_mem, claims=claims))
    # a small chunk: many chunks, groups cut in the middle
    c_str = _by_name(streamed_output_criteria(out, stream, PROFILE, m_str, claims=claims,
                                              rows_per_chunk=7))
    for name in ("finite", "bound_ratio", "bias_z", "bias_z_signed"):
        assert c_str[name].value == c_mem[name].value, name  # bit for bit
        assert c_str[name].passed == c_mem[name].passed, name
        assert c_str[name].n_bad == c_mem[name].n_bad, name
    assert repr(c_str["bound_ratio"].worst) == repr(c_mem["bound_ratio"].worst)  # NaN-safe
    assert m_str["bound_ratio_argmax"] == m_mem["bound_ratio_argmax"]
    assert m_str["ulp_max_vs_exact"] == m_mem["ulp_max_vs_exact"]
    assert m_str["ulp_off_vs_exact"] == sum(
        v for k, v in m_mem["ulp_histogram_vs_exact"].items() if k != "0")
    assert ("bit_exact" in c_str) == exact == ("bit_exact" in c_mem)
    if exact:
        assert c_str["bit_exact"].value == c_mem["bit_exact"].value
    assert c_str["finite"].passed is (not damage)
    assert c_str["bound_ratio"].passed is (not damage)
    assert set(m_str["streamed_not_evaluated"]) >= {"error_ratio"}


def test_streamed_hopper_bit_exact_equals_in_memory():
    case = _ci_case("residues", "bf16", exact=True)
    mem, stream = _problems(case)
    out = mem.accum_ref("deepgemm-hopper", case.out_dtype, 32).copy()
    out[3, 5] = out[3, 6]  # one element off the model (different in this data)
    assert out[3, 5] != mem.accum_ref("deepgemm-hopper", case.out_dtype, 32)[3, 5]
    m_mem, m_str = {}, {}
    claims = MatmulClaims(accum="deepgemm-hopper", hopper_interval=32, flushes_subnormals=False)
    c_mem = _by_name(output_criteria(out, mem, PROFILE, m_mem, claims=claims))
    c_str = _by_name(streamed_output_criteria(out, stream, PROFILE, m_str, claims=claims))
    assert c_str["bit_exact"].value == c_mem["bit_exact"].value == 1
    for name in ("bias_z", "bias_z_signed"):  # against the model, as in memory
        assert c_str[name].value == c_mem[name].value, name
    assert "bound_ratio" not in c_str and "bound_ratio" in m_str["streamed_not_evaluated"]


def test_streamed_validate_case_is_a_normal_result():
    case = dataclasses.replace(_ci_case("random1", "bf16"), streamed=True)
    res = validate_case(BUGS["bug-int16-group-offsets"].spec, case, PROFILE)
    assert res.error is None and res.passed is True
    assert [c.name for c in res.criteria] == ["inputs_unchanged", "finite", "bound_ratio",
                                             "bias_z", "bias_z_signed", "deterministic"]
    assert "plots" not in res.metrics and "plots_note" in res.metrics


@pytest.mark.parametrize("shape", [(640, 384), (3, 384, 256)])
def test_chunked_quantization_is_bit_exact(monkeypatch, shape):
    monkeypatch.setattr(problem_mod, "_QUANT_ROWS", 128)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    x *= np.exp2(np.random.default_rng(2).integers(-8, 8, size=shape[-2:])).astype(np.float32)
    block = (1, 128) if len(shape) == 2 else (128, 128)
    whole, chunked = quantize(x, block), problem_mod._quantized_in_chunks(x, block, "deepgemm")
    assert whole.values.tobytes() == chunked.values.tobytes()
    assert whole.scales.tobytes() == chunked.scales.tobytes()


def test_production_cases_lead_full_and_reproduce_by_id():
    full = build_suite("full", 0)
    prod = [c for c in full if c.streamed]
    assert full[:2] == prod and {c.aspect for c in prod} == {"wi", "wo"}
    for c in prod:
        assert (c.m, c.g) == (PRODUCTION_M, 256)
        assert (c.k, c.n) == ((2048, 512) if c.aspect == "wi" else (512, 2048))
        gs = np.asarray(c.group_sizes)
        assert np.cumsum(gs).max() > 32767  # offsets past int16
        assert (gs == 0).any() and 0 < c.m - gs.sum() < 128  # empty groups, residual rows
        assert find_case("full", 0, c.id) == c
    assert not any(c.streamed for s in ("smoke", "ci") for c in build_suite(s, 0))
    assert [c.group_sizes for c in build_suite("full", 1)[:2]] != [c.group_sizes for c in prod]


def test_int16_offsets_drop_only_the_group_straddling_32768():
    gs = np.asarray(build_suite("full", 0)[0].group_sizes)
    ends = np.cumsum(gs)
    written = Int16GroupOffsets().rows_written(gs, PRODUCTION_M)
    g = int(np.searchsorted(ends, 32768, side="right"))  # the group holding row 32768
    lost = np.flatnonzero(~written[: ends[-1]])
    assert lost.size and lost.min() == ends[g] - gs[g] and lost.max() == ends[g] - 1
    for m in (512, 2048, 32767):  # every suite below production: nothing lost
        small = np.diff(np.linspace(0, m, 9).astype(int))
        assert Int16GroupOffsets().rows_written(small, m).all()


def test_int16_offsets_bug_passes_every_ci_case():
    spec = BUGS["bug-int16-group-offsets"].spec
    for case in (c for c in CI if c.applies_to(spec.contract)):
        res = validate_case(spec, case, PROFILE)
        assert res.passed, (case.id, res.failed_criteria, res.error)


def test_vectorised_kernel_is_the_deepgemm_recipe():
    case = _ci_case("random1", "bf16")
    mem, _ = _problems(case)
    out = Int16GroupOffsets()(*mem.args, out_dtype=ml_dtypes.bfloat16)
    ref = gmm(*mem.quantized, mem.args[-1], out_dtype=ml_dtypes.bfloat16, accum="deepgemm")
    assert out[: mem.rows].tobytes() == ref[: mem.rows].tobytes()


def test_only_gmm_fp8_runs_streamed_cases():
    from fp8check.layers.op import build_problem

    prod = build_suite("full", 0)[0]
    assert prod.streamed and prod.contracts() == ("gmm-fp8",)
    for contract in ("gmm", "tgmm", "quantizer"):
        assert not prod.applies_to(contract)
        with pytest.raises(ValueError, match=f"is not for {contract}: it is for gmm-fp8"):
            build_problem(contract, prod)
