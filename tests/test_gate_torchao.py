"""Third-party adapters: torchao's blockwise FP8 Triton GEMM and quantizers under the
Triton interpreter with fp8check's fidelity fixes, gated on the smoke suite
(docs/peers.md, "Third-party kernels")."""

import json

import ml_dtypes
import numpy as np
import pytest
from adapter_support import assert_recipe_bit_for_bit

from fp8check.cli import main
from fp8check.contracts import call_kernel
from fp8check.kernels.adapters.torchao import (
    torchao_act_quant,
    torchao_fp8,
    torchao_weight_quant,
)
from fp8check.layers.op.criteria import quantizer_output_criteria
from fp8check.references import quantize

KERNELS = ("torchao-fp8", "torchao-act-quant", "torchao-weight-quant")


def test_torchao_kernels_pass_smoke(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["gate", "--suite", "smoke", "--layers", "1", "--no-progress", "--json", "t.json"]
    rc = main(args + [a for name in KERNELS for a in ("--kernel", name)])
    doc = json.loads((tmp_path / "t.json").read_text())
    assert rc == 0 and doc["summary"]["passed"]
    env = doc["environment"]["kernels"]
    assert env["torchao-fp8"]["accum"] == "tokamax"
    assert all(env[k]["backend"] == "interpret" for k in KERNELS)
    assert "dot_exact_partial" in env["torchao-fp8"]["fidelity_fixes"]
    for name in KERNELS:
        mine = [r for r in doc["results"] if r["kernel"] == name]
        assert mine and all(r["passed"] for r in mine), name


def test_torchao_gemm_recipe_is_tokamax_bit_for_bit_where_the_recipes_differ():
    """`accumulator += tl.dot(a, b) * a_s[:, None] * b_s` rounds the two multiplies and
    the add separately under the interpreter: "tokamax", not "cublas" or "deepgemm"."""
    assert_recipe_bit_for_bit(torchao_fp8(), "tokamax", seed=7)


@pytest.mark.parametrize("factory", [torchao_act_quant, torchao_weight_quant])
def test_torchao_quantizers_fail_transformer_engine_on_all_zero_blocks(factory):
    """The finding: on an all-zero block torchao stores the scale 1/RN(448 / 1e-12)
    (its amax floor EPS = 1e-12, a float32) where transformer-engine stores 1.  The fp8
    values are 0 either way and every other block matches, so the gate's
    `quantizer_bit_exact` fails on exactly those scales: a different convention for a
    block that dequantizes to zero whatever its scale, not a wrong result."""
    spec = factory()
    claims = spec.quantizer_claims
    rng = np.random.default_rng(11)
    if claims.block == (1, 128):
        x = rng.standard_normal((6, 512)).astype(np.float32)
        zero = [(1, 2), (4, 0)]
    else:
        x = rng.standard_normal((2, 256, 384)).astype(np.float32)
        zero = [(0, 1, 2), (1, 0, 0)]
    x *= np.exp2(rng.integers(-20, 20, x.shape[:-1] + (1,)))  # magnitudes far apart
    x = x.astype(ml_dtypes.bfloat16)
    b0, b1 = claims.block
    for *lead, i, j in zero:
        x[(*lead, slice(i * b0, (i + 1) * b0), slice(j * b1, (j + 1) * b1))] = 0
    values, scales = call_kernel(spec, (x,))
    ref = quantize(x, claims.block, "transformer-engine", "e4m3fn")
    np.testing.assert_array_equal(values.view(np.uint8), ref.values.view(np.uint8))
    diff = scales.view(np.uint32) != ref.scales.view(np.uint32)
    assert sorted(map(tuple, np.argwhere(diff).tolist())) == sorted(zero)
    floor = np.float64(np.float32(1e-12))
    want = np.float32(1) / np.float32(np.float64(448) / floor)
    assert all(scales[z] == want and ref.scales[z] == 1 for z in zero)
    crit = quantizer_output_criteria(values, scales, x, claims, {})
    assert [(c.name, c.passed) for c in crit] == [("quantizer_bit_exact", False)]


def test_torchao_act_quant_hides_nan_and_inf():
    """The non-finite policy, written down in docs/peers.md, "Third-party kernels": `tl.max` and
    `tl.clamp` (PropagateNan.NONE, the GPU's min/max without .NaN) skip NaN, so a NaN
    element leaves the block's scale to the finite ones and is stored as -448; an inf
    makes amax inf, m = 448/inf = 0, s = inf, its finite neighbours 0 and itself -448
    (inf * 0 = NaN, clamped).  transformer-engine keeps NaN as NaN and saturates inf."""
    x = np.full((2, 128), 3.0, ml_dtypes.bfloat16)
    x[0, 5], x[1, 5] = np.nan, np.inf
    values, scales = call_kernel(torchao_act_quant(), (x,))
    q = values.astype(np.float32)
    assert q[0, 5] == -448 and np.all(q[0, np.arange(128) != 5] == 448)
    assert scales[0, 0] == np.float32(1) / np.float32(448 / 3)
    assert q[1, 5] == -448 and np.all(q[1, np.arange(128) != 5] == 0)
    assert scales[1, 0] == np.inf
    ref = quantize(x, (1, 128), "transformer-engine", "e4m3fn", nan="propagate")
    assert np.isnan(ref.values[0, 5].astype(np.float32)) and ref.values[1, 5] == 448


def test_torchao_grouped_emulated_fails_the_bound_unless_scales_are_powers_of_two():
    """The finding on torchao's grouped FP8 GEMM (the path its MoE training takes off
    SM90): it dequantizes to bf16, rounding each float32 scale and each q * s to 8
    significant bits, so with the deepgemm recipe's arbitrary float32 scales it fails
    `bound_ratio` (ci: its bf16 cases with float32 scales, 17x to 82x the bound as
    measured); with power-of-two
    (ue8m0) scales q * s is exact in bf16 and it passes."""
    from fp8check.inputs import cases
    from fp8check.kernels.adapters.torchao import torchao_grouped_emulated
    from fp8check.layers.op import build_problem, validate_case
    from fp8check.profiles import get_profile

    spec = torchao_grouped_emulated()
    verdicts = {}
    for case_id in ("wo-m512-k640-n896-g16-ones-near-max-bf16-s0",
                    "wo-m512-k640-n896-g8-residues-smallint-bf16-s0"):
        case = cases.find_case("ci", 0, case_id)
        res = validate_case(spec, case, get_profile("strict"), build_problem("gmm-fp8", case))
        verdicts[case.recipe] = (res.passed, res.failed_criteria)
    assert verdicts["deepgemm"][0] is False and "bound_ratio" in verdicts["deepgemm"][1]
    assert verdicts["deepgemm-ue8m0"] == (True, [])


def test_torchao_scale_equals_transformer_engine_for_every_bf16_amax_significand():
    """The claim behind declaring "transformer-engine": torchao's m = float32(448 /
    float64(amax)) rounds twice, and that equals RN32(448 / amax).  Checked exhaustively
    against exact rationals over the 128 significands of a bf16 amax (j / 128, j in
    128..255; another exponent scales the quotient by a power of two, exactly, while it
    stays a normal float32), then on the kernel: one 1x128 block per significand, at
    random exponents, quantized bit for bit as transformer-engine."""
    from fractions import Fraction

    from oracle import rn32

    for j in range(128, 256):
        a = Fraction(j, 128)
        assert np.float32(np.float64(448) / np.float64(float(a))) == rn32(Fraction(448) / a), j
    rng = np.random.default_rng(5)
    amax = np.arange(128, 256) / 128 * np.exp2(rng.integers(-38, 60, 128))
    x = rng.uniform(-1, 1, (128, 128)) * amax[:, None]
    x[np.arange(128), rng.integers(0, 128, 128)] = amax * rng.choice([-1, 1], 128)
    x = x.astype(ml_dtypes.bfloat16)
    assert np.array_equal(np.abs(x.astype(np.float64)).max(axis=1), amax)  # amax exact in bf16
    spec = torchao_act_quant()
    values, scales = call_kernel(spec, (x,))
    crit = quantizer_output_criteria(values, scales, x, spec.quantizer_claims, {})
    assert [(c.name, c.passed) for c in crit] == [("quantizer_bit_exact", True)]


def test_torchao_grouped_emulated_error_is_its_bf16_dequantization():
    """Attribution of the finding above: the emulated GEMM's output is, within one bf16
    ulp (its own output rounding and float32 accumulation), the exact product of the
    bf16-dequantized operands RN_bf16(q * RN_bf16(s)) (q has 4 significant bits and
    RN_bf16(s) 8, so q * RN_bf16(s) is exact before that rounding), while it lies many
    ulps from the exact product of the FP8 operands it was handed."""
    from fp8check.kernels.adapters.torchao import torchao_grouped_emulated
    from fp8check.references.quant import QTensor, dequantize

    rng = np.random.default_rng(3)
    m, k, n, gs = 160, 256, 256, np.array([60, 0, 100], np.int32)
    fp8, bf16 = ml_dtypes.float8_e4m3fn, ml_dtypes.bfloat16
    lhs = QTensor(rng.standard_normal((m, k)).astype(fp8),
                  rng.uniform(0.01, 3.0, (m, k // 128)).astype(np.float32), (1, 128),
                  "e4m3fn", "deepgemm")
    rhs = QTensor(rng.standard_normal((gs.size, k, n)).astype(fp8),
                  rng.uniform(0.01, 3.0, (gs.size, k // 128, n // 128)).astype(np.float32),
                  (128, 128), "e4m3fn", "deepgemm")
    got = call_kernel(torchao_grouped_emulated(),
                      (lhs.values, lhs.scales, rhs.values, rhs.scales, gs)).astype(np.float64)

    def bf16_dequantized(q: QTensor) -> np.ndarray:
        rounded = QTensor(q.values, q.scales.astype(bf16).astype(np.float32), q.block,
                          q.fmt, q.recipe)
        return dequantize(rounded, np.float64).astype(bf16).astype(np.float64)

    def grouped(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        ends = np.cumsum(gs)
        return np.concatenate([a[end - size:end] @ b[g]
                               for g, (size, end) in enumerate(zip(gs, ends, strict=True))])

    model = grouped(bf16_dequantized(lhs), bf16_dequantized(rhs))
    true = grouped(dequantize(lhs, np.float64), dequantize(rhs, np.float64))
    rows = int(gs.sum())
    ulp = np.exp2(np.floor(np.log2(np.abs(model) + 1e-30)) - 7)  # one bf16 ulp of model
    assert np.all(np.abs(got[:rows] - model) <= ulp)
    assert np.max(np.abs(got[:rows] - true) / ulp) > 8


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nonfinite_ci_case_shows_the_quantizers_masking_and_not_the_gemm():
    """The ci suite's `nonfinite` case (docs/contract.md, "Non-finite inputs"): the act
    quantizer fails `quantizer_bit_exact`, its mismatches confined to the blocks holding a
    NaN or an Inf (the masking documented above), while the dense GEMM carries every
    NaN to exactly the reference's elements and passes."""
    from fp8check.inputs.cases import NONFINITE, build_suite, case_inputs
    from fp8check.layers.op import build_problem, validate_case
    from fp8check.profiles import get_profile

    case = next(c for c in build_suite("ci", 0) if c.distribution == NONFINITE)
    profile = get_profile("strict")
    res = validate_case(torchao_act_quant(), case, profile)
    assert res.failed_criteria == ["quantizer_bit_exact"]
    x = case_inputs(case).x.astype(ml_dtypes.bfloat16)
    values, _ = call_kernel(torchao_act_quant(), (x,))
    ref = quantize(x, (1, 128), "transformer-engine", nan="propagate")
    blocks = ~np.isfinite(x.astype(np.float32)).reshape(x.shape[0], -1, 128).any(axis=2)
    finite_blocks = np.repeat(blocks, 128, axis=1)
    assert np.array_equal(values.view(np.uint8)[finite_blocks],
                          ref.values.view(np.uint8)[finite_blocks])
    gemm = validate_case(torchao_fp8(), case, profile, build_problem("gmm-fp8", case))
    assert gemm.passed, gemm.failed_criteria
