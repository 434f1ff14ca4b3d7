"""The accuracy-gated tiling search end to end, with the real Pallas kernels (interpret mode
on CPU) on small shapes: reproducibility, the staged checks, a planted inaccurate tiling,
and the `fp8check tune` command."""

import dataclasses
import functools
import itertools
import json

import jax.numpy as jnp
import pytest

from fp8check.cli import main
from fp8check.kernels.pallas.tiling import Tiling, resolve_tiling
from fp8check.tune.accuracy import AccuracyChecker, PallasKernels, proxy_for
from fp8check.tune.cost_model import phase_cost
from fp8check.tune.output import tune_section
from fp8check.tune.search import TilingSearch
from fp8check.tune.shapes import GmmShape
from fp8check.tune.space import rejection

TINY = GmmShape(m=512, k=256, n=256, g=2)
SMALL = GmmShape(m=1024, k=512, n=256, g=4)


@pytest.fixture(scope="module")
def kernels():
    return PallasKernels("interpret")


class RecordingChecker(AccuracyChecker):
    """Records every (phase, tiling, profile) the search asks about."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.asked = []

    def check(self, phase, tiling, profile):
        self.asked.append((phase, tuple(tiling), profile))
        return super().check(phase, tiling, profile)


def _without_seconds(x):
    """x without its wall-clock fields (seconds, and the layer-1 results' timing)."""
    if isinstance(x, dict):
        return {k: _without_seconds(v) for k, v in x.items() if k not in ("seconds", "timing")}
    if isinstance(x, list):
        return [_without_seconds(v) for v in x]
    return x


def _search(kernels, seed, **kw):
    checker = RecordingChecker(TINY, kernels)
    res = TilingSearch(TINY, checker, rounds=2, population=2, seed=seed, finalists=1,
                       **kw).run()
    return res, checker


def test_search_is_reproducible_and_stages_its_checks(kernels):
    res_a, chk_a = _search(kernels, seed=3, phases=("fwd", "tgmm"))
    res_b, chk_b = _search(kernels, seed=3, phases=("fwd", "tgmm"))  # fresh checker
    doc_a, doc_b = tune_section(res_a), tune_section(res_b)
    assert _without_seconds(doc_a) == _without_seconds(doc_b)
    assert chk_a.asked == chk_b.asked

    for phase, state in res_a.phases.items():
        cands = list(state.seen.values())
        runnable = {tuple(c.tiling) for c in cands if c.status != "rejected"}
        explored = {t for ph, t, prof in chk_a.asked if ph == phase and prof == "explore"}
        strict = [t for ph, t, prof in chk_a.asked if ph == phase and prof == "strict"]
        assert explored == runnable  # every runnable candidate, and nothing rejected
        assert strict == [tuple(c.tiling) for c in state.finalists]
        for c in cands:
            if c.status == "rejected":
                assert c.reason and c.cost is None
                assert rejection(phase, c.tiling, TINY) == c.reason
        for rnd in state.rounds[1:]:
            assert sum(c.status != "rejected" for c in rnd) <= 2
        # best: the fastest finalist that passed strict, never slower than the baseline
        assert state.best is not None and state.best.strict.passed
        assert state.best.fitness_us <= state.baseline.fitness_us
        assert state.best is state.ranked()[0]  # all accurate here: the model's fastest
    assert len(doc_a["rounds"]) == 3 and doc_a["rounds"][0]["round"] == 0
    assert "not measured" in doc_a["fitness"]


def _fastest_valid_fwd(shape):
    """The cost model's fastest valid fwd tiling over a power-of-two grid."""
    m, k, n = shape.phase_dims("fwd")
    grid = itertools.product([32, 64, 128, 256, 512, 1024], [128, 256, 512], [128, 256])
    valid = [Tiling(*t) for t in grid if rejection("fwd", Tiling(*t), shape) is None]
    return min(valid, key=lambda t: phase_cost("fwd", t, shape).total_us)


def _drops_last_subchannel(fn, tk, lhs_q, lhs_scale, rhs_q, rhs_scale, gs, **kw):
    """A kernel whose subchannel loop stops one 128-block early in every K tile: what it
    computes is the real kernel with those blocks' lhs scales zeroed."""
    sub = tk // 128
    blocks = jnp.arange(lhs_scale.shape[1])
    lhs_scale = jnp.where(blocks % sub == sub - 1, 0.0, lhs_scale)
    return fn(lhs_q, lhs_scale, rhs_q, rhs_scale, gs, **kw)


def test_planted_fast_but_wrong_tiling_is_never_best(kernels):
    planted = _fastest_valid_fwd(SMALL)
    assert planted.num_subchannels >= 2

    def kernel_for(phase, tiling):
        spec = kernels(phase, tiling)
        if (phase, tiling) != ("fwd", planted):
            return spec
        return dataclasses.replace(spec, fn=functools.partial(_drops_last_subchannel, spec.fn,
                                                              planted.tk))

    checker = AccuracyChecker(SMALL, kernel_for)
    res = TilingSearch(SMALL, checker, rounds=1, population=2, seed=0, finalists=1,
                       phases=("fwd",), extra_starts={"fwd": [planted]}).run()
    state = res.phases["fwd"]
    bad = state.seen[planted]
    assert bad.status == "inaccurate" and bad.reason.startswith("explore:")
    assert "bit_exact" in bad.reason or "bound_ratio" in bad.reason
    assert state.best is not None and state.best.tiling != planted
    assert state.best.strict.passed
    # it really was the fastest under the model: only the accuracy check kept it out
    assert bad.fitness_us < state.best.fitness_us
    # and the tiling itself is fine with the real kernel: the planted kernel was wrong
    assert AccuracyChecker(SMALL, kernels).check("fwd", planted, "explore").passed


def test_proxy_keeps_the_tiling_meaningful():
    for phase, t in (("fwd", Tiling(256, 256, 128)), ("dgrad", Tiling(128, 128, 256))):
        p = proxy_for(phase, t, SMALL)
        m, k, n = SMALL.phase_dims(phase)
        assert (p.k, p.n) == (k, n)  # the real K / N: as many K and N tiles as at SMALL
        assert p.m == 2 * t.tm and sum(p.group_sizes) < p.m  # rows past the groups
        first, _, last = p.group_sizes
        assert first < t.tm < first + last  # group 3 straddles into the second row tile
        assert resolve_tiling(phase, tuple(t), m=p.m, k=p.k, n=p.n, in_dtype=jnp.bfloat16,
                              out_dtype=jnp.bfloat16) == t  # runs unclamped


def test_tune_command_writes_json_report_and_usable_tilings(tmp_path):
    out, html, emit = tmp_path / "t.json", tmp_path / "t.html", tmp_path / "best.json"
    rc = main(["tune", "--shape", "M=512,K=256,N=256,G=2", "--rounds", "1",
               "--population", "1", "--finalists", "1", "--phases", "fwd,dgrad",
               "--backend", "interpret", "--json", str(out), "--report", str(html),
               "--emit", str(emit)])
    assert rc == 0
    doc = json.loads(out.read_text())
    tune = doc["tune"]
    assert tune["fitness"] == "cost-model (not measured)"
    assert "proxy" in tune["accuracy_proxy"]
    assert [r["round"] for r in tune["rounds"]] == [0, 1]
    assert {c["phase"] for r in tune["rounds"] for c in r["candidates"]} == {"fwd", "dgrad"}
    assert all(f["passed"] for f in tune["finalists"])
    assert doc["results"] and all(r["passed"] for r in doc["results"])
    assert html.read_text().count("Tiling search") >= 1
    best = json.loads(emit.read_text())
    assert best == tune["best"]
    m, k, n = 512, 256, 256
    dims = {"fwd": (m, k, n), "dgrad": (m, n, k)}
    for phase, t in best.items():
        # accepted as-is by the kernels' tiling= validation
        assert resolve_tiling(phase, t, m=m, k=dims[phase][1], n=dims[phase][2],
                              in_dtype=jnp.bfloat16, out_dtype=jnp.bfloat16) == tuple(t)


def test_tune_command_compiles_candidates_for_v7x(tmp_path):
    """`--chip v7x`: every candidate is compiled for v7x (libtpu's `tpu7x`) before it is
    judged, and the finalists carry v7x's compiled figures within its 64 MiB of VMEM."""
    out = tmp_path / "t.json"
    rc = main(["tune", "--shape", "M=512,K=256,N=256,G=2", "--rounds", "1",
               "--population", "1", "--finalists", "1", "--phases", "fwd",
               "--backend", "interpret", "--chip", "v7x", "--json", str(out)])
    assert rc == 0
    tune = json.loads(out.read_text())["tune"]
    compiled = [c["native"] for r in tune["rounds"] for c in r["candidates"] if c["native"]]
    assert compiled and all(n["chip"] == "v7x" for n in compiled)
    assert all(0 < n["vmem_bytes"] <= 64 * 2**20 and n["llo_vmatmul"] > 0 for n in compiled)


@pytest.mark.parametrize("argv, words", [
    (["--shape", "huge"], "expected one of"),
    (["--kernel", "triton-fp8"], "supports pallas-fp8"),
    (["--fitness", "measured"], "needs a TPU"),
    (["--start", "fwd=256x1024"], "PHASE=TMxTKxTN"),
    (["--population", "0", "--phases", "fwd"], "population >= 1"),
    (["--phases", "fwd,bwd"], "subset of"),
    (["--chip", "sm_90a"], "expected one of v5e, v6e, v5p, v7x"),
])
def test_tune_command_bad_usage_is_one_line_exit_2(argv, words, capsys):
    assert main(["tune", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1
