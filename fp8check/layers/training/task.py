"""Layer 3's tasks: next-token prediction where the model sees the current token only.

* `MarkovTask`: a stationary random Markov chain.  The best achievable expected loss is
  the chain's entropy rate H = sum_i pi_i H(P_i) (nats), `MarkovTask.entropy_rate`.
* `TextTask`: real text, the bytes of a corpus (by default the Python standard library's
  own source files, present on every machine).  A batch draws corpus positions uniformly
  (with replacement), so (token, next) pairs are i.i.d. from the corpus's empirical bigram
  distribution, and the best achievable expected loss of a model that sees one token is
  that distribution's conditional entropy H(next | token) = -sum_ab p(a,b) log p(b|a),
  computed exactly from the bigram counts (`TextTask.entropy_rate`): no other function of
  the current token has a lower expected cross-entropy (Gibbs' inequality).

The untrained model starts near log V.  Batches are a pure function of (seed, step): every
precision and framework sees the same data order.
"""

from __future__ import annotations

import hashlib
import sysconfig
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np


class TrainingTask(Protocol):
    """What the trainer needs of a task."""

    @property
    def vocab(self) -> int: ...

    @property
    def entropy_rate(self) -> float: ...

    def batch(self, seed: int, step: int, tokens: int) -> tuple[np.ndarray, np.ndarray]: ...


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


BYTE_VOCAB = 256


@dataclass(frozen=True)
class TextTask:
    """Next-byte prediction on `data` (uint8 [N], N >= 2); `source` names the corpus and
    `digest` is its sha256 (the corpus is part of the case: results say which one)."""

    data: np.ndarray
    source: str
    digest: str

    @property
    def vocab(self) -> int:
        return BYTE_VOCAB

    @property
    def entropy_rate(self) -> float:
        """H(next | token) in nats of the corpus's bigram distribution (module docstring)."""
        d = self.data.astype(np.int64)
        pairs = np.bincount(d[:-1] * BYTE_VOCAB + d[1:], minlength=BYTE_VOCAB**2)
        counts = pairs.reshape(BYTE_VOCAB, BYTE_VOCAB).astype(np.float64)
        rows = counts.sum(axis=1, keepdims=True)
        nz = counts > 0
        cond = np.where(nz, counts / np.where(rows > 0, rows, 1.0), 1.0)
        return float(-np.sum(counts[nz] * np.log(cond[nz])) / counts.sum())

    def batch(self, seed: int, step: int, tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """(bytes [T], next bytes [T]) int32 at `tokens` uniform positions."""
        rng = np.random.default_rng(zlib.crc32(f"text/{seed}/{step}".encode()))
        pos = rng.integers(0, self.data.shape[0] - 1, size=tokens)
        return self.data[pos].astype(np.int32), self.data[pos + 1].astype(np.int32)


def text_task(data: bytes, source: str) -> TextTask:
    """The `TextTask` of the corpus `data`.  ValueError for fewer than 2 bytes."""
    if len(data) < 2:
        raise ValueError(f"text corpus {source}: needs at least 2 bytes, got {len(data)}")
    return TextTask(np.frombuffer(data, np.uint8).copy(), source,
                    hashlib.sha256(data).hexdigest())


def stdlib_corpus(max_bytes: int = 1 << 22) -> tuple[bytes, str]:
    """(bytes, name) of the Python standard library's top-level `*.py` files in name
    order, cut at `max_bytes`.  Present on every machine; its contents follow the Python
    version, so a text case's results record the corpus digest."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = bytearray()
    for f in sorted(root.glob("*.py")):
        out += f.read_bytes()
        if len(out) >= max_bytes:
            break
    return bytes(out[:max_bytes]), f"python{sysconfig.get_python_version()}-stdlib"
