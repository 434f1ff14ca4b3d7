"""Tiling search pieces that run no kernel: shapes, hard constraints, mutations, cost model."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from fp8check.kernels.pallas.metadata import make_group_metadata
from fp8check.kernels.pallas.tiling import LANES, PHASES, Tiling, vmem_bytes
from fp8check.tune import cost_model
from fp8check.tune.cost_model import MACHINE, balanced_group_sizes, phase_cost, visit_list
from fp8check.tune.shapes import NAMED_SHAPES, GmmShape, parse_shape
from fp8check.tune.space import (
    MUTATIONS,
    PHASE_DTYPES,
    baseline_tiling,
    default_tiling,
    mutate,
    rejection,
)

DEV = NAMED_SHAPES["dev"]


def test_parse_shape_named_and_spec():
    assert parse_shape("wi") == GmmShape(65536, 2048, 512, 256)
    assert parse_shape("wo") == GmmShape(65536, 512, 2048, 256)
    assert parse_shape("dev") == GmmShape(8192, 2048, 512, 32)
    assert parse_shape("g=4, M=1024,K=512,n=256") == GmmShape(1024, 512, 256, 4)


@pytest.mark.parametrize("text, words", [
    ("huge", "expected one of"), ("M=1,K=128,N=128", "missing G"),
    ("M=1,M=2,K=128,N=128,G=1", "twice"), ("M=64,K=200,N=128,G=1", "multiples of 128"),
    ("M=0,K=128,N=128,G=1", "positive"),
])
def test_parse_shape_rejects_bad_text(text, words):
    with pytest.raises(ValueError, match=words):
        parse_shape(text)


def test_phase_dims_follow_the_tiling_letters():
    s = GmmShape(100, 256, 384, 3)
    assert s.phase_dims("fwd") == (100, 256, 384)
    assert s.phase_dims("tgmm") == (100, 256, 384)
    assert s.phase_dims("dgrad") == (100, 384, 256)  # contracts W's N, writes K columns


@pytest.mark.parametrize("phase, tiling, words", [
    ("fwd", Tiling(256, 192, 512), "multiples of 128"),
    ("fwd", Tiling(48, 2048, 512), "tm must be a multiple of 32"),  # fp8 sublane packing
    ("tgmm", Tiling(512, 2048, 512), "VMEM"),
    ("fwd", Tiling(256, 4096, 512), "exceeds its dimension 2048"),
    ("dgrad", Tiling(256, 512, 4096), "exceeds its dimension 2048"),
    ("fwd", Tiling(16384, 128, 128), "exceeds the 8192 rows"),
])
def test_hard_constraints_reject_with_reason(phase, tiling, words):
    assert words in rejection(phase, tiling, DEV)


def test_non_dividing_tile_is_rejected():
    shape = GmmShape(1024, 768, 256, 4)
    assert "not a multiple of its tile 512" in rejection("fwd", Tiling(256, 512, 256), shape)
    assert rejection("fwd", Tiling(256, 384, 256), shape) is None


def test_every_vmem_rejection_is_over_budget_and_every_runnable_tiling_fits():
    from fp8check.kernels.pallas.tiling import VMEM_BUDGET_BYTES

    for phase in PHASES:
        m, k, n = DEV.phase_dims(phase)
        in_b, out_b = (d.itemsize for d in PHASE_DTYPES[phase])
        for tm in (128, 256, 512, 1024):
            for tk in (128, 512, 2048):
                for tn in (128, 512, 2048):
                    t = Tiling(tm, tk, tn)
                    why = rejection(phase, t, DEV)
                    if tk > k or tn > n:
                        assert "exceeds" in why
                        continue
                    need = vmem_bytes(phase, t, in_b, out_b)
                    assert (why is None) == (need <= VMEM_BUDGET_BYTES), (phase, t, why)


def test_baseline_has_one_subchannel_and_defaults_are_valid():
    for phase in PHASES:
        base, default = baseline_tiling(phase, DEV), default_tiling(phase, DEV)
        assert base.tk == LANES and base.num_subchannels == 1
        assert (base.tm, base.tn) == (default.tm, default.tn)
        assert rejection(phase, base, DEV) is None and rejection(phase, default, DEV) is None


def test_mutations_are_directed_single_steps():
    t = Tiling(256, 512, 256)
    k = DEV.phase_dims("fwd")[1]
    got = {op: mutate(t, op, "fwd", DEV) for op in MUTATIONS}
    assert got["double tm"] == Tiling(512, 512, 256)
    assert got["halve tn"] == Tiling(256, 512, 128)
    assert got["all K in subchannels"] == Tiling(256, k, 256)
    assert got["all K on the grid"] == Tiling(256, LANES, 256)
    assert got["deeper, narrower (tk x2, tn /2)"] == Tiling(256, 1024, 128)
    # the output tile's area is kept when depth is traded for width
    trade = got["shallower, wider (tk /2, tn x2)"]
    assert trade.tk * trade.tn == t.tk * t.tn and trade != t
    with pytest.raises(ValueError, match="unknown mutation"):
        mutate(t, "shuffle", "fwd", DEV)


def test_visit_list_matches_the_kernels_metadata():
    rng = np.random.default_rng(7)
    for _ in range(20):
        g, tm = int(rng.integers(1, 9)), int(rng.choice([16, 32, 128]))
        m = tm * int(rng.integers(1, 6))
        sizes = rng.multinomial(m, rng.dirichlet(np.ones(g))).astype(np.int64)
        for empty in (False, True):
            meta, nv = make_group_metadata(jnp.asarray(sizes, jnp.int32), m=m, tm=tm,
                                           visit_empty_groups=empty)
            nv = int(nv)
            tiles, groups = visit_list(sizes, tm, empty)
            assert tiles.tolist() == np.asarray(meta.m_tile_ids)[:nv].tolist()
            assert groups.tolist() == np.asarray(meta.group_ids)[:nv].tolist()


def test_balanced_group_sizes_split_evenly():
    gs = balanced_group_sizes(10, 4)
    assert gs.tolist() == [3, 3, 2, 2] and gs.sum() == 10


def test_cost_model_hbm_traffic_from_first_principles():
    # 8 experts of 256 rows, tm = 256: no straddling tile, one visit per tile.
    shape = GmmShape(2048, 1024, 512, 8)
    m, k, n, g = shape
    whole_k = phase_cost("fwd", Tiling(256, k, 256), shape)
    # lhs is read once per N tile, each expert's weights once, the output read (aliased
    # initial buffer) and written once, scales once per N tile / once per expert.
    lhs, rhs, out = m * k * (n // 256), g * k * n, 2 * m * n * 2
    scales = (n // 256) * m * (k // 128) * 4 + g * (k // 128) * n * 4
    assert whole_k.hbm_bytes == lhs + rhs + out + scales
    assert whole_k.steps == (n // 256) * (m // 256)
    # with 4 K steps per tile the weights are re-read on every visit: still g * k * n here
    # (one visit per expert), the grid has 4x the steps and so 4x the per-step overhead
    split = phase_cost("fwd", Tiling(256, 256, 256), shape)
    assert split.steps == 4 * whole_k.steps
    assert split.overhead_us == pytest.approx(4 * whole_k.overhead_us)
    assert split.hbm_bytes == whole_k.hbm_bytes


def test_straddling_tiles_cost_extra_visits():
    # 3 experts of 100 rows, tm = 128: tiles {0}, {0, 1}, {1, 2} -> 5 visits
    shape = GmmShape(300, 256, 256, 3)
    c = phase_cost("fwd", Tiling(128, 256, 256), shape)
    assert c.steps == 5


def test_cost_model_terms_and_overhead_constant():
    t = default_tiling("fwd", DEV)
    c = phase_cost("fwd", t, DEV)
    assert c.total_us == pytest.approx(max(c.mxu_us, c.vpu_us, c.hbm_us) + c.overhead_us)
    assert c.vmem_bytes == vmem_bytes("fwd", t, 1, 2)
    slow = dataclasses.replace(MACHINE, step_overhead_s=2 * MACHINE.step_overhead_s)
    c2 = phase_cost("fwd", t, DEV, slow)
    assert c2.total_us - c.total_us == pytest.approx(c.steps * MACHINE.step_overhead_s * 1e6)


def test_model_prefers_the_subchannel_loop_over_the_baseline():
    # tk = 128 per grid step (one quantization block) is the conservative baseline.
    for name in ("wi", "wo", "dev"):
        shape = NAMED_SHAPES[name]
        base = phase_cost("fwd", baseline_tiling("fwd", shape), shape).total_us
        whole = phase_cost("fwd", default_tiling("fwd", shape), shape).total_us
        assert whole < base, name


def test_cost_model_label_says_model():
    assert "model" in cost_model.FITNESS_LABEL and "not measured" in cost_model.FITNESS_LABEL
