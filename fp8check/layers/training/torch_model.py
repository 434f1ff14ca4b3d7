"""The layer-3 tiny MoE model in torch on the torch MoE layer
(`fp8check.layers.moe.torch_layer.moe_layer`).

The model is `fp8check.layers.training.model`'s (its docstring): fixed embedding and head in
float32, two residual MoE blocks on rmsnorm'd bf16 inputs, mean cross-entropy.  Only the
blocks' grouped matmuls differ between runs (an `ExpertMatmuls` variant, or any
`GroupedMatmul` a test injects).
"""

from __future__ import annotations

import numpy as np
import torch

from fp8check.layers.moe.torch_layer import GroupedMatmul, moe_layer
from fp8check.layers.training.dense import torch_single_thread
from fp8check.layers.training.model import GradFn, ModelConfig, Params, frozen_params


def _rmsnorm(h: torch.Tensor) -> torch.Tensor:
    return h * torch.rsqrt(torch.mean(h * h, dim=-1, keepdim=True) + 1e-6)


def make_grad_fn(cfg: ModelConfig, gmm: GroupedMatmul, task_seed: int = 0) -> GradFn:
    """A `GradFn` (numpy params in, (loss, numpy grads) out) of the model whose expert
    matmuls are the differentiable grouped matmul `gmm`."""
    emb, head = (torch.from_numpy(a) for a in frozen_params(cfg, task_seed))
    no_bias = torch.zeros(cfg.experts)
    names = cfg.trainable()

    @torch_single_thread()  # ~20% faster: the torch glue between kernels is tiny
    def grad_fn(params: Params, tokens: np.ndarray, targets: np.ndarray):
        p = {k: torch.tensor(params[k], dtype=torch.float32, requires_grad=True)
             for k in names}
        h = emb[torch.from_numpy(tokens.astype(np.int64))]
        for b in range(cfg.blocks):
            out, _ = moe_layer(_rmsnorm(h).to(torch.bfloat16), p[f"b{b}.w_router"], no_bias,
                               p[f"b{b}.wi"], p[f"b{b}.wo"], top_k=cfg.top_k, gmm=gmm)
            h = h + out
        logits = _rmsnorm(h) @ head
        loss = torch.nn.functional.cross_entropy(
            logits, torch.from_numpy(targets.astype(np.int64)))
        grads = torch.autograd.grad(loss, [p[k] for k in names])
        return float(loss.detach()), {k: g.numpy() for k, g in zip(names, grads, strict=True)}

    return grad_fn
