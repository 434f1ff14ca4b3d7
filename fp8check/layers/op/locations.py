"""Where an element of a layer-1 output lies, in the kernel's terms, for failure messages
(`fp8check.testing`'s AssertionError, the gate's FAIL lines): its group and row within
the group, its K/N tiles, its quantization block."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fp8check.references.quant import BLOCK

Locate = Callable[[list[int]], str]  # an element's index -> where it lies, in words


def _group_of(gs: np.ndarray, row: int) -> tuple[int, int, int]:
    """(group, its first row, its end row) of output row `row`."""
    ends = np.cumsum(gs)
    g = int(np.searchsorted(ends, row, side="right"))
    return g, int(ends[g] - gs[g]), int(ends[g])


def _tile(axis: str, i: int) -> str:
    t = i // BLOCK
    return f"{axis} tile {t} ({axis.lower()} {t * BLOCK}-{t * BLOCK + BLOCK - 1})"


def in_gmm_output(gs: np.ndarray) -> Locate:
    """An element [row, col] of a grouped matmul's [M,N] output."""
    def where(idx: list[int]) -> str:
        r, c = idx
        g, r0, r1 = _group_of(gs, r)
        return (f"group {g} (rows {r0}-{r1 - 1}), row {r - r0} of the group, "
                f"{_tile('N', c)}")
    return where


def in_tgmm_output(gs: np.ndarray) -> Locate:
    """An element [group, k, n] of a weight gradient's [G,K,N] output."""
    def where(idx: list[int]) -> str:
        g, k, n = idx
        r0 = int(np.sum(gs[:g]))
        return (f"group {g} (rows {r0}-{r0 + int(gs[g]) - 1}, M_g = {int(gs[g])}), "
                f"{_tile('K', k)}, {_tile('N', n)}")
    return where


def in_quantized(block: tuple[int, int]) -> Locate:
    """A quantized value [..., row, col]: its block of the scale grid."""
    def where(idx: list[int]) -> str:
        *lead, r, c = idx
        return f"block ({r // block[0]}, {c // block[1]}) of {block[0]}x{block[1]}"
    return where


def nowhere(idx: list[int]) -> str:
    """No location beyond the index (assert_bitexact's arbitrary arrays)."""
    return ""
