"""Suite coverage (`fp8check.inputs.coverage`) and its listing in `fp8check list`: every input
class turns covered by a case made to reach it and only by such a case; the named suites'
coverage follows from their definitions (`fp8check.inputs.cases.SUITE_SHAPES`)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from fp8check.cli import main
from fp8check.inputs import coverage
from fp8check.inputs.cases import SUITE_SHAPES, SUITES, Case, build_suite

BASE = build_suite("smoke", 0)[0]  # wi, zero-middle, fp8-ties, f32: K/128 = 4, N = 256


def _classes(cases) -> dict[str, bool]:
    return {name: covered for name, covered, _ in coverage.suite_coverage(cases).classes}


def _named(part: str) -> str:
    [name] = [ic.name for ic in coverage.INPUT_CLASSES if ic.name.startswith(part)]
    return name


def _big_m(case):
    m = 40_000
    return dataclasses.replace(case, m=m, group_sizes=(m - 3, 0, 1, 2))


def _rows(m, g=None, sizes=None):
    """The base case with M = m rows: its last group grows by the rows added (or `sizes`
    over `g` groups), so no other row class changes."""
    def change(c):
        gs = sizes or c.group_sizes[:-1] + (c.group_sizes[-1] + m - c.m,)
        return dataclasses.replace(c, m=m, g=g or c.g, group_sizes=gs)
    return change


# (class, the base case changed to reach it, the classes that change implies); the base
# has M = 256 (whole row tiles), K/128 = 4, N = 256, f32 output
REACH = [
    ("odd K/128", lambda c: dataclasses.replace(c, k=640), ()),
    ("K % 128", lambda c: dataclasses.replace(c, k=600), ("odd K/128",)),  # 5 blocks
    ("N % 256", lambda c: dataclasses.replace(c, n=384), ()),
    ("M % 4", _rows(257), ("M > 128",)),
    ("M % 8 == 4", _rows(260), ("M > 128",)),
    ("M > 128", _rows(320), ()),  # 320 = 2.5 tiles: a multiple of 64, not of 128
    ("small M", _rows(48, g=8, sizes=(6,) * 8), ()),  # a multiple of 16, under 128
    ("non-finite", lambda c: dataclasses.replace(c, distribution="nonfinite"), ()),
    ("float32-subnormal",
     lambda c: dataclasses.replace(c, distribution="subnormal-sums"), ()),
    ("ue8m0", lambda c: dataclasses.replace(c, distribution="ue8m0-edges"), ()),
    ("exact partials on bf16",
     lambda c: dataclasses.replace(c, exact_partials=True, out_dtype="bf16"), ("bf16 output",)),
]


@pytest.mark.parametrize(("part", "change", "implied"), REACH, ids=[p for p, _, _ in REACH])
def test_a_case_made_for_a_class_covers_it(part, change, implied):
    before, after = _classes([BASE]), _classes([BASE, change(BASE)])
    name = _named(part)
    assert not before[name] and after[name]
    # only the class itself and what the change implies turns covered
    changed = {n for n in before if before[n] != after[n]}
    assert changed == {name} | {_named(p) for p in implied}


def test_row_and_offset_classes():
    big = _big_m(BASE)
    got = _classes([big])
    assert got[_named("M > 32767")] and got[_named("group offsets past")]
    assert got[_named("zero-size groups")]
    whole = _named("M % 128 == 0")  # BASE: M = 256; 300 and 40000 leave a partial tile
    assert _classes([BASE])[whole] and not _classes([_rows(300)(BASE)])[whole]
    assert not got[whole]
    small = dataclasses.replace(big, group_sizes=(100, 0, 1, 2))  # M past int16, groups not
    got = _classes([small])
    assert got[_named("M > 32767")] and not got[_named("group offsets past")]
    assert got[_named("rows past the last group")]


@dataclasses.dataclass(frozen=True)
class _NewFamilyCase(Case):
    """A Case with a boolean flag Case does not have (a new case family)."""

    new_family: bool = True


def test_quantizer_only_cases_and_new_flags():
    fields = {f.name: getattr(BASE, f.name) for f in dataclasses.fields(Case)}
    q = _NewFamilyCase(**{**fields, "id": BASE.id + "-q", "k": 600,  # 5 K blocks
                          "quantizer_only": True})
    cov = coverage.suite_coverage([BASE, q])
    facts, classes = dict(cov.facts), _classes([BASE, q])
    assert q.contracts() == ("quantizer",)
    assert facts["contracts"] == "every contract ×1, quantizer ×1"
    # a quantizer's partial K block counts; its odd block count says nothing of a matmul's
    assert classes[_named("K % 128")] and not classes[_named("odd K/128")]
    assert facts["cases new_family"] == "1" and facts["cases exact_partials"] == "0"


def test_unknown_distribution_appears_as_itself():
    odd = dataclasses.replace(BASE, distribution="weird-new-values")
    facts = dict(coverage.suite_coverage([BASE, odd]).facts)
    assert "weird-new-values ×1" in facts["distributions"]
    assert "weird" not in facts["value classes"]
    assert coverage.value_classes("weird-new-values") == set()
    assert coverage.value_classes("nonfinite") == {"non-finite inputs"}


@pytest.mark.parametrize("suite", SUITES)
def test_named_suites_follow_their_definitions(suite):
    cases = build_suite(suite, 0)
    cov = coverage.suite_coverage(cases)
    facts, classes = dict(cov.facts), _classes(cases)
    assert facts["cases"] == str(len(cases)) == str(cov.n_cases)
    shape = SUITE_SHAPES[suite]
    # every suite draws the zero-middle and residues patterns on both aspects' shapes
    assert classes[_named("zero-size groups")] and classes[_named("residual rows")]
    for aspect, (k, n) in (("wi", shape.wi), ("wo", shape.wo)):
        assert f"{k}x{n}" in facts[f"K x N ({aspect})"].split(", ")
    assert str(shape.m) in facts["M"].split(", ")
    # a class is covered exactly when some case's fields reach it
    assert classes[_named("odd K/128")] == any(-(-c.k // 128) % 2 for c in cases)
    assert classes[_named("N % 256")] == any(c.n % 256 for c in cases)
    assert classes[_named("M > 32767")] == any(c.m > 32767 for c in cases)
    assert set(cov.not_covered) == {n for n, v in classes.items() if not v}


def test_smoke_reports_what_it_has_not_looked_at():
    # smoke is one shape per aspect (SUITE_SHAPES): K/128 = 4, N % 256 == 0, M = 256
    smoke = SUITE_SHAPES["smoke"]
    assert all((k // 128) % 2 == 0 and n % 256 == 0 for k, n in (smoke.wi, smoke.wo))
    missing = coverage.suite_coverage(build_suite("smoke", 0)).not_covered
    for part in ("odd K/128", "N % 256", "M > 32767", "group offsets past"):
        assert _named(part) in missing


def test_list_prints_the_coverage(capsys):
    assert main(["list", "--suite", "smoke", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    cases = build_suite("smoke", 3)
    cov = coverage.suite_coverage(cases)
    listed = re.findall(r"^  (\S+)  groups=.*  covers: (.*)$", out, re.M)
    assert [i for i, _ in listed] == [c.id for c in cases]
    for (_, tags), case in zip(listed, cases, strict=True):  # the classes each case reaches
        reached = [ic.tag for ic in coverage.INPUT_CLASSES if ic.covered_by(case)]
        assert tags == (", ".join(reached) or "-")
    head, _, tail = out.partition("what suite smoke looks at")
    assert tail and "NOT looked at:" in tail
    tags = {ic.name: ic.tag for ic in coverage.INPUT_CLASSES}
    for name in cov.not_covered:
        assert f"not covered  {name} [{tags[name]}]" in tail
    for name, covered, hits in cov.classes:
        if covered:
            assert f"covered      {name} ({len(hits)}) [{tags[name]}]" in tail
    assert re.search(rf"^  cases +{len(cases)}$", tail, re.M)


def test_list_names_each_ci_case_row_and_ue8m0_class(capsys):
    """On ci, the listing tags the cases of other row counts and the ue8m0-edges cases
    with their classes (fields read here, not through `coverage`)."""
    assert main(["list", "--suite", "ci"]) == 0
    tags = dict(re.findall(r"^  (\S+)  groups=.*  covers: (.*)$", capsys.readouterr().out,
                           re.M))
    cases = build_suite("ci", 0)
    assert set(tags) == {c.id for c in cases}
    # the row classes are the matmuls' (a quantizer-only case's M says nothing of them)
    expected = {"m-unaligned": lambda c: c.m % 4 != 0 and not c.quantizer_only,
                "m-4-not-8": lambda c: c.m % 8 == 4 and not c.quantizer_only,
                "small-m-many-groups": lambda c: c.m < 128 and c.g >= 16,
                "ue8m0-edges": lambda c: c.distribution == "ue8m0-edges"}
    for tag, has in expected.items():
        tagged = {i for i, t in tags.items() if tag in t.split(", ")}
        assert len(tagged) >= 2 and tagged == {c.id for c in cases if has(c)}, tag
