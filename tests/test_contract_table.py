"""The contracts as values (`fp8check.contracts.table`): each name has one Contract, its
argument table is the call the layer-1 problems hand the kernel, and no code outside the
contracts package switches on a contract's name."""

import re
from pathlib import Path

import pytest

from fp8check.contracts import (
    ARG_NAMES,
    CONTRACTS,
    CONTRACTS_BY_NAME,
    NUMPY_DTYPES,
    QUANTIZER,
    contract_of,
)
from fp8check.inputs.cases import build_suite
from fp8check.layers.op import build_problem
from fp8check.layers.op.problem import PROBLEM_BUILDERS

ROOT = Path(__file__).resolve().parents[1]
SMOKE = build_suite("smoke", 0)


def test_each_name_is_one_contract():
    assert tuple(CONTRACTS_BY_NAME) == CONTRACTS == ("gmm-fp8", "gmm", "tgmm", "quantizer")
    for name in CONTRACTS:
        assert contract_of(name).name == name
        assert ARG_NAMES[name] == contract_of(name).arg_names
    with pytest.raises(ValueError, match="unknown contract 'gemm'; expected one of gmm-fp8, "
                                         "gmm, tgmm, quantizer"):
        contract_of("gemm")


@pytest.mark.parametrize("name", CONTRACTS)
def test_a_matmul_and_only_a_matmul_has_a_problem_and_operands(name):
    c = contract_of(name)
    assert (c.problem is not None) == c.matmul == bool(c.operands)
    assert c.problem is None or c.problem in PROBLEM_BUILDERS


@pytest.mark.parametrize("name", [c.name for c in CONTRACTS_BY_NAME.values() if c.matmul])
def test_the_argument_table_is_what_the_problem_hands_the_kernel(name):
    c = contract_of(name)
    case = next(k for k in SMOKE if k.applies_to(name) and not k.streamed)
    prob = build_problem(name, case)
    sizes = {"m": case.m, "k": case.k, "n": case.n, "g": case.g}
    assert [(a.shape, a.dtype) for a in prob.args] == c.arg_shapes(sizes, "f32")
    assert c.sizes(prob.args) == sizes
    assert c.out_shape(prob.args) == prob.exact.shape


def test_the_quantizer_is_handed_its_declared_dtype():
    assert QUANTIZER.arg_shapes({"m": 4, "k": 256}, "bf16") == [((4, 256), NUMPY_DTYPES["bf16"])]
    with pytest.raises(ValueError, match="returns \\(values, scales\\)"):
        QUANTIZER.out_shape(())


# `<...>.contract == "gmm"`, `contract in (...)`, `contract != x`, `contract not in x`
SWITCH = re.compile(r"contract\s*(==|!=|in\s*\(|not\s+in\b)")


def test_no_switch_on_a_contract_name_outside_the_contracts_package():
    found = [f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
             for top in ("fp8check", "references", "kernels", "reports")
             for path in sorted((ROOT / top).rglob("*.py"))
             if "contracts" not in path.relative_to(ROOT).parts
             for i, line in enumerate(path.read_text().splitlines(), 1)
             if SWITCH.search(line)]
    assert found == []
