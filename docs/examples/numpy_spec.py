"""The numpy gmm-fp8 kernel as a KernelSpec (docs/contract.md): what it is and its claims
live in code, so `--kernel docs/examples/numpy_spec.py:SPEC` needs no other flag.  It
imports its sibling module as any kernel file may."""

from numpy_gmm_fp8 import gmm_fp8

from fp8check.contracts import KernelSpec, MatmulClaims

SPEC = KernelSpec(
    name="my-numpy-gmm-fp8", contract="gmm-fp8", framework="numpy", fn=gmm_fp8,
    claims=MatmulClaims(
        out_dtypes=("f32", "bf16"),  # every output dtype it returns (the default)
        m_align=1,  # group sizes it takes: any
        deterministic=True,  # two calls give the same bits: checked
        accum=None,  # no bit-exact recipe claimed: checked against the error bound
    ),
)
