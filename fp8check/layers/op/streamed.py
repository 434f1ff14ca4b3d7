"""The layer-1 criteria of one output on a streamed (production-shape) case: the criteria
engine (`layers.op.engine`, the code behind `criteria.output_criteria`) over the output's
row chunks, each chunk's exact value, |A||B| and recipe reference computed for it alone
(`chunks.StreamedChunks`): no [M, N] float64 array is built.

Every criterion is the in-memory one, value for value, where the streamed chunks give its
references: `finite`, `bound_ratio`, `bias_z`, `bias_z_signed`, `bit_exact` where it
applies, and `error_ratio` against a tensor-core model; the reported ULP, allclose and
SQNR figures vs the exact value.  Not evaluated, and listed in
`metrics["streamed_not_evaluated"]`: what needs a reference that is not streamed, the
naive float32 kernel's output (`error_ratio` against a float32 accumulator), the
unquantized operands' float64 product (the impact criteria), and a tensor core's
truncation term (its `bound_ratio`; `bit_exact` against the model, a stronger check,
decides).  No per-case plots (they need [M, N] references).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fp8check.contracts import MatmulClaims
from fp8check.layers.op.chunks import StreamedChunks
from fp8check.layers.op.engine import evaluate
from fp8check.layers.op.problem import StreamedProblem
from fp8check.profiles import Profile
from fp8check.results.model import Criterion


def streamed_output_criteria(
    out: np.ndarray, prob: StreamedProblem, profile: Profile, m: dict[str, Any], *,
    claims: MatmulClaims, rows_per_chunk: int = 2048,
) -> list[Criterion]:
    """The criteria of `out` [M, N] (the problem's dtype) on a streamed problem, in the
    order `output_criteria` lists them; metrics go into `m`, the names of the criteria
    not evaluated into `m["streamed_not_evaluated"]`.  `claims` as in
    `output_criteria`; `rows_per_chunk`
    bounds the streamed chunks (memory O(rows_per_chunk K + rows_per_chunk N))."""
    crit, skipped = evaluate(out, StreamedChunks(prob, rows_per_chunk), profile, m, claims)
    m["streamed_not_evaluated"] = skipped
    return crit
