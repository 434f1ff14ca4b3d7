"""Group metadata and per-phase tiling of the Pallas kernels (no kernel runs: fast)."""

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fp8check.inputs.strategies import group_sizes
from fp8check.kernels.pallas.metadata import make_group_metadata
from fp8check.kernels.pallas.tiling import (
    PRODUCTION_SHAPES,
    TILINGS,
    VMEM_BUDGET_BYTES,
    Tiling,
    resolve_tiling,
    vmem_bytes,
)

FP8 = ml_dtypes.float8_e4m3fn


def expected_visits(sizes: np.ndarray, m: int, tm: int, visit_empty: bool) -> list:
    """(group, tile) pairs a grouped kernel must visit, derived from row sets directly."""
    visits, start = [], 0
    for g, size in enumerate(sizes):
        rows = range(start, start + size)
        tiles = sorted({r // tm for r in rows})
        if not tiles and visit_empty:
            tiles = [min(start // tm, m // tm - 1)]
        visits += [(g, t) for t in tiles]
        start += size
    return visits


@settings(max_examples=40, deadline=None)
@given(data=st.data(), tm=st.sampled_from([8, 16, 128]), g=st.integers(1, 9),
       visit_empty=st.booleans())
def test_visits_cover_each_group_tile_pair_once_in_order(data, tm, g, visit_empty):
    m = tm * data.draw(st.integers(1, 6))
    sizes = data.draw(group_sizes(m, g))
    meta, num = make_group_metadata(jnp.asarray(sizes), m=m, tm=tm, visit_empty_groups=visit_empty)
    n = int(num)
    got = list(zip(np.asarray(meta.group_ids)[:n].tolist(),
                   np.asarray(meta.m_tile_ids)[:n].tolist(), strict=True))
    assert got == expected_visits(sizes, m, tm, visit_empty)
    assert np.asarray(meta.offsets).tolist() == [0, *np.cumsum(sizes).tolist()]
    # The static visit list must be long enough for the worst case.
    assert n <= meta.group_ids.shape[0] == m // tm + g - 1


def test_metadata_rejects_m_not_multiple_of_tm():
    with pytest.raises(ValueError, match="multiple of tm"):
        make_group_metadata(jnp.asarray([3], jnp.int32), m=12, tm=8, visit_empty_groups=False)


@pytest.mark.parametrize("layer", ["wi", "wo"])
@pytest.mark.parametrize("phase", ["fwd", "tgmm", "dgrad"])
def test_production_tilings_fit_the_budget_on_production_and_dev_shapes(layer, phase):
    for shape in (layer, f"{layer}-dev"):
        s = PRODUCTION_SHAPES[shape]
        # In each phase's letters: fwd (M, K, N); dgrad contracts N and writes K; tgmm's
        # reduction is M and its output is [K, N].
        k, n = (s["n"], s["k"]) if phase == "dgrad" else (s["k"], s["n"])
        in_dtype = FP8 if phase == "fwd" else jnp.bfloat16
        out = jnp.float32 if phase == "tgmm" else jnp.bfloat16
        t = resolve_tiling(phase, TILINGS[layer][phase], m=s["m"], k=k, n=n, in_dtype=in_dtype,
                           out_dtype=out)
        assert t.tk <= k and t.tn <= n and k % t.tk == 0 and n % t.tn == 0


def test_seed_fwd_tilings_and_subchannels():
    assert TILINGS["wi"]["fwd"] == (256, 2048, 1024) and TILINGS["wi"]["fwd"].num_subchannels == 16
    assert TILINGS["wo"]["fwd"] == (256, 512, 2048) and TILINGS["wo"]["fwd"].num_subchannels == 4
    assert TILINGS["wi"]["tgmm"].tm < TILINGS["wi"]["fwd"].tm


def test_tiles_are_clamped_to_the_problem():
    t = resolve_tiling("fwd", (256, 2048, 1024), m=40, k=256, n=128, in_dtype=FP8,
                       out_dtype=jnp.bfloat16)
    assert t == (64, 256, 128)  # tm: 40 rounded up to the fp8 sublane multiple 32


@pytest.mark.parametrize("tiling, match", [
    ((128, 192, 128), "multiples of 128"),
    ((128, 128, 64), "multiples of 128"),
    ((100, 128, 128), "tm must be a multiple of 32"),
    ((128, 256, 128), "k=384 is not a multiple"),
    ((0, 128, 128), "positive ints"),
    ((128, 128), "positive ints"),
])
def test_invalid_tilings_raise(tiling, match):
    with pytest.raises(ValueError, match=match):
        resolve_tiling("fwd", tiling, m=512, k=384, n=256, in_dtype=FP8, out_dtype=jnp.float32)


def test_tiling_over_the_vmem_budget_raises():
    tiling = (2048, 2048, 2048)
    assert vmem_bytes("fwd", Tiling(*tiling), 1, 4) > VMEM_BUDGET_BYTES
    with pytest.raises(ValueError, match="VMEM"):
        resolve_tiling("fwd", tiling, m=4096, k=2048, n=2048, in_dtype=FP8, out_dtype=jnp.float32)


def test_unknown_phase_raises():
    with pytest.raises(ValueError, match="unknown phase"):
        resolve_tiling("bwd", None, m=8, k=128, n=128, in_dtype=FP8, out_dtype=jnp.float32)


def test_default_tiling_shrinks_to_a_dividing_tile_but_explicit_one_must_divide():
    t = resolve_tiling("tgmm", None, m=256, k=512, n=768, in_dtype=ml_dtypes.bfloat16,
                       out_dtype=np.float32)
    assert 768 % t.tn == 0 and t.tn % 128 == 0 and 512 % t.tk == 0
    with pytest.raises(ValueError, match="not a multiple of its tile"):
        resolve_tiling("tgmm", (128, 512, 512), m=256, k=512, n=768,
                       in_dtype=ml_dtypes.bfloat16, out_dtype=np.float32)
