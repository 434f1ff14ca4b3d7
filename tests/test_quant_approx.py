"""The quantizer check under declared approximate division (`division_ulps`): its windows
against exact rationals; quantizers that divide within the declared ulps (even at the
window's ends, and on fp8 rounding ties) pass while each real bug fails; Triton 3.9's code
for DeepSeek-V3's act_quant; the declaration through KernelSpec, fp8check.testing, the
replay file and the gate's command line."""

import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fp8check import testing
from fp8check.cli import main
from fp8check.contracts import KernelSpec, QuantizerClaims, claims_for, contract_of
from fp8check.references.quant import expand_scales, quantize
from fp8check.references.quant_approx import (
    APPROX_RECIPES,
    scale_mismatches,
    value_mismatches,
    window,
)
from tests import approx_quantizers as AQ

TESTS = Path(__file__).parent


def _ulp(q: Fraction) -> Fraction:
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    return Fraction(2) ** (max(e, -126) - 23)


def _next(v: np.float32, toward: float) -> Fraction:
    return Fraction(float(np.nextafter(np.float32(v), np.float32(toward))))


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_window_is_every_float32_within_n_ulps_exactly(n):
    """lo and hi are within n ulp(q) of the exact |num / den| and the float32s just past
    them are not (Fractions), on random quotients and on the hard ones: exact powers of
    two and float32s (ties of the bound), quotients just under a power of two (a finer
    spacing below), float32 subnormals; 0, inf, NaN and overflow map as documented."""
    rng = np.random.default_rng()
    num = (rng.standard_normal(400) * 2.0 ** rng.integers(-40, 40, 400)).astype(np.float32)
    den = (np.abs(rng.standard_normal(400)) * 2.0 ** rng.integers(-30, 30, 400)).astype(
        np.float32)
    den[:60] = 2.0 ** rng.integers(-20, 20, 60)              # exact quotients
    num[60:120] = np.float32(1) - np.float32(2.0**-24) * rng.integers(1, 9, 60)
    den[60:120] = 1                                          # just under 2^0
    num[120:160] = np.float32(1e-41) * rng.integers(1, 100, 40)
    den[120:160] = 1 + rng.integers(0, 4, 40)                # subnormal quotients
    lo, hi = window(num.astype(np.float64) / den.astype(np.float64), n)
    for i in range(len(num)):
        q = abs(Fraction(float(num[i])) / Fraction(float(den[i])))
        bound = n * _ulp(q)
        assert abs(Fraction(float(lo[i])) - q) <= bound and abs(Fraction(float(hi[i])) - q) <= bound
        assert lo[i] == 0 or abs(_next(lo[i], 0) - q) > bound, i
        assert abs(_next(hi[i], np.inf) - q) > bound, i
    special = np.array([0.0, np.inf, np.nan, 1e300])
    lo, hi = window(special, n)
    np.testing.assert_array_equal(lo, np.float32([0, np.inf, np.nan, np.inf]))
    np.testing.assert_array_equal(hi, lo)


def _rows(rng, dtype=np.float32) -> np.ndarray:
    """[64, 512] activations of varied magnitude; rows 0-7 put every value on an fp8
    rounding midpoint of a power-of-two scale (amax 56: s = 1/8, 1/s = 8 exactly), where
    exact division ties and an approximate one may give either neighbour."""
    x = rng.standard_normal((64, 512)) * 2.0 ** rng.integers(-12, 12, (64, 1))
    mids = (8 + 2 * rng.integers(0, 8, (8, 512)) + 1) / 16 * 2.0 ** rng.integers(-6, 8, (8, 512))
    x[:8] = mids / 8 * rng.choice([-1, 1], (8, 512))
    x[:8, ::128] = 56.0
    return x.astype(dtype)


@pytest.mark.parametrize("recipe", ["deepseek-v3", "deepgemm"])
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_approximate_division_passes_the_claim_and_not_the_bits(recipe, dtype):
    """A quantizer whose every division is up to 2 ulps off (deterministically) passes
    with division_ulps=2, fails bit for bit (scales differ), and on the tie rows gives
    codes that exact division does not: the claim accepts both neighbours there."""
    rng = np.random.default_rng()
    x = _rows(rng, dtype)
    v, s = AQ.approx_quantize(x, recipe, 2, salt=int(rng.integers(0, 1000)))
    testing.assert_quantizer_matches(v, s, x, (1, 128), recipe, division_ulps=2)
    with pytest.raises(AssertionError, match="quantizer_bit_exact"):
        testing.assert_quantizer_matches(v, s, x, (1, 128), recipe)
    exact = quantize(x, (1, 128), recipe)
    assert (s != exact.scales).any()
    # the exact rule from the kernel's own scales, on the tie rows (scale 1/8 exactly)
    x32 = x.astype(np.float32)[:8]
    s8 = expand_scales(s[:8], (1, 128), x32.shape)
    ruled = (x32 / s8 if recipe == "deepseek-v3" else x32 * (np.float32(1) / s8))
    codes = np.clip(ruled, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    assert (codes.view(np.uint8) != v[:8].view(np.uint8)).any()


@pytest.mark.parametrize("recipe", ["deepgemm-ue8m0", "deepseek-v3-ue8m0", "deepgemm-legacy"])
@pytest.mark.parametrize("block", [(1, 128), (128, 128), (128, 1)])
def test_every_approximate_recipe_and_block_passes_its_claim(recipe, block):
    """The ue8m0 recipes (the power of two of an approximate quotient: blocks whose
    amax / 448 is within 2 ulps of a power of two may get either), the legacy multiplier
    (1 / amax approximate, then * 448) and the other blocks pass with division_ulps=2,
    and a scale or code changed by one step fails."""
    from tests.quant_blocks import amax_near_powers_of_two, blocks

    rng = np.random.default_rng()
    amax = amax_near_powers_of_two([-9, -3, 0, 4], 3)
    x = blocks(rng, amax, 128 if block[0] == 128 else 2)
    v, s = AQ.approx_quantize(x, recipe, 2, int(rng.integers(0, 1000)), block)
    testing.assert_quantizer_matches(v, s, x, block, recipe, division_ulps=2)
    worse = s.copy().ravel()
    worse[0] = worse[0] * 4
    with pytest.raises(AssertionError, match="quantizer_approx_division"):
        testing.assert_quantizer_matches(v, worse.reshape(s.shape), x, block, recipe,
                                         division_ulps=2)
    bits = v.view(np.uint8).copy()
    big = np.unravel_index(np.argmax(np.abs(v.astype(np.float32))), v.shape)
    bits[big] -= 1  # 448 -> 416 at a block max: outside any window
    with pytest.raises(AssertionError, match="quantizer_approx_division"):
        testing.assert_quantizer_matches(bits.view(ml_dtypes.float8_e4m3fn), s, x, block,
                                         recipe, division_ulps=2)


@pytest.mark.parametrize("bug", [AQ.truncating, AQ.amax_missing_last_column, AQ.amax_in_bf16,
                                 "one-code-off", "nan-for-a-number"])
def test_each_real_bug_fails_the_approximate_division_check(bug):
    """Under division_ulps=2: truncation instead of RNE, a block amax that misses the
    block's last element (the max is put there), an amax rounded to bf16, one code one
    step off (the block max's 448 -> 416) and a NaN for a number all fail, where the
    correct quantizer passes on the same data."""
    rng = np.random.default_rng()
    x = _rows(rng)[8:]
    x[:, 127::128] = np.abs(x).max(axis=1, keepdims=True) * np.float32(1.001)
    if callable(bug):
        v, s = bug(x)
    else:
        v, s = AQ.deepseek_v3(x)
        bits = v.view(np.uint8).copy()
        i = int(rng.integers(0, x.shape[0]))
        bits[i, 127] = (bits[i, 127] & 0x80) | (0x7D if bug == "one-code-off" else 0x7F)
        v = bits.view(ml_dtypes.float8_e4m3fn)
    testing.assert_quantizer_matches(*AQ.deepseek_v3(x), x, (1, 128), "deepseek-v3",
                                     division_ulps=2)
    with pytest.raises(AssertionError, match="quantizer_approx_division"):
        testing.assert_quantizer_matches(v, s, x, (1, 128), "deepseek-v3", division_ulps=2)


def _admissible_reciprocals() -> list[np.float32]:
    """Every float32 r within 2 ulps of 1/448: what PTX allows `div.approx.f32(1, 448)`."""
    rn = int((np.float32(1) / np.float32(448)).view(np.uint32))
    out = []
    for k in range(-4, 5):
        r = np.uint32(rn + k).view(np.float32)
        if abs(Fraction(float(r)) - Fraction(1, 448)) <= 2 * _ulp(Fraction(1, 448)):
            out.append(r)
    return out


def test_triton_act_quant_scale_needs_four_ulps_under_the_ptx_bound():
    """Triton 3.9 compiles act_quant's `amax / 448.` to amax * div.approx.f32(1, 448)
    (docs/peers.md).  Over every float32 amax of a binade, with each r PTX admits, the
    scale RN(amax * r) is within 4 ulps of amax / 448, and for some r more than 3: so the
    claim to declare is 4 (x / s is div.full.f32, within 2)."""
    a = ((np.uint32(127) << 23) | np.arange(2**23, dtype=np.uint32)).view(np.float32)
    q = a.astype(np.float64) / 448
    _, e = np.frexp(q)
    ulp = np.ldexp(1.0, e - 1 - 23)
    worst = []
    for r in _admissible_reciprocals():
        s = (a * r).astype(np.float64)
        worst.append(float((np.abs(s - q) / ulp).max()))
    assert len(worst) == 4 and max(worst) < 4 and max(worst) > 3


@pytest.mark.parametrize("r", _admissible_reciprocals())
def test_triton_act_quant_emulation_passes_with_four_ulps(r):
    rng = np.random.default_rng()
    x = _rows(rng, ml_dtypes.bfloat16)
    v, s = AQ.deepseek_v3(x, 2, salt=int(rng.integers(0, 1000)), reciprocal=r)
    testing.assert_quantizer_matches(v, s, x, (1, 128), "deepseek-v3", division_ulps=4)


def test_masks_point_at_the_wrong_block_and_element():
    """One scale moved 3 ulps (outside a 2-ulp claim) marks that block only; one code
    moved marks that element only."""
    rng = np.random.default_rng()
    x = _rows(rng)[8:]
    v, s = AQ.deepseek_v3(x)
    assert not scale_mismatches(s, x, (1, 128), "deepseek-v3", "e4m3fn", 2).any()
    ref = quantize(x, (1, 128), "deepseek-v3").scales
    s2 = s.copy()
    s2[5, 2] = (ref[5, 2].view(np.uint32) + 3).view(np.float32)
    bad = scale_mismatches(s2, x, (1, 128), "deepseek-v3", "e4m3fn", 2)
    assert np.argwhere(bad).tolist() == [[5, 2]]
    bits = v.view(np.uint8).copy()
    bits[7, 300] ^= 0x08  # the lowest exponent bit: a different value, not a neighbour
    bad = value_mismatches(bits.view(ml_dtypes.float8_e4m3fn), s, x, (1, 128),
                           "deepseek-v3", "e4m3fn", 2)
    assert np.argwhere(bad).tolist() == [[7, 300]]


def test_declaration_is_checked_and_replayed(tmp_path, monkeypatch):
    """Bad declarations are one-line ValueErrors (KernelSpec, the assert); a failing
    assert's replay file keeps division_ulps, so the replay passes or fails as it did."""
    with pytest.raises(ValueError, match="division_ulps applies"):
        KernelSpec("q", "quantizer", "numpy", AQ.gate_deepseek_v3,
                   QuantizerClaims("transformer-engine", division_ulps=2))
    with pytest.raises(ValueError, match="division_ulps: not a claim of MatmulClaims"):
        KernelSpec("g", "gmm", "numpy", AQ.gate_deepseek_v3,
                   claims_for(contract_of("gmm"), {"division_ulps": 2}))
    for bad in (-1, 17, 1.5, True):
        with pytest.raises(ValueError, match="division_ulps must be"):
            testing.assert_quantizer_matches(np.zeros((1, 128), ml_dtypes.float8_e4m3fn),
                                             np.ones((1, 1), np.float32),
                                             np.zeros((1, 128), np.float32), (1, 128),
                                             "deepseek-v3", division_ulps=bad)
    assert set(APPROX_RECIPES) >= {"deepgemm", "deepgemm-cuda", "deepseek-v3"}
    monkeypatch.setenv("FP8CHECK_FAILURE_DIR", str(tmp_path))
    rng = np.random.default_rng()
    x = _rows(rng)[8:16]
    v, s = AQ.truncating(x)
    with pytest.raises(AssertionError) as err:
        testing.assert_quantizer_matches(v, s, x, (1, 128), "deepseek-v3", division_ulps=2)
    saved = list(tmp_path.rglob("quantizer-*.npz"))
    assert len(saved) == 1, str(err.value)
    with pytest.raises(AssertionError, match="quantizer_approx_division"):
        testing.replay(saved[0])


QUANT_FILE = f"import sys\nsys.path.insert(0, {str(TESTS.parent)!r})\n" \
             "from tests.approx_quantizers import gate_deepseek_v3, gate_truncating\n"


@pytest.mark.parametrize("kernel, ulps, rc", [("gate_deepseek_v3", "2", 0),
                                              ("gate_truncating", "2", 1),
                                              ("gate_deepseek_v3", None, 1)])
def test_gate_takes_the_declaration(tmp_path, monkeypatch, kernel, ulps, rc):
    """`fp8check gate --contract quantizer --recipe deepseek-v3 --division-ulps 2`: the
    approximate quantizer passes (exit 0) and the truncating one fails (1); undeclared,
    the approximate one fails bit for bit; a failing result's repro repeats the
    declaration."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quant.py").write_text(QUANT_FILE)
    declared = ["--division-ulps", ulps] if ulps else []
    got = main(["gate", "--no-progress", "--suite", "smoke", "--kernel", f"quant.py:{kernel}",
                "--contract", "quantizer", "--framework", "numpy", "--recipe",
                "deepseek-v3", *declared, "--no-isolate", "--json", "q.json"])
    results = json.loads(Path("q.json").read_text())["results"]
    name = "quantizer_approx_division" if ulps else "quantizer_bit_exact"
    assert got == rc and results
    assert {r["criteria"][name]["passed"] for r in results} == ({True} if rc == 0 else
                                                                {False})
    for r in results:
        if r["passed"] is False and ulps:
            assert f"--division-ulps {ulps}" in r["repro"]


@pytest.mark.parametrize("args", [["--recipe", "transformer-engine", "--division-ulps", "2"],
                                  ["--recipe", "deepseek-v3", "--division-ulps", "-1"],
                                  ["--division-ulps", "2"]])
def test_gate_refuses_a_bad_declaration_with_exit_2(tmp_path, monkeypatch, capsys, args):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quant.py").write_text(QUANT_FILE)
    contract = ["--contract", "quantizer"] if "--recipe" in args else ["--contract", "gmm"]
    assert main(["gate", "--no-progress", "--suite", "smoke", "--kernel",
                 "quant.py:gate_deepseek_v3", *contract, "--framework", "numpy",
                 *args]) == 2
    assert "--division-ulps" in capsys.readouterr().err


_PTX_OPS = """
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import tests.peer_triton as peer

name, constexprs = json.loads(sys.argv[1])
sig = {"x_ptr": "*bf16", "y_ptr": "*fp8e4nv", "s_ptr": "*fp32"}
sig |= {k: "constexpr" for k in constexprs}
kernel = triton.compile(ASTSource(fn=getattr(peer, name), signature=sig,
                                  constexprs=constexprs), target=GPUTarget("cuda", 90, 32))
print(json.dumps([line.split()[0] for line in kernel.asm["ptx"].splitlines()
                  if line.strip() and line.split()
                  and not line.lstrip().startswith(("//", ".", "{", "}", "$", "@"))]))
"""


def _ptx(name: str, constexprs: dict) -> list[str]:
    """The PTX instructions Triton (as installed) emits for `tests.peer_triton.<name>` on
    sm_90, bf16 in.  Compiled in a fresh process with the interpreter off, as
    `fp8check.targets.cuda` compiles: in this process an earlier test may have put Triton
    in interpret mode, whose functions the compiler rejects."""
    root = Path(__file__).parents[1]
    proc = subprocess.run([sys.executable, "-c", _PTX_OPS, json.dumps([name, constexprs])],
                          capture_output=True, text=True, cwd=root, timeout=600,
                          env={**os.environ, "TRITON_INTERPRET": "0",
                               "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_triton_lowers_act_quants_divisions_to_approximate_instructions():
    """What docs/peers.md says DeepSeek-V3's act_quant runs on a Hopper GPU, read from the
    PTX Triton emits here for sm_90: `amax / 448.` as a multiply by `div.approx.f32` (of 1
    by 448), `x / s` as `div.full.f32`, the cast `cvt.rn.satfinite.e4m3x2.f32`; with
    `tl.math.div_rn` both are `div.rn.f32` and nothing approximate is left.  The ue8m0
    scale's exp2 is `ex2.approx.ftz.f32` and its log2 is no `lg2` instruction."""
    ops = _ptx("act_quant_kernel", {"BLOCK_SIZE": 128, "scale_fmt": None})
    divisions = [op for op in ops if op.startswith(("div.", "rcp."))]
    assert sorted(divisions) == ["div.approx.f32", "div.full.f32"]
    assert ops.index("div.approx.f32") < ops.index("div.full.f32")
    assert ops[ops.index("div.approx.f32") + 1].startswith("mul")
    assert "cvt.rn.satfinite.e4m3x2.f32" in ops
    ue8m0 = _ptx("act_quant_kernel", {"BLOCK_SIZE": 128, "scale_fmt": "ue8m0"})
    assert "ex2.approx.ftz.f32" in ue8m0 and not any(op.startswith("lg2") for op in ue8m0)
    exact = _ptx("act_quant_kernel_div_rn", {"BLOCK_SIZE": 128})
    assert sorted(op for op in exact if op.startswith(("div.", "rcp."))) == ["div.rn.f32"] * 2


def test_a_kernelspec_named_in_the_pyproject_carries_the_declaration(tmp_path, monkeypatch):
    """`[tool.fp8check] kernels` holds no declarations of its own (no recipe, accum or
    block): a KernelSpec it names carries them, division_ulps too."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quant.py").write_text(
        QUANT_FILE + "from fp8check.contracts import KernelSpec, QuantizerClaims\n"
        "SPEC = KernelSpec('approx-act-quant', 'quantizer', 'numpy', gate_deepseek_v3, "
        "QuantizerClaims('deepseek-v3', division_ulps=2))\n")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.fp8check]\nkernels = ["quant.py:SPEC"]\nsuite = "smoke"\nlayers = [1]\n')
    assert main(["gate", "--no-progress", "--no-isolate", "--json", "q.json"]) == 0
    results = json.loads(Path("q.json").read_text())["results"]
    assert results and all(r["criteria"]["quantizer_approx_division"]["passed"]
                           for r in results)


@pytest.mark.parametrize("recipe", APPROX_RECIPES)
def test_the_recipes_own_bits_pass_its_approximate_check_non_finite_blocks_too(recipe):
    """Exact division is one of the allowed ones: quantize(x, nan="propagate") passes
    with division_ulps=1 on random and adversarial blocks, an all-zero block and blocks
    holding a NaN or an inf; a NaN turned into a number there fails."""
    from tests.quant_blocks import amax_near_powers_of_two, blocks

    rng = np.random.default_rng()
    x = blocks(rng, amax_near_powers_of_two([-12, -1, 0, 7], 2), 3)
    x[0, :128] = 0
    x[1, 130] = np.nan
    x[2, 260] = np.inf
    q = quantize(x, (1, 128), recipe, nan="propagate")
    assert not scale_mismatches(q.scales, x, (1, 128), recipe, "e4m3fn", 1).any()
    assert not value_mismatches(q.values, q.scales, x, (1, 128), recipe, "e4m3fn", 1).any()
    bits = q.values.view(np.uint8).copy()
    nan_at = np.argwhere(np.isnan(q.values.astype(np.float32)))[0]
    bits[tuple(nan_at)] = 0x38  # 1.0
    bad = value_mismatches(bits.view(ml_dtypes.float8_e4m3fn), q.scales, x, (1, 128),
                           recipe, "e4m3fn", 1)
    assert np.argwhere(bad).tolist() == [nan_at.tolist()]
