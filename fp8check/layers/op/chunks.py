"""The row chunks of a matmul output with the references the layer-1 criteria need on them:
what the criteria engine (`layers.op.engine`) reads, from a Problem held in memory
(`InMemoryChunks`: slices of its [rows, ...] references, one chunk covering every row by
default) or from a production-shape `StreamedProblem` (`StreamedChunks`: the references
computed one chunk at a time, `fp8check.measures.totals.gmm_reference_chunks`).

A source also says which references it cannot give (`missing`, with why): the engine then
does not evaluate the criteria that need them and says so, rather than computing them
another way."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fp8check.contracts import NUMPY_DTYPES
from fp8check.layers.op.accumulator import AccumulatorModel
from fp8check.layers.op.problem import Problem, StreamedProblem
from fp8check.measures import metrics
from fp8check.measures.underflow import UnderflowModel

# The references a source may lack, by the name `missing` gives them.
NAIVE, UNQUANTIZED, TRUNCATION = "naive", "unquantized", "truncation"


@dataclass(frozen=True)
class RowChunk:
    """Leading rows [start, start + len(out)) of the compared output and their references.

    out: the kernel's output there (its dtype; [rows, N], or [groups, K, N] for tgmm).
    exact, abs_ab: the exact value (float64, may hold NaN/Inf on non-finite inputs) and
        the |A||B| bound (float64), out's shape.
    groups: the group of each row of out.reshape(-1, N) (`metrics.row_groups`).
    recipe: the declared recipe's output (out's dtype) where bit_exact applies, else None.
    extra: the tensor core's truncation term of the bound (float64), or None.
    naive: the naive same-precision kernel's output (out's dtype), None if not given.
    unquantized: the float64 product of the unquantized operands, None if not given.
    """

    start: int
    out: np.ndarray
    exact: np.ndarray
    abs_ab: np.ndarray
    groups: np.ndarray
    recipe: np.ndarray | None = None
    extra: np.ndarray | None = None
    naive: np.ndarray | None = None
    unquantized: np.ndarray | None = None


class ChunkSource(Protocol):
    """The facts of one (contract, case) problem that the engine needs besides the chunks,
    and its chunks."""

    @property
    def out_shape(self) -> tuple[int, ...]: ...
    @property
    def out_dtype(self) -> str: ...
    @property
    def k(self) -> int: ...
    @property
    def n_terms(self) -> int | None: ...
    @property
    def underflow(self) -> UnderflowModel: ...
    @property
    def n_groups(self) -> int: ...
    @property
    def block(self) -> int: ...
    @property
    def exact_partials(self) -> bool: ...
    @property
    def impact_not_gated(self) -> str | None: ...
    @property
    def problem(self) -> Problem | None: ...
    @property
    def missing(self) -> Mapping[str, str]: ...

    def chunks(self, out: np.ndarray, acc: AccumulatorModel) -> Iterator[RowChunk]:
        """The chunks of `out` (the whole output, already checked for shape and dtype),
        in row order, covering the compared rows once, for a kernel declaring `acc`."""
        ...


class _ProblemFacts:
    """What both chunk sources read off their problem alike."""

    prob: Problem | StreamedProblem

    @property
    def out_dtype(self) -> str:
        return self.prob.out_dtype

    @property
    def k(self) -> int:
        return self.prob.k

    @property
    def underflow(self) -> UnderflowModel:
        return self.prob.underflow

    @property
    def block(self) -> int:
        return self.prob.rhs_block_columns

    @property
    def exact_partials(self) -> bool:
        return self.prob.exact_partials


@dataclass(frozen=True)
class InMemoryChunks(_ProblemFacts):
    """The chunks of a `Problem`'s output: `rows_per_chunk` leading rows at a time (the
    last may be shorter), or one chunk covering the compared rows when None (always at
    least one chunk: an empty one when no row is compared)."""

    prob: Problem
    rows_per_chunk: int | None = None

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(self.prob.exact.shape)

    @property
    def n_terms(self) -> int | None:
        return self.prob.n_terms

    @property
    def n_groups(self) -> int:
        return metrics.row_groups(self.out_shape, self.prob.group_sizes)[1]

    @property
    def impact_not_gated(self) -> str | None:
        return self.prob.impact_not_gated

    @property
    def problem(self) -> Problem | None:
        return self.prob

    @property
    def missing(self) -> Mapping[str, str]:
        if self.prob.unquantized is None:
            return {UNQUANTIZED: "unquantized operands not given: impact not measured"}
        return {}

    def chunks(self, out: np.ndarray, acc: AccumulatorModel) -> Iterator[RowChunk]:
        p, rows = self.prob, self.prob.rows
        groups = metrics.row_groups(self.out_shape, p.group_sizes)[0].reshape(
            (-1, *self.out_shape[1:-1]))
        recipe = (p.accum_ref(acc.recipe, p.out_dtype, acc.interval)
                  if acc.recipe is not None and acc.bit_exact(p.exact_partials) else None)
        extra = (p.tensor_core_term(acc.recipe, acc.interval)
                 if acc.recipe is not None and acc.against_model else None)
        step = self.rows_per_chunk or max(rows, 1)
        for r0 in range(0, max(rows, 1), step):
            sl = slice(r0, min(r0 + step, rows))
            yield RowChunk(
                r0, out[sl], p.exact[sl], p.abs_ab[sl], groups[sl].reshape(-1),
                recipe=None if recipe is None else recipe[sl],
                extra=None if extra is None else extra[sl], naive=p.naive[sl],
                unquantized=None if p.unquantized is None else p.unquantized[sl])


@dataclass(frozen=True)
class StreamedChunks(_ProblemFacts):
    """The chunks of a `StreamedProblem`'s output: at most `rows_per_chunk` rows of one
    group each (memory O(rows_per_chunk (K + N))), their exact value, |A||B| and recipe
    reference computed for that chunk alone.  It gives no naive kernel's output, no
    unquantized product and no tensor-core truncation term (`missing`)."""

    prob: StreamedProblem
    rows_per_chunk: int = 2048

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.prob.out_shape

    @property
    def n_terms(self) -> int | None:
        return None  # gmm-fp8's: K and the scalings (`metrics.bound_ratio`)

    @property
    def n_groups(self) -> int:
        return len(self.prob.group_sizes)

    @property
    def impact_not_gated(self) -> str | None:
        return None

    @property
    def problem(self) -> Problem | None:
        return None

    @property
    def missing(self) -> Mapping[str, str]:
        return {
            NAIVE: "the naive kernel's output is not streamed",
            UNQUANTIZED: ("a streamed case keeps no unquantized operands: impact not "
                          "measured"),
            TRUNCATION: "the tensor core's truncation term is not streamed",
        }

    def chunks(self, out: np.ndarray, acc: AccumulatorModel) -> Iterator[RowChunk]:
        from fp8check.measures.totals import gmm_reference_chunks

        p = self.prob
        lq, rq = p.quantized
        accum = acc.recipe if acc.bit_exact(p.exact_partials) else None
        for c in gmm_reference_chunks(lq, rq, p.group_sizes, NUMPY_DTYPES[p.out_dtype],
                                      accum=accum, rows_per_chunk=self.rows_per_chunk,
                                      interval=acc.interval):
            yield RowChunk(c.start, out[c.start:c.stop], c.exact, c.abs_ab,
                           np.full(c.stop - c.start, c.group), recipe=c.ref)
