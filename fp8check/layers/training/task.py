"""Layer 3's synthetic task: next-token prediction on a stationary random Markov chain.

The context is the current token only, so the best achievable expected loss is the chain's
entropy rate H = sum_i pi_i H(P_i) (nats), which `MarkovTask.entropy_rate` gives exactly;
the untrained model starts near log V.  Batches are i.i.d. (token ~ pi, next ~ P[token]),
a pure function of (seed, step): every precision and framework sees the same data order.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np


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
