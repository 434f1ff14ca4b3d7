"""Layer 3's optimizer: AdamW in float32 numpy and its learning-rate schedule, the same
for every precision and framework."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fp8check.layers.training.model import Params


@dataclass(frozen=True)
class Schedule:
    """AdamW hyperparameters and the run length.  lr warms up linearly over `warmup`
    steps, then follows a cosine to `lr * final_lr_frac`; weight decay is decoupled."""

    steps: int
    tokens: int = 64
    lr: float = 3e-3
    warmup: int = 5
    final_lr_frac: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.01
    snr_every: int = 5  # gradient SNR against f32 every this many steps

    def __post_init__(self) -> None:
        if self.steps < 1 or self.tokens < 1 or self.snr_every < 1:
            raise ValueError(f"steps, tokens and snr_every must be >= 1: {self}")

    def lr_at(self, step: int) -> float:
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        span = max(1, self.steps - self.warmup)
        cos = 0.5 * (1 + math.cos(math.pi * min(1.0, (step - self.warmup) / span)))
        return self.lr * (self.final_lr_frac + (1 - self.final_lr_frac) * cos)


@dataclass
class AdamW:
    """AdamW in float32 numpy (bias-corrected moments, decoupled weight decay)."""

    schedule: Schedule
    m: Params = field(default_factory=dict)
    v: Params = field(default_factory=dict)
    t: int = 0

    def update(self, params: Params, grads: Params) -> Params:
        s = self.schedule
        b1, b2 = s.betas
        lr = np.float32(s.lr_at(self.t))
        self.t += 1
        new: Params = {}
        for k, p in params.items():
            g = grads[k].astype(np.float32)
            self.m[k] = b1 * self.m.get(k, np.zeros_like(p)) + (1 - b1) * g
            self.v[k] = b2 * self.v.get(k, np.zeros_like(p)) + (1 - b2) * g * g
            m_hat = self.m[k] / (1 - b1 ** self.t)
            v_hat = self.v[k] / (1 - b2 ** self.t)
            upd = m_hat / (np.sqrt(v_hat) + s.eps) + s.weight_decay * p
            new[k] = (p - lr * upd).astype(np.float32)
        return new
