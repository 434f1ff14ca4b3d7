"""Hypothesis strategies for grouped matmuls, over the deterministic builders of
`fp8check.inputs.testdata` (re-exported here, so one import serves both).

Each strategy draws a pattern or distribution name and a seed and calls the same builders,
so hypothesis shrinks towards simple names and small seeds.  hypothesis is not a runtime
dependency of fp8check: this module needs the `test` extra (`pip install 'fp8check[test]'`)::

    @given(group_sizes(m=512, g=8))                    # named patterns + a shrinkable list
    @given(distributions())                            # a name from DISTRIBUTIONS
    @given(arrays((64, 256), dist="near-max"))         # float32 [64, 256]
    @given(gmm_inputs(max_m=256, max_g=4))           # GmmInputs, K and N multiples of 128

The builders (`GROUP_PATTERNS`, `DISTRIBUTIONS`, `GmmInputs`, `make_gmm_inputs`) and
the group-size sum rule are documented in `fp8check.inputs.testdata`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import strategies as st

from fp8check.inputs.testdata import (
    DISTRIBUTIONS,
    GROUP_PATTERNS,
    GmmInputs,
    check_group_args,
    check_name,
    gmm_inputs_from_sizes,
    make_gmm_inputs,
)
from fp8check.references.quant import BLOCK

__all__ = [
    "DISTRIBUTIONS", "GROUP_PATTERNS", "GmmInputs", "arrays", "distributions", "gmm_inputs",
    "group_sizes", "make_gmm_inputs",
]

_SEEDS = st.integers(0, 2**32 - 1)

def _applicable(m: int, g: int, name: str) -> bool:
    try:
        GROUP_PATTERNS[name](np.random.default_rng(0), m, g)
    except ValueError:
        return False
    return True


def group_sizes(
    m: int, g: int, patterns: Sequence[str] | None = None
) -> st.SearchStrategy[np.ndarray]:
    """int32[g] group sizes with sum <= m.

    patterns=None: every pattern of GROUP_PATTERNS that can be met for (m, g) (drawn as a
    name and a seed), plus a generic list-based strategy: g - 1 cut points and an unused
    tail drawn as integers, which reaches any size vector with sum <= m and shrinks
    element-wise (cut points towards 0, the unused tail towards 0: towards [0, ..., 0, m]).
    An explicit list uses only those patterns and raises ValueError if one cannot be met.

    Example: ``@given(group_sizes(512, 8))`` or
    ``@given(group_sizes(512, 8, patterns=["zero-middle", "residues"]))``.
    """
    check_group_args(m, g)
    if patterns is None:
        names = [p for p in GROUP_PATTERNS if _applicable(m, g, p)]
    else:
        names = list(patterns)
        for p in names:
            check_name(p, GROUP_PATTERNS, "group pattern")
            if not _applicable(m, g, p):
                raise ValueError(f"group_sizes: pattern {p!r} cannot be met for m={m}, g={g}")
        if not names:
            raise ValueError("group_sizes: patterns is empty")
    named = st.tuples(st.sampled_from(names), _SEEDS).map(
        lambda t: GROUP_PATTERNS[t[0]](np.random.default_rng(t[1]), m, g)
    )
    if patterns is not None:
        return named

    @st.composite
    def generic(draw) -> np.ndarray:
        unused = draw(st.one_of(st.just(0), st.integers(0, m)))
        cuts = draw(st.lists(st.integers(0, m), min_size=g - 1, max_size=g - 1))
        ends = np.minimum(np.sort(np.array(cuts, dtype=np.int64)), m - unused)
        return np.diff(np.concatenate(([0], ends, [m - unused]))).astype(np.int32)

    return st.one_of(generic(), named)


def distributions() -> st.SearchStrategy[str]:
    """A distribution name from DISTRIBUTIONS."""
    return st.sampled_from(list(DISTRIBUTIONS))


def arrays(shape: tuple, dist: str | None = None) -> st.SearchStrategy[np.ndarray]:
    """float32 arrays of `shape` from DISTRIBUTIONS[dist] (any distribution if None)."""
    if dist is not None:
        check_name(dist, DISTRIBUTIONS, "distribution")
    names = distributions() if dist is None else st.just(dist)
    return st.tuples(names, _SEEDS).map(
        lambda t: DISTRIBUTIONS[t[0]](np.random.default_rng(t[1]), shape)
    )


def gmm_inputs(
    max_m: int = 384,
    max_g: int = 4,
    k_blocks: tuple[int, int] = (1, 4),
    n_blocks: tuple[int, int] = (1, 2),
) -> st.SearchStrategy[GmmInputs]:
    """GmmInputs with m in [0, max_m], g in [1, max_g], K = 128 * k_blocks range, N =
    128 * n_blocks range (inclusive), group sizes from `group_sizes`, one distribution."""
    if max_m < 0 or max_g < 1:
        raise ValueError(f"gmm_inputs: need max_m >= 0, max_g >= 1, got {max_m}, {max_g}")
    for name, (lo, hi) in (("k_blocks", k_blocks), ("n_blocks", n_blocks)):
        if not 1 <= lo <= hi:
            raise ValueError(f"gmm_inputs: {name} must be (lo, hi) with 1 <= lo <= hi")

    @st.composite
    def problems(draw) -> GmmInputs:
        m = draw(st.integers(0, max_m))
        g = draw(st.integers(1, max_g))
        k = BLOCK * draw(st.integers(*k_blocks))
        n = BLOCK * draw(st.integers(*n_blocks))
        sizes = draw(group_sizes(m, g))
        return gmm_inputs_from_sizes(draw(_SEEDS), k, n, sizes, m, draw(distributions()))

    return problems()
