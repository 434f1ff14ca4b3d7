"""Analytic cost model of one Pallas GMM phase: the search's fitness where no TPU is present.

It is a MODEL, never a measurement, and everything that shows its numbers says so.  Per
phase and tiling it counts, on the kernel's real grid and visit list (balanced routing:
every expert gets M / G rows):

* MXU work: every grid step multiplies a whole tile, including the rows of other groups
  that a straddling row tile carries; each dot is padded up to the MXU's width on its
  contracted and output dimensions (a 128-deep subchannel dot half-fills a 256-wide MXU).
* VPU work: the fwd scale multiply-adds (3 per accumulator element per subchannel), the
  f32 accumulate of dgrad, and tgmm's row masks, transposed copy and accumulate.
* HBM bytes: Pallas copies a block into VMEM only when its block index changes from one
  grid step to the next, so the model replays each operand's block index over the grid and
  counts the changes (lhs re-read per N tile, rhs per visit, outputs once per tile...).
* VMEM footprint: `kernels.pallas.tiling.vmem_bytes`; above the budget a tiling is
  rejected before it gets here (`space.rejection`), below it it is reported.
* per-step overhead: a fixed cost per grid step (pipeline bookkeeping, DMA issue, loop).

Compute and DMA are double-buffered and overlap, the per-step overhead does not:
    time = max(MXU time, VPU time, HBM bytes / bandwidth) + steps x overhead.
The machine constants live in `MACHINE` and nowhere else.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from fp8check.kernels.pallas.tiling import LANES, Tiling
from fp8check.tune.shapes import GmmShape
from fp8check.tune.space import PHASE_DTYPES, footprint_bytes


@dataclass(frozen=True)
class Machine:
    """Constants of the modelled chip.  Assumed, not measured: no TPU was available."""

    name: str
    mxu_dim: int  # systolic array width; dots are padded to multiples of it
    fp8_flops_per_s: float  # MXU peak, both operands e4m3
    bf16_flops_per_s: float  # MXU peak, bf16
    vpu_ops_per_s: float  # f32 elementwise ops per second
    hbm_bytes_per_s: float
    step_overhead_s: float  # fixed cost of one grid step


# TPU v7x-like: published microbenchmarked MXU peaks (1662 TFLOPS FP8, 918 TFLOPS bf16),
# a 256-wide MXU, HBM at 7.4 TB/s; VPU throughput and the per-step overhead
# (a few tenths of a microsecond, the usual order for a Pallas TPU grid step) are guesses.
MACHINE = Machine(
    name="tpu-v7x-like (assumed constants)",
    mxu_dim=256,
    fp8_flops_per_s=1662e12,
    bf16_flops_per_s=918e12,
    vpu_ops_per_s=12e12,
    hbm_bytes_per_s=7.4e12,
    step_overhead_s=0.35e-6,
)

FITNESS_LABEL = "cost-model (not measured)"


@dataclass(frozen=True)
class Cost:
    """Modelled cost of one phase; times in microseconds, traffic and footprint in bytes."""

    steps: int
    mxu_us: float
    vpu_us: float
    hbm_bytes: int
    hbm_us: float
    overhead_us: float
    vmem_bytes: int
    total_us: float

    def to_dict(self) -> dict[str, float | int]:
        return {key: round(v, 4) if isinstance(v, float) else v
                for key, v in asdict(self).items()}


def balanced_group_sizes(m: int, g: int) -> np.ndarray:
    """m rows over g groups as evenly as possible (the first m % g groups get one more)."""
    return np.full(g, m // g, np.int64) + (np.arange(g) < m % g)


def visit_list(group_sizes: np.ndarray, tm: int, visit_empty_groups: bool
               ) -> tuple[np.ndarray, np.ndarray]:
    """(row tile, group) of every visit, in the kernels' order (`kernels.pallas.metadata`):
    one visit per row tile a group touches; an empty group gets one visit on the tile
    where it would start when `visit_empty_groups` (tgmm), none otherwise (fwd)."""
    ends = np.cumsum(group_sizes)
    starts = ends - group_sizes
    m_tiles = max(-(-int(ends[-1]) // tm), 1)
    tiles, groups = [], []
    for g, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        if e > s:
            first, last = s // tm, (e - 1) // tm
        elif visit_empty_groups:
            first = last = min(s // tm, m_tiles - 1)
        else:
            continue
        tiles.append(np.arange(first, last + 1))
        groups.append(np.full(last - first + 1, g))
    return np.concatenate(tiles), np.concatenate(groups)


def _fetches(*index: np.ndarray) -> int:
    """Copies of a block whose index over the flattened grid is the tuple `index`: one at
    the first step and one at every step where any component changes."""
    changed = np.zeros(index[0].size, bool)
    changed[0] = True
    for comp in index:
        changed[1:] |= comp[1:] != comp[:-1]
    return int(np.count_nonzero(changed))


def _grid(*extents: np.ndarray) -> list[np.ndarray]:
    """Flattened C-order indices of a grid whose axes enumerate the given arrays."""
    mesh = np.meshgrid(*extents, indexing="ij")
    return [a.ravel() for a in mesh]


def _padded(dim: int, unit: int) -> int:
    return -(-dim // unit) * unit


def phase_cost(phase: str, tiling: Tiling, shape: GmmShape,
               machine: Machine = MACHINE) -> Cost:
    """Modelled cost of `phase` with a valid `tiling` at `shape` (module docstring)."""
    tm, tk, tn = tiling
    m, k, n = shape.phase_dims(phase)
    in_dt, out_dt = PHASE_DTYPES[phase]
    ib, ob = in_dt.itemsize, out_dt.itemsize
    gs = balanced_group_sizes(m, shape.g)
    tiles, groups = visit_list(gs, tm, visit_empty_groups=phase == "tgmm")
    visits = np.arange(tiles.size)
    mxu = machine.mxu_dim
    if phase == "tgmm":
        # grid (n tile, k tile, visit); dot lhs^T [tk, tm] @ dy [tm, tn] contracts tm.
        n_i, k_i, v = _grid(np.arange(n // tn), np.arange(k // tk), visits)
        t, g = tiles[v], groups[v]
        steps = v.size
        hbm = (_fetches(t, k_i) * tm * tk * ib + _fetches(t, n_i) * tm * tn * ib
               + _fetches(g, k_i, n_i) * tk * tn * ob)
        flops = steps * 2 * tk * _padded(tm, mxu) * _padded(tn, mxu)
        # masks of both operands, the transposed lhs copy, the f32 accumulate
        vpu_ops = steps * (2 * tm * tk + tm * tn + tk * tn)
        peak = machine.bf16_flops_per_s
    else:
        # grid (n tile, visit, k tile); fwd and dgrad share the kernel.
        n_i, v, k_i = _grid(np.arange(n // tn), visits, np.arange(k // tk))
        t, g = tiles[v], groups[v]
        steps = v.size
        out_blocks = _fetches(t, n_i)
        hbm = (_fetches(t, k_i) * tm * tk * ib + _fetches(g, k_i, n_i) * tk * tn * ib
               + 2 * out_blocks * tm * tn * ob)  # the aliased initial output is read too
        if phase == "fwd":
            kb = k // LANES
            # whole-K scale blocks: lhs [tm, K/128] per row tile, rhs [K/128, tn] per group
            hbm += _fetches(t, n_i) * tm * kb * 4 + _fetches(g, n_i) * kb * tn * 4
            dot_depth, dots = LANES, tiling.num_subchannels  # the subchannel loop
            vpu_ops = steps * 3 * tm * tn * dots
            peak = machine.fp8_flops_per_s
        else:
            dot_depth, dots = tk, 1
            vpu_ops = steps * tm * tn
            peak = machine.bf16_flops_per_s
        flops = steps * dots * 2 * tm * _padded(dot_depth, mxu) * _padded(tn, mxu)
    mxu_us = flops / peak * 1e6
    vpu_us = vpu_ops / machine.vpu_ops_per_s * 1e6
    hbm_us = hbm / machine.hbm_bytes_per_s * 1e6
    overhead_us = steps * machine.step_overhead_s * 1e6
    return Cost(steps=int(steps), mxu_us=mxu_us, vpu_us=vpu_us, hbm_bytes=int(hbm),
                hbm_us=hbm_us, overhead_us=overhead_us,
                vmem_bytes=footprint_bytes(phase, tiling),
                total_us=max(mxu_us, vpu_us, hbm_us) + overhead_us)
