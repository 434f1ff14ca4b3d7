"""Layer 2 (MoE layer): a MoE layer, forward and backward, against the float64 reference
layer `fp8check.references.moe`.

The layer is the framework's (`jax_layer`, `torch_layer`) around a set of expert matmuls
(`ExpertMatmuls`): a kernel family's ("pallas", "triton": two layers under test each,
"<family>-moe-fp8", FP8 forward and bf16 backward, and "<family>-moe-bf16", bf16 forward and
backward) or a user's kernels (`fp8check.layers.moe.user`: "<kernel>-moe-fp8" for a gmm-fp8
forward, "<kernel>-moe-bf16" for a gmm one; the results' `forward` and `backward` metrics
say what ran).  Every
result answers two questions, never mixed (each criterion names its question):

* **correctness** (`st_*`): the layer against the reference computed on the *same*
  operands, i.e. the straight-through function the kernels claim to compute
  (`moe_reference(..., operands="fp8"|"bf16")`).  What remains is the backward's bf16
  rounding (dy, the saved operands and the inter-GMM gradient are rounded to bf16, u =
  2^-8, each rounding ~53 dB of SQNR for uniform relative error u/sqrt(3)), float32
  accumulation (negligible), and the rare element where the layer's own bf16 activation
  rounds to a neighbour of the reference's (the FP8 code of that element moves by one).
  The limit, `fp8check.profiles.ST_MIN_SQNR_DB` (with its source there), catches every
  seeded wiring bug of tests/seeded_bugs/layer2.py, including one (FP8 residuals saved
  for the backward) that every impact criterion passes.  The criterion is applied to every
  tensor (out, dx, router, wi, wo) and to the worst expert of wi and wo (a group-boundary
  leak hurts the smallest group most and drowns in a whole-tensor figure).  Experts that
  received no tokens must get gradients that are exactly zero (`st_dead_experts_zero`), and
  the layer's routing must equal the reference's (`st_routing`).
* **quantization impact** (`sqnr_db.*`): the layer against the exact float64 layer: SQNR
  of out and of every gradient, per-expert SQNR of the wi and wo gradients (experts with
  few tokens are where FP8 hurts), cosine similarity (reported).  Limits: the profile's
  `MoeLimits` (outputs, gradients); the bf16 layers are held to `BF16_IMPACT_MIN_DB`
  (`fp8check.profiles`, each with its source).

With top_k = 1 the renormalised combine weight is identically 1, so the router gets no
gradient: its SQNR is undefined and is reported, not gated (`router_note`).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fp8check.layers.moe.matmuls import VARIANTS, ExpertMatmuls, resolve
from fp8check.measures import metrics
from fp8check.profiles import BF16_IMPACT_MIN_DB, ST_MIN_SQNR_DB, get_profile
from fp8check.references.casts import to_float64
from fp8check.references.moe import MoEInputs, MoEOutputs, moe_reference, route_numpy
from fp8check.results.model import CaseResult, Criterion

LAYER = 2
TENSORS = ("out", "dx", "router", "wi", "wo")
# Routing must not hinge on rounding: the k-th and (k+1)-th logit of every token differ by
# at least this much (float32 logits are within ~1e-6 of the float64 ones).
MIN_TOPK_MARGIN = 1e-3

# (inputs, variant) -> outputs: a layer under test.  Tests inject buggy ones.
LayerImpl = Callable[[MoEInputs, str], MoEOutputs]


@dataclass(frozen=True)
class MoeCase:
    """A routing scenario: tokens T, experts E, top_k, and the router bias that forces the
    routing (`hot`: experts favoured by +4, `dead`: experts pushed down by -30, which no
    softmax of O(1) logits can select)."""

    name: str
    tokens: int
    experts: int
    top_k: int
    hot: tuple[int, ...] = ()
    dead: tuple[int, ...] = ()
    d_model: int = 256
    d_ff: int = 256

    def case_id(self, seed: int) -> str:
        return f"{self.name}-t{self.tokens}-e{self.experts}-k{self.top_k}-s{seed}"


CI_SCENARIOS = (
    MoeCase("balanced", tokens=64, experts=4, top_k=2),
    MoeCase("hot-expert", tokens=64, experts=8, top_k=2, hot=(0,)),
    MoeCase("dead-experts", tokens=64, experts=8, top_k=2, dead=(1, 4, 7)),
    MoeCase("tiny-groups", tokens=12, experts=8, top_k=2),
    MoeCase("top1", tokens=128, experts=4, top_k=1),
    MoeCase("top8", tokens=16, experts=16, top_k=8),
)
SUITES: dict[str, tuple[MoeCase, ...]] = {
    "smoke": (CI_SCENARIOS[0], CI_SCENARIOS[2]),
    "ci": CI_SCENARIOS,
    "full": CI_SCENARIOS + tuple(
        MoeCase(s.name + "-wide", s.tokens * 4, s.experts, s.top_k, s.hot, s.dead, 512, 512)
        for s in CI_SCENARIOS),
}


def make_inputs(sc: MoeCase, seed: int) -> MoEInputs:
    """The scenario's layer inputs, a pure function of (scenario, seed).

    x, dy ~ N(0, 1) (x rounded to bf16, the layers' activation dtype); wi ~ N(0, 1/D),
    wo ~ N(0, 1/F) (unit-scale activations); w_router ~ N(0, 1/D) (O(1) logits), redrawn
    until every token's top-k margin is at least MIN_TOPK_MARGIN.
    """
    import ml_dtypes

    rng = np.random.default_rng(zlib.crc32(f"layer2/{sc.name}/{sc.d_model}/{seed}".encode()))
    d, f, e, t = sc.d_model, sc.d_ff, sc.experts, sc.tokens
    x = rng.standard_normal((t, d)).astype(ml_dtypes.bfloat16).astype(np.float32)
    wi = (rng.standard_normal((e, d, 2 * f)) / np.sqrt(d)).astype(np.float32)
    wo = (rng.standard_normal((e, f, d)) / np.sqrt(f)).astype(np.float32)
    dy = rng.standard_normal((t, d)).astype(np.float32)
    bias = np.zeros(e, np.float32)
    bias[list(sc.hot)] = 4.0
    bias[list(sc.dead)] = -30.0
    for _ in range(50):
        w_r = (rng.standard_normal((d, e)) / np.sqrt(d)).astype(np.float32)
        inp = MoEInputs(x=x, w_router=w_r, router_bias=bias, wi=wi, wo=wo, dy=dy,
                        top_k=sc.top_k)
        if sc.top_k == e:
            return inp
        _, logits = route_numpy(inp)
        if np.min(logits[:, sc.top_k - 1] - logits[:, sc.top_k]) >= MIN_TOPK_MARGIN:
            return inp
    raise ValueError(f"scenario {sc.name}: no router draw with a top-k margin >= "
                     f"{MIN_TOPK_MARGIN} in 50 tries")


def _grads(o: MoEOutputs) -> dict[str, np.ndarray]:
    return {"out": o.out, "dx": o.dx, "router": o.d_router, "wi": o.d_wi, "wo": o.d_wo}


def _per_expert_sqnr(ref: np.ndarray, out: np.ndarray, live: np.ndarray) -> list[float | None]:
    return [float(metrics.sqnr_db(ref[g], out[g])) if live[g] else None
            for g in range(ref.shape[0])]


def _sqnr_criteria(
    prefix: str, question: str, ref: MoEOutputs, got: MoEOutputs, limits: dict[str, float],
    top_k: int, m: dict[str, Any],
) -> list[Criterion]:
    """SQNR of every tensor and the worst expert of wi / wo, each gated at `limits`."""
    live = ref.group_sizes > 0
    crit: list[Criterion] = []
    r, o = _grads(ref), _grads(got)
    for name in TENSORS:
        s = float(metrics.sqnr_db(r[name], o[name]))
        m[f"{prefix}.{name}"] = s
        if question == "impact":
            m[f"cosine.{name}"] = _cosine(r[name], o[name])
        if name == "router" and top_k == 1:
            m["router_note"] = ("top_k = 1: the renormalised weight is identically 1, so "
                                "the router gradient is zero in exact arithmetic; not gated")
            m[f"max_abs.{prefix}.router"] = float(np.max(np.abs(o[name])))
            continue
        crit.append(Criterion.check(f"{prefix}.{name}", question, s, ">=", limits[name],
                                    meaning=f"SQNR (dB) of {name}"))
    for name in ("wi", "wo"):
        per = _per_expert_sqnr(r[name], o[name], live)
        worst = min((v for v in per if v is not None), default=float("inf"))
        m[f"{prefix}.{name}.expert"] = per
        m[f"{prefix}.{name}.min_expert"] = worst
        crit.append(Criterion.check(f"{prefix}.{name}.min_expert", question, worst, ">=",
                                    limits[name], meaning=f"worst expert's SQNR (dB) of {name}"))
    return crit


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = to_float64(a).ravel(), to_float64(b).ravel()
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return float("nan")
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na and nb else float(na == nb)


def _structure_criteria(ref: MoEOutputs, got: MoEOutputs, m: dict[str, Any]) -> list[Criterion]:
    same_routing = bool(np.array_equal(ref.group_sizes, got.group_sizes))
    m["layer_group_sizes"] = [int(v) for v in got.group_sizes]
    dead = ref.group_sizes == 0
    leaked = int(np.count_nonzero(got.d_wi[dead]) + np.count_nonzero(got.d_wo[dead]))
    m["dead_expert_nonzero_grads"] = leaked
    return [Criterion.check("st_routing", "correctness", same_routing, "==", True,
                            meaning="the kernel's layer routes as the reference does"),
            Criterion.check("st_dead_experts_zero", "correctness", leaked, "==", 0,
                            meaning="nonzero gradient entries of experts with no tokens")]


def _limits(variant: str, profile: str) -> dict[str, float]:
    if variant == "bf16":
        return dict.fromkeys(TENSORS, BF16_IMPACT_MIN_DB)
    lim = get_profile(profile).moe
    return {"out": lim.out_min_sqnr_db} | dict.fromkeys(TENSORS[1:], lim.grad_min_sqnr_db)


def validate_moe_case(
    name: str, variant: str, sc: MoeCase, seed: int, profile: str, layer: LayerImpl,
    refs: dict[str, MoEOutputs], inp: MoEInputs, notes: Mapping[str, str] | None = None,
) -> CaseResult:
    """One (layer, scenario) result of kernel `<name>-moe-<variant>`; `refs` holds the
    "exact" and `variant` references; `notes` go into the metrics as they are."""
    t0 = time.perf_counter()
    cid = sc.case_id(seed)
    res = CaseResult(kernel=f"{name}-moe-{variant}", layer=LAYER, case=cid, passed=None)
    m = res.metrics
    m.update(tokens=sc.tokens, experts=sc.experts, top_k=sc.top_k, d_model=sc.d_model,
             d_ff=sc.d_ff, group_sizes=[int(v) for v in refs["exact"].group_sizes])
    m.update(notes or {})
    try:
        got = layer(inp, variant)
        st_limits = dict.fromkeys(TENSORS, ST_MIN_SQNR_DB)
        res.criteria = (
            _structure_criteria(refs[variant], got, m)
            + _sqnr_criteria("st_sqnr_db", "correctness", refs[variant], got, st_limits,
                             sc.top_k, m)
            + _sqnr_criteria("sqnr_db", "impact", refs["exact"], got,
                             _limits(variant, profile), sc.top_k, m))
    except Exception as e:  # the layer under test may raise anything: report, don't crash
        res.error = f"{type(e).__name__}: {e}"
    res.decide()
    res.seconds = time.perf_counter() - t0
    return res


def layer2_size(suite: str, cases: Sequence[str] | None = None, *,
                variants: int = len(VARIANTS)) -> int:
    """Number of results `iter_layer2` yields for expert matmuls with `variants` tested
    variants (for progress bars)."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; expected one of {', '.join(SUITES)}")
    n = len(SUITES[suite]) if cases is None else len(set(cases))
    return n * variants


def iter_layer2(
    family: str | ExpertMatmuls, suite: str = "ci", seed: int = 0, profile: str = "strict", *,
    layer_impl: LayerImpl | None = None, cases: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
) -> Iterator[CaseResult]:
    """Layer 2 of `suite` for a kernel family (its name) or a user's `ExpertMatmuls`: one
    CaseResult per (scenario, variant), yielded as each completes (so the gate can stream
    them).

    `layer_impl` replaces the layer (seeded-bug tests); `cases` keeps only the given case
    ids (a repro); `variants` a subset of the tested variants (default: all of them).
    """
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; expected one of {', '.join(SUITES)}")
    get_profile(profile)  # the gate's profile check: unknown or "off" is a ValueError
    matmuls = resolve(family)
    variants = matmuls.tested if variants is None else tuple(variants)
    bad = [v for v in variants if v not in matmuls.tested]
    if bad:
        raise ValueError(f"unknown variants {bad}; expected a subset of {matmuls.tested}")
    scenarios = [s for s in SUITES[suite] if cases is None or s.case_id(seed) in cases]
    if cases is not None and len(scenarios) != len(set(cases)):
        known = ", ".join(s.case_id(seed) for s in SUITES[suite])
        raise ValueError(f"unknown layer-2 case in {list(cases)}; suite {suite} has {known}")
    layer = layer_impl or matmuls.run_layer
    for sc in scenarios:
        inp = make_inputs(sc, seed)
        refs = {"exact": moe_reference(inp, "exact")}
        for v in variants:
            refs[v] = moe_reference(inp, v)
            yield validate_moe_case(matmuls.name, v, sc, seed, profile, layer, refs, inp,
                                    matmuls.notes)


def run_layer2(
    family: str | ExpertMatmuls, suite: str = "ci", seed: int = 0, profile: str = "strict", *,
    layer_impl: LayerImpl | None = None, cases: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """`iter_layer2` collected as result dicts (the gate's JSON keys), grouped by variant
    in the order of `variants`."""
    out = [r.to_dict() for r in iter_layer2(family, suite, seed, profile,
                                            layer_impl=layer_impl, cases=cases,
                                            variants=variants)]
    order = {v: i for i, v in enumerate(variants or VARIANTS)}
    return sorted(out, key=lambda r: order.get(r["kernel"].rsplit("-", 1)[1], len(order)))
