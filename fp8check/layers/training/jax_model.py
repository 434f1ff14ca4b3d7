"""The layer-3 tiny MoE model in JAX on the JAX MoE layer
(`fp8check.layers.moe.jax_layer.moe_layer`).

The model is `fp8check.layers.training.model`'s (its docstring): fixed embedding and head in
float32, two residual MoE blocks on rmsnorm'd bf16 inputs, mean cross-entropy.  Only the
blocks' grouped matmuls differ between runs (an `ExpertMatmuls` variant, or any
`GroupedMatmul` a test injects).  The whole loss-and-gradient step is one `jax.jit`
(so the grouped matmuls are traced: group sizes are traced int32 arrays): interpret-mode
Pallas kernels are traced once and then run as compiled XLA, so a step costs milliseconds
on a CPU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fp8check.layers.moe.jax_layer import GroupedMatmul, moe_layer
from fp8check.layers.training.model import GradFn, ModelConfig, Params, frozen_params


def _rmsnorm(h: jax.Array) -> jax.Array:
    return h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + 1e-6)


def make_grad_fn(cfg: ModelConfig, gmm: GroupedMatmul, task_seed: int = 0) -> GradFn:
    """A `GradFn` (numpy params in, (loss, numpy grads) out) of the model whose expert
    matmuls are the differentiable grouped matmul `gmm`."""
    emb, head = (jnp.asarray(a) for a in frozen_params(cfg, task_seed))
    no_bias = jnp.zeros(cfg.experts, jnp.float32)

    def loss_fn(params, tokens, targets):
        h = emb[tokens]
        for b in range(cfg.blocks):
            out, _ = moe_layer(_rmsnorm(h).astype(jnp.bfloat16), params[f"b{b}.w_router"],
                               no_bias, params[f"b{b}.wi"], params[f"b{b}.wo"],
                               top_k=cfg.top_k, gmm=gmm)
            h = h + out
        logits = _rmsnorm(h) @ head
        nll = jax.nn.logsumexp(logits, axis=1) - jnp.take_along_axis(
            logits, targets[:, None], axis=1)[:, 0]
        return jnp.mean(nll)

    step = jax.jit(jax.value_and_grad(loss_fn))

    def grad_fn(params: Params, tokens: np.ndarray, targets: np.ndarray):
        loss, grads = step({k: jnp.asarray(v) for k, v in params.items()},
                           jnp.asarray(tokens), jnp.asarray(targets))
        return float(loss), {k: np.asarray(v, np.float32) for k, v in grads.items()}

    return grad_fn
