"""The search space: per-phase tilings, their hard constraints, and directed mutations.

A candidate is one phase's `Tiling(tm, tk, tn)`; its subchannel count is tk / 128 (the fwd
kernel runs one 128-deep matmul per quantization block inside a K tile).  Hard constraints
are the kernels' own (`kernels.pallas.tiling.resolve_tiling`: tk, tn multiples of 128 that
divide their dimensions, tm a multiple of the input dtype's sublane packing, the VMEM
estimate within the budget) plus one of the search's: no tile larger than its dimension,
since the kernel would clamp it to a tiling that is already in the space.

Mutations are directed steps from a parent (variants with a direction, not random
numbers): double or halve one of tm, tk, tn; move the K reduction
between the grid and the subchannel loop (all of K in one tile, or one 128-wide
subchannel per grid step); or trade depth for width (tk x2 with tn / 2, and back).
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np

from fp8check.kernels.pallas.tiling import (
    LANES,
    Tiling,
    resolve_tiling,
    sublane_multiple,
    vmem_bytes,
)
from fp8check.tune.shapes import GmmShape

# (input dtype, output dtype) of each phase in training: FP8 forward with a bf16 output,
# bf16 backward ("zero backward quantization"), f32 weight gradient.
PHASE_DTYPES: dict[str, tuple[np.dtype, np.dtype]] = {
    "fwd": (np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.bfloat16)),
    "dgrad": (np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.bfloat16)),
    "tgmm": (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)),
}


def rejection(phase: str, tiling: Tiling, shape: GmmShape) -> str | None:
    """Why `tiling` cannot run `phase` at `shape` (None when it can), before it runs."""
    m, k, n = shape.phase_dims(phase)
    in_dt, out_dt = PHASE_DTYPES[phase]
    for name, tile, dim in (("tk", tiling.tk, k), ("tn", tiling.tn, n)):
        if tile > dim:
            return f"{name}={tile} exceeds its dimension {dim}"
    align = sublane_multiple(in_dt)
    rows = -(-m // align) * align  # what the kernel clamps tm to
    if tiling.tm > rows and tiling.tm % align == 0:
        return f"tm={tiling.tm} exceeds the {m} rows (the kernel would clamp it to {rows})"
    try:
        resolve_tiling(phase, tiling, m=m, k=k, n=n, in_dtype=in_dt, out_dtype=out_dt)
    except ValueError as e:
        return str(e)
    return None


def footprint_bytes(phase: str, tiling: Tiling) -> int:
    """VMEM estimate of one grid step (the kernels' `vmem_bytes`), in bytes: it depends on
    the tiles only (the scale blocks are per K tile)."""
    in_dt, out_dt = PHASE_DTYPES[phase]
    return vmem_bytes(phase, tiling, in_dt.itemsize, out_dt.itemsize)


def default_tiling(phase: str, shape: GmmShape) -> Tiling:
    """The kernels' per-phase default (`DEFAULT_TILINGS`) as resolved at `shape`."""
    m, k, n = shape.phase_dims(phase)
    in_dt, out_dt = PHASE_DTYPES[phase]
    return resolve_tiling(phase, None, m=m, k=k, n=n, in_dtype=in_dt, out_dtype=out_dt)


def baseline_tiling(phase: str, shape: GmmShape) -> Tiling:
    """The reference point of every speedup: the default with tk = 128 (one quantization
    block per K tile, the pre-subchannel kernel: tk == block_size)."""
    return default_tiling(phase, shape)._replace(tk=LANES)


def _scaled(t: Tiling, **factors: float) -> Tiling:
    return t._replace(**{d: int(getattr(t, d) * f) for d, f in factors.items()})


# name -> (tiling, k of the phase) -> mutated tiling.  Each is one directed step.
MUTATIONS: dict[str, Callable[[Tiling, int], Tiling]] = {
    "double tm": lambda t, k: _scaled(t, tm=2),
    "halve tm": lambda t, k: _scaled(t, tm=0.5),
    "double tk": lambda t, k: _scaled(t, tk=2),
    "halve tk": lambda t, k: _scaled(t, tk=0.5),
    "double tn": lambda t, k: _scaled(t, tn=2),
    "halve tn": lambda t, k: _scaled(t, tn=0.5),
    "all K in subchannels": lambda t, k: t._replace(tk=k),
    "all K on the grid": lambda t, k: t._replace(tk=LANES),
    "deeper, narrower (tk x2, tn /2)": lambda t, k: _scaled(t, tk=2, tn=0.5),
    "shallower, wider (tk /2, tn x2)": lambda t, k: _scaled(t, tk=0.5, tn=2),
}


def mutate(parent: Tiling, op: str, phase: str, shape: GmmShape) -> Tiling:
    """`parent` after mutation `op` (a key of MUTATIONS).  The result may break a hard
    constraint: the search records it as rejected with `rejection`'s reason."""
    if op not in MUTATIONS:
        raise ValueError(f"unknown mutation {op!r}; expected one of {', '.join(MUTATIONS)}")
    return MUTATIONS[op](parent, shape.phase_dims(phase)[1])
