"""Layer-3 training, the framework-neutral pieces: the tiny MoE model's shape and
initialisation, the synthetic task, the data order, AdamW, the training loop, and the f32
dense variant of the model (torch float32 autograd, no kernels).

The model (every framework computes exactly this; only the two expert GMMs of each block
change between precisions):

    h      = embed[token]                                   [T, D]  f32
    h      = h + moe_b(rmsnorm(h))        for b = 0, 1       (the layer-2 MoE layer)
    logits = rmsnorm(h) @ head                              [T, V]  f32
    loss   = mean cross-entropy(logits, next_token)         nats

The embedding and the head are fixed random matrices and are *not* trained: the
only trainable parameters are the routers and expert weights of the two MoE blocks, so
everything the model learns goes through the kernels under test and a kernel error cannot
be compensated by an embedding that learns around it.

The task: next-token prediction on a stationary random Markov chain over V tokens.  The
context is the current token only, so the best achievable expected loss is the chain's
entropy rate H = sum_i pi_i H(P_i) (nats), which `MarkovTask.entropy_rate` gives exactly;
the untrained model starts near log V.  Batches are i.i.d. (token ~ pi, next ~ P[token]),
a pure function of (seed, step): every precision and framework sees the same data order.
"""

from __future__ import annotations

import contextlib
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

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
        if self.d_model % 128 or self.d_ff % 128:
            raise ValueError(f"d_model and d_ff must be multiples of 128, got "
                             f"{self.d_model}, {self.d_ff}")
        if not 1 <= self.top_k <= self.experts:
            raise ValueError(f"top_k must be in [1, {self.experts}], got {self.top_k}")

    def trainable(self) -> list[str]:
        """Names of the trainable tensors, in a fixed order."""
        return [f"b{b}.{t}" for b in range(self.blocks) for t in BLOCK_TENSORS]


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


@dataclass(frozen=True)
class MarkovTask:
    """A stationary Markov chain over `vocab` tokens: transition [V, V] (rows sum to 1)
    and its stationary distribution [V], float64."""

    transition: np.ndarray
    stationary: np.ndarray

    @property
    def vocab(self) -> int:
        return self.transition.shape[0]

    @property
    def entropy_rate(self) -> float:
        """The best achievable expected loss in nats: sum_i pi_i H(P_i)."""
        p = self.transition
        row_h = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0.0), axis=1)
        return float(self.stationary @ row_h)

    def batch(self, seed: int, step: int, tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """(tokens [T], next tokens [T]) int32 of one step, a pure function of its args."""
        rng = np.random.default_rng(zlib.crc32(f"markov/{seed}/{step}".encode()))
        cur = rng.choice(self.vocab, size=tokens, p=self.stationary)
        u = rng.random(tokens)
        nxt = np.minimum((u[:, None] > np.cumsum(self.transition[cur], axis=1)).sum(1),
                         self.vocab - 1)
        return cur.astype(np.int32), nxt.astype(np.int32)


def make_task(vocab: int = 64, temperature: float = 2.0, task_seed: int = 0) -> MarkovTask:
    """A random chain: row i = softmax(temperature * N(0, 1)^V); larger temperature gives
    peakier rows (lower entropy rate).  The same task serves every run seed."""
    rng = np.random.default_rng(zlib.crc32(f"markov-task/{vocab}/{task_seed}".encode()))
    z = temperature * rng.standard_normal((vocab, vocab))
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    w, v = np.linalg.eig(p.T)
    pi = np.abs(np.real(v[:, np.argmin(np.abs(w - 1))]))
    return MarkovTask(transition=p, stationary=pi / pi.sum())


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


@dataclass
class AdamW:
    """AdamW in float32 numpy (bias-corrected moments, decoupled weight decay), the same
    optimizer for every precision and framework."""

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


def train(grad_fn: GradFn, cfg: ModelConfig, sched: Schedule, task: MarkovTask, seed: int,
          *, snr_ref: GradFn | None = None) -> TrainLog:
    """Train `init_params(cfg, seed)` for `sched.steps` AdamW steps on `task`'s batches.

    `snr_ref` (usually the f32 dense model) is evaluated every `sched.snr_every` steps at
    the run's own weights and batch, and the SNR of `grad_fn`'s gradients against it logged.
    """
    from fp8check.metrics import sqnr_db

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


# --- the f32 dense variant: the model in torch float32, every expert a plain matmul -----


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
    matmuls are tiny ([64, 128] x [128, 256]): thread hand-offs cost more than they save
    (measured: a dense f32 step 59 ms with 2 threads, 9 ms with 1, on the 2-core CI box)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def dense_f32_grad_fn(cfg: ModelConfig, task_seed: int = 0) -> GradFn:
    """The model (module docstring) in torch float32 with dense expert matmuls: the f32
    baseline run and the reference of the gradient SNR."""
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
