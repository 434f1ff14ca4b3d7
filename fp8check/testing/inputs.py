"""The asserts' inputs as numpy arrays: numpy, ml_dtypes, jax or torch arrays converted
bit for bit, dtypes, shapes and group sizes checked.  Bad input raises ValueError, from
frames pytest hides (`__tracebackhide__`): the user sees their call and the message."""

from __future__ import annotations

from typing import Any

import numpy as np

from fp8check.contracts import NUMPY_DTYPES, to_numpy

UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # bytes -> bits dtype


def as_array(x: Any, what: str) -> np.ndarray:
    """`x` as a numpy array with the same bits; ValueError when it is no array at all."""
    __tracebackhide__ = True
    try:
        return to_numpy(x)
    except Exception as e:  # an object that is no array at all
        raise ValueError(f"{what}: expected an array, got {type(x).__name__}") from e


def dtype_name(a: np.ndarray, what: str, allowed: tuple[str, ...]) -> str:
    """The name ("f32", "bf16", "e4m3fn" ...) of `a`'s dtype among `allowed`."""
    __tracebackhide__ = True
    for name in allowed:
        if a.dtype == NUMPY_DTYPES[name]:
            return name
    raise ValueError(f"{what} has dtype {a.dtype}; expected one of {', '.join(allowed)}")


def group_sizes_of(group_sizes: Any, g: int, m: int) -> np.ndarray:
    """`group_sizes` as int32[g], each >= 0, summing to at most `m` rows."""
    __tracebackhide__ = True
    gs = as_array(group_sizes, "group_sizes")
    if gs.ndim != 1 or gs.shape[0] != g or not np.issubdtype(gs.dtype, np.integer):
        raise ValueError(f"group_sizes must be {g} integers, got {gs.dtype}{list(gs.shape)}")
    if np.any(gs < 0) or int(gs.sum()) > m:
        raise ValueError(f"group_sizes {gs.tolist()} must be >= 0 with sum <= {m} rows")
    return gs.astype(np.int32)


def quantized_operand(x: Any, block: tuple[int, int], what: str) -> Any:
    """A QTensor from a QTensor or a (values, scales) pair; None for an unscaled array."""
    __tracebackhide__ = True
    from fp8check.references import QTensor

    if isinstance(x, QTensor):
        return x
    if isinstance(x, tuple | list):
        if len(x) != 2:
            raise ValueError(f"{what}: a quantized operand is (values, scales)")
        values, scales = as_array(x[0], f"{what} values"), as_array(x[1], f"{what} scales")
        fmt = dtype_name(values, f"{what} values", ("e4m3fn", "e5m2"))
        if scales.dtype != np.float32:
            raise ValueError(f"{what} scales have dtype {scales.dtype}; expected float32")
        return QTensor(values, scales, block, fmt, "as given")
    return None


def check_gmm_shapes(out: np.ndarray, lhs: np.ndarray, rhs: np.ndarray) -> None:
    """out [M,N] of lhs [M,K] and rhs [G,K,N], else ValueError."""
    __tracebackhide__ = True
    if lhs.ndim != 2 or rhs.ndim != 3 or lhs.shape[1] != rhs.shape[1]:
        raise ValueError(f"expected lhs [M,K] and rhs [G,K,N], got {list(lhs.shape)}, "
                         f"{list(rhs.shape)}")
    if out.shape != (lhs.shape[0], rhs.shape[2]):
        raise ValueError(f"out has shape {list(out.shape)}; expected [{lhs.shape[0]}, "
                         f"{rhs.shape[2]}]")
