"""Layer 1 (single op): one kernel on one case, every criterion a named, reported metric.

Two questions, never mixed (see `fp8check.profiles`):

* correctness, against the bit-exact reference on the *same* quantized operands:
  - `finite`: no NaN/Inf unless the exact reference has them at the same place;
  - `bound_ratio` <= 1 (rigorous: any valid float32 summation order passes);
  - `error_ratio` <= 2 against a naive same-precision implementation (dequantized
    operands, a float32 sum in K order per group, `naive_matmul`, rounded to the output
    dtype);
  - `bias_z` and `bias_z_signed` within the profile's limits: a sign test of the side of
    RN(exact) the outputs land on, toward or away from zero (truncation) and toward
    -inf or +inf (a directed rounding mode);
  - `deterministic`: two calls give the same bits (kernels that declare it);
  - `bit_exact` against `gmm(..., accum=<declared>)` on `exact_partials` cases;
  - `quantizer_bit_exact`: values and scales bit for bit equal to the recipe, or, for
    a quantizer declaring `division_ulps`, `quantizer_approx_division`: what the recipe
    allows from divisions within that many ulps (`references.quant_approx`).
* quantization impact, FP8 (or bf16) result vs the unquantized float64 reference:
  SQNR (dB), calc_diff and allclose(atol, rtol) against the profile's thresholds.

Only rows below sum(group_sizes) of a [M,N] output are compared: the contract leaves the
rows past the groups undefined (`fp8check.contracts`).
"""

from fp8check.layers.op.criteria import (
    BadOutput,
    PlotHook,
    output_criteria,
    quantizer_output_criteria,
)
from fp8check.layers.op.problem import (
    Problem,
    ProblemCache,
    StreamedProblem,
    build_problem,
    gmm_fp8_problem,
    streamed_gmm_fp8_problem,
    tgmm_problem,
    unscaled_gmm_problem,
)
from fp8check.layers.op.streamed import streamed_output_criteria
from fp8check.layers.op.validate import LAYER, skipped_result, validate_case

__all__ = [
    "LAYER", "BadOutput", "PlotHook", "Problem", "ProblemCache", "build_problem",
    "gmm_fp8_problem", "output_criteria", "unscaled_gmm_problem", "quantizer_output_criteria",
    "skipped_result", "StreamedProblem", "streamed_gmm_fp8_problem",
    "streamed_output_criteria", "tgmm_problem", "validate_case",
]
