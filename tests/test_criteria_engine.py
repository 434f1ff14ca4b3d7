"""The criteria engine is one implementation whatever the chunking: on the ci suite's
cases, the in-memory path (one chunk covering every compared row), the same Problem cut
into many row chunks, and the production-shape path (references streamed chunk by chunk)
give the same criteria, bit for bit, on a correct kernel's and a buggy kernel's outputs.

Every ci case of every matmul contract is swept with a correct kernel (64-row chunks and,
for gmm-fp8, the streamed source); the chosen cases below add seeded bugs and finer
chunks.  They cover gmm-fp8 with float32 and bfloat16 outputs, zero-size groups (first,
middle, last), many tiny groups, the subnormal and non-finite families, a float32 recipe
checked bit for bit (exact partials), a tensor-core recipe, a kernel declaring it flushes
subnormals, and the gmm and tgmm contracts.
"""

import dataclasses

import numpy as np
import pytest
from seeded_bugs.catalog import kernel

from fp8check.contracts import KernelSpec, run_kernel
from fp8check.inputs.cases import build_suite
from fp8check.layers.op import ProblemCache, streamed_gmm_fp8_problem
from fp8check.layers.op.chunks import InMemoryChunks, StreamedChunks
from fp8check.layers.op.engine import evaluate
from fp8check.profiles import get_profile
from fp8check.references.baselines import grouped_matmul

PROFILE = get_profile("strict")
CI = {c.id: c for c in build_suite("ci", 0)}
CACHE = ProblemCache(capacity=2)

# (case id, contract) -> the kernels run on it: correct ones and seeded bugs
CASES = {
    ("wi-m512-k1024-n256-g8-zero-first-zero-blocks-f32-s0", "gmm-fp8"):
        ("numpy-fp8-deepgemm", "numpy-fp8-hopper", "bug-empty-group-shift"),
    ("wi-m512-k1024-n256-g16-zero-middle-lognormal-rows-bf16-s0", "gmm-fp8"):
        ("numpy-fp8-pairwise", "bug-truncating-bf16-cast"),
    ("wo-m512-k640-n896-g8-residues-smallint-bf16-s0", "gmm-fp8"):
        ("numpy-fp8-deepgemm", "numpy-fp8-hopper", "bug-hopper-truncating-bf16-cast",
         "bug-bf16-accumulator"),
    ("wo-m512-k640-n896-g8-residues-subnormal-f32-s0", "gmm-fp8"):
        ("numpy-fp8-deepgemm", "numpy-fp8-deepgemm+flush", "bug-dropped-last-k-block"),
    ("wi-m512-k1024-n256-g8-zero-middle-subnormal-bf16-s0", "gmm-fp8"):
        ("numpy-fp8-deepgemm+flush", "bug-truncating-bf16-cast"),
    ("wo-m140-k640-n896-g8-zero-last-nonfinite-f32-s0", "gmm-fp8"):
        ("numpy-fp8-naive", "numpy-fp8-hopper", "bug-shifted-group-start"),
    ("wi-m77-k1024-n256-g16-uniform-random-nonfinite-bf16-s0", "gmm-fp8"):
        ("numpy-fp8-deepgemm", "bug-empty-group-shift"),
    ("wi-m77-k1024-n256-g16-many-tiny-normal-f32-s0", "gmm-fp8"):
        ("numpy-fp8-f64acc", "bug-one-scale-per-512-tile"),
    ("wo-m140-k640-n896-g8-zero-last-nonfinite-f32-s0", "tgmm"):
        ("numpy-tgmm", "bug-tgmm-empty-group-nan"),
    ("wi-m512-k1024-n256-g16-zero-middle-lognormal-rows-bf16-s0", "tgmm"):
        ("numpy-tgmm", "bug-tgmm-empty-group-nan"),
    ("wi-m512-k1024-n256-g16-zero-middle-lognormal-rows-bf16-s0", "gmm"):
        ("naive", "naive-rows-shifted"),
    ("wi-m77-k1024-n256-g16-uniform-random-nonfinite-bf16-s0", "gmm"):
        ("naive", "naive-rows-shifted"),
}
RUNS = [(case_id, contract, name) for (case_id, contract), names in CASES.items()
        for name in names]


def _spec(name: str) -> KernelSpec:
    """A catalog kernel; "+flush": the same, declaring that it flushes subnormals."""
    base, _, flush = name.partition("+")
    spec = kernel(base)
    if not flush:
        return spec
    return dataclasses.replace(
        spec, claims=dataclasses.replace(spec.matmul_claims, flushes_subnormals=True))


def _plain_naive(lhs, rhs, group_sizes, out_dtype=np.float32):
    """A correct gmm kernel: float32 products summed in K order per group."""
    return grouped_matmul(lhs, rhs, group_sizes).astype(out_dtype)


def _plain_rows_shifted(lhs, rhs, group_sizes, out_dtype=np.float32):
    """A buggy one: every output row is the next row's."""
    out = _plain_naive(lhs, rhs, group_sizes, out_dtype)
    out[:-1] = out[1:].copy()
    return out


PLAIN = {name: KernelSpec(name=name, contract="gmm", framework="numpy", fn=fn)
         for name, fn in (("naive", _plain_naive), ("naive-rows-shifted", _plain_rows_shifted))}


def _output(case_id: str, contract: str, name: str):
    """(problem, kernel, its output on the case)."""
    case = CI[case_id]
    prob, _ = CACHE.get(contract, case)
    spec = PLAIN[name] if contract == "gmm" else _spec(name)
    with np.errstate(all="ignore"):  # non-finite cases: the kernels meet inf - inf
        out = run_kernel(spec, prob.args, case.out_dtype).out
    return prob, spec, out


def _evaluate(out, source, spec: KernelSpec):
    m: dict = {}
    crit, skipped = evaluate(out, source, PROFILE, m, spec.matmul_claims)
    return crit, skipped, m


def _fields(c):
    """A criterion as comparable text: repr keeps NaN equal to NaN and -0.0 apart from 0."""
    return repr((c.name, c.question, c.value, c.relation, c.limit, c.passed, c.n_bad,
                 c.bad_means, c.worst))


@pytest.mark.parametrize(("case_id", "contract", "name"), RUNS)
def test_many_chunks_give_the_one_chunk_criteria(case_id, contract, name):
    prob, spec, out = _output(case_id, contract, name)
    one = _evaluate(out, InMemoryChunks(prob), spec)
    assert [c.name for c in one[0]][:2] == ["finite", "bound_ratio"]
    for rows in (7, 64):
        many = _evaluate(out, InMemoryChunks(prob, rows_per_chunk=rows), spec)
        assert [_fields(c) for c in many[0]] == [_fields(c) for c in one[0]], rows
        assert many[1] == one[1] == []
        assert repr(many[2]) == repr(one[2]), rows  # every metric, in the same order


def test_the_cases_exercise_what_they_are_chosen_for():
    """Both verdicts, every family the engine treats apart, both output dtypes."""
    seen: dict[str, set] = {"passed": set(), "names": set(), "metrics": set(),
                            "dtypes": set()}
    for case_id, contract, name in RUNS:
        prob, spec, out = _output(case_id, contract, name)
        crit, _, m = _evaluate(out, InMemoryChunks(prob), spec)
        seen["passed"].add((contract, all(c.passed for c in crit)))
        seen["names"] |= {c.name for c in crit}
        seen["metrics"] |= set(m)
        seen["dtypes"].add((contract, str(out.dtype)))
    assert seen["passed"] == {(c, v) for c in ("gmm-fp8", "gmm", "tgmm") for v in (True, False)}
    assert {"bit_exact", "error_ratio", "bias_z", "bias_z_signed", "impact_sqnr_db"} \
        <= seen["names"]
    assert {"hopper_interval", "nonfinite_note", "ftz_not_gated", "subnormal_range",
            "bit_exact_accum"} <= seen["metrics"]
    assert {("gmm-fp8", "float32"), ("gmm-fp8", "bfloat16")} <= seen["dtypes"]
    assert any((np.asarray(CI[i].group_sizes) == 0).any() for i, _ in CASES)


STREAMED = [run for run in RUNS if run[1] == "gmm-fp8"]


@pytest.mark.parametrize(("case_id", "contract", "name"), STREAMED)
def test_streamed_chunks_give_the_in_memory_criteria(case_id, contract, name):
    """The production-shape source, its references computed 64 rows of one group at a
    time: every criterion it evaluates is the in-memory one, and the ones it does not are
    exactly those whose reference it lacks."""
    prob, spec, out = _output(case_id, contract, name)
    streamed = streamed_gmm_fp8_problem(*prob.quantized, prob.group_sizes, prob.out_dtype,
                                        prob.exact_partials)
    mem_crit, _, mem_m = _evaluate(out, InMemoryChunks(prob), spec)
    str_crit, skipped, str_m = _evaluate(out, StreamedChunks(streamed, 64), spec)
    by_name = {c.name: c for c in mem_crit}
    assert [_fields(c) for c in str_crit] == [_fields(by_name[c.name]) for c in str_crit]
    missing = [c.name for c in mem_crit if c.name not in {s.name for s in str_crit}]
    assert missing == [n for n in skipped if n in by_name]
    assert set(skipped) >= {"impact_sqnr_db", "impact_calc_diff", "impact_allclose"}
    assert ("error_ratio" in skipped) is (spec.matmul_claims.accum not in ("deepgemm-hopper",))
    assert ("bound_ratio" in skipped) is (spec.matmul_claims.accum == "deepgemm-hopper")
    for key in set(mem_m) & set(str_m) - {"impact_note", "ftz_not_gated"}:
        assert repr(str_m[key]) == repr(mem_m[key]), key
    if "ftz_not_gated" in mem_m:
        assert str_m["ftz_not_gated"] == [n for n in mem_m["ftz_not_gated"] if n not in skipped]


CORRECT = {"gmm-fp8": "numpy-fp8-deepgemm", "gmm": "naive", "tgmm": "numpy-tgmm"}
SWEEP = [(c.id, contract, name) for c in CI.values() for contract, name in CORRECT.items()
         if c.applies_to(contract)]


@pytest.mark.parametrize(("case_id", "contract", "name"), SWEEP)
def test_every_ci_case_gives_the_same_criteria_in_chunks_and_streamed(case_id, contract, name):
    """A correct kernel on every ci case of its contract: 64-row chunks give the one-chunk
    criteria and metrics; for gmm-fp8 the streamed source gives every criterion it
    evaluates identically."""
    prob, spec, out = _output(case_id, contract, name)
    one = _evaluate(out, InMemoryChunks(prob), spec)
    many = _evaluate(out, InMemoryChunks(prob, rows_per_chunk=64), spec)
    assert [_fields(c) for c in many[0]] == [_fields(c) for c in one[0]]
    assert repr(many[2]) == repr(one[2])
    if contract == "gmm-fp8":
        streamed = streamed_gmm_fp8_problem(*prob.quantized, prob.group_sizes,
                                            prob.out_dtype, prob.exact_partials)
        str_crit, skipped, _ = _evaluate(out, StreamedChunks(streamed, 64), spec)
        by_name = {c.name: c for c in one[0]}
        assert [_fields(c) for c in str_crit] == [_fields(by_name[c.name]) for c in str_crit]
        assert {c.name for c in one[0]} - {c.name for c in str_crit} <= set(skipped)


def test_the_sweep_covers_the_whole_ci_suite():
    """Every ci case with a matmul contract is in the sweep (the quantizer-only ones are
    the quantizer's)."""
    swept = {case_id for case_id, _, _ in SWEEP}
    assert swept == {c.id for c in CI.values() if not c.quantizer_only}
    assert len({(i, c) for i, c, _ in SWEEP}) == len(SWEEP) > 2 * len(swept)
