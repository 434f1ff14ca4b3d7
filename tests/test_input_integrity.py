"""A kernel must not write into its inputs (issue 38, item 2): after every call, in layers
1, 2 and 3 and in numpy, torch and jax, the arguments are compared bit for bit with what
was handed; a write fails `inputs_unchanged` naming the argument and how many elements
changed, even when the output is bit for bit the correct kernel's; `fp8check.testing`
does the same.  The expected counts are worked out here from the write's definition, on
the case's own arguments, independently of the comparison under test."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from seeded_bugs import kernels
from seeded_bugs.input_writes import BUGS, CORRECT, QB

from fp8check import testing
from fp8check.contracts import run_kernel, to_framework, to_numpy
from fp8check.gate.failure import failure_line
from fp8check.inputs.cases import build_suite
from fp8check.layers.op import build_problem, validate_case
from fp8check.measures.integrity import changes, raw_bits
from fp8check.profiles import get_profile

TESTS = Path(__file__).parent
PROFILE = get_profile("strict")
# a zero-size group in the middle: the offsets bug changes the groups after the first
CASE = build_suite("smoke", 0)[0]
assert CASE.group_sizes[2] == 0 and CASE.applies_to("gmm-fp8")
ARG = {"offsets": "group_sizes", "scales": "lhs_scale", "weights": "rhs_q"}
# each framework's correct twin of the bugs
TWIN = {"numpy": kernels.CORRECT["numpy-fp8-naive"], "torch": CORRECT["torch-fp8-naive"],
        "jax": CORRECT["jax-fp8-naive"]}
FRAMEWORKS = ("numpy", "torch", "jax")


@pytest.fixture(scope="module")
def prob():
    return build_problem("gmm-fp8", CASE)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1).view(f"u{a.dtype.itemsize}")


def _expected_changes(write: str, args) -> tuple[int, int]:
    """(elements the write changes, the argument's size), from the write's definition."""
    lq, ls, rq, rs, gs = args
    if write == "offsets":  # gs -> its prefix sums: element g changes iff they differ
        ends = [sum(gs.tolist()[:g + 1]) for g in range(len(gs))]
        return sum(e != s for e, s in zip(ends, gs.tolist(), strict=True)), gs.size
    if write == "scales":  # 2s differs from s exactly where s is finite and nonzero
        return int(np.count_nonzero(np.isfinite(ls) & (ls != 0))), ls.size
    # weights: flat position p of the tile-major layout holds the element of tile
    # (kb, nb), row i, column j; it changes where that element differs from the one at p
    g, k, n = rq.shape
    packed = np.empty_like(_bits(rq)).reshape(g, -1)
    src = _bits(rq).reshape(g, k, n)
    p = 0
    for kb in range(k // QB):
        for nb in range(n // QB):
            tile = src[:, kb * QB:(kb + 1) * QB, nb * QB:(nb + 1) * QB].reshape(g, -1)
            packed[:, p:p + QB * QB] = tile
            p += QB * QB
    return int(np.count_nonzero(packed.reshape(-1) != _bits(rq))), rq.size


# --- the comparison itself ----------------------------------------------------------------


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_changed_nan_payload_or_zero_sign_counts(framework):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(64).astype(np.float32)
    a[3] = np.uint32(0x7FC00000).view(np.float32)  # a quiet NaN
    a[7] = 0.0
    handed = to_framework(a, framework)
    before = [raw_bits(handed, copy=True)]
    assert changes(["a"], [handed], before) == []
    b = a.copy()
    b[3] = np.uint32(0x7FC00001).view(np.float32)  # another NaN payload
    b[7] = -0.0
    b[11] = np.nextafter(b[11], np.float32(np.inf))
    after = to_framework(b, framework)
    (c,) = changes(["a"], [after], before)
    assert (c.name, c.changed, c.size) == ("a", 3, 64)
    assert changes(["a"], [to_framework(b[:63], framework)], before)[0].note.startswith(
        "shape or dtype changed")


def test_a_snapshot_is_not_changed_by_a_later_write():
    import torch

    t = torch.arange(8, dtype=torch.int32)
    before = raw_bits(t, copy=True)
    t.cumsum_(0)
    (c,) = changes(["group_sizes"], [t], [before])
    assert c.changed == 6  # 0, 1 keep their value; 2..7 become prefix sums
    # a tensor moved off its storage (x.data = ...) is read where it is now
    u = torch.zeros(4, dtype=torch.bfloat16)
    snap = raw_bits(u, copy=True)
    u.data = torch.ones(4, dtype=torch.bfloat16)
    assert changes(["x"], [u], [snap])[0].changed == 4


# --- layer 1, every framework ---------------------------------------------------------------


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("write", sorted(ARG))
def test_a_kernel_writing_an_input_fails_only_inputs_unchanged(prob, framework, write):
    bug = BUGS[f"bug-{framework}-inplace-{write}"].spec
    n, size = _expected_changes(write, prob.args)
    assert n > 0
    res = validate_case(bug, CASE, PROFILE, prob)
    assert res.error is None and res.failed_criteria == ["inputs_unchanged"]
    crit = next(c for c in res.criteria if c.name == "inputs_unchanged")
    assert crit.value == crit.n_bad == n
    assert f"{ARG[write]} ({n} of {size} elements changed)" in crit.bad_means
    assert ARG[write] in failure_line(res) and failure_line(res).startswith("inputs_unchanged")
    # the output is the correct twin's, bit for bit; the twin writes nothing
    got = run_kernel(bug, prob.args, CASE.out_dtype)
    want = run_kernel(TWIN[framework], prob.args, CASE.out_dtype)
    assert _bits(got.out).tobytes() == _bits(want.out).tobytes()
    assert [c.name for c in got.inputs_changed] == [ARG[write]] and not want.inputs_changed


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_correct_twins_pass_with_inputs_unchanged(prob, framework):
    res = validate_case(TWIN[framework], CASE, PROFILE, prob)
    assert res.passed, (res.failed_criteria, res.error)
    crit = next(c for c in res.criteria if c.name == "inputs_unchanged")
    assert crit.passed and crit.value == 0


def test_the_problem_is_never_written(prob):
    """Each call gets private copies: a write never reaches the shared references'
    arguments, so the next kernel and the determinism call see the case's data."""
    before = [a.copy() for a in prob.args]
    for framework in FRAMEWORKS:
        for write in ARG:
            run_kernel(BUGS[f"bug-{framework}-inplace-{write}"].spec, prob.args, "f32")
    for a, b in zip(prob.args, before, strict=True):
        assert _bits(a).tobytes() == _bits(b).tobytes()


def test_a_quantizer_and_a_tgmm_writing_their_inputs_fail():
    ci = build_suite("ci", 0)
    quant = BUGS["bug-quantizer-scales-x-in-place"].spec
    case = next(c for c in ci if c.applies_to("quantizer"))
    res = validate_case(quant, case, PROFILE)
    assert res.failed_criteria == ["inputs_unchanged"] and "x (" in failure_line(res)
    tgmm = BUGS["bug-tgmm-zeroes-padding-rows"].spec
    case = next(c for c in ci if c.applies_to("tgmm") and sum(c.group_sizes) < c.m)
    res = validate_case(tgmm, case, PROFILE)
    assert res.failed_criteria == ["inputs_unchanged"] and "dy (" in failure_line(res)


def test_the_criterion_crosses_the_worker_boundary(tmp_path):
    """A real isolated gate: the numpy and torch bugs' criterion is in the JSON and the
    FAIL lines name the argument; the twin passes on the same case."""
    (tmp_path / "k.py").write_text(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
        "from seeded_bugs.input_writes import BUGS, CORRECT\n"
        "NUMPY = BUGS['bug-numpy-inplace-offsets'].spec\n"
        "TORCH = BUGS['bug-torch-inplace-scales'].spec\n"
        "TWIN = CORRECT['torch-fp8-naive']\n")
    out = tmp_path / "g.json"
    proc = subprocess.run(
        [sys.executable, "-m", "fp8check", "gate", "--no-progress", "--suite", "smoke",
         "--layers", "1", "--case", CASE.id, "--json", str(out),
         *[a for n in ("NUMPY", "TORCH", "TWIN") for a in ("--kernel", f"k.py:{n}")]],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr
    results = {r["kernel"]: r for r in json.loads(out.read_text())["results"]}
    for name, arg in (("bug-numpy-inplace-offsets", "group_sizes"),
                      ("bug-torch-inplace-scales", "lhs_scale")):
        r = results[name]
        assert r["failed"] == ["inputs_unchanged"], r["failed"]
        assert f"{arg} (" in r["criteria"]["inputs_unchanged"]["bad_means"]
        assert f"FAIL {name} {CASE.id}: inputs_unchanged" in proc.stderr
    assert results["torch-fp8-naive"]["passed"] is True


# --- fp8check.testing ---------------------------------------------------------------------


def _assertion(fn):
    """(the result the listeners got, the AssertionError's text or None)."""
    got: list = []
    testing.add_listener(got.append)
    try:
        fn()
        text = None
    except AssertionError as e:
        text = str(e)
    finally:
        testing.remove_listener(got.append)
    return got[0], text


@pytest.fixture(autouse=True)
def _failures_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv(testing.FAILURE_DIR_ENV, str(tmp_path / "failures"))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_gate_case_asserts_name_the_written_argument(prob, framework):
    for write in ("offsets", "scales"):
        gc = testing.GateCase(CASE, suite="smoke", framework=framework)
        fn = BUGS[f"bug-{framework}-inplace-{write}"].spec.fn
        out = fn(*gc.args_as(framework), out_dtype=gc.out_dtype_as(framework))
        res, text = _assertion(lambda gc=gc, out=out: gc.assert_matches(out))
        n, size = _expected_changes(write, prob.args)
        assert res.failed_criteria == ["inputs_unchanged"]
        assert text is not None and f"{ARG[write]} ({n} of {size} elements changed)" in text
    twin = TWIN[framework]
    gc = testing.GateCase(CASE, suite="smoke", framework=framework)
    out = twin.fn(*gc.args_as(framework), out_dtype=gc.out_dtype_as(framework))
    res, text = _assertion(lambda: gc.assert_matches(out))
    assert text is None and "inputs_unchanged" in {c.name for c in res.criteria}


def test_gate_case_args_are_copies_and_unhanded_args_are_not_judged(prob):
    gc = testing.GateCase(CASE, suite="smoke")
    a, b = gc.args, gc.args
    assert all(x is not y and not np.shares_memory(x, y) for x, y in zip(a, b, strict=True))
    out = TWIN["numpy"].fn(*prob.args, out_dtype=np.float32)
    gc2 = testing.GateCase(CASE, suite="smoke")  # nothing handed: nothing to say
    res, text = _assertion(lambda: gc2.assert_matches(out))
    assert text is None and "inputs_unchanged" not in {c.name for c in res.criteria}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_assert_inputs_unchanged_names_the_parameter(framework):
    rng = np.random.default_rng(1)
    scale = rng.uniform(0.5, 2.0, (16, 4)).astype(np.float32)
    gs = np.array([3, 0, 5, 8], np.int32)

    def numpy_kernel(lhs_scale, group_sizes, *, prescale=False):
        if prescale:
            np.multiply(lhs_scale, np.float32(2), out=lhs_scale)
        return lhs_scale.sum()

    def torch_kernel(lhs_scale, group_sizes, *, prescale=False):
        if prescale:
            group_sizes.cumsum_(0)
        return lhs_scale.sum()

    def jax_kernel(lhs_scale, group_sizes, *, prescale=False):
        import torch

        if prescale:  # a foreign function writing the buffer
            torch.from_dlpack(lhs_scale).mul_(2)
        return lhs_scale.sum()

    kernel = {"numpy": numpy_kernel, "torch": torch_kernel, "jax": jax_kernel}[framework]
    written = {"numpy": "lhs_scale (64 of 64", "torch": "group_sizes (3 of 4",
               "jax": "lhs_scale (64 of 64"}[framework]
    args = [to_framework(a, framework) for a in (scale, gs)]
    out = testing.assert_inputs_unchanged(kernel, *args)
    assert float(to_numpy(out)) == pytest.approx(float(scale.sum(dtype=np.float64)), rel=1e-5)
    with pytest.raises(AssertionError, match=r"inputs_unchanged failed: .*"
                       + written.replace("(", r"\(")):
        testing.assert_inputs_unchanged(kernel, *args, prescale=True)
    # a keyword argument is named by its keyword
    fresh = to_framework(scale, framework)
    with pytest.raises(AssertionError, match=r"lhs_scale \(64 of 64"):
        testing.assert_inputs_unchanged(
            lambda *, lhs_scale: _write_any(lhs_scale, framework), lhs_scale=fresh)


def _write_any(x, framework):
    if framework == "numpy":
        x += 1
    else:
        import torch

        (x if framework == "torch" else torch.from_dlpack(x)).add_(1)


def test_a_jax_array_cannot_be_written_through_numpy():
    """The only way into a jax array's memory is its buffer (checked above): numpy's view
    of it is read-only, so a numpy-style in-place write raises in the kernel."""
    gs = to_framework(np.array([1, 2, 3], np.int32), "jax")
    with pytest.raises(ValueError, match="read-only"):
        np.cumsum(np.asarray(gs), out=np.asarray(gs))


# --- layers 2 and 3 -----------------------------------------------------------------------


def _torch_user_kernels():
    from fp8check.contracts import load_target

    file = TESTS / "data" / "user_layers" / "torch_kernels.py"
    return {n: load_target(f"{file}:{n}") for n in ("gmm_fp8", "tgmm", "dgrad")}


def test_layer2_fails_a_torch_kernel_writing_its_inputs():
    k = _torch_user_kernels()

    def gmm_offsets(lhs_q, lhs_s, rhs_q, rhs_s, group_sizes):
        out = k["gmm_fp8"](lhs_q, lhs_s, rhs_q, rhs_s, group_sizes)
        group_sizes.cumsum_(0)  # "end offsets for the next kernel", in the routing itself
        return out

    def dgrad_masks_dy(dy, w, group_sizes):
        out = k["dgrad"](dy, w, group_sizes)
        dy[int(group_sizes.sum()):] = 0  # "masking the padding" in the incoming gradient
        dy.mul_(1.0 + 2.0**-7)  # and prescaling it in place
        return out

    with pytest.raises(AssertionError) as info:
        testing.assert_layers_pass(gmm_offsets, framework="torch", tgmm=k["tgmm"],
                                   dgrad=k["dgrad"], layers=(2,))
    assert re.search(r"InputsChanged: inputs_unchanged failed: forward kernel \S*gmm_offsets "
                     r"wrote into its inputs: group_sizes \(\d+ of 8 elements changed\)",
                     str(info.value))
    with pytest.raises(AssertionError) as info:
        testing.assert_layers_pass(k["gmm_fp8"], framework="torch", tgmm=k["tgmm"],
                                   dgrad=dgrad_masks_dy, layers=(2,))
    assert re.search(r"dgrad kernel \S*dgrad_masks_dy wrote into its inputs: dy \(",
                     str(info.value))


def test_layer2_passes_the_same_kernels_unwritten():
    k = _torch_user_kernels()
    results = testing.assert_layers_pass(k["gmm_fp8"], framework="torch", tgmm=k["tgmm"],
                                         dgrad=k["dgrad"], layers=(2,))
    assert results and all(r.passed for r in results)


def test_jax_layer2_sees_a_buffer_write():
    """jax layer 2 runs eagerly under jax.grad: the forward gets concrete arrays, whose
    buffers are compared after the call."""
    from fp8check.contracts import load_target

    file = TESTS / "data" / "user_layers" / "jax_kernels.py"
    gmm = load_target(f"{file}:gmm_fp8")

    def gmm_offsets(lhs_q, lhs_s, rhs_q, rhs_s, group_sizes):
        import torch

        out = gmm(lhs_q, lhs_s, rhs_q, rhs_s, group_sizes)
        if not isinstance(group_sizes, __import__("jax").core.Tracer):
            torch.from_dlpack(group_sizes).cumsum_(0)
        return out

    with pytest.raises(AssertionError) as info:
        testing.assert_layers_pass(gmm_offsets, framework="jax", layers=(2,))
    assert "wrote into its inputs: group_sizes (" in str(info.value)
