"""Argument checks shared by the Pallas kernels, and the interpret-mode switch.

Every check raises ValueError with a one-line message.  Checks on values (group sizes)
run only when the values are concrete; under `jax.jit` they are traced and the kernels
rely on the caller (the contract says sum(group_sizes) <= M).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def use_interpret(interpret: bool | None) -> bool:
    """Whether to run in interpret mode: `interpret`, or when None, unless the backend is TPU."""
    if interpret is None:
        return jax.default_backend() != "tpu"
    return bool(interpret)


def check_array(name: str, x, ndim: int, dtypes: tuple) -> jax.Array:
    """`x` as a jax array, after checking its rank and dtype."""
    x = jnp.asarray(x)
    if x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(x.shape)}")
    if x.dtype not in [np.dtype(d) for d in dtypes]:
        names = ", ".join(np.dtype(d).name for d in dtypes)
        raise ValueError(f"{name} must have dtype {names}, got {x.dtype}")
    return x


def check_group_sizes(group_sizes, num_groups: int, m: int) -> jax.Array:
    """group_sizes as int32 [num_groups]; when concrete: non-negative with sum <= m."""
    gs: jax.Array
    if isinstance(group_sizes, jax.core.Tracer):
        gs = group_sizes
    else:
        host = np.asarray(group_sizes)
        if host.ndim != 1 or host.shape[0] != num_groups:
            raise ValueError(f"group_sizes must have shape ({num_groups},), got {host.shape}")
        if not np.issubdtype(host.dtype, np.integer):
            raise ValueError(f"group_sizes must be integers, got {host.dtype}")
        if (host < 0).any():
            raise ValueError(f"group_sizes must be non-negative, got {host.tolist()}")
        if host.sum() > m:
            raise ValueError(f"sum(group_sizes)={int(host.sum())} exceeds M={m}")
        gs = jnp.asarray(host)
    if gs.shape != (num_groups,):
        raise ValueError(f"group_sizes must have shape ({num_groups},), got {gs.shape}")
    return gs.astype(jnp.int32)


def check_out_dtype(out_dtype, allowed=(jnp.float32, jnp.bfloat16)) -> np.dtype:
    dt = np.dtype(out_dtype)
    if dt not in [np.dtype(a) for a in allowed]:
        raise ValueError(f"out_dtype must be one of {[np.dtype(a).name for a in allowed]}, "
                         f"got {dt.name}")
    return dt


def pad_rows(x: jax.Array, rows: int) -> jax.Array:
    """`x` with zero rows appended up to `rows` rows (the kernels need M % tm == 0)."""
    extra = rows - x.shape[0]
    return x if extra == 0 else jnp.pad(x, ((0, extra),) + ((0, 0),) * (x.ndim - 1))
