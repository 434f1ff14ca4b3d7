"""Float64 reference MoE layer with exact gradients (torch float64 autograd, CPU).

The layer (the same math as the JAX and torch layers under test):

    logits  = x @ w_router + router_bias                     [T, E]
    probs   = softmax(logits)                                 over all E experts
    experts = top_k(probs)          weights = probs[experts] / sum(probs[experts])   [T, k]
    pairs (token t, slot j) sorted stably by expert -> x_perm [T*k, D], group_sizes [E]
    h       = gmm(x_perm, wi)       wi [E, D, 2F]: gate = h[:, :F], up = h[:, F:]
    act     = silu(gate) * up                                 [T*k, F]
    y       = gmm(act, wo)          wo [E, F, D]
    out[t]  = sum_j weights[t, j] * y[pair(t, j)]             [T, D]

`router_bias` is a constant (no gradient): it lets a scenario force a routing (a hot
expert, dead experts) without changing the math.  The loss whose gradients are returned is
sum(out * dy) for a given cotangent dy.

`operands` selects what the reference computes:

* "exact": the unquantized layer, float64 throughout (the quantization-impact reference).
* "fp8": the straight-through function an FP8-forward / bf16-backward layer claims to
  compute: each GMM's operands go through deq(q(.)) with the `deepgemm` recipe (1x128
  blocks for the activation, 128x128 per expert for the weight), and the forward rounds to
  the layers' declared storage precision (x_perm, act and both GMM outputs in bf16);
  in the backward every one of these roundings is the identity.
* "bf16": the same with deq(q(.)) replaced by rounding to bf16 (the bf16 layers'
  straight-through function).

Everything else (router, softmax, SiLU, combine, all gradients) is float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from fp8check.references.quant import BLOCK

OPERAND_MODES = ("exact", "fp8", "bf16")


@dataclass(frozen=True)
class MoEInputs:
    """One layer problem (numpy).  x [T, D] (bf16 values held in float32: the layers feed it
    as bf16), w_router [D, E], router_bias [E], wi [E, D, 2F], wo [E, F, D], dy [T, D]
    float32; 1 <= top_k <= E."""

    x: np.ndarray
    w_router: np.ndarray
    router_bias: np.ndarray
    wi: np.ndarray
    wo: np.ndarray
    dy: np.ndarray
    top_k: int

    def __post_init__(self) -> None:
        t, d = self.x.shape
        e = self.w_router.shape[1]
        f2 = self.wi.shape[2]
        shapes = {"w_router": (d, e), "router_bias": (e,), "wi": (e, d, f2),
                  "wo": (e, f2 // 2, d), "dy": (t, d)}
        for name, want in shapes.items():
            got = getattr(self, name).shape
            if got != want:
                raise ValueError(f"MoEInputs.{name} has shape {got}, expected {want}")
        if f2 % 2:
            raise ValueError(f"wi's last dim (2F) must be even, got {f2}")
        if not 1 <= self.top_k <= e:
            raise ValueError(f"top_k must be in [1, {e}], got {self.top_k}")

    @property
    def num_experts(self) -> int:
        return self.w_router.shape[1]


@dataclass(frozen=True)
class MoEOutputs:
    """Forward output and the gradients of sum(out * dy), numpy, plus the routing used.
    out [T, D], dx [T, D], d_router [D, E], d_wi [E, D, 2F], d_wo [E, F, D],
    group_sizes [E] int32."""

    out: np.ndarray
    dx: np.ndarray
    d_router: np.ndarray
    d_wi: np.ndarray
    d_wo: np.ndarray
    group_sizes: np.ndarray


def route_numpy(inp: MoEInputs) -> tuple[np.ndarray, np.ndarray]:
    """(experts [T, k] int, sorted logits [T, E] descending) in float64: what every layer's
    top-k must select (scenarios check the top-k margin on the sorted logits)."""
    logits = inp.x.astype(np.float64) @ inp.w_router.astype(np.float64) + inp.router_bias
    order = np.argsort(-logits, axis=1, kind="stable")
    return order[:, :inp.top_k], np.take_along_axis(logits, order, axis=1)


def _straight_through(fn):
    """An autograd op applying numpy `fn` to the forward value, identity backward."""
    import torch

    class _ST(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return torch.from_numpy(fn(t.detach().numpy()).astype(np.float64))

        @staticmethod
        def backward(ctx, g):
            return g

    return _ST.apply


def _round_bf16(v: np.ndarray) -> np.ndarray:
    return v.astype(ml_dtypes.bfloat16).astype(np.float64)


def _fp8_roundtrip(block: tuple[int, int]):
    from fp8check.references import dequantize, quantize

    def fn(v: np.ndarray) -> np.ndarray:
        # The layers quantize bf16 activations and float32 weights: round from those.
        src = v.astype(ml_dtypes.bfloat16) if block == (1, BLOCK) else v.astype(np.float32)
        # A [E, K, N] weight gets 128x128 blocks within each expert.
        return dequantize(quantize(src, block, "deepgemm"))

    return fn


def _grouped_matmul(act_q, weight_q):
    """Differentiable per-group matmul out_g = A(x_g) @ W(w_g) whose backward is that of
    x_g @ w_g: the forward operand maps A, W (deq(q(.)) or bf16 rounding) are the identity
    for the gradient, as in the kernels' backward, which reads the unquantized operands."""
    import torch

    class _GMM(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, group_sizes):
            ctx.save_for_backward(x, w)
            ctx.group_sizes = group_sizes
            xq, wq = act_q(x.detach().numpy()), weight_q(w.detach().numpy())
            out = np.zeros((x.shape[0], w.shape[2]))
            for g, (lo, hi) in enumerate(_bounds(group_sizes)):
                out[lo:hi] = xq[lo:hi] @ wq[g]
            return torch.from_numpy(out)

        @staticmethod
        def backward(ctx, dy):
            x, w = ctx.saved_tensors
            dx, dw = torch.zeros_like(x), torch.zeros_like(w)
            for g, (lo, hi) in enumerate(_bounds(ctx.group_sizes)):
                dx[lo:hi] = dy[lo:hi] @ w[g].T
                dw[g] = x[lo:hi].T @ dy[lo:hi]
            return dx, dw, None

    return _GMM.apply


def _bounds(group_sizes: np.ndarray) -> list[tuple[int, int]]:
    ends = np.cumsum(group_sizes)
    return [(int(e - s), int(e)) for s, e in zip(group_sizes, ends, strict=True)]


def _identity(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float64)


def moe_reference(inp: MoEInputs, operands: str = "exact") -> MoEOutputs:
    """Forward and exact float64 gradients of the layer (module docstring) on `inp`."""
    import torch

    if operands not in OPERAND_MODES:
        raise ValueError(f"operands must be one of {OPERAND_MODES}, got {operands!r}")
    f64 = torch.float64
    x = torch.tensor(inp.x, dtype=f64, requires_grad=True)
    w_r = torch.tensor(inp.w_router, dtype=f64, requires_grad=True)
    wi = torch.tensor(inp.wi, dtype=f64, requires_grad=True)
    wo = torch.tensor(inp.wo, dtype=f64, requires_grad=True)
    t, k, e = inp.x.shape[0], inp.top_k, inp.num_experts

    if operands == "exact":
        gmm = _grouped_matmul(_identity, _identity)

        def store(v):
            return v
    else:
        store = _straight_through(_round_bf16)
        if operands == "bf16":
            gmm = _grouped_matmul(_round_bf16, _round_bf16)
        else:
            gmm = _grouped_matmul(_fp8_roundtrip((1, BLOCK)), _fp8_roundtrip((BLOCK, BLOCK)))

    logits = x @ w_r + torch.tensor(inp.router_bias, dtype=f64)
    probs = torch.softmax(logits, dim=1)
    experts, _ = route_numpy(inp)
    p_sel = torch.gather(probs, 1, torch.from_numpy(experts))
    weights = p_sel / p_sel.sum(dim=1, keepdim=True)

    flat = experts.reshape(-1)
    order = np.argsort(flat, kind="stable")
    group_sizes = np.bincount(flat, minlength=e).astype(np.int32)
    x_perm = x[torch.from_numpy(order // k)]
    f = inp.wi.shape[2] // 2
    h = store(gmm(x_perm, wi, group_sizes))
    act = store(torch.nn.functional.silu(h[:, :f]) * h[:, f:])
    y_perm = store(gmm(act, wo, group_sizes))
    y_pairs = torch.zeros_like(y_perm).index_copy(0, torch.from_numpy(order), y_perm)
    out = torch.einsum("tk,tkd->td", weights, y_pairs.reshape(t, k, -1))
    out.backward(torch.tensor(inp.dy, dtype=f64))

    def grad(leaf: torch.Tensor) -> np.ndarray:
        assert leaf.grad is not None  # every leaf above requires grad and feeds `out`
        return leaf.grad.numpy()

    return MoEOutputs(out=out.detach().numpy(), dx=grad(x), d_router=grad(w_r),
                      d_wi=grad(wi), d_wo=grad(wo), group_sizes=group_sizes)

