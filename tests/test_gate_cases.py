"""Case suites: deterministic ids and inputs, coverage, the exact-partials family, skips."""

import numpy as np
import pytest

from fp8check import strategies
from fp8check.cases import (
    SUITES,
    build_suite,
    case_inputs,
    find_case,
    supported,
)
from fp8check.references import quantize


@pytest.fixture(scope="module")
def ci():
    return build_suite("ci", 0)


def test_suites_are_deterministic_and_ids_unique():
    for suite in SUITES:
        a, b = build_suite(suite, 3), build_suite(suite, 3)
        assert [c.id for c in a] == [c.id for c in b]
        assert [c.group_sizes for c in a] == [c.group_sizes for c in b]
        assert len({c.id for c in a}) == len(a)
        assert all(c.id.endswith("-s3") for c in a)


def test_seed_changes_the_draws():
    a, b = build_suite("ci", 0), build_suite("ci", 1)
    assert [c.group_sizes for c in a] != [c.group_sizes for c in b]


def test_inputs_regenerate_bit_for_bit_from_the_id(ci):
    case = ci[3]
    again = find_case("ci", 0, case.id)
    x1, x2 = case_inputs(case), case_inputs(again)
    for a, b in ((x1.x, x2.x), (x1.w, x2.w), (x1.dy, x2.dy)):
        assert a.dtype == np.float32 and a.tobytes() == b.tobytes()
    assert case_inputs(ci[4]).x.tobytes() != x1.x.tobytes()


def test_ci_covers_patterns_distributions_aspects_and_dtypes(ci):
    assert set(strategies.GROUP_PATTERNS) <= {c.pattern for c in ci}
    assert set(strategies.DISTRIBUTIONS) <= {c.distribution for c in ci}
    assert {c.aspect for c in ci} == {"wi", "wo"}
    assert {c.out_dtype for c in ci} == {"f32", "bf16"}
    assert any(c.pattern.startswith("hyp") for c in ci)
    assert any(c.exact_partials for c in ci)
    for c in ci:
        assert c.k % 128 == 0 and c.k // 128 >= 4, c.id
        assert c.n % 128 == 0 and c.n // 128 >= 2, c.id
        assert sum(c.group_sizes) <= c.m and len(c.group_sizes) == c.g
        assert c.m <= 512 and c.g <= 16  # sized for interpret-mode kernels
    wi = next(c for c in ci if c.aspect == "wi")
    wo = next(c for c in ci if c.aspect == "wo")
    assert wi.k > wi.n and wo.k < wo.n  # production's wi / wo aspects
    assert 15 <= len(ci) <= 30


def test_ci_has_the_group_edge_cases(ci):
    sizes = [np.array(c.group_sizes) for c in ci]
    assert any(s[0] == 0 for s in sizes) and any(s[-1] == 0 for s in sizes)
    assert any((s[1:-1] == 0).any() for s in sizes)
    assert any((s == 1).any() for s in sizes)
    assert any(((s % 128) != 0).any() and (s > 128).any() for s in sizes)
    assert any(((s % 128) == 0).all() and s.sum() > 0 for s in sizes)
    assert any(s.sum() < c.m for s, c in zip(sizes, ci, strict=True))


def test_every_k_block_gets_its_own_scale(ci):
    case = next(c for c in ci if c.distribution == "normal")
    q = quantize(case_inputs(case).x, (1, 128))
    # Different power-of-two magnitudes per K block: the per-block scales of one row differ.
    assert len(np.unique(q.scales[0])) >= 3


def test_exact_partials_cases_have_exact_float32_partials(ci):
    exact = [c for c in ci if c.exact_partials]
    assert exact
    for case in exact:
        inp = case_inputs(case)
        lq = quantize(inp.x, (1, 128), case.recipe)
        rq = quantize(inp.w, (128, 128), case.recipe)
        assert np.all(np.log2(lq.scales) % 1 == 0) and np.all(np.log2(rq.scales) % 1 == 0)
        a = lq.values.astype(np.float64)
        b = rq.values.astype(np.float64)
        start = 0
        for g, size in enumerate(case.group_sizes):
            for kb in range(case.k // 128):
                ks = slice(kb * 128, (kb + 1) * 128)
                p = a[start:start + size, ks] @ b[g, ks]  # float64: exact (see DESIGN.md)
                np.testing.assert_array_equal(p.astype(np.float32).astype(np.float64), p)
            start += size


def test_supported_explains_skips(ci):
    c = next(c for c in ci if c.out_dtype == "bf16")
    assert "out dtype bf16" in supported(c, ("f32",), 1)
    assert supported(c, ("f32", "bf16"), 1) is None
    residue = next(c for c in ci if c.pattern == "residues")
    assert "m_align=128" in supported(residue, ("f32", "bf16"), 128)
    aligned = next(c for c in ci if c.pattern == "multiples-128")
    assert supported(aligned, (aligned.out_dtype,), 128) is None


def test_unknown_suite_and_case_are_value_errors():
    with pytest.raises(ValueError, match="unknown suite"):
        build_suite("nightly")
    with pytest.raises(ValueError, match="no case"):
        find_case("smoke", 0, "wi-nope")
