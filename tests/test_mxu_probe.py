"""benchmarks/mxu_probe.py, the probe for a TPU's FP8 MXU accumulation, checked before any
chip is asked: its predictions are what they claim (every row's exact sum and float32 sets
from exact rationals), every pair of readings is told apart by some row, and interpret
mode (XLA:CPU, IEEE float32 sums) is predicted by `float32` on every row."""

import itertools
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
import mxu_probe  # noqa: E402


@pytest.fixture(scope="module", params=mxu_probe.DEPTHS)
def probe(request):
    depth = request.param
    rows = mxu_probe.probe_rows(depth)
    return depth, rows, mxu_probe.predictions(rows, depth)


def test_every_pair_of_readings_is_told_apart(probe):
    """For any two readings some row has an outcome one allows and the other does not;
    disjoint sets wherever neither contains the other (`exact-rne` is one of `float32`'s
    orders, so a chip that rounds once leaves both standing: the stricter answer)."""
    depth, rows, pred = probe
    names = [n for n in mxu_probe.READINGS if depth > 128 or not n.endswith("-per128")]
    for x, y in itertools.combinations(names, 2):
        assert any(pred[x][i] != pred[y][i] for i in range(len(rows))), (depth, x, y)
        if {x, y} != {"exact-rne", "float32"}:
            assert any(not (pred[x][i] & pred[y][i]) for i in range(len(rows))), (depth, x, y)


def test_exact_reading_is_the_rational_sum_rounded(probe):
    _, rows, pred = probe
    for row, allowed in zip(rows, pred["exact-rne"], strict=True):
        exact = sum((Fraction(a) * Fraction(b) for a, b in zip(row.a, row.b, strict=True)),
                    Fraction(0))
        [v] = allowed
        # v is a float32 value nearest to exact: no float32 lies strictly closer
        f = np.float32(v)
        for other in (np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf))):
            assert abs(Fraction(float(f)) - exact) <= abs(Fraction(float(other)) - exact)


def test_float32_reading_holds_the_sequential_sum(probe):
    """Summing the products left to right in float32 is one valid order: it is in the set."""
    _, rows, pred = probe
    for row, allowed in zip(rows, pred["float32"], strict=True):
        acc = np.float32(0)
        for a, b in zip(row.a, row.b, strict=True):
            acc = np.float32(acc + np.float32(a * b))
        assert float(acc) in allowed


def test_interpret_mode_is_float32(probe):
    depth, rows, pred = probe
    got = mxu_probe.device_dots(rows, depth, interpret=True)
    assert all(v in s for v, s in zip(got, pred["float32"], strict=True))
    # and it is not any of the narrow aligned accumulators
    for f in mxu_probe.WIDTHS:
        assert any(v not in s for v, s in zip(got, pred[f"aligned-f{f}-rz"], strict=True))
