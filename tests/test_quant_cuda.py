"""DeepGEMM's casts as torch computes them on CUDA (the `-cuda` recipes): scales
RN(a * RN(1/448)) against exact rationals on every bf16 amax of twenty binades, where they
differ from the CPU's RN(a / 448), why `deepgemm-ue8m0` needs no CUDA twin, and a CUDA-way
quantizer passing as `deepgemm-cuda` and failing as `deepgemm` (fp8check.testing)."""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
import torch

from fp8check import testing
from fp8check.measures import metrics
from fp8check.references import quant
from fp8check.references.quant import quantize
from tests import peer_ports as P
from tests.oracle import rn32
from tests.quant_blocks import blocks

_RN_INV_448 = Fraction(rn32(Fraction(1, 448)))
_FLOOR = Fraction(float(np.float32(1e-4)))


def _bf16_amaxes(lo: int, hi: int) -> np.ndarray:
    """Every positive bf16 in [2^lo, 2^hi): 128 per binade."""
    bits = np.arange((lo + 127) << 7, (hi + 127) << 7, dtype=np.uint16)
    return bits.view(ml_dtypes.bfloat16)


def _one_block_per_amax(amax: np.ndarray, rng) -> np.ndarray:
    """[len(amax), 128] bf16 rows whose max |x| is amax (at a random column, random sign),
    the rest below it."""
    a = amax.astype(np.float32)[:, None]
    x = (rng.uniform(-1, 1, (len(amax), 128)) * a * np.float32(0.99)).astype(np.float32)
    col = rng.integers(0, 128, len(amax))
    x[np.arange(len(amax)), col] = a[:, 0] * rng.choice([-1, 1], len(amax))
    return x.astype(ml_dtypes.bfloat16)


def test_cuda_scales_are_rn_of_amax_times_rn_one_over_448_on_every_bf16_amax():
    """2560 bf16 amaxes (every one in [2^-10, 2^10)) plus amaxes under the 1e-4 floor:
    `deepgemm-cuda` gives RN(a * RN(1/448)) and `deepgemm` RN(a / 448), both computed here
    with Fractions; they differ on exactly the amaxes where those rationals round apart,
    by one float32 ulp there, and that set is neither empty nor everything."""
    rng = np.random.default_rng()
    amax = np.concatenate([_bf16_amaxes(-10, 10),
                           np.array([0.0, 1e-6, 9.9e-5], ml_dtypes.bfloat16)])
    x = _one_block_per_amax(amax, rng)
    x[-3] = 0  # an all-zero block: the floor
    cuda, cpu = quantize(x, recipe="deepgemm-cuda"), quantize(x, recipe="deepgemm")
    a = [max(Fraction(float(v)), _FLOOR) for v in
         np.abs(x.astype(np.float32)).max(axis=1)]
    want_cuda = np.float32([rn32(v * _RN_INV_448) for v in a])
    want_cpu = np.float32([rn32(v / 448) for v in a])
    np.testing.assert_array_equal(cuda.scales[:, 0].view(np.uint32), want_cuda.view(np.uint32))
    np.testing.assert_array_equal(cpu.scales[:, 0].view(np.uint32), want_cpu.view(np.uint32))
    differ = cuda.scales[:, 0] != cpu.scales[:, 0]
    np.testing.assert_array_equal(differ, want_cuda != want_cpu)
    assert differ.any() and not differ.all()
    ulps = metrics.ulp_distance(cuda.scales[differ, 0], cpu.scales[differ, 0], np.float32)
    assert (ulps == 1).all() and (cuda.scales[differ, 0] > cpu.scales[differ, 0]).all()
    # the codes follow their own scale: RN(x * RN(1/s)), checked exactly on a sample row
    for i in rng.choice(np.flatnonzero(differ), 4, replace=False):
        inv = Fraction(rn32(1 / Fraction(float(cuda.scales[i, 0]))))
        want = [rn32(Fraction(float(v)) * inv) for v in x[i].astype(np.float32)]
        np.testing.assert_array_equal(
            cuda.values[i].astype(np.float32),
            np.float32(want).clip(-448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32))


def test_rn_times_reciprocal_is_within_one_step_and_never_crosses_a_power_of_two():
    """Every float32 a in [1, 2): RN(a * RN(1/448)) is RN(a / 448) or the float32 above
    it, and the two never lie on the two sides of a power of two, so DeepGEMM's bit-level
    ceil (`deepgemm-ue8m0`) gives the same 2^e on CUDA as on the CPU.  Scaling a by 2^k
    scales both exact values by 2^k, and a >= 1e-4 keeps them normal float32s, so one
    binade of a covers every a (the product is exact in float64, the division is IEEE)."""
    a = ((np.uint32(127) << 23) | np.arange(2**23, dtype=np.uint32)).view(np.float32)
    cpu = a / np.float32(448)
    cuda = (a.astype(np.float64) * float(np.float32(1) / np.float32(448))).astype(np.float32)
    step = cuda.view(np.uint32).astype(np.int64) - cpu.view(np.uint32).astype(np.int64)
    assert set(np.unique(step).tolist()) == {0, 1}
    np.testing.assert_array_equal(quant._ue8m0(cuda), quant._ue8m0(cpu))
    # the numpy arithmetic above is the exact one: a sample against Fractions
    rng = np.random.default_rng()
    for i in rng.integers(0, 2**23, 300):
        v = Fraction(float(a[i]))
        assert float(cpu[i]) == rn32(v / 448) and float(cuda[i]) == rn32(v * _RN_INV_448)


@pytest.mark.parametrize("block, port", [((1, 128), P.deepgemm_per_token_cast),
                                         ((128, 128), P.deepgemm_per_block_cast)])
def test_a_cuda_way_deepgemm_cast_passes_as_deepgemm_cuda_and_fails_as_deepgemm(block, port):
    """DeepGEMM's own cast with torch's CUDA lowering of `x_amax / 448.0`
    (peer_ports._div_scalar) on bf16 activations: `deepgemm-cuda` bit for bit,
    `deepgemm` not (scales one ulp off on some blocks); its ue8m0 mode passes as
    `deepgemm-ue8m0`."""
    rng = np.random.default_rng()
    rows = 2 * block[0]
    x = (rng.standard_normal((rows, 1024)) * 2.0 ** rng.integers(-8, 8, (rows, 1)))
    t = torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
    v, s = port(t, False, cuda=True)
    xb = x.astype(ml_dtypes.bfloat16)
    testing.assert_quantizer_matches(v, s, t, block, "deepgemm-cuda")
    with pytest.raises(AssertionError, match="quantizer_bit_exact"):
        testing.assert_quantizer_matches(v, s, t, block, "deepgemm")
    assert (quantize(xb, block, "deepgemm").scales != s.numpy()).any()
    v8, s8 = port(t, True, cuda=True)
    testing.assert_quantizer_matches(v8, s8, t, block, "deepgemm-ue8m0")


def test_legacy_cuda_cast_passes_as_its_recipe_on_adversarial_blocks():
    """The pre-July-2025 cast on CUDA: scale RN(a * RN(1/448)), multiplier
    RN(RN(1/a) * 448) as on the CPU; bit for bit `deepgemm-legacy-cuda`."""
    rng = np.random.default_rng()
    amax = _bf16_amaxes(-3, 3).astype(np.float32)
    x = blocks(rng, amax, 2)
    v, s = P.deepgemm_legacy_per_token_cast(torch.from_numpy(x), cuda=True)
    testing.assert_quantizer_matches(v, s, x, (1, 128), "deepgemm-legacy-cuda")
    with pytest.raises(AssertionError, match="quantizer_bit_exact"):
        testing.assert_quantizer_matches(v, s, x, (1, 128), "deepgemm-legacy")
