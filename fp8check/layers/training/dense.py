"""The f32 dense implementation of layer 3's model (`model`): torch float32 autograd,
every expert a plain matmul, no kernels.  It is the f32 baseline run and the reference of
the gradient SNR."""

from __future__ import annotations

import contextlib

import numpy as np

from fp8check.layers.training.model import GradFn, ModelConfig, Params, frozen_params


def _rmsnorm(torch, h):
    return h * torch.rsqrt(torch.mean(h * h, dim=-1, keepdim=True) + 1e-6)


def _moe_f32(torch, x, w_router, wi, wo, top_k: int):
    probs = torch.softmax(x @ w_router, dim=1)
    p_sel, experts = torch.topk(probs, top_k, dim=1)
    weights = p_sel / p_sel.sum(dim=1, keepdim=True)
    f = wi.shape[2] // 2
    out = torch.zeros_like(x)
    for e in range(w_router.shape[1]):
        tok, slot = torch.nonzero(experts == e, as_tuple=True)
        h = x[tok] @ wi[e]
        y = (torch.nn.functional.silu(h[:, :f]) * h[:, f:]) @ wo[e]
        out = out.index_add(0, tok, weights[tok, slot, None] * y)
    return out


@contextlib.contextmanager
def torch_single_thread():
    """Run torch ops on one intra-op thread, restoring the setting after.  The model's
    matmuls are tiny ([64, 128] x [128, 256]): at that size thread hand-offs cost more
    than the second thread saves."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def dense_f32_grad_fn(cfg: ModelConfig, task_seed: int = 0) -> GradFn:
    """The model in torch float32 with dense expert matmuls, as a `GradFn`."""
    import torch

    emb, head = (torch.from_numpy(a) for a in frozen_params(cfg, task_seed))
    names = cfg.trainable()

    @torch_single_thread()
    def grad_fn(params: Params, tokens: np.ndarray, targets: np.ndarray):
        p = {k: torch.tensor(params[k], dtype=torch.float32, requires_grad=True)
             for k in names}
        h = emb[torch.from_numpy(tokens.astype(np.int64))]
        for b in range(cfg.blocks):
            h = h + _moe_f32(torch, _rmsnorm(torch, h), p[f"b{b}.w_router"], p[f"b{b}.wi"],
                             p[f"b{b}.wo"], cfg.top_k)
        logits = _rmsnorm(torch, h) @ head
        loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(
            targets.astype(np.int64)))
        grads = torch.autograd.grad(loss, [p[k] for k in names])
        return float(loss.detach()), {k: g.numpy() for k, g in zip(names, grads, strict=True)}

    return grad_fn
