"""Kernel contracts: what a kernel under test is called with and what it must return.

The user's documentation of every contract (call, layouts per framework, what is compared,
what to declare, an example per framework) is `docs/contract.md` (`CONTRACT_DOC`); every
error about a kernel that breaks its contract points there.

A kernel under test is a `KernelSpec`.  The gate hands it numpy arrays converted into the
kernel's framework and converts its result back to numpy (fp8 crosses as the framework's
own fp8 dtype: ml_dtypes for numpy and jax, `torch.float8_e4m3fn` for torch).  After each
call the arguments handed are compared bit for bit with what was passed (`run_kernel`,
`fp8check.measures.integrity`): a kernel must not write into its inputs.

| contract   | call                                                              | returns      |
|------------|-------------------------------------------------------------------|--------------|
| `gmm-fp8`  | fn(lhs_q [M,K] e4m3fn, lhs_scale [M,K/128] f32,                   | [M,N]        |
|            |    rhs_q [G,K,N] e4m3fn, rhs_scale [G,K/128,N/128] f32, gs [G] i32) |            |
| `gmm`      | fn(lhs [M,K] bf16, rhs [G,K,N] bf16, gs [G] i32)                  | [M,N]        |
| `tgmm`     | fn(lhs [M,K] bf16, dy [M,N] bf16, gs [G] i32)                     | [G,K,N]      |
| `quantizer`| fn(x)                                                             | (q, scales)  |

Output dtype: a matmul kernel whose signature takes an `out_dtype` keyword (or **kwargs)
is called with `out_dtype=<the framework's dtype object>` of the case; one that does not
is called without it (`takes_out_dtype`), and on every case its result must have the
case's dtype: a kernel that returns one dtype only declares it (`MatmulClaims.out_dtypes`,
the gate's `--out-dtypes`), else its other cases fail, saying so.  Rows at or past sum(group_sizes)
are never compared.  A bare function becomes a spec through `spec_from_target(
"module:attr" or "path/file.py:attr", contract, framework)`.

Each contract is a `Contract` (`table`: `contract_of(name)`, `CONTRACTS_BY_NAME`), holding
its argument table, its output, what a case's operands become, and what the gate, the
layers and `fp8check.testing` do with its kernels.  The modules: `table` (the contracts),
`frameworks` (dtypes and arrays across numpy, jax and torch), `claims` (what a kernel
declares about itself: `MatmulClaims`, `QuantizerClaims`), `spec` (`KernelSpec`: a
kernel's identity and its claims), `call` (calling a kernel), `loading` (a user's kernel
by name).
"""

from fp8check.contracts.call import (
    KernelCall,
    call_kernel,
    out_dtype_kwargs,
    run_kernel,
    takes_out_dtype,
)
from fp8check.contracts.claims import (
    ACCUMS,
    F32_UNIT_ROUNDOFF,
    OUT_DTYPES,
    QUANT_BLOCKS,
    ClaimError,
    Claims,
    MatmulClaims,
    QuantizerClaims,
    check_claims,
    claims_for,
    claims_type,
    declare,
)
from fp8check.contracts.frameworks import (
    FRAMEWORKS,
    NUMPY_DTYPES,
    framework_dtype,
    to_framework,
    to_numpy,
)
from fp8check.contracts.loading import load_target, spec_from_target
from fp8check.contracts.spec import KernelSpec
from fp8check.contracts.table import (
    ARG_NAMES,
    CONTRACT_DOC,
    CONTRACTS,
    CONTRACTS_BY_NAME,
    GMM,
    GMM_FP8,
    LAYER_CONTRACTS,
    QUANTIZER,
    TGMM,
    Arg,
    Contract,
    Operand,
    contract_of,
)

__all__ = [
    "ACCUMS", "ARG_NAMES", "CONTRACTS", "CONTRACTS_BY_NAME", "CONTRACT_DOC",
    "F32_UNIT_ROUNDOFF", "FRAMEWORKS", "GMM", "GMM_FP8", "LAYER_CONTRACTS", "NUMPY_DTYPES",
    "OUT_DTYPES", "QUANTIZER", "QUANT_BLOCKS", "TGMM", "Arg", "ClaimError", "Claims",
    "Contract", "KernelCall", "KernelSpec", "MatmulClaims", "Operand", "QuantizerClaims",
    "call_kernel", "check_claims", "claims_for", "claims_type", "contract_of", "declare",
    "framework_dtype", "load_target", "out_dtype_kwargs", "run_kernel", "spec_from_target",
    "takes_out_dtype", "to_framework", "to_numpy",
]
