"""Each recipe against a torch port of its peer's own code (tests/peer_ports.py), bit for bit,
on fresh random and adversarial blocks; the float32 log2 rule of `deepseek-v3-ue8m0` against
torch's log2; and the non-finite and all-zero-block behaviours docs/peers.md states."""

import functools

import ml_dtypes
import numpy as np
import pytest
import torch

from fp8check.references import quant
from fp8check.references.quant import quantize
from tests import peer_ports as P
from tests.quant_blocks import amax_near_powers_of_two, blocks

# (recipe, block, port name) -> port(x_torch) -> (fp8 values, float32 scales)
PORTS = {
    ("deepgemm", (1, 128), "per_token"): lambda t: P.deepgemm_per_token_cast(t, False),
    ("deepgemm", (128, 128), "per_block"): lambda t: P.deepgemm_per_block_cast(t, False),
    ("deepgemm-ue8m0", (1, 128), "per_token"): lambda t: P.deepgemm_per_token_cast(t, True),
    ("deepgemm-ue8m0", (128, 128), "per_block"): lambda t: P.deepgemm_per_block_cast(t, True),
    ("deepgemm-legacy", (1, 128), "per_token"): P.deepgemm_legacy_per_token_cast,
    ("deepgemm-legacy", (128, 128), "per_block"): P.deepgemm_legacy_per_block_cast,
    # the same code as torch computes it on a CUDA tensor (peer_ports._div_scalar)
    ("deepgemm-cuda", (1, 128), "per_token"):
        lambda t: P.deepgemm_per_token_cast(t, False, cuda=True),
    ("deepgemm-cuda", (128, 128), "per_block"):
        lambda t: P.deepgemm_per_block_cast(t, False, cuda=True),
    ("deepgemm-ue8m0", (1, 128), "per_token_cuda"):
        lambda t: P.deepgemm_per_token_cast(t, True, cuda=True),
    ("deepgemm-ue8m0", (128, 128), "per_block_cuda"):
        lambda t: P.deepgemm_per_block_cast(t, True, cuda=True),
    ("deepgemm-legacy-cuda", (1, 128), "per_token"):
        lambda t: P.deepgemm_legacy_per_token_cast(t, cuda=True),
    ("deepgemm-legacy-cuda", (128, 128), "per_block"):
        lambda t: P.deepgemm_legacy_per_block_cast(t, cuda=True),
    ("deepseek-v3", (1, 128), "act_quant"): P.deepseek_v3_act_quant,
    ("deepseek-v3-ue8m0", (1, 128), "act_quant"):
        lambda t: P.deepseek_v3_act_quant(t, scale_fmt="ue8m0"),
}
for _pow2, _recipe in ((False, "transformer-engine"), (True, "transformer-engine-pow2")):
    PORTS[(_recipe, (1, 128), "reference")] = functools.partial(
        P.te_reference_vectorwise, pow_2_scales=_pow2)
    PORTS[(_recipe, (128, 128), "reference")] = functools.partial(
        P.te_reference_square, pow_2_scales=_pow2)
    PORTS[(_recipe, (1, 128), "kernel")] = functools.partial(
        P.te_kernel_vectorwise, pow_2_scales=_pow2)
CASES = list(PORTS)


def _torch(x: np.ndarray) -> torch.Tensor:
    if x.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(x.view(np.uint16).copy()).view(torch.bfloat16)
    return torch.from_numpy(x.copy())


def _port(recipe, block, x, port):
    v, s = PORTS[(recipe, block, port)](_torch(x))
    return v.contiguous().view(torch.uint8).numpy(), s.contiguous().numpy()


def _assert_port_equal(recipe, block, x, port):
    q = quantize(x, block, recipe, nan="propagate")
    v, s = _port(recipe, block, x, port)
    np.testing.assert_array_equal(q.scales.view(np.uint32), s.view(np.uint32).reshape(
        q.scales.shape), err_msg=f"{recipe} {block} scales")
    np.testing.assert_array_equal(q.values.view(np.uint8), v, err_msg=f"{recipe} values")


def _adversarial(rng, block) -> np.ndarray:
    amaxes = amax_near_powers_of_two([-25, -20, -17, -16, -9, -8, -5, -2, -1, 0, 1, 4, 8,
                                       16, 20, 40, 100, 110])
    amaxes = np.concatenate([amaxes, np.float32([0.0, 1e-5, 9.9e-5, 1e-4, 448.0, 449.0,
                                                 3e38, 2e-38])])
    if block == (1, 128):
        return blocks(rng, amaxes, 3)
    # 128x128 tiles: one tile per amax, tiles stacked along the columns.
    return blocks(rng, amaxes, 128)


@pytest.mark.parametrize("recipe,block,port", CASES)
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_recipe_is_its_peer_bit_for_bit_on_random_data(recipe, block, port, dtype):
    rng = np.random.default_rng()
    rows = block[0] * int(rng.integers(1, 3))
    x = rng.standard_normal((rows, 128 * int(rng.integers(1, 5))))
    x *= 2.0 ** rng.integers(-20, 15, (rows, 1))
    _assert_port_equal(recipe, block, x.astype(dtype), port)


@pytest.mark.parametrize("recipe,block,port", CASES)
def test_recipe_is_its_peer_bit_for_bit_on_adversarial_blocks(recipe, block, port):
    rng = np.random.default_rng()
    x = _adversarial(rng, block)
    _assert_port_equal(recipe, block, x, port)
    _assert_port_equal(recipe, block, x.astype(ml_dtypes.bfloat16), port)


def _ceil_log2_by_torch(s: np.ndarray) -> np.ndarray:
    return torch.exp2(torch.ceil(torch.log2(torch.from_numpy(s)))).numpy()


def test_float32_log2_rule_is_torchs_around_every_power_of_two():
    """Every normal float32 within 80 ulps above and below each power of two 2^-125..2^127,
    through torch's vectorized log2 (the whole array) and its scalar path (one element)."""
    biased = np.arange(1, 255, dtype=np.uint32)[:, None]
    above = (biased << 23) | np.arange(0, 81, dtype=np.uint32)[None, :]
    below = ((biased[1:] - 1) << 23) | (0x7FFFFF - np.arange(0, 80, dtype=np.uint32))[None, :]
    s = np.concatenate([above.ravel(), below.ravel()]).view(np.float32)
    ours = quant._pow2_ceil_log2_f32(s)
    np.testing.assert_array_equal(ours.view(np.uint32), _ceil_log2_by_torch(s).view(np.uint32))
    one_by_one = np.array([_ceil_log2_by_torch(s[i:i + 1])[0] for i in range(len(s))])
    np.testing.assert_array_equal(ours.view(np.uint32), one_by_one.view(np.uint32))
    # The rule is not vacuous: log2 stays at k for up to 22 ulps above 2^k (|k| >= 64).
    stays = (ours == np.exp2(np.floor(np.log2(s.astype(np.float64))))) & (
        s.view(np.uint32) & 0x7FFFFF != 0)
    assert stays.sum() > 0 and (s.view(np.uint32)[stays] & 0x7FFFFF).max() == 22


def test_deepseek_v3_ue8m0_halves_deepgemm_ue8m0_exactly_where_log2_stays():
    """Same data, two ue8m0 recipes: the scales differ (DeepSeek-V3's is half DeepGEMM's)
    on exactly the blocks whose RN(a/448) = 2^k (1 + n 2^-23) with 1 <= n <= N(k)."""
    rng = np.random.default_rng()
    x = _adversarial(rng, (1, 128))
    ds = quantize(x, (1, 128), "deepseek-v3-ue8m0")
    dg = quantize(x, (1, 128), "deepgemm-ue8m0")
    a = np.maximum(quant.block_amax(x, (1, 128)), np.float32(1e-4))
    bits = (a / np.float32(448)).astype(np.float32).view(np.uint32)
    n = bits & 0x7FFFFF
    in_window = (n >= 1) & (n <= quant._LOG2_STAYS_AT_K[bits >> 23])
    ulps_from_pow2 = np.where(n < 2**22, n.astype(np.int64), n.astype(np.int64) - 2**23)
    # The data's reach: every s 0..8 ulps above 2^k, and 1..8 below but for -4: below 2^k a
    # float32 step of amax moves amax/448 by 8/7 of an ulp, so RN(amax/448) skips one in 8.
    assert set(range(-8, 9)) - {-4} <= set(ulps_from_pow2.ravel().tolist())
    assert in_window.any() and (~in_window).any()
    np.testing.assert_array_equal(ds.scales[in_window] * 2, dg.scales[in_window])
    np.testing.assert_array_equal(ds.scales[~in_window], dg.scales[~in_window])


def test_deepgemm_legacy_differs_from_deepgemm_on_some_values():
    """RN(RN(1/a) * 448) is not RN(1 / RN(a / 448)): on bf16 activations some values land on
    the other side of an fp8 rounding midpoint (scales are the same RN(a / 448))."""
    rng = np.random.default_rng()
    x = rng.standard_normal((512, 1024)).astype(ml_dtypes.bfloat16)
    legacy, current = quantize(x, recipe="deepgemm-legacy"), quantize(x, recipe="deepgemm")
    np.testing.assert_array_equal(legacy.scales, current.scales)
    assert (legacy.values.view(np.uint8) != current.values.view(np.uint8)).any()


# --- non-finite and all-zero blocks (the behaviours docs/peers.md tabulates) ----------------

def _special_rows() -> np.ndarray:
    """Row 0: all zero; row 1: one NaN; row 2: one +inf; rest finite around 1."""
    x = np.full((3, 128), 0.5, np.float32)
    x[:, 7] = -1.5
    x[0] = 0.0
    x[1, 3] = np.nan
    x[2, 3] = np.inf
    return x


@pytest.mark.parametrize("recipe", quant.RECIPES)
def test_non_finite_input_raises_by_default(recipe):
    for row in (1, 2):
        with pytest.raises(ValueError, match="NaN or Inf"):
            quantize(_special_rows()[row:row + 1], recipe=recipe)


def test_propagate_matches_the_torch_ports_on_non_finite_blocks():
    """nan="propagate" runs each recipe's arithmetic as written; for the DeepGEMM and
    DeepSeek-V3 recipes that is what their torch ports do on NaN and inf blocks too."""
    x = _special_rows()
    for recipe, port in (("deepgemm", "per_token"), ("deepgemm-ue8m0", "per_token"),
                         ("deepgemm-legacy", "per_token"), ("deepgemm-cuda", "per_token"),
                         ("deepgemm-ue8m0", "per_token_cuda"),
                         ("deepgemm-legacy-cuda", "per_token"), ("deepseek-v3", "act_quant"),
                         ("deepseek-v3-ue8m0", "act_quant")):
        _assert_port_equal(recipe, (1, 128), x, port)


def test_transformer_engine_non_finite_blocks_kernel_vs_reference():
    """fp8check's transformer-engine recipes give a NaN or inf block scale 1 (the kernel's
    compute_scale_from_amax); TE's Python reference gives the inf block scale inf and the NaN
    block NaN (pow2: 2, because torch.frexp(NaN) returns exponent 0, so the reference's
    ldexp(1, 0 - 1) makes the multiplier 1/2); TE's kernel drops NaN from the amax (fmaxf),
    so its NaN block keeps the scale of its finite entries."""
    x = _special_rows()
    for pow2 in (False, True):
        recipe = "transformer-engine-pow2" if pow2 else "transformer-engine"
        q = quantize(x, recipe=recipe, nan="propagate")
        assert q.scales[1, 0] == 1.0 and q.scales[2, 0] == 1.0
        _, ref_s = P.te_reference_vectorwise(_torch(x), pow_2_scales=pow2)
        assert (ref_s[1, 0].item() == 2.0) if pow2 else ref_s[1, 0].isnan().item()
        assert ref_s[2, 0].item() == np.inf
        kv, ks = P.te_kernel_vectorwise(_torch(x), pow_2_scales=pow2)
        finite = quantize(np.where(np.isnan(x), 0, x)[1:2], recipe=recipe)
        assert ks[1, 0].item() == finite.scales[0, 0] and ks[2, 0].item() == 1.0
        # The kernel and fp8check agree on the inf block (scale 1, inf saturates to 448).
        np.testing.assert_array_equal(kv[2].view(torch.uint8).numpy(),
                                      q.values[2].view(np.uint8))


_FLOOR_SCALE = float(np.float32(np.float32(1e-4) / np.float32(448)))
_FLOOR_SCALE_CUDA = float(np.float32(np.float32(1e-4) * (np.float32(1) / np.float32(448))))
# recipe -> block scale of (all-zero, one-NaN, one-inf) rows under nan="propagate"
_SPECIAL_SCALES = {
    "deepgemm": (_FLOOR_SCALE, np.nan, np.inf),
    "deepgemm-legacy": (_FLOOR_SCALE, np.nan, np.inf),
    "deepgemm-cuda": (_FLOOR_SCALE_CUDA, np.nan, np.inf),
    "deepgemm-legacy-cuda": (_FLOOR_SCALE_CUDA, np.nan, np.inf),
    "deepseek-v3": (_FLOOR_SCALE, np.nan, np.inf),
    "deepgemm-ue8m0": (2.0**-22, 2.0**127, 2.0**127),  # exponent field clamped to 254
    "deepseek-v3-ue8m0": (2.0**-22, np.nan, np.inf),
    "transformer-engine": (1.0, 1.0, 1.0),
    "transformer-engine-pow2": (1.0, 1.0, 1.0),
}


@pytest.mark.parametrize("recipe", quant.RECIPES)
def test_special_block_scales_are_the_documented_ones(recipe):
    q = quantize(_special_rows(), recipe=recipe, nan="propagate")
    np.testing.assert_array_equal(q.scales[:, 0], np.float32(_SPECIAL_SCALES[recipe]))
    assert (q.values[0].view(np.uint8) == 0).all()  # the all-zero block: +0 everywhere


def test_deepseek_v3_release_kernel_had_no_amax_floor():
    """The release act_quant (4c2fdb8f) divides an all-zero block by s = 0: NaN values and
    scale 0; blocks with amax >= 1e-4 are the deepseek-v3 recipe's."""
    x = _special_rows()[:1].copy()
    v, s = P.deepseek_v3_act_quant(_torch(x), amax_floor=False)
    assert s[0, 0].item() == 0.0 and v.float().isnan().all()
    rng = np.random.default_rng()
    y = (rng.standard_normal((4, 256)) * 1e-3).astype(np.float32)
    v, s = P.deepseek_v3_act_quant(_torch(y), amax_floor=False)
    q = quantize(y, recipe="deepseek-v3")
    np.testing.assert_array_equal(q.values.view(np.uint8), v.view(torch.uint8).numpy())
    np.testing.assert_array_equal(q.scales, s.numpy())


def test_peers_pass_the_quantizer_check_under_their_recipe_and_fail_the_look_alike():
    """End to end through fp8check.testing: DeepSeek-V3.1's ue8m0 act_quant (its torch port)
    passes as `deepseek-v3-ue8m0` and fails as `deepgemm-ue8m0` on blocks whose amax/448
    sits just above a power of two; DeepGEMM's legacy cast passes as `deepgemm-legacy`."""
    from fp8check import testing

    rng = np.random.default_rng()
    x = _adversarial(rng, (1, 128))
    t = _torch(x)
    v, s = P.deepseek_v3_act_quant(t, scale_fmt="ue8m0")
    testing.assert_quantizer_matches(v, s, t, (1, 128), "deepseek-v3-ue8m0")
    with pytest.raises(AssertionError, match="quantizer_bit_exact"):
        testing.assert_quantizer_matches(v, s, t, (1, 128), "deepgemm-ue8m0")
    v, s = P.deepgemm_legacy_per_token_cast(t)
    testing.assert_quantizer_matches(v, s, t, (1, 128), "deepgemm-legacy")
