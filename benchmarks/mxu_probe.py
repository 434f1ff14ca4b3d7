"""How does a TPU's MXU accumulate an FP8 dot?  A probe for a run on the chip (v7x first).

Compiling shows that v7x's MXU takes e4m3 operands itself (LLO `matmul_data_format<e4m3b>`,
`fp8check.targets.chips`), not how it sums them: IEEE float32 sums of exact products (in some
order), one rounding of the exact sum, or a narrower fixed-point accumulator with the
products aligned to the largest one and cut (as NVIDIA's FP8 tensor cores do, 13 fraction
bits on Hopper).  This script runs single-pass FP8 dots built to tell these readings apart
(`probe_rows`), one Pallas kernel call per depth (128 and 256: one MXU pass each way), and
prints which readings predict every output bit for bit.

    python benchmarks/mxu_probe.py              # on a TPU: compiled, the chip's answer
    python benchmarks/mxu_probe.py --interpret  # anywhere: interpret mode (XLA:CPU)

Readings (`READINGS`), each a prediction per probe row:

* `exact-rne`: the exact sum rounded once to float32 (round to nearest even);
* `float32`: IEEE float32 additions of the exact products in *some* order (the set over
  every order of the row's nonzero products; the gate's assumption for TPUs, judged by
  bound_ratio with u = 2^-24);
* `aligned-f<F>-rz` (F = 13, 16, 20, 23, 24): the products aligned to the largest product
  exponent, each cut to F fraction bits toward zero, summed exactly, the sum cut to F bits
  (`fp8check.references.mma.MmaModel`, one group over the whole pass); and the same
  per 128-deep half of a 256-deep pass (`...-per128`).

On the CPU the interpret-mode result must lie in `float32`'s set on every row (a test runs
this: the probe's own predictions are checked before any chip is asked).  On a chip, the
readings left standing are the answer; `fp8check.targets.chips` row `v7x` says what the gate
assumes until then, and what it would false-alarm on if the assumption is wrong.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import ml_dtypes
import numpy as np

from fp8check.references.mma import MmaModel, mma_block

E4M3 = ml_dtypes.float8_e4m3fn
DEPTHS = (128, 256)
COLS = 128  # the MXU's output width; only the first columns carry probes
WIDTHS = (13, 16, 20, 23, 24)


@dataclass(frozen=True)
class ProbeRow:
    """One dot product: `a` [depth] and `b` [depth] as floats exactly representable in
    e4m3, and what it asks."""

    question: str
    a: tuple[float, ...]
    b: tuple[float, ...]


def _row(question: str, depth: int, terms: Sequence[tuple[int, float, float]]) -> ProbeRow:
    """A row of `depth` zeros but for `terms` (position, a value, b value)."""
    a, b = [0.0] * depth, [0.0] * depth
    for k, x, y in terms:
        a[k], b[k] = x, y
    for v in a + b:
        if float(np.float64(v).astype(E4M3)) != v:
            raise ValueError(f"{v} is not an e4m3 value")
    return ProbeRow(question, tuple(a), tuple(b))


def probe_rows(depth: int) -> list[ProbeRow]:
    """The probe's dot products at one depth (module docstring).  Products are exact powers
    of two (or small multiples) so each reading's prediction is easy to state: 2^16 =
    256 x 256 beside a small term 2^-d below it shows how many bits below the largest
    product survive; ties, signs and cancellation show the rounding; a small term in the
    second 128-deep half shows whether a 256-deep pass is aligned as one group."""
    rows = []
    for x in range(-9, 9):  # the small product 2^x (x - 9 with b = 2^-9: d up to 34)
        rows.append(_row(f"width: 2^16 + 2^{x}", depth, [(0, 256.0, 256.0), (1, 2.0 ** x, 1.0)]))
        rows.append(_row(f"width: 2^16 + 2^{x - 9}", depth,
                         [(0, 256.0, 256.0), (1, 2.0 ** x, 2.0 ** -9)]))
    rows += [
        _row("tie then sticky: 2^16 + 2^-8 + 2^-18 (exact-then-RNE rounds up)", depth,
             [(0, 256.0, 256.0), (1, 2.0, 2.0 ** -9), (2, 2.0 ** -9, 2.0 ** -9)]),
        _row("rounding: 2^16 + 3 x 2^-9 (3/4 ulp: to nearest up, truncation down)", depth,
             [(0, 256.0, 256.0), (1, 3 * 2.0 ** -9, 1.0)]),
        _row("normalisation: 2^16 - 2^15 + 2^-8 (2^-8 kept by 24 aligned bits, not 23)",
             depth, [(0, 256.0, 256.0), (1, -256.0, 128.0), (2, 2.0 ** -4, 2.0 ** -4)]),
        _row("sign: -2^16 + 2^-9 (RNE: -2^16; toward zero: -(2^16 - 2^-8))", depth,
             [(0, -256.0, 256.0), (1, 1.0, 2.0 ** -9)]),
        _row("sign: 2^16 - 2^-9 (RNE: 2^16; toward zero: 2^16 - 2^-8)", depth,
             [(0, 256.0, 256.0), (1, -1.0, 2.0 ** -9)]),
        _row("cancellation: 2^16 - 2^16 + 2^-4", depth,
             [(0, 256.0, 256.0), (1, -256.0, 256.0), (2, 2.0 ** -4, 1.0)]),
        _row("cancellation: 2^16 - 2^16 + 3 x 2^-18", depth,
             [(0, 256.0, 256.0), (1, -256.0, 256.0), (2, 3 * 2.0 ** -9, 2.0 ** -9)]),
        _row("many small: 2^16 + 96 x 2^-9", depth,
             [(0, 256.0, 256.0)] + [(k, 2.0 ** -9, 1.0) for k in range(1, 97)]),
    ]
    if depth > 128:
        rows += [
            _row("second half: 2^16 - 2^16 at k=0,1 and 2^-9 at k=200", depth,
                 [(0, 256.0, 256.0), (1, -256.0, 256.0), (200, 2.0 ** -9, 1.0)]),
            _row("second half: 2^16 at k=0 and 2^-4 at k=200", depth,
                 [(0, 256.0, 256.0), (200, 2.0 ** -4, 1.0)]),
        ]
    return rows


def _f32(x: Fraction) -> float:
    """x rounded to float32, to nearest even.  Every probe sum is a dyadic rational of at
    most 53 significant bits, so float64 holds it exactly (checked) and the one rounding
    is numpy's float64 -> float32 conversion (IEEE: to nearest even)."""
    if Fraction(float(x)) != x:
        raise ValueError(f"{x} is not exact in float64")
    return float(np.float32(float(x)))


def exact_rne(row: ProbeRow) -> set[float]:
    return {_f32(sum((Fraction(x) * Fraction(y) for x, y in zip(row.a, row.b, strict=True)),
                     Fraction(0)))}


def float32_any_order(row: ProbeRow) -> set[float]:
    """Every result of float32 additions of the row's nonzero products in some order
    (products are exact in float32 here).  Rows with many equal terms are summed in the
    orders that differ: the distinct terms permuted, equal terms kept together."""
    terms = [np.float32(x * y) for x, y in zip(row.a, row.b, strict=True) if x * y != 0]
    groups = sorted({float(t) for t in terms})
    counts = {g: sum(1 for t in terms if float(t) == g) for g in groups}
    out = set()
    for order in itertools.permutations(groups):
        acc = np.float32(0.0)
        for g in order:
            for _ in range(counts[g]):
                acc = np.float32(acc + np.float32(g))
        out.add(float(acc))
    return out


def _codes(rows: Sequence[ProbeRow], depth: int) -> tuple[np.ndarray, np.ndarray]:
    """A [len(rows), depth] and, one column per row, B [depth, COLS] as e4m3."""
    a = np.array([r.a for r in rows], np.float64).astype(E4M3)
    b = np.zeros((depth, COLS), np.float64)
    for i, r in enumerate(rows):
        b[:, i] = r.b
    return a, b.astype(E4M3)


def aligned(rows: Sequence[ProbeRow], depth: int, frac_bits: int, group: int) -> list[float]:
    """`mma_block` under an aligned, truncating accumulator of `frac_bits` over `group`
    products (chained through C when the group is shorter than the pass)."""
    a, b = _codes(rows, depth)
    model = MmaModel(group=group, frac_bits=frac_bits, rounding="rz")
    d = mma_block(a, b, None, model)
    return [float(d[i, i]) for i in range(len(rows))]


READINGS = ("exact-rne", "float32") + tuple(
    f"aligned-f{f}-rz{suffix}" for suffix in ("", "-per128") for f in WIDTHS)


def predictions(rows: Sequence[ProbeRow], depth: int) -> dict[str, list[set[float]]]:
    """reading -> per row, the set of float32 results it allows."""
    pred = {"exact-rne": [exact_rne(r) for r in rows],
            "float32": [float32_any_order(r) for r in rows]}
    for f in WIDTHS:
        pred[f"aligned-f{f}-rz"] = [{v} for v in aligned(rows, depth, f, depth)]
        # per 128-deep half: at depth 128 the same single group
        pred[f"aligned-f{f}-rz-per128"] = [{v} for v in aligned(rows, depth, f, 128)]
    return pred


def device_dots(rows: Sequence[ProbeRow], depth: int, interpret: bool) -> list[float]:
    """The rows' dots from one Pallas kernel: o = dot(a, b) with float32 results, a single
    [128, depth] x [depth, 128] block (one MXU pass), compiled (interpret=False) or in
    interpret mode."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    a, b = _codes(rows, depth)
    a_pad = np.zeros((128, depth), E4M3)
    a_pad[:len(rows)] = a

    def kernel(a_ref, b_ref, o_ref):
        o_ref[...] = jax.lax.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((128, COLS), jnp.float32),
                         interpret=interpret)(jnp.asarray(a_pad), jnp.asarray(b))
    d = np.asarray(out)
    return [float(d[i, i]) for i in range(len(rows))]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--interpret", action="store_true",
                   help="run the kernel in interpret mode (no TPU needed)")
    args = p.parse_args(argv)
    import jax

    print(f"device: {jax.devices()[0].device_kind}; "
          f"{'interpret mode' if args.interpret else 'compiled'}")
    standing = set(READINGS)
    for depth in DEPTHS:
        rows = probe_rows(depth)
        got = device_dots(rows, depth, args.interpret)
        pred = predictions(rows, depth)
        print(f"\ndepth {depth}: {len(rows)} rows")
        for i, (row, v) in enumerate(zip(rows, got, strict=True)):
            fits = [name for name, sets in pred.items() if v in sets[i]]
            print(f"  {row.question:64s} {v!r:>24}  {', '.join(fits) or 'NO READING'}")
        for name in READINGS:
            if any(v not in s for v, s in zip(got, pred[name], strict=True)):
                standing.discard(name)
    print(f"\nreadings that predict every output: {', '.join(sorted(standing)) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
