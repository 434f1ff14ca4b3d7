"""Layer 3's training loop: AdamW steps of a model implementation (`GradFn`) on the
task's batches, with the loss curve and the gradient SNR against a reference model."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fp8check.layers.training.model import GradFn, ModelConfig, Params, init_params
from fp8check.layers.training.optimizer import AdamW, Schedule
from fp8check.layers.training.task import TrainingTask


@dataclass
class TrainLog:
    """One run: loss per step (nats, at the weights before that step's update), and the
    gradient SNR (dB, all trainable tensors concatenated, against the f32 dense model's
    gradients at the same weights and batch) at `snr_steps`.  A run stops at the first
    non-finite loss or gradient (`diverged_at`)."""

    loss: list[float] = field(default_factory=list)
    snr_steps: list[int] = field(default_factory=list)
    snr_db: list[float] = field(default_factory=list)
    diverged_at: int | None = None


def _flat(grads: Params, names: list[str]) -> np.ndarray:
    return np.concatenate([np.asarray(grads[n], np.float64).ravel() for n in names])


def train(grad_fn: GradFn, cfg: ModelConfig, sched: Schedule, task: TrainingTask, seed: int,
          *, snr_ref: GradFn | None = None) -> TrainLog:
    """Train `init_params(cfg, seed)` for `sched.steps` AdamW steps on `task`'s batches.

    `snr_ref` (usually the f32 dense model) is evaluated every `sched.snr_every` steps at
    the run's own weights and batch, and the SNR of `grad_fn`'s gradients against it logged.
    """
    from fp8check.measures.metrics import sqnr_db

    params, opt, log = init_params(cfg, seed), AdamW(sched), TrainLog()
    names = cfg.trainable()
    for step in range(sched.steps):
        tokens, targets = task.batch(seed, step, sched.tokens)
        loss, grads = grad_fn(params, tokens, targets)
        log.loss.append(float(loss))
        flat = _flat(grads, names)
        if not (math.isfinite(loss) and np.all(np.isfinite(flat))):
            log.diverged_at = step
            break
        if snr_ref is not None and step % sched.snr_every == 0:
            _, ref = snr_ref(params, tokens, targets)
            log.snr_steps.append(step)
            log.snr_db.append(sqnr_db(_flat(ref, names), flat))
        params = opt.update(params, grads)
    return log
