"""The GMM problem a tiling is tuned for, and its dimensions in each phase's tiling letters.

A shape is the forward grouped matmul of one MoE projection: out[M, N] = x[M, K] @ W_g[K, N]
over G experts.  The three kernels of its training step tile different dimensions with the
same letters (`kernels.pallas.tiling`): tk always tiles the contracted dimension of fwd and
dgrad and the K of dW for tgmm, so each phase sees (m, k, n) as follows:

* fwd   (M, K, N): out = x @ W_g
* dgrad (M, N, K): dX = dY @ W_g^T contracts W's N and writes K columns
* tgmm  (M, K, N): dW_g = x_g^T @ dY_g reduces over M and writes a [K, N] tile
"""

from __future__ import annotations

import re
from typing import NamedTuple

from fp8check.kernels.pallas.tiling import PHASES, PRODUCTION_SHAPES
from fp8check.references.quant import BLOCK


class GmmShape(NamedTuple):
    """Forward GMM sizes: M rows (tokens x top_k), K in, N out, G experts (groups)."""

    m: int
    k: int
    n: int
    g: int

    def phase_dims(self, phase: str) -> tuple[int, int, int]:
        """(m, k, n) in `phase`'s tiling letters (module docstring)."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; expected one of {PHASES}")
        return (self.m, self.n, self.k) if phase == "dgrad" else (self.m, self.k, self.n)

    def label(self) -> str:
        return f"M={self.m},K={self.k},N={self.n},G={self.g}"


# `dev` is the EP=8 shard of wi (M = 65536 / 8, G = 256 / 8): one device's share under
# 8-way expert parallelism.
NAMED_SHAPES: dict[str, GmmShape] = {
    "wi": GmmShape(**PRODUCTION_SHAPES["wi"]),
    "wo": GmmShape(**PRODUCTION_SHAPES["wo"]),
    "dev": GmmShape(**PRODUCTION_SHAPES["wi-dev"]),
    "wi-dev": GmmShape(**PRODUCTION_SHAPES["wi-dev"]),
    "wo-dev": GmmShape(**PRODUCTION_SHAPES["wo-dev"]),
}

_SPEC_ITEM = re.compile(r"^\s*([mkng])\s*=\s*(\d+)\s*$", re.IGNORECASE)


def parse_shape(text: str) -> GmmShape:
    """A named shape (wi, wo, dev, wi-dev, wo-dev) or `M=..,K=..,N=..,G=..` (any order).

    Raises ValueError for an unknown name, a missing or repeated letter, non-positive
    sizes, or K / N not multiples of 128 (the FP8 quantization block).
    """
    if text in NAMED_SHAPES:
        return NAMED_SHAPES[text]
    sizes: dict[str, int] = {}
    for item in text.split(","):
        match = _SPEC_ITEM.match(item)
        if match is None:
            raise ValueError(f"shape {text!r}: expected one of {', '.join(NAMED_SHAPES)} "
                             "or M=..,K=..,N=..,G=..")
        letter = match.group(1).lower()
        if letter in sizes:
            raise ValueError(f"shape {text!r}: {letter.upper()} given twice")
        sizes[letter] = int(match.group(2))
    missing = [c.upper() for c in "mkng" if c not in sizes]
    if missing:
        raise ValueError(f"shape {text!r}: missing {', '.join(missing)}")
    shape = GmmShape(**sizes)
    if min(shape) < 1:
        raise ValueError(f"shape {text!r}: sizes must be positive")
    if shape.k % BLOCK or shape.n % BLOCK:
        raise ValueError(f"shape {text!r}: K and N must be multiples of {BLOCK}")
    return shape
