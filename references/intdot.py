"""What the integer-digit paths of the e4m3 gmm reference share (`references.amx`: AMX
int8 tiles; `references.vnni`: AVX512-VNNI int16 dot products): their C library's
loading and calling convention, and the cut of the rows into per-thread shares (run on
`cbuild.run_parallel`'s threads).

Each path's C file exports, with these signatures (pointers as uint64):

* `<prefix>_pack_rhs(codes, k, n, out) -> int`: one expert's rhs codes [k, n] uint8 -> its
  packed digits (the path's own layout, `DigitPath.packed_shape`); 1 if a code is a NaN;
* `<prefix>_gmm(a, lda, k, b, n, offsets, g, m0, m1, sa, sb, nb, code, out, ldo) -> int`:
  the recipe `code` (`RECIPE_CODES`) of rows [m0, m1) of a gmm in float32; 1 when a code
  it reads is a NaN (which the digits cannot carry: the caller takes another path);
* `<prefix>_partials(a, lda, rows, k, packed, n, out, ldk) -> int`: the exact 128-wide
  K-block partials of rows of one group in float64 (no NaN codes: the caller checks);
* `<prefix>_exact_gmm(a, k, b, n, offsets, g, m0, m1, sa, sb, nb, code, rows_per_pass,
  out, exact, mag, undecided, scale, metrics) -> int`: the production check's pass over
  rows [m0, m1) (references/forward_refs.py, exact_gmm.h): the recipe, the exact value
  and |A||B| at once, or with `metrics` (exact_gmm.h's metric_rows, else 0) their metrics
  against an output under test; 1 when a code it reads is a NaN;

the last three returning -1 when their scratch cannot be allocated.  Every path gives the
float64 BLAS path's bits (each C file's header has its exactness argument).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

from fp8check.references import cbuild
from fp8check.references.quant import BLOCK

RECIPE_CODES = {"deepgemm": 0, "cublas": 1, "tokamax": 2}
_PANEL = 8  # rows: the unit of a share's cut inside a group
_P, _I = ctypes.c_void_p, ctypes.c_int64


def row_shares(offsets: np.ndarray, parts: int) -> np.ndarray:
    """Boundaries [parts + 1] of `parts` contiguous row ranges of the groups (offsets
    [G + 1]) of about equal cost, each starting at one of a group's 8-row panels.  A panel
    costs 1 and packing a group's rhs about 1 more (about the work of 8 rows of
    the same K and N), so many tiny groups split as evenly as one large one."""
    rows = np.diff(offsets)
    panels = -(-rows // _PANEL)
    first = np.repeat(np.cumsum(panels) - panels, panels)
    idx = np.arange(panels.sum()) - first  # panel index within its group
    start = np.repeat(offsets[:-1], panels) + _PANEL * idx
    cost = 1 + (idx == 0)
    before = np.cumsum(cost) - cost
    j = np.searchsorted(before, np.arange(parts + 1) * cost.sum() / parts)
    return np.append(start, offsets[-1])[j]


class DigitPath:
    """One integer-digit path: its C library where this CPU runs it, else `status` says
    why not ("off (<reason>)"; `cbuild.load`)."""

    def __init__(self, name: str, source: Path, flags: tuple[str, ...],
                 needs: tuple[str, ...], switch: str, prefix: str,
                 packed_shape: Callable[[int, int], tuple[int, ...]], packed_dtype: type,
                 pass_bytes: int, start: Callable[[ctypes.CDLL], str] | None = None):
        """`pass_bytes`: the bytes of L2 an lhs code is counted as in `exact_gmm`'s pass
        (its digits and its magnitude's), which sizes the pass; `start(lib)`: "" once the library
        may run, else why not (AMX asks Linux for the tile state)."""
        self.prefix, self.packed_shape, self.packed_dtype = prefix, packed_shape, packed_dtype
        self.pass_bytes = pass_bytes
        lib, why = cbuild.load(name, source, flags, needs, switch)
        if lib is not None and start is not None:
            why = start(lib)
        self.lib = self.bind(lib) if lib is not None and not why else None
        self.status = f"off ({why})" if why else name

    def bind(self, lib: ctypes.CDLL) -> ctypes.CDLL:
        """lib with the signatures of the path's functions (module docstring) declared."""
        for fn, args, ret in (("pack_rhs", [_P, _I, _I, _P], ctypes.c_int),
                              ("gmm", [_P, _I, _I, _P, _I, _P, _I, _I, _I, _P, _P, _I, _I,
                                       _P, _I], ctypes.c_int),
                              ("partials", [_P, _I, _I, _I, _P, _I, _P, _I], ctypes.c_int),
                              ("exact_gmm", [_P, _I, _P, _I, _P, _I, _I, _I, _P, _P, _I,
                                             _I, _I, _P, _P, _P, _P, ctypes.c_double, _P],
                               ctypes.c_int)):
            f = getattr(lib, f"{self.prefix}_{fn}")
            f.argtypes, f.restype = args, ret
        return lib

    def fn(self, name: str) -> Callable[..., int]:
        """The library's `<prefix>_<name>` (module docstring); RuntimeError where the path
        is off."""
        if self.lib is None:
            raise RuntimeError(f"the {self.prefix} path is {self.status}")
        return getattr(self.lib, f"{self.prefix}_{name}")

    def pack_rhs(self, codes: np.ndarray) -> np.ndarray:
        """One expert's rhs e4m3fn codes [K, N] uint8 (K a multiple of 128) -> its packed
        digits (`packed_shape(K, N)`, the layout its C file describes)."""
        k, n = codes.shape
        out: np.ndarray = np.empty(self.packed_shape(k, n), self.packed_dtype)
        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        self.fn("pack_rhs")(codes.ctypes.data, k, n, out.ctypes.data)
        return out

    def gmm(self, a_codes: np.ndarray, sa: np.ndarray, b_codes: np.ndarray, sb: np.ndarray,
            offsets: np.ndarray, recipe: str, out: np.ndarray, parts: int | None = None) -> bool:
        """The recipe's float32 output of every group into out [M, N] (float32,
        C-contiguous; rows outside the groups are left alone): lhs codes [M, K] uint8 and
        scales sa [M, K/128], rhs codes [G, K, N] uint8 and scales sb [G, K/128,
        ceil(N/128)] float32, offsets [G + 1] (first row of each group, end of the last).
        Returns False where a code it reads (the groups' lhs rows, the rhs of a group with
        rows) is a NaN, which the digits cannot carry: the groups' rows of out then mean
        nothing.  The rows are cut into `parts` shares (`row_shares`; default numba's
        thread count) computed in parallel; the result does not depend on the cut."""
        m, k = a_codes.shape
        g, _, n = b_codes.shape
        a_codes = np.ascontiguousarray(a_codes, dtype=np.uint8)
        b_codes = np.ascontiguousarray(b_codes, dtype=np.uint8)
        sa = np.ascontiguousarray(sa, dtype=np.float32)
        sb = np.ascontiguousarray(sb, dtype=np.float32)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if out.dtype != np.float32 or out.shape != (m, n) or not out.flags.c_contiguous:
            raise ValueError(f"out must be C-contiguous float32 {(m, n)}")
        cuts = row_shares(offsets, parts or numba.get_num_threads()).tolist()
        fn = self.fn("gmm")
        return 1 not in cbuild.run_parallel([
            (fn, (a_codes.ctypes.data, k, k, b_codes.ctypes.data, n, offsets.ctypes.data, g,
                  r0, r1, sa.ctypes.data, sb.ctypes.data, sb.shape[2], RECIPE_CODES[recipe],
                  out.ctypes.data, n))
            for r0, r1 in zip(cuts[:-1], cuts[1:], strict=True) if r1 > r0])

    def exact_partials(self, a_codes: np.ndarray, b_packed: np.ndarray, n: int,
                       parts: int | None = None,
                       scratch: np.ndarray | None = None) -> np.ndarray:
        """The exact 128-wide K-block partials sum_k a[r, k] b[k, j] of lhs e4m3fn codes
        [m, K] (uint8, no NaN codes) and one expert's rhs packed by `pack_rhs` (N
        columns), in value units -> float64 [K/128, m, N] (each exact), the rows cut into
        `parts` shares (`row_shares`) computed in parallel (default numba's thread
        count).  With `scratch` (flat float64, at least K/128 m N long) the result is a
        view of its front: a caller that reuses one buffer saves the page faults of a
        fresh one."""
        m, k = a_codes.shape
        a_codes = np.ascontiguousarray(a_codes, dtype=np.uint8)
        size = (k // BLOCK) * m * n
        if scratch is not None and (scratch.dtype != np.float64 or scratch.ndim != 1
                                    or scratch.size < size or not scratch.flags.c_contiguous):
            raise ValueError(f"scratch must be flat contiguous float64 of >= {size} elements")
        out = (np.empty(size) if scratch is None else scratch[:size]).reshape(k // BLOCK, m, n)
        cuts = row_shares(np.array([0, m]), parts or numba.get_num_threads()).tolist()
        fn = self.fn("partials")
        cbuild.run_parallel([
            (fn, (a_codes.ctypes.data + r0 * k, k, r1 - r0, k, b_packed.ctypes.data, n,
                  out.ctypes.data + r0 * n * out.itemsize, m * n))
            for r0, r1 in zip(cuts[:-1], cuts[1:], strict=True) if r1 > r0])
        return out
