"""Per-phase tilings of the Pallas GMM kernels: defaults, clamping and validation.

A tiling is `(tm, tk, tn)`.  What the three letters tile depends on the phase:

* ``fwd``   out[M,N] = lhs[M,K] @ W_g[K,N]:   tm rows, tk the reduction (K), tn the output N.
* ``dgrad`` dX[M,K] = dY[M,N] @ W_g[K,N]^T:   tm rows, tk the reduction (W's N), tn the
  output columns (W's K).  It runs the fwd kernel with a transposed rhs, so the letters keep
  the fwd kernel's meaning: tk is always the contracted dimension.
* ``tgmm``  dW_g[K,N] = lhs_g[:,K]^T dY_g[:,N]: tm the reduction (rows of M), tk and tn the
  output tile of dW.

Defaults come from the production MoE model's shapes: wi M=65536, K=2048, N=512, G=256;
wo K and N swapped; the dev shard M=8192, G=32 has the same K and N, so the same tilings
apply to it.  Reasoning per entry:

* fwd: the reduction is K.  With the subchannel loop tk no longer has to equal the 128-wide
  quantization block, so take the whole K (wi tk=2048, 16 subchannels; wo tk=512, 4): the
  MXU gets 16 (or 4) back-to-back 128-deep matmuls per grid step and the scale multiplies
  on the VPU overlap with them.  tm=256 fills the MXU rows; tn as wide as the output
  allows (the source design's production tilings: wi (256, 2048, 1024), wo (256, 512, 2048); wi's
  tn=1024 clamps to N=512 here).
* tgmm: the reduction is M.  Each step holds the [tm, tk] lhs tile, its transpose [tk, tm]
  (a VMEM transpose keeps both copies), the [tm, tn] dY tile and a [tk, tn] f32
  accumulator.  Everything that scales with tm is paid twice for the lhs, so tgmm takes a
  smaller tm=128 and spends VMEM on the output tile instead.
* dgrad: the same kernel as fwd, in bf16 (no quantization in the backward), contracted
  over W's N: wi reduces over 512 and writes 2048 columns, wo the other way round.

Every tiling is clamped to the problem (a tile never exceeds its dimension) and then
validated: tk and tn multiples of 128 that divide their dimensions, tm a multiple of the
dtype's sublane packing, and the VMEM estimate within `VMEM_BUDGET_BYTES`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

LANES = 128  # TPU vector lane width, and the FP8 quantization block along K
PHASES = ("fwd", "tgmm", "dgrad")

# 16 MiB: the default scoped-VMEM limit of TPU v5e, the smallest among v5e / v6e / v7x, so a
# tiling that fits it compiles everywhere without raising the limit.
VMEM_BUDGET_BYTES = 16 * 2**20


class Tiling(NamedTuple):
    """Tile sizes (tm, tk, tn); see the module docstring for each phase's meaning."""

    tm: int
    tk: int
    tn: int

    @property
    def num_subchannels(self) -> int:
        """128-wide quantization blocks per K tile (the fwd subchannel loop count)."""
        return self.tk // LANES


PRODUCTION_SHAPES: dict[str, dict[str, int]] = {
    "wi": {"m": 65536, "k": 2048, "n": 512, "g": 256},
    "wo": {"m": 65536, "k": 512, "n": 2048, "g": 256},
    "wi-dev": {"m": 8192, "k": 2048, "n": 512, "g": 32},
    "wo-dev": {"m": 8192, "k": 512, "n": 2048, "g": 32},
}

TILINGS: dict[str, dict[str, Tiling]] = {
    "wi": {
        "fwd": Tiling(256, 2048, 1024),
        "tgmm": Tiling(128, 1024, 512),
        "dgrad": Tiling(256, 512, 1024),
    },
    "wo": {
        "fwd": Tiling(256, 512, 2048),
        "tgmm": Tiling(128, 512, 1024),
        "dgrad": Tiling(256, 2048, 512),
    },
}

# Used when a caller passes tiling=None.  Clamping makes wi's entries valid for wo as well.
DEFAULT_TILINGS: dict[str, Tiling] = TILINGS["wi"]


def sublane_multiple(dtype) -> int:
    """Row alignment of a VMEM tile of `dtype`: 8 rows of 32 bits, packed (bf16 16, fp8 32)."""
    return 8 * 4 // np.dtype(dtype).itemsize


def vmem_bytes(phase: str, tiling: Tiling, in_bytes: int, out_bytes: int) -> int:
    """Estimated VMEM use in bytes of one grid step of `phase` with `tiling`.

    Pipelined operands are double-buffered (x2).  fwd/dgrad: lhs and rhs tiles, the scale
    blocks of the K tile (f32, FP8 only: lhs [tm, nsub] takes a full 128-lane row per
    sublane, rhs [nsub, tn] at least 8 sublanes), the initial-output and output tiles and
    the f32 accumulator.  Gate layer 0 measures the compiled kernel's blocks from Mosaic
    (`fp8check.targets.tpu`) and tests hold this estimate to it.  tgmm: lhs and dY tiles, the
    transposed lhs copy (f32), the output tile and the f32 accumulator.
    """
    tm, tk, tn = tiling
    if phase == "tgmm":
        inputs = 2 * (tm * tk + tm * tn) * in_bytes
        return inputs + tk * tm * 4 + 2 * tk * tn * out_bytes + tk * tn * 4
    inputs = 2 * (tm * tk + tk * tn) * in_bytes
    scales = 2 * (tm * LANES + max(tk // LANES, 8) * tn) * 4 if in_bytes == 1 else 0
    return inputs + scales + 2 * 2 * tm * tn * out_bytes + tm * tn * 4


def _largest_dividing_tile(tile: int, dim: int) -> int:
    """Largest multiple of LANES <= tile dividing dim (dim itself when dim < LANES)."""
    for t in range(tile - tile % LANES, 0, -LANES):
        if dim % t == 0:
            return t
    return dim


def resolve_tiling(
    phase: str,
    tiling: tuple[int, int, int] | None,
    *,
    m: int,
    k: int,
    n: int,
    in_dtype,
    out_dtype,
) -> Tiling:
    """Clamp `tiling` (or the phase default when None) to an (m, k, n) problem and validate it.

    (m, k, n) are the problem in the tiling's own letters: m the rows, k the dimension tk
    tiles, n the dimension tn tiles.  tm is clamped to m rounded up to the sublane multiple
    of `in_dtype`; tk, tn to k, n (a phase default also shrinks to a tile that divides k,
    n; an explicit tiling must divide them).  Raises ValueError for an unknown phase, non-positive
    tiles, tk or tn not a multiple of 128 or not dividing k or n, tm not a sublane multiple,
    or a VMEM estimate above `VMEM_BUDGET_BYTES`.
    """
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; expected one of {PHASES}")
    raw = DEFAULT_TILINGS[phase] if tiling is None else tiling
    if len(raw) != 3 or not all(isinstance(t, int | np.integer) and t > 0 for t in raw):
        raise ValueError(f"tiling must be three positive ints (tm, tk, tn), got {raw!r}")
    tm, tk, tn = (int(t) for t in raw)
    if tk % LANES or tn % LANES:
        raise ValueError(f"{phase} tiling {tuple(raw)}: tk and tn must be multiples of {LANES}")
    align = sublane_multiple(in_dtype)
    if tm % align:
        raise ValueError(f"{phase} tiling {tuple(raw)}: tm must be a multiple of {align} "
                         f"for {np.dtype(in_dtype).name} inputs")
    clamped = Tiling(min(tm, -(-m // align) * align), min(tk, k), min(tn, n))
    if tiling is None:
        # A default is a size target, not a demand: shrink tk / tn to the largest multiple of
        # 128 that divides the problem (N = 768 with a 512 default gets 384).
        clamped = Tiling(clamped.tm, _largest_dividing_tile(clamped.tk, k),
                         _largest_dividing_tile(clamped.tn, n))
    for name, dim, tile in (("k", k, clamped.tk), ("n", n, clamped.tn)):
        if dim % tile:
            raise ValueError(f"{phase}: {name}={dim} is not a multiple of its tile {tile} "
                             f"(tiling {tuple(raw)})")
    need = vmem_bytes(phase, clamped, np.dtype(in_dtype).itemsize,
                      np.dtype(out_dtype).itemsize)
    if need > VMEM_BUDGET_BYTES:
        raise ValueError(f"{phase} tiling {tuple(clamped)} needs ~{need / 2**20:.1f} MiB of "
                         f"VMEM, above the {VMEM_BUDGET_BYTES / 2**20:.0f} MiB budget")
    return clamped
