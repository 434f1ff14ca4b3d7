"""The problem each matmul contract poses on one case: the kernel's arguments and every
reference the layer-1 criteria compare with, and the cache that shares them between the
kernels of a contract."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fp8check.contracts import GMM, GMM_FP8, NUMPY_DTYPES, TGMM, contract_of
from fp8check.inputs.cases import NONFINITE, Case, case_inputs
from fp8check.measures.underflow import UnderflowModel, fp8_model, unscaled_model
from fp8check.profiles import IMPACT_REPORT_ONLY
from fp8check.references.baselines import grouped_matmul, grouped_tmatmul
from fp8check.references.casts import to_float64
from fp8check.references.gmm import DEFAULT_INTERVAL
from fp8check.references.quant import BLOCK


@dataclass
class Problem:
    """Kernel arguments and everything the criteria compare against (numpy, float64 refs).

    `contract` names the contract it is posed under (its argument table says where the
    group sizes are, `group_sizes`).  `rows` is how many leading rows of the output are
    compared (all of them for tgmm); `k`, `n_terms`
    and `underflow` (what the bound's underflow / flush-to-zero term needs,
    `fp8check.measures.underflow`) feed the error bound.  `out_dtype` is the dtype the output must
    have; `exact_partials` says every 128-wide partial is exact in float32 (then a
    declared accumulation recipe is checked bit for bit); `unquantized` is None when the
    unquantized operands are not known (the impact question is then not measured);
    `impact_not_gated` gives the reason when impact is reported but not gated.  A Problem
    depends only on (contract, case), so one serves every kernel of that contract;
    `accum_ref` memoises the reference under each declared recipe.
    """

    args: tuple[np.ndarray, ...]
    exact: np.ndarray
    abs_ab: np.ndarray
    naive: np.ndarray
    unquantized: np.ndarray | None
    rows: int
    k: int
    n_terms: int | None
    out_dtype: str
    underflow: UnderflowModel
    contract: str
    exact_partials: bool = False
    impact_not_gated: str | None = None
    quantized: tuple[Any, Any] | None = None  # (lhs QTensor, rhs QTensor) for gmm-fp8
    _accum_refs: dict[tuple[str, str, int], np.ndarray] = field(default_factory=dict)
    _tensor_core_terms: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)

    def _operands(self) -> tuple[Any, Any]:
        if self.quantized is None:
            raise ValueError("a recipe reference needs quantized operands (gmm-fp8 problems)")
        return self.quantized

    @property
    def group_sizes(self) -> np.ndarray:
        """The group sizes among the kernel's arguments (`Contract.group_sizes`)."""
        return contract_of(self.contract).group_sizes(self.args)

    @property
    def rhs_block_columns(self) -> int:
        """How many output columns share one rhs scale: the N width of the rhs's scale
        blocks (128 for gmm-fp8's 128x128 blocks), 1 for an unscaled rhs."""
        return 1 if self.quantized is None else int(self.quantized[1].block[-1])

    def accum_ref(self, accum: str, out_dtype: str, interval: int = DEFAULT_INTERVAL) -> np.ndarray:
        """gmm(..., accum=accum, interval=interval) on the quantized operands, rounded to
        out_dtype (`interval`: a tensor-core recipe's promotion interval)."""
        from fp8check.references import gmm

        key = (accum, out_dtype, interval)
        if key not in self._accum_refs:
            lq, rq = self._operands()
            self._accum_refs[key] = gmm(lq, rq, self.group_sizes,
                                        out_dtype=NUMPY_DTYPES[out_dtype],
                                        accum=accum, interval=interval)
        return self._accum_refs[key]

    def tensor_core_term(self, accum: str, interval: int) -> np.ndarray:
        """The truncation term [M, N] of the tensor core a recipe of
        `references.gmm.TENSOR_CORE_ACCUMS` models (`references.hopper_bound`)."""
        from fp8check.references.gmm import TENSOR_CORE_ACCUMS
        from fp8check.references.hopper_bound import truncation_term
        from fp8check.references.mma import mma_model

        key = (accum, interval)
        if key not in self._tensor_core_terms:
            lq, rq = self._operands()
            self._tensor_core_terms[key] = truncation_term(
                lq, rq, self.group_sizes, interval=interval,
                model=mma_model(TENSOR_CORE_ACCUMS[accum]))
        return self._tensor_core_terms[key]


@dataclass
class StreamedProblem:
    """The `gmm-fp8` problem of a streamed (production-shape) case: the kernel's arguments
    and quantized operands only.  No reference is held: the criteria engine computes the
    exact value, |A||B| and a recipe reference one row chunk at a time
    (`chunks.StreamedChunks`, `fp8check.measures.totals.gmm_reference_chunks`), so memory is the
    operands, the output and O(chunk), never an [M, N] float64 array.  `rows`, `k`,
    `out_dtype`, `underflow` and `exact_partials` as in Problem (the contract is
    gmm-fp8's); `out_shape` is the [M, N] shape the kernel must return."""

    args: tuple[np.ndarray, ...]
    quantized: tuple[Any, Any]
    out_shape: tuple[int, int]
    rows: int
    k: int
    out_dtype: str
    underflow: UnderflowModel
    exact_partials: bool = False
    contract: str = GMM_FP8.name

    @property
    def group_sizes(self) -> np.ndarray:
        """The group sizes among the kernel's arguments (`Contract.group_sizes`)."""
        return contract_of(self.contract).group_sizes(self.args)

    @property
    def rhs_block_columns(self) -> int:
        """The N width of the rhs's scale blocks (as `Problem.rhs_block_columns`)."""
        return int(self.quantized[1].block[-1])


AnyProblem = Problem | StreamedProblem


class ProblemCache:
    """Problems by (contract, case id), built once and shared by every kernel of the
    contract: the gate's runner, the tuner, `fp8check.testing` and the tests use this one
    cache.  A build that raised is cached as its exception, so every kernel of the
    contract reports the same failure.  At most `capacity` problems are kept (the oldest
    goes first); a Problem of a CI case holds a few MB, of a production shape GBs."""

    def __init__(self, capacity: int = 8) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._entries: dict[tuple[str, str], AnyProblem | Exception] = {}
        self._unreported: dict[tuple[str, str], float] = {}  # build seconds, until a `get`

    def prepare(self, contract: str, case: Case) -> None:
        """Build the problem now if it is not cached (a failed build is cached too); the
        next `get` reports the build's time."""
        key = (contract, case.id)
        if key in self._entries:
            return
        t = time.perf_counter()
        try:
            # A non-finite case's references meet inf * 0 and inf - inf, which IEEE
            # defines as NaN, the answer they must give: no warning for the expected.
            expected = (np.errstate(invalid="ignore") if case.distribution == NONFINITE
                        else contextlib.nullcontext())
            with expected:
                self._entries[key] = build_problem(contract, case)
        except Exception as e:  # cached: every kernel of the contract reports it
            self._entries[key] = e
        self._unreported[key] = time.perf_counter() - t
        while len(self._entries) > self.capacity:
            old = next(iter(self._entries))
            del self._entries[old]
            self._unreported.pop(old, None)

    def get(self, contract: str, case: Case) -> tuple[AnyProblem, float]:
        """(the problem, seconds spent building it not yet reported by an earlier `get`:
        0.0 when it was cached).  Raises the build's exception, this time and every later
        time."""
        self.prepare(contract, case)
        key = (contract, case.id)
        built = self._unreported.pop(key, 0.0)
        entry = self._entries[key]
        if isinstance(entry, Exception):
            raise entry
        return entry, built


def gmm_fp8_problem(
    lq: Any, rq: Any, group_sizes: np.ndarray, out_dtype: str,
    unquantized: tuple[np.ndarray, np.ndarray] | None = None, **facts: Any,
) -> Problem:
    """The `gmm-fp8` problem on quantized operands lq [M,K] (1x128) and rq [G,K,N]
    (128x128) QTensors; `unquantized` = (x, w) they came from (float32), if known;
    `facts`: exact_partials, impact_not_gated (see Problem)."""
    from fp8check.references import abs_product, dequantize, gmm

    gs = group_sizes
    return Problem(
        args=(lq.values, lq.scales, rq.values, rq.scales, gs),
        exact=gmm(lq, rq, gs, out_dtype=np.float64, accum="exact"),
        abs_ab=abs_product(lq, rq, gs),
        naive=grouped_matmul(dequantize(lq), dequantize(rq), gs).astype(NUMPY_DTYPES[out_dtype]),
        unquantized=None if unquantized is None else grouped_matmul(*unquantized, gs, np.float64),
        rows=int(gs.sum()), k=lq.shape[1], n_terms=None, out_dtype=out_dtype,
        underflow=fp8_model(lq, rq, lq.shape[1]), contract=GMM_FP8.name, quantized=(lq, rq),
        **facts,
    )


def unscaled_gmm_problem(
    lhs: np.ndarray, rhs: np.ndarray, group_sizes: np.ndarray, out_dtype: str,
    unquantized: tuple[np.ndarray, np.ndarray] | None = None, **facts: Any,
) -> Problem:
    """The `gmm` problem on unscaled (bf16 or f32) operands lhs [M,K], rhs [G,K,N]."""
    from fp8check.references import abs_product, gmm

    gs = group_sizes
    return Problem(
        args=(lhs, rhs, gs),
        exact=gmm(lhs, rhs, gs, out_dtype=np.float64, accum="exact"),
        abs_ab=abs_product(lhs, rhs, gs),
        naive=grouped_matmul(lhs, rhs, gs).astype(NUMPY_DTYPES[out_dtype]),
        unquantized=None if unquantized is None else grouped_matmul(*unquantized, gs, np.float64),
        # No scales in an unscaled matmul: only the K-term sum rounds.
        rows=int(gs.sum()), k=lhs.shape[1], n_terms=lhs.shape[1], out_dtype=out_dtype,
        underflow=unscaled_model(lhs, rhs, lhs.shape[1]), contract=GMM.name, **facts,
    )


def tgmm_problem(
    lhs: np.ndarray, dy: np.ndarray, group_sizes: np.ndarray, out_dtype: str,
    unquantized: tuple[np.ndarray, np.ndarray] | None = None, **facts: Any,
) -> Problem:
    """The `tgmm` problem on unscaled (bf16 or f32) operands lhs [M,K], dy [M,N]."""
    from fp8check.references import tgmm

    gs = group_sizes
    # The reduction runs over a group's rows: the longest group bounds every entry.
    k = max(int(gs.max(initial=0)), 1)
    return Problem(
        args=(lhs, dy, gs),
        exact=tgmm(lhs, dy, gs, out_dtype=np.float64),
        # |lhs_g|^T |dy_g| in float64: low by at most M_g 2^-53 relative, negligible next to
        # the bound's gamma_n >= n 2^-24.
        abs_ab=grouped_tmatmul(np.abs(to_float64(lhs)), np.abs(to_float64(dy)),
                               gs, np.float64),
        naive=grouped_tmatmul(lhs, dy, gs).astype(NUMPY_DTYPES[out_dtype]),
        unquantized=None if unquantized is None else grouped_tmatmul(*unquantized, gs, np.float64),
        rows=len(gs), k=k, n_terms=k, out_dtype=out_dtype,
        underflow=unscaled_model(lhs, dy, k), contract=TGMM.name, **facts,
    )


# The Problem builder of each matmul contract, by `Contract.problem`: (lhs, rhs, group
# sizes, out dtype, the unquantized operands, **facts) -> Problem.
PROBLEM_BUILDERS: dict[str, Callable[..., Problem]] = {
    "gmm_fp8": gmm_fp8_problem, "unscaled_gmm": unscaled_gmm_problem, "tgmm": tgmm_problem}


# Rows quantized at a time for a streamed case: quantize's float32 and float64 temporaries
# of a whole production operand would take several GiB.
_QUANT_ROWS = 4096


def _quantized_in_chunks(x: np.ndarray, block: tuple[int, int], recipe: str) -> Any:
    """quantize(x, block, recipe) of x [R, C] or [G, R, C], bit for bit, computed
    _QUANT_ROWS rows of one matrix at a time.  Exact: every block lies inside one chunk
    (the chunk is a multiple of the block's rows), and quantize treats each block on its
    own."""
    from fp8check.references import quantize
    from fp8check.references.quant import QTensor

    assert _QUANT_ROWS % block[0] == 0
    if x.ndim == 3:
        qs = [_quantized_in_chunks(mat, block, recipe) for mat in x]
        return QTensor(np.stack([q.values for q in qs]), np.stack([q.scales for q in qs]),
                       block, qs[0].fmt, recipe)
    qs = [quantize(x[r0:r0 + _QUANT_ROWS], block, recipe)
          for r0 in range(0, x.shape[0], _QUANT_ROWS)]
    return QTensor(np.concatenate([q.values for q in qs]),
                   np.concatenate([q.scales for q in qs]), block, qs[0].fmt, recipe)


def streamed_gmm_fp8_problem(lq: Any, rq: Any, group_sizes: np.ndarray, out_dtype: str,
                             exact_partials: bool = False) -> StreamedProblem:
    """The streamed `gmm-fp8` problem on quantized operands lq [M,K] (1x128) and rq
    [G,K,N] (128x128) QTensors (the streamed twin of `gmm_fp8_problem`)."""
    gs = group_sizes
    return StreamedProblem(
        args=(lq.values, lq.scales, rq.values, rq.scales, gs), quantized=(lq, rq),
        out_shape=(lq.shape[0], rq.shape[2]), rows=int(gs.sum()), k=lq.shape[1],
        out_dtype=out_dtype, underflow=fp8_model(lq, rq, lq.shape[1]),
        exact_partials=exact_partials,
    )


def streamed_problem(contract: str, case: Case) -> StreamedProblem:
    """The StreamedProblem of a streamed `case` (gmm-fp8 only, `Contract.streamed`: the
    streamed summary is the gmm-fp8 reference's; ValueError for another contract)."""
    if not contract_of(contract).streamed:
        raise ValueError(f"case {case.id} is checked through the streamed gmm-fp8 summary; "
                         f"contract {contract!r} has no streamed reference")
    inp = case_inputs(case)
    x, w, gs = inp.x, inp.w, inp.group_sizes
    del inp  # the float32 operands go as soon as they are quantized (GiBs)
    lq = _quantized_in_chunks(x, (1, BLOCK), case.recipe)
    del x
    rq = _quantized_in_chunks(w, (BLOCK, BLOCK), case.recipe)
    return streamed_gmm_fp8_problem(lq, rq, gs, case.out_dtype, case.exact_partials)


def build_problem(contract: str, case: Case) -> AnyProblem:
    """Kernel arguments and references of `case` under a matmul contract (a
    StreamedProblem for a streamed case): the case's operands (`Contract.operands`),
    quantized in their blocks with the case's recipe or rounded to bf16, handed to the
    contract's builder (`PROBLEM_BUILDERS`)."""
    from fp8check.references import quantize

    if not case.applies_to(contract):
        raise ValueError(f"case {case.id} is not for {contract}: it is for "
                         f"{', '.join(case.contracts())}")
    if case.streamed:
        return streamed_problem(contract, case)
    c = contract_of(contract)
    if c.problem is None:
        raise ValueError(f"contract {contract!r} has no matmul problem")
    inp = case_inputs(case)
    unquantized = tuple(getattr(inp, o.source) for o in c.operands)
    # nan="propagate": a non-finite input reaches the kernel as the recipe makes it
    # (docs/contract.md, "Non-finite inputs"); identical to "raise" on finite data.
    handed = [a.astype(NUMPY_DTYPES["bf16"]) if o.block is None else
              quantize(a, o.block, case.recipe, nan="propagate")
              for a, o in zip(unquantized, c.operands, strict=True)]
    return PROBLEM_BUILDERS[c.problem](
        *handed, inp.group_sizes, case.out_dtype, unquantized,
        exact_partials=case.exact_partials,
        impact_not_gated=IMPACT_REPORT_ONLY.get(case.distribution))
