"""Layer 3's tiny MoE model, framework-neutral: its shape, its parameters and their
initialisation, and the signature every implementation of it has (`GradFn`).

The model (every framework computes exactly this; only the two expert GMMs of each block
change between precisions):

    h      = embed[token]                                   [T, D]  f32
    h      = h + moe_b(rmsnorm(h))        for b = 0, 1       (the layer-2 MoE layer)
    logits = rmsnorm(h) @ head                              [T, V]  f32
    loss   = mean cross-entropy(logits, next_token)         nats

The embedding and the head are fixed random matrices and are *not* trained: the
only trainable parameters are the routers and expert weights of the two MoE blocks, so
everything the model learns goes through the kernels under test and a kernel error cannot
be compensated by an embedding that learns around it.  Implementations: `dense` (f32,
no kernels), `pallas` and `triton` (the families' MoE layers).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fp8check.references.quant import BLOCK

Params = dict[str, np.ndarray]
# (params, tokens [T] int32, targets [T] int32) -> (mean loss in nats, grads like params)
GradFn = Callable[[Params, np.ndarray, np.ndarray], tuple[float, Params]]

BLOCK_TENSORS = ("w_router", "wi", "wo")


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the tiny MoE model.  d_model and d_ff are multiples of 128 (the kernels'
    quantization block)."""

    vocab: int = 64
    d_model: int = 128
    d_ff: int = 128
    experts: int = 4
    top_k: int = 2
    blocks: int = 2

    def __post_init__(self) -> None:
        if self.d_model % BLOCK or self.d_ff % BLOCK:
            raise ValueError(f"d_model and d_ff must be multiples of {BLOCK}, got "
                             f"{self.d_model}, {self.d_ff}")
        if not 1 <= self.top_k <= self.experts:
            raise ValueError(f"top_k must be in [1, {self.experts}], got {self.top_k}")

    def trainable(self) -> list[str]:
        """Names of the trainable tensors, in a fixed order."""
        return [f"b{b}.{t}" for b in range(self.blocks) for t in BLOCK_TENSORS]


def frozen_params(cfg: ModelConfig, task_seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The fixed (untrained) embedding [V, D] ~ N(0, 1) and head [D, V] ~ N(0, 1/D), f32.
    The untrained model's logits are then ~N(0, 1): its loss starts near log V + 1/2."""
    rng = np.random.default_rng(zlib.crc32(f"frozen/{cfg.vocab}/{cfg.d_model}/{task_seed}"
                                           .encode()))
    emb = rng.standard_normal((cfg.vocab, cfg.d_model))
    head = rng.standard_normal((cfg.d_model, cfg.vocab)) / np.sqrt(cfg.d_model)
    return emb.astype(np.float32), head.astype(np.float32)


def init_params(cfg: ModelConfig, seed: int) -> Params:
    """Trainable float32 parameters, a pure function of (cfg, seed): w_router ~ N(0, 1/D),
    wi ~ N(0, 1/D) (unit-scale GMM outputs on unit-RMS inputs), wo ~ N(0, 1/F) / blocks
    (the residual branches start small)."""
    rng = np.random.default_rng(zlib.crc32(f"init/{seed}".encode()))
    d, f, e = cfg.d_model, cfg.d_ff, cfg.experts
    out: Params = {}
    for b in range(cfg.blocks):
        out[f"b{b}.w_router"] = rng.standard_normal((d, e)) / np.sqrt(d)
        out[f"b{b}.wi"] = rng.standard_normal((e, d, 2 * f)) / np.sqrt(d)
        out[f"b{b}.wo"] = rng.standard_normal((e, f, d)) / np.sqrt(f) / cfg.blocks
    return {k: v.astype(np.float32) for k, v in out.items()}
