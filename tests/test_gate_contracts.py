"""Kernel contracts: spec validation, framework conversion bit for bit, plain-function loading."""

import ml_dtypes
import numpy as np
import pytest

from fp8check.contracts import (
    CONTRACT_DOC,
    OUT_DTYPES,
    KernelSpec,
    MatmulClaims,
    QuantizerClaims,
    call_kernel,
    load_target,
    spec_from_target,
    takes_out_dtype,
    to_framework,
    to_numpy,
)


def _identity(*args, **kw):
    return args[0]


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"contract": "gemm"}, "unknown contract"),
        ({"framework": "tf"}, "unknown framework"),
        ({"name": ""}, "name must be non-empty"),
        ({"contract": "gmm", "claims": MatmulClaims(accum="deepgemm")},
         "accum 'deepgemm': only meaningful for gmm-fp8"),
        ({"contract": "quantizer"}, "a quantizer kernel declares QuantizerClaims"),
        ({"claims": QuantizerClaims("deepgemm")}, "a gmm-fp8 kernel declares MatmulClaims"),
        ({"fn": 3}, "not callable"),
    ],
)
def test_spec_rejects_bad_declarations(kw, msg):
    """A spec's identity is checked and its claims against its contract, each a one-line
    ValueError naming the kernel (the claims' own rules: tests/test_claims.py)."""
    base = {"name": "k", "contract": "gmm-fp8", "framework": "numpy", "fn": _identity}
    with pytest.raises(ValueError, match=msg) as e:
        KernelSpec(**{**base, **kw})
    assert "\n" not in str(e.value)


def _all_codes(dtype) -> np.ndarray:
    """Every bit pattern of a 1- or 2-byte dtype (NaN codes included)."""
    width = np.dtype(dtype).itemsize
    bits = np.arange(2 ** (8 * width), dtype=np.uint8 if width == 1 else np.uint16)
    return bits.view(dtype)


@pytest.mark.parametrize("framework", ["numpy", "jax", "torch"])
@pytest.mark.parametrize(
    "dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.bfloat16]
)
def test_round_trip_preserves_every_bit_pattern(framework, dtype):
    a = _all_codes(dtype).reshape(-1, 16)
    back = to_numpy(to_framework(a, framework))
    assert back.dtype == a.dtype and back.shape == a.shape
    assert back.tobytes() == a.tobytes()


@pytest.mark.parametrize("framework", ["numpy", "jax", "torch"])
def test_round_trip_float32_and_int32(framework):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    x[0, 0] = np.nan
    gs = np.array([3, 0, 2], np.int32)
    for a in (x, gs):
        back = to_numpy(to_framework(a, framework))
        assert back.dtype == a.dtype and back.tobytes() == a.tobytes()


def test_torch_kernel_sees_torch_fp8():
    import torch

    seen = {}

    def fn(q, out_dtype):
        seen["dtype"], seen["out"] = q.dtype, out_dtype
        return q.to(torch.float32).to(out_dtype)

    spec = KernelSpec(name="t", contract="gmm", framework="torch", fn=fn)
    q = np.array([1.5, -448, 0.001953125], ml_dtypes.float8_e4m3fn)
    out = call_kernel(spec, (q,), "bf16")
    assert seen == {"dtype": torch.float8_e4m3fn, "out": torch.bfloat16}
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.astype(np.float32), q.astype(np.float32))


def test_single_out_dtype_kernel_gets_no_keyword():
    spec = KernelSpec(name="n", contract="gmm", framework="numpy", fn=lambda x: x)
    x = np.ones(3, np.float32)
    assert call_kernel(spec, (x,), "f32").tobytes() == x.tobytes()


def _kw_only(x, *, out_dtype=np.float32):
    return x.astype(out_dtype)


def _any_kwargs(x, **kw):
    return x.astype(kw.get("out_dtype", np.float32))


def _positional_only(x, out_dtype=np.float32, /):
    return x.astype(out_dtype)


@pytest.mark.parametrize("fn, takes", [
    (_kw_only, True),
    (_any_kwargs, True),
    (lambda x, out_dtype: x.astype(out_dtype), True),
    (lambda x: x, False),
    (_positional_only, False),  # cannot be passed by keyword
    (max, False),  # a builtin whose signature cannot be read
])
def test_a_kernel_gets_out_dtype_exactly_when_its_signature_takes_it(fn, takes):
    assert takes_out_dtype(fn) is takes
    spec = KernelSpec(name="k", contract="gmm", framework="numpy", fn=lambda x, **kw: kw)
    # the rule is the signature's, not the number of declared dtypes
    one = KernelSpec(name="k1", contract="gmm", framework="numpy", fn=_kw_only,
                     claims=MatmulClaims(out_dtypes=("bf16",)))
    assert call_kernel(spec, (np.ones(2, np.float32),), "bf16") == {
        "out_dtype": ml_dtypes.bfloat16}
    assert call_kernel(one, (np.ones(2, np.float32),), "bf16").dtype == ml_dtypes.bfloat16


def test_a_spec_runs_every_out_dtype_unless_narrowed():
    spec = KernelSpec(name="k", contract="gmm", framework="numpy", fn=_kw_only)
    assert spec.matmul_claims.out_dtypes == OUT_DTYPES


@pytest.mark.parametrize("fn, how", [
    (lambda lhs, rhs, group_sizes: np.zeros((lhs.shape[0], rhs.shape[-1]), np.float32),
     "it takes no out_dtype keyword"),
    (lambda lhs, rhs, group_sizes, out_dtype: np.zeros((lhs.shape[0], rhs.shape[-1]),
                                                       np.float32),
     "it was called with out_dtype=bf16"),
])
def test_a_wrong_output_dtype_fails_naming_out_dtypes(fn, how):
    """A kernel that returns f32 on a bf16 case fails (never a skip), saying how it was
    called and which declaration narrows it."""
    from fp8check.inputs.cases import build_suite
    from fp8check.layers.op import validate_case
    from fp8check.profiles import get_profile

    case = next(c for c in build_suite("smoke") if c.out_dtype == "bf16")
    res = validate_case(KernelSpec(name="f32-only", contract="gmm", framework="numpy", fn=fn),
                        case, get_profile("strict"))
    assert res.passed is False and res.skipped is None
    assert "returned dtype float32, expected bfloat16 on a bf16 case" in res.error
    assert how in res.error and "--out-dtypes" in res.error and CONTRACT_DOC in res.error


def test_a_kernel_file_imports_its_siblings_and_its_package(tmp_path, monkeypatch):
    """As pytest imports a test file: the file's directory, or the root of its package
    (the first parent without __init__.py), goes on sys.path; a file in a package is
    imported by its dotted name, so its relative imports work.  No PYTHONPATH."""
    import sys

    monkeypatch.setattr(sys, "path", list(sys.path))
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "byok_sibling_helper.py").write_text("SCALE = 3\n")
    (flat / "kern.py").write_text("from byok_sibling_helper import SCALE\n"
                                  "def gmm(x):\n    return x * SCALE\n")
    pkg = tmp_path / "root" / "byok_pkg" / "sub"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent):
        (d / "__init__.py").write_text("")
    (pkg / "helper.py").write_text("SCALE = 5\n")
    (pkg / "kern.py").write_text("from .helper import SCALE\n"
                                 "from byok_pkg.sub import helper\n"
                                 "def gmm(x):\n    return x * SCALE * helper.SCALE\n")
    monkeypatch.chdir(tmp_path / "root")  # neither file's directory
    assert load_target(f"{flat / 'kern.py'}:gmm")(2) == 6
    assert load_target("byok_pkg/sub/kern.py:gmm")(2) == 50
    assert str(flat) in sys.path and str(tmp_path / "root") in sys.path
    for name in ("byok_sibling_helper", "byok_pkg", "byok_pkg.sub", "byok_pkg.sub.kern",
                 "byok_pkg.sub.helper"):
        monkeypatch.delitem(sys.modules, name)


def test_a_kernel_file_shadowed_by_an_imported_package_is_named(tmp_path, monkeypatch):
    """A package file whose dotted name is already imported from another file (two
    `byok_dup/kern.py` under different roots) is an error naming both, never silently
    the other file's kernel."""
    import sys

    monkeypatch.setattr(sys, "path", list(sys.path))
    for root, value in (("one", 1), ("two", 2)):
        pkg = tmp_path / root / "byok_dup"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "kern.py").write_text(f"def gmm(x):\n    return {value}\n")
    assert load_target(f"{tmp_path / 'one/byok_dup/kern.py'}:gmm")(0) == 1
    with pytest.raises(ValueError, match="imports as module 'byok_dup.kern', which is "
                                         "already imported from .*one") as e:
        load_target(f"{tmp_path / 'two/byok_dup/kern.py'}:gmm")
    assert "\n" not in str(e.value)
    for name in ("byok_dup", "byok_dup.kern"):
        monkeypatch.delitem(sys.modules, name)


def test_load_target_module_and_file(tmp_path):
    assert load_target("numpy:matmul") is np.matmul
    f = tmp_path / "mykernel.py"
    f.write_text("def gmm(lhs, rhs, gs):\n    return lhs\n")
    fn = load_target(f"{f}:gmm")
    assert fn(1, 2, 3) == 1
    spec = spec_from_target(f"{f}:gmm", "gmm", "numpy")
    assert spec.name == f"{f}:gmm" and spec.contract == "gmm"


@pytest.mark.parametrize(
    "target, msg",
    [
        ("no_colon", "module:attr"),
        ("does_not_exist_pkg:fn", "importing"),
        ("numpy:no_such_attr", "no attribute"),
        ("/nonexistent/file.py:fn", "does not exist"),
    ],
)
def test_load_target_errors_are_one_line_value_errors(target, msg):
    with pytest.raises(ValueError, match=msg) as e:
        load_target(target)
    assert "\n" not in str(e.value)


def test_plain_function_needs_contract_and_framework():
    with pytest.raises(ValueError, match="--contract and --framework") as e:
        spec_from_target("numpy:matmul", None, "numpy")
    assert str(e.value).endswith(f"(the kernel contract: {CONTRACT_DOC})")


def test_spec_target_must_agree_with_flags(tmp_path):
    f = tmp_path / "k.py"
    f.write_text(
        "from fp8check.contracts import KernelSpec\n"
        "K = KernelSpec(name='k', contract='gmm', framework='numpy', fn=lambda *a: a[0])\n"
    )
    assert spec_from_target(f"{f}:K", None, None).name == "k"
    with pytest.raises(ValueError, match="disagrees"):
        spec_from_target(f"{f}:K", "tgmm", None)
    # a declaration for a spec is checked, not ignored: --out-dtypes f32 does not narrow it
    assert spec_from_target(f"{f}:K", None, None, out_dtypes=OUT_DTYPES).name == "k"
    with pytest.raises(ValueError, match=r"--out-dtypes \('f32',\) disagrees with the spec's"):
        spec_from_target(f"{f}:K", None, None, out_dtypes=("f32",))


@pytest.mark.parametrize("returns, what", [
    (lambda out: out.tolist(), "a list"),
    (lambda out: None, "None"),
    (lambda out: (out,), "a tuple"),
    (lambda out: 1.5, "a float"),
])
def test_a_wrong_return_is_reported_as_what_it_was(returns, what):
    """A kernel returning a list was reported as "returned tuple", None as "returned
    shape ()": the result says what came back and what was expected."""
    from fp8check.inputs.cases import build_suite
    from fp8check.layers.op import validate_case
    from fp8check.profiles import get_profile

    case = next(c for c in build_suite("smoke") if c.out_dtype == "f32")

    def kernel(lhs, rhs, group_sizes, out_dtype=None):
        m, n = lhs.shape[0], rhs.shape[-1]
        return returns(np.zeros((m, n), np.float32))

    spec = KernelSpec(name="odd", contract="gmm", framework="numpy", fn=kernel)
    res = validate_case(spec, case, get_profile("strict"))
    assert res.passed is False
    assert res.error.startswith(f"bad output: returned {what}, expected an array of shape (")
    assert res.error.endswith(") float32 (the kernel contract: docs/contract.md)")


@pytest.mark.parametrize("returns, what", [
    (lambda v, s: [v, s], None),  # a list of the two arrays is accepted
    (lambda v, s: None, "None"),
    (lambda v, s: (v, s, v), "a tuple"),
])
def test_a_quantizer_must_return_values_and_scales(returns, what):
    from fp8check.inputs.cases import build_suite
    from fp8check.layers.op import validate_case
    from fp8check.profiles import get_profile
    from fp8check.references import quantize

    def quantizer(x):
        q = quantize(np.asarray(x, np.float32), (1, 128), "deepgemm")
        return returns(q.values, q.scales)

    spec = KernelSpec(name="q", contract="quantizer", framework="numpy", fn=quantizer,
                      claims=QuantizerClaims("deepgemm", block=(1, 128)))
    res = validate_case(spec, build_suite("smoke")[0], get_profile("strict"))
    if what is None:
        assert res.error is None
    else:
        assert res.error == (f"bad output: returned {what}, expected a tuple (values, scales) "
                             f"(the kernel contract: docs/contract.md)")
