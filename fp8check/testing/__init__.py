"""Assertions for a kernel's own test suite: the gate's layer-1 criteria, one call each.

    from fp8check.testing import assert_gmm_matches
    out = my_gmm(lq.values, lq.scales, rq.values, rq.scales, group_sizes)
    assert_gmm_matches(out, lq, rq, group_sizes)               # QTensors the kernel consumed
    assert_gmm_matches(out, x, w, group_sizes, recipe="deepgemm")  # or the float inputs

Every assertion builds the same `Problem` the gate builds and applies the same criteria
(`fp8check.layers.op.output_criteria` / `quantizer_output_criteria`: one implementation),
so a test and the gate reach the same verdict on the same data.  The kernel's claims
(`fp8check.contracts.MatmulClaims` / `QuantizerClaims`: accum, hopper_interval,
flushes_subnormals, ...) are keywords of the asserts by the same names, or a `claims=`
object: every claim the gate's command line declares, the asserts declare, and the
criteria get the same claims object.  On failure the
AssertionError names each failed criterion, how many elements are off, the worst one
(index, group, row within the group, K/N tile, value, reference, ULP distance, bound) and
a one-line reproduction:

* the inputs are saved to an .npz (in `$FP8CHECK_FAILURE_DIR`, else beside the pytest
  plugin's report, else the temp dir; the name is a hash of the content) and the line
  `python -c "from fp8check.testing import replay; replay('/abs/path.npz')"` re-runs the
  assertion on them anywhere, without the kernel;
* inside a test driven by the `fp8check_case` fixture (pytest plugin), the gate command
  for that case is printed too (`fp8check gate --kernel ... --case <id>`).

Inputs may be numpy, ml_dtypes, jax or torch arrays (converted bit for bit).  Every
assertion returns the `CaseResult` when it passes, and reports it (pass or fail) to the
listeners that `add_listener` registered (the pytest plugin's `--fp8check-report`).
Bad input (shapes, dtypes, unknown names) raises ValueError, not AssertionError.
pytest shows a failure as the test's line and the message: fp8check's own frames are
hidden (`__tracebackhide__`).

A kernel must not write into its inputs: `GateCase.assert_matches` checks the arguments
it handed (`args`, `args_as`) bit for bit (`inputs_unchanged`), and
`out = assert_inputs_unchanged(kernel, *args)` calls a kernel and asserts the same of its
arguments, naming each one written.

Layers 2 and 3 around a user's kernels (the MoE layer and training built around its
forward and backward kernels): `assert_layers_pass(forward, framework=..., tgmm=...,
dgrad=...)` (`layers`).

Modules: `asserts` (the public asserts and `replay`), `gate_case` (`GateCase`),
`engine` (the one path from criteria to the AssertionError), `message` (its text),
`replay_record` (`ReplayRecord`, its .npz), `unchanged` (`assert_inputs_unchanged`),
`recording` (listeners, the assertion scope, the failure directory: the pytest plugin's
API), `inputs` (array coercion and checks), `exactness` (`partials_exact_in_f32`).
Where an element lies comes from `fp8check.layers.op.locations` (the gate's FAIL lines
say it too).
"""

from fp8check.testing.asserts import (
    assert_bitexact,
    assert_gmm_matches,
    assert_quantizer_matches,
    assert_tgmm_matches,
    replay,
)
from fp8check.testing.exactness import partials_exact_in_f32
from fp8check.testing.gate_case import GateCase
from fp8check.testing.layers import assert_layers_pass
from fp8check.testing.recording import FAILURE_DIR_ENV as FAILURE_DIR_ENV
from fp8check.testing.recording import add_listener, remove_listener
from fp8check.testing.unchanged import assert_inputs_unchanged

__all__ = [
    "GateCase",
    "add_listener",
    "assert_bitexact",
    "assert_gmm_matches",
    "assert_inputs_unchanged",
    "assert_layers_pass",
    "assert_quantizer_matches",
    "assert_tgmm_matches",
    "partials_exact_in_f32",
    "remove_listener",
    "replay",
]
