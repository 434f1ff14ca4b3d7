"""A user's kernels as the expert matmuls of layers 2 and 3 (`user_matmuls`): the MoE layer
and the training model of the kernels' framework, built around them.

* forward, contract `gmm-fp8` (variant "fp8"): each grouped matmul quantizes its operands
  with the `deepgemm` recipe, as the straight-through reference does (x [M, K] in 1x128
  blocks, w [G, K, N] in 128x128 blocks per expert: `<framework>_grouped.quantize`), and
  calls the kernel on (x values, x scales, w values, w scales, group_sizes);
* forward, contract `gmm` (variant "bf16"): the kernel on bf16 copies of (x, w), group_sizes;
* the kernel's output is asked for in bf16 (the layer's storage dtype) when it declares
  bf16, else in float32 and rounded to bf16 by the layer (said in the results' `forward`);
* backward: the user's `dgrad` (dy [M, N] bf16, w [G, K, N] bf16, group_sizes) -> dX [M, K]
  and `tgmm` (x [M, K] bf16, dy [M, N] bf16, group_sizes) -> dW [G, K, N], float32 or bf16;
  where one is not given, fp8check's bf16 reference backward (`bf16_dgrad`, `bf16_tgmm`:
  bf16 operands, float32 accumulation) runs in its place and the results' `backward` says
  so.

A gmm-fp8 kernel's layer-3 training is compared with a bf16 run of fp8check's own bf16
grouped matmul (`bf16_forward`, the reference backward): the baseline, whose results are
not reported.  Every output of the user's kernels is checked for its shape and dtype (a
ValueError naming the kernel is the result's error), and after every call of a user's
kernel on concrete arrays its arguments are compared bit for bit with what it was handed
(`fp8check.measures.integrity`: a traced jax value is not, it has no buffer): a kernel that wrote
into one fails its result with the error `inputs_unchanged failed: ...` naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from fp8check.contracts import (
    LAYER_CONTRACTS,
    TGMM,
    KernelSpec,
    Operand,
    contract_of,
    out_dtype_kwargs,
    takes_out_dtype,
)
from fp8check.layers.moe.matmuls import LAYER_FRAMEWORKS, ExpertMatmuls
from fp8check.measures.integrity import raise_if_changed, watched_call

REFERENCE_BACKWARD = "fp8check's bf16 reference (bf16 operands, float32 accumulation)"


@dataclass(frozen=True)
class UserKernels:
    """The kernels a user's layers 2 and 3 run: `forward` (a KernelSpec of contract gmm-fp8
    or gmm, framework jax or torch) and, optionally, its backward kernels `dgrad` and
    `tgmm` (module docstring; None: fp8check's bf16 reference backward in its place), with
    the names the results give them."""

    forward: KernelSpec
    dgrad: Callable[..., Any] | None = None
    tgmm: Callable[..., Any] | None = None
    dgrad_name: str = "dgrad"
    tgmm_name: str = "tgmm"

    def __post_init__(self) -> None:
        spec = self.forward
        tested_variant(spec.contract, spec.name)
        if spec.framework not in LAYER_FRAMEWORKS:
            raise ValueError(f"layers 2 and 3 build the MoE layer in "
                             f"{' or '.join(LAYER_FRAMEWORKS)}; {spec.name} is a "
                             f"{spec.framework} kernel")
        for name, fn in (("dgrad", self.dgrad), ("tgmm", self.tgmm)):
            if fn is not None and not callable(fn):
                raise ValueError(f"{name} {fn!r} is not callable")


def tested_variant(contract: str, name: str = "the forward kernel") -> str:
    """The variant ("fp8" or "bf16") a forward kernel of `contract` is
    (`Contract.layer_variant`); ValueError for a contract layers 2 and 3 cannot build
    around (naming the kernel `name`)."""
    variant = contract_of(contract).layer_variant
    if variant is None:
        raise ValueError(f"layers 2 and 3 build a MoE layer around a forward kernel of "
                         f"contract {' or '.join(LAYER_CONTRACTS)}; {name} is {contract}")
    return variant


def _ops(framework: str) -> ModuleType:
    if framework == "jax":
        from fp8check.layers.moe import jax_grouped

        return jax_grouped
    from fp8check.layers.moe import torch_grouped

    return torch_grouped


def _checked(ops: ModuleType, out: Any, shape: tuple[int, ...], what: str,
             dtypes: tuple[str, ...]) -> Any:
    """`out` if it is an array of `shape` and one of `dtypes`; else ValueError."""
    got = ops.dtype_name(out)
    if got not in dtypes or tuple(out.shape) != shape:
        have = f"{getattr(out, 'dtype', type(out).__name__)}{list(getattr(out, 'shape', []))}"
        raise ValueError(f"{what} returned {have}; expected {' or '.join(dtypes)} "
                         f"{list(shape)}")
    return out


def _handed(ops: ModuleType, a: Any, operand: Operand) -> tuple[Any, ...]:
    """What a forward kernel is handed of its operand `a`: (values, scales) quantized in
    the operand's block, or `a` rounded to bf16 (`Operand`)."""
    return (ops.to_bf16(a),) if operand.block is None else tuple(ops.quantize(a, operand.block))


def _forward(spec: KernelSpec, ops: ModuleType) -> tuple[Callable[..., Any], str]:
    """(the forward (x, w, group_sizes) -> [M, N] bf16 around `spec`, what its output
    is).  A kernel that takes `out_dtype` is asked for bf16 when it declares bf16 (the
    layer's dtype); one that does not must return a dtype it declares, the same on every
    call (the first call's)."""
    takes = takes_out_dtype(spec.fn)
    out_dtypes = spec.matmul_claims.out_dtypes
    if takes:
        wanted = ("bf16",) if "bf16" in out_dtypes else out_dtypes[:1]
    else:
        wanted = out_dtypes
    kwargs = out_dtype_kwargs(spec, wanted[0])
    seen: list[str] = []
    contract = contract_of(spec.contract)
    lhs, rhs = contract.operands

    def forward(x: Any, w: Any, group_sizes: Any) -> Any:
        args = (*_handed(ops, x, lhs), *_handed(ops, w, rhs), group_sizes)
        who = f"forward kernel {spec.name}"
        out, written = watched_call(spec.fn, args, contract.arg_names, kwargs)
        raise_if_changed(written, who)
        out = _checked(ops, out, contract.out_shape(args), who, tuple(seen) or wanted)
        seen[:] = [ops.dtype_name(out)]
        return ops.to_bf16(out)

    if takes and wanted == ("bf16",):
        return forward, "output bf16"
    how = "asked by out_dtype" if takes else "as the kernel returns it, without out_dtype"
    return forward, f"output {' or '.join(wanted)} ({how}), rounded to bf16 by the layer"


def _backward(fn: Callable[..., Any] | None, reference: Callable[..., Any], name: str,
              ops: ModuleType, shape_of: Callable[[Any, Any, Any], tuple[int, ...]],
              arg_names: tuple[str, ...]) -> Callable[..., Any]:
    """The user's backward kernel `fn` (its arguments named `arg_names`) with its inputs
    and output checked, or the reference."""
    if fn is None:
        return reference

    def backward(a: Any, b: Any, group_sizes: Any) -> Any:
        out, written = watched_call(fn, (a, b, group_sizes), arg_names)
        raise_if_changed(written, name)
        return _checked(ops, out, shape_of(a, b, group_sizes), name, ("f32", "bf16"))

    return backward


def _backward_note(k: UserKernels) -> str:
    if k.dgrad is None and k.tgmm is None:
        return (f"{REFERENCE_BACKWARD}: no dgrad or tgmm kernel given (--dgrad, --tgmm), so "
                f"the gradients check the forward kernel and the layer, not a backward "
                f"kernel of yours")
    parts = [f"{role}: {name if fn is not None else REFERENCE_BACKWARD + ' (none given)'}"
             for role, fn, name in (("dgrad", k.dgrad, k.dgrad_name),
                                    ("tgmm", k.tgmm, k.tgmm_name))]
    return "; ".join(parts)


def user_matmuls(k: UserKernels) -> ExpertMatmuls:
    """The expert matmuls of `k` (module docstring): the kernels' variant, tested, and for a
    gmm-fp8 forward the bf16 baseline; `notes` say what ran forward and backward."""
    spec = k.forward
    ops = _ops(spec.framework)
    forward, output = _forward(spec, ops)
    dgrad = _backward(k.dgrad, ops.bf16_dgrad, f"dgrad kernel {k.dgrad_name}", ops,
                      lambda dy, w, gs: (dy.shape[0], w.shape[1]),
                      ("dy", "rhs", "group_sizes"))
    tgmm = _backward(k.tgmm, ops.bf16_tgmm, f"tgmm kernel {k.tgmm_name}", ops,
                     lambda x, dy, gs: TGMM.out_shape((x, dy, gs)), TGMM.arg_names)
    variant = tested_variant(spec.contract)
    variants = {variant: ops.differentiable(forward, dgrad, tgmm)}
    if variant == "fp8":
        variants["bf16"] = ops.differentiable(ops.bf16_forward, ops.bf16_dgrad, ops.bf16_tgmm)
    operands = ("operands quantized with the deepgemm recipe (1x128 activation blocks, "
                "128x128 weight blocks per expert)" if variant == "fp8"
                else "bf16 operands")
    notes = {"forward": f"{spec.name} on {operands}, {output}",
             "backward": _backward_note(k)}
    return ExpertMatmuls(spec.name, spec.framework, variants, tested=(variant,), notes=notes)
