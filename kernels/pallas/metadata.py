"""Group metadata for the grouped-matmul grids (scalar-prefetched into SMEM).

The rows of group g are [offsets[g], offsets[g+1]).  The kernels walk a 1-D list of
"visits": visit i works on row tile `m_tile_ids[i]` for group `group_ids[i]`.  A row tile
that straddles a group boundary is visited once per group it holds, and each visit only
stores (fwd) or only reads (tgmm) the rows of its own group (`row_mask`).  Visits of one
row tile are consecutive and groups appear in order, so a kernel can keep an output block
resident across the visits of one tile (fwd) or one group (tgmm).

Same idea as jax's megablox `make_group_metadata`, computed directly: group g covers tiles
first_tile[g] .. last_tile[g], so visit i of group g is tile first_tile[g] + (i - start[g]).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class GroupMetadata(NamedTuple):
    """offsets [G+1] (row where each group starts; offsets[G] = sum of sizes), group_ids and
    m_tile_ids [tiles_m + G - 1] (the visit list, padded past `num_visits` with its last entry).
    """

    offsets: jax.Array
    group_ids: jax.Array
    m_tile_ids: jax.Array


def make_group_metadata(
    group_sizes: jax.Array, *, m: int, tm: int, visit_empty_groups: bool
) -> tuple[GroupMetadata, jax.Array]:
    """Visit list for `group_sizes` [G] int32 over m rows (m a multiple of tm) in tm-row tiles.

    visit_empty_groups=False (fwd: an empty group has nothing to store) skips empty groups;
    True (tgmm: every group's dW must be written, zeros for an empty one) gives each empty
    group one visit, on the tile where it would start (clamped to the last tile).
    Returns (metadata, num_visits) with num_visits a traced int32 scalar: the grid extent.
    """
    if m % tm:
        raise ValueError(f"m={m} must be a multiple of tm={tm}")
    tiles_m = m // tm
    num_groups = group_sizes.shape[0]
    ends = jnp.cumsum(group_sizes, dtype=jnp.int32)
    starts = ends - group_sizes
    offsets = jnp.concatenate([jnp.zeros((1,), jnp.int32), ends])
    nonempty = group_sizes > 0
    first_tile = jnp.minimum(starts // tm, tiles_m - 1)
    last_tile = jnp.where(nonempty, (ends - 1) // tm, first_tile)
    visits = jnp.where(nonempty, last_tile - first_tile + 1, 1 if visit_empty_groups else 0)
    # Every tile is visited once by the group owning its first row, plus once per group that
    # starts inside it or is empty and visited: at most tiles_m + G - 1 visits in total.
    length = tiles_m + num_groups - 1
    group_ids = jnp.repeat(jnp.arange(num_groups, dtype=jnp.int32), visits,
                           total_repeat_length=length)
    first_visit = jnp.cumsum(visits) - visits
    visit = jnp.arange(length, dtype=jnp.int32)
    m_tile_ids = (first_tile[group_ids] + visit - first_visit[group_ids]).astype(jnp.int32)
    num_visits = jnp.sum(visits).astype(jnp.int32)
    # The padding entries repeat the last group; keep their tile in range as well.
    m_tile_ids = jnp.minimum(m_tile_ids, tiles_m - 1)
    return GroupMetadata(offsets, group_ids, m_tile_ids), num_visits


def row_mask(
    meta: GroupMetadata, visit: jax.Array, *, tm: int, width: int
) -> jax.Array:
    """[tm, width] bool: which rows of visit `visit`'s row tile belong to its group."""
    group = meta.group_ids[visit]
    rows = jax.lax.broadcasted_iota(jnp.int32, (tm, width), 0) + meta.m_tile_ids[visit] * tm
    return (rows >= meta.offsets[group]) & (rows < meta.offsets[group + 1])
