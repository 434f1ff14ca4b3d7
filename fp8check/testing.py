"""Assertions for a kernel's own test suite: the gate's layer-1 criteria, one call each.

    from fp8check.testing import assert_gmm_matches
    out = my_gmm(lq.values, lq.scales, rq.values, rq.scales, group_sizes)
    assert_gmm_matches(out, lq, rq, group_sizes)               # QTensors the kernel consumed
    assert_gmm_matches(out, x, w, group_sizes, recipe="deepgemm")  # or the float inputs

Every assertion builds the same `Problem` the gate builds and applies the same criteria
(`fp8check.layers.op.output_criteria` / `quantizer_output_criteria`: one implementation),
so a test and the gate reach the same verdict on the same data.  On failure the
AssertionError names each failed criterion, how many elements are off, the worst one
(index, group, row within the group, K/N tile, value, reference, ULP distance, bound) and
a one-line reproduction:

* the inputs are saved to an .npz (in `$FP8CHECK_FAILURE_DIR`, else beside the pytest
  plugin's report, else the temp dir; the name is a hash of the content) and the line
  `python -c "from fp8check.testing import replay; replay('...npz')"` re-runs the
  assertion on them anywhere, without the kernel;
* inside a test driven by the `fp8check_case` fixture (pytest plugin), the gate command
  for that case is printed too (`fp8check gate --kernel ... --case <id>`).

Inputs may be numpy, ml_dtypes, jax or torch arrays (converted bit for bit).  Every
assertion returns the `CaseResult` when it passes, and reports it (pass or fail) to the
listeners that `add_listener` registered (the pytest plugin's `--fp8check-report`).
Bad input (shapes, dtypes, unknown names) raises ValueError, not AssertionError.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import os
import shlex
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fp8check.cases import Case, CaseInputs, case_inputs, supported
from fp8check.contracts import NUMPY_DTYPES, framework_dtype, to_framework, to_numpy
from fp8check.gate.repro import PlainDeclarations, gate_command
from fp8check.layers.op import (
    LAYER,
    Problem,
    ProblemCache,
    gmm_fp8_problem,
    output_criteria,
    plain_gmm_problem,
    quantizer_output_criteria,
    tgmm_problem,
)
from fp8check.profiles import get_profile
from fp8check.results import CaseResult, Criterion

__all__ = [
    "GateCase",
    "add_listener",
    "assert_bitexact",
    "assert_gmm_matches",
    "assert_quantizer_matches",
    "assert_tgmm_matches",
    "partials_exact_in_f32",
    "remove_listener",
    "replay",
]

BLOCK = 128
FAILURE_DIR_ENV = "FP8CHECK_FAILURE_DIR"
F32_SIGNIFICAND_BITS = 24

# --- who hears about results, and in which test/case they were made ------------------------

_listeners: list[Callable[[CaseResult], None]] = []


@dataclass
class _Context:
    """Where assertions are being made: a label (the pytest node id), the active gate case."""

    label: str | None = None
    gate_case: GateCase | None = None
    count: int = 0  # assertions made so far under this label


_context: contextvars.ContextVar[_Context | None] = contextvars.ContextVar(
    "fp8check_testing_context", default=None)
_failure_dir: list[Path] = []  # set by the plugin (beside its report); the env var wins


def add_listener(fn: Callable[[CaseResult], None]) -> None:
    """Call `fn(result)` for every assertion made from now on, passing or failing."""
    _listeners.append(fn)


def remove_listener(fn: Callable[[CaseResult], None]) -> None:
    _listeners.remove(fn)


@contextmanager
def assertion_context(label: str | None = None,
                      gate_case: GateCase | None = None) -> Iterator[None]:
    """Results made inside are labelled `label` (their report `kernel`) and, with a
    `gate_case`, carry its case id and gate repro command.  Used by the pytest plugin."""
    token = _context.set(_Context(label=label, gate_case=gate_case))
    try:
        yield
    finally:
        _context.reset(token)


def set_failure_dir(path: str | Path | None) -> None:
    """Where failing inputs are saved (the env var FP8CHECK_FAILURE_DIR overrides it)."""
    _failure_dir.clear()
    if path is not None:
        _failure_dir.append(Path(path))


def _save_dir() -> Path:
    if os.environ.get(FAILURE_DIR_ENV):
        return Path(os.environ[FAILURE_DIR_ENV])
    if _failure_dir:
        return _failure_dir[0]
    return Path(tempfile.gettempdir()) / "fp8check-failures"


# --- inputs ----------------------------------------------------------------------------------


def _array(x: Any, what: str) -> np.ndarray:
    try:
        return to_numpy(x)
    except Exception as e:  # an object that is no array at all
        raise ValueError(f"{what}: expected an array, got {type(x).__name__}") from e


def _dtype_name(a: np.ndarray, what: str, allowed: tuple[str, ...]) -> str:
    for name in allowed:
        if a.dtype == NUMPY_DTYPES[name]:
            return name
    raise ValueError(f"{what} has dtype {a.dtype}; expected one of {', '.join(allowed)}")


def _group_sizes(group_sizes: Any, g: int, m: int) -> np.ndarray:
    gs = _array(group_sizes, "group_sizes")
    if gs.ndim != 1 or gs.shape[0] != g or not np.issubdtype(gs.dtype, np.integer):
        raise ValueError(f"group_sizes must be {g} integers, got {gs.dtype}{list(gs.shape)}")
    if np.any(gs < 0) or int(gs.sum()) > m:
        raise ValueError(f"group_sizes {gs.tolist()} must be >= 0 with sum <= {m} rows")
    return gs.astype(np.int32)


def _qtensor(x: Any, block: tuple[int, int], what: str) -> Any:
    """A QTensor from a QTensor or a (values, scales) pair; None for a plain array."""
    from fp8check.references import QTensor

    if isinstance(x, QTensor):
        return x
    if isinstance(x, tuple | list):
        if len(x) != 2:
            raise ValueError(f"{what}: a quantized operand is (values, scales)")
        values, scales = _array(x[0], f"{what} values"), _array(x[1], f"{what} scales")
        fmt = _dtype_name(values, f"{what} values", ("e4m3fn", "e5m2"))
        if scales.dtype != np.float32:
            raise ValueError(f"{what} scales have dtype {scales.dtype}; expected float32")
        return QTensor(values, scales, block, fmt, "as given")
    return None


def partials_exact_in_f32(lq: Any, rq: Any, group_sizes: np.ndarray) -> bool:
    """True when every 128-wide K partial sum of q_a * q_b is exact in float32 in *any*
    summation order, so a kernel declaring an accumulation recipe must match it bit for
    bit.  Sufficient condition, per (row, K block, column): every product is a multiple of
    2^(ta + tb) (ta, tb: the lowest set bit over the row's and column's nonzero block
    values), so every partial sum is too, and the sum of |products| is at most 2^24 such
    units.  The gate's `exact_partials` cases meet it by construction."""
    a = np.asarray(lq.values, np.float64)
    b = np.asarray(rq.values, np.float64)
    k = a.shape[1]
    if k % BLOCK:
        return False

    def lowest_bit(x: np.ndarray, axis: int) -> np.ndarray:
        # exponent of the lowest set bit of each nonzero value, min over the block axis
        mant, exp = np.frexp(x)
        ints = np.abs(mant * 2.0**53).astype(np.int64)
        with np.errstate(divide="ignore"):  # zeros: log2(0), replaced by inf
            low = np.where(ints != 0, np.log2(ints & -ints) + exp - 53, np.inf)
        return low.min(axis=axis)

    nkb = k // BLOCK
    ta = lowest_bit(a.reshape(a.shape[0], nkb, BLOCK), 2)  # [M, KB]
    tb = lowest_bit(b.reshape(b.shape[0], nkb, BLOCK, b.shape[2]), 2)  # [G, KB, N]
    start = 0
    for g, size in enumerate(group_sizes.tolist()):
        rows = slice(start, start + size)
        start += size
        for kb in range(nkb):
            cols = slice(kb * BLOCK, (kb + 1) * BLOCK)
            total = np.abs(a[rows, cols]) @ np.abs(b[g, cols])  # exact enough: compared
            unit = ta[rows, kb][:, None] + tb[g, kb][None, :]  # with a power of two
            with np.errstate(invalid="ignore"):
                ok = (total == 0) | (np.log2(np.maximum(total, 1e-300)) - unit
                                     <= F32_SIGNIFICAND_BITS - 1e-9)
            if not ok.all():
                return False
    return True


# --- the assertions --------------------------------------------------------------------------


def assert_gmm_matches(
    out: Any, lhs: Any, rhs: Any, group_sizes: Any, *, accum: str | None = None,
    profile: str = "strict", recipe: str | None = None,
    unquantized: tuple[Any, Any] | None = None, acc_unit_roundoff: float = 2.0**-24,
) -> CaseResult:
    """Assert that `out` [M,N] (f32 or bf16) is a correct grouped matmul of lhs and rhs.

    lhs [M,K], rhs [G,K,N] are either
    * the quantized operands the kernel consumed: `QTensor`s or (values, scales) pairs
      (e4m3fn/e5m2 values, float32 scales in 1x128 / 128x128 blocks): the `gmm-fp8`
      contract.  `unquantized=(x, w)` (the float inputs) adds the impact question;
    * with `recipe` (e.g. "deepgemm"): the float32/bf16 inputs, quantized here with that
      recipe exactly as the gate does (both questions are measured);
    * otherwise plain bf16/f32 operands: the `gmm` contract (a bf16 GMM).
    `accum` declares the recipe the kernel follows ("deepgemm", "cublas", "tokamax"):
    then `bit_exact` is checked wherever the partials are provably exact
    (`partials_exact_in_f32`).  `acc_unit_roundoff` is the accumulator's u (2^-24 = f32).
    Only rows below sum(group_sizes) are compared.
    """
    from fp8check.references import quantize

    o = _array(out, "out")
    out_dtype = _dtype_name(o, "out", ("f32", "bf16"))
    lq, rq = _qtensor(lhs, (1, BLOCK), "lhs"), _qtensor(rhs, (BLOCK, BLOCK), "rhs")
    if (lq is None) != (rq is None):
        raise ValueError("lhs and rhs must both be quantized or both be plain arrays")
    unq = None if unquantized is None else tuple(
        _array(u, "unquantized").astype(np.float32) for u in unquantized)
    if lq is None:
        a, b = _array(lhs, "lhs"), _array(rhs, "rhs")
        for name, arr in (("lhs", a), ("rhs", b)):
            _dtype_name(arr, name, ("f32", "bf16"))
        if recipe is not None:
            x, w = a.astype(np.float32), b.astype(np.float32)
            lq, rq = quantize(x, (1, BLOCK), recipe), quantize(w, (BLOCK, BLOCK), recipe)
            unq = (x, w)
    _check_gmm_shapes(o, lq.values if lq is not None else _array(lhs, "lhs"),
                      rq.values if rq is not None else _array(rhs, "rhs"))
    n_groups = rq.shape[0] if rq is not None else _array(rhs, "rhs").shape[0]
    gs = _group_sizes(group_sizes, n_groups, o.shape[0])
    if lq is not None:
        prob = gmm_fp8_problem(lq, rq, gs, out_dtype, unq,
                               exact_partials=partials_exact_in_f32(lq, rq, gs))
        saved = {"lhs_values": lq.values, "lhs_scales": lq.scales, "rhs_values": rq.values,
                 "rhs_scales": rq.scales}
    else:
        if accum is not None:
            raise ValueError("accum needs quantized operands (QTensors, (values, scales) or "
                             "recipe=...)")
        prob = plain_gmm_problem(_array(lhs, "lhs"), _array(rhs, "rhs"), gs, out_dtype, unq)
        saved = {"lhs": prob.args[0], "rhs": prob.args[1]}
    if unq is not None:
        saved.update(x=unq[0], w=unq[1])
    options = {"accum": accum, "profile": profile, "acc_unit_roundoff": acc_unit_roundoff}
    return _check_matmul("gmm", o, prob, saved, options)


def assert_tgmm_matches(
    out: Any, lhs: Any, dy: Any, group_sizes: Any, *, profile: str = "strict",
    unquantized: tuple[Any, Any] | None = None, acc_unit_roundoff: float = 2.0**-24,
) -> CaseResult:
    """Assert that `out` [G,K,N] (f32 or bf16) is the weight gradient dW_g = lhs_g^T dy_g
    of lhs [M,K] and dy [M,N] (bf16 or f32); an empty group must give zeros.
    `unquantized=(x, dy)` in float32 adds the impact question."""
    o = _array(out, "out")
    out_dtype = _dtype_name(o, "out", ("f32", "bf16"))
    a, d = _array(lhs, "lhs"), _array(dy, "dy")
    for name, arr in (("lhs", a), ("dy", d)):
        _dtype_name(arr, name, ("f32", "bf16"))
    if a.ndim != 2 or d.ndim != 2 or a.shape[0] != d.shape[0]:
        raise ValueError(f"expected lhs [M,K] and dy [M,N], got {list(a.shape)}, {list(d.shape)}")
    if o.ndim != 3 or o.shape[1:] != (a.shape[1], d.shape[1]):
        raise ValueError(f"out has shape {list(o.shape)}; expected [G, {a.shape[1]}, "
                         f"{d.shape[1]}]")
    gs = _group_sizes(group_sizes, o.shape[0], a.shape[0])
    unq = None if unquantized is None else tuple(
        _array(u, "unquantized").astype(np.float32) for u in unquantized)
    prob = tgmm_problem(a, d, gs, out_dtype, unq)
    saved = {"lhs": a, "dy": d} | ({} if unq is None else {"x": unq[0], "w": unq[1]})
    options = {"accum": None, "profile": profile, "acc_unit_roundoff": acc_unit_roundoff}
    return _check_matmul("tgmm", o, prob, saved, options)


def assert_quantizer_matches(
    values: Any, scales: Any, x: Any, block: tuple[int, int], recipe: str,
    fmt: str = "e4m3fn",
) -> CaseResult:
    """Assert that (values, scales) are bit for bit quantize(x, block, recipe, fmt).

    x is float32 or bf16 (the recipe rounds from x's dtype: f32 -> bf16 -> fp8 is not
    f32 -> fp8); block is (1,128), (128,1) or (128,128)."""
    v, s, xx = _array(values, "values"), _array(scales, "scales"), _array(x, "x")
    _dtype_name(xx, "x", ("f32", "bf16"))
    m: dict[str, Any] = {"recipe": recipe, "block": list(block), "fmt": fmt,
                         "n_compared": int(v.size + s.size)}
    crit = quantizer_output_criteria(v, s, xx, tuple(block), recipe, fmt, m)
    saved = {"values": v, "scales": s, "x": xx}
    options = {"block": list(block), "recipe": recipe, "fmt": fmt}
    return _finish("quantizer", crit, m, saved, options, _where_quantizer(tuple(block)))


def assert_bitexact(a: Any, b: Any) -> CaseResult:
    """Assert that a and b have the same shape, dtype and bits (NaN payloads included):
    the determinism check (run a kernel twice) or a kernel vs a bit-exact reference."""
    from fp8check import metrics

    x, y = _array(a, "a"), _array(b, "b")
    if x.shape != y.shape or x.dtype != y.dtype:
        raise AssertionError(f"fp8check: not bit-exact: a is {x.dtype}{list(x.shape)}, "
                             f"b is {y.dtype}{list(y.shape)}")
    bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize]
    diff = np.ascontiguousarray(x).view(bits) != np.ascontiguousarray(y).view(bits)
    n_bad = int(np.count_nonzero(diff))
    worst = None
    if n_bad:
        try:
            ulps = metrics.ulp_distance(x, y, x.dtype)
        except (ValueError, TypeError):  # not a float format: count bits only
            ulps = diff.astype(np.int64)
        ulps = np.where(diff, ulps, 0)
        idx = np.unravel_index(np.argmax(ulps), ulps.shape)
        worst = {"index": [int(i) for i in idx], "out": float(x[idx]), "ref": float(y[idx]),
                 "ulp": int(ulps[idx]), "bound": None}
    crit = [Criterion.check("bit_exact", "correctness", n_bad, "==", 0,
                            meaning="a and b bit for bit equal", n_bad=n_bad,
                            bad_means="elements whose bits differ", worst=worst)]
    return _finish("bitexact", crit, {"n_compared": int(x.size)}, {"a": x, "b": y}, {},
                   lambda idx: "")


# --- shared machinery ------------------------------------------------------------------------


def _check_gmm_shapes(out: np.ndarray, lhs: np.ndarray, rhs: np.ndarray) -> None:
    if lhs.ndim != 2 or rhs.ndim != 3 or lhs.shape[1] != rhs.shape[1]:
        raise ValueError(f"expected lhs [M,K] and rhs [G,K,N], got {list(lhs.shape)}, "
                         f"{list(rhs.shape)}")
    if out.shape != (lhs.shape[0], rhs.shape[2]):
        raise ValueError(f"out has shape {list(out.shape)}; expected [{lhs.shape[0]}, "
                         f"{rhs.shape[2]}]")


def _check_matmul(kind: str, out: np.ndarray, prob: Problem, saved: dict[str, np.ndarray],
                  options: dict[str, Any]) -> CaseResult:
    prof = get_profile(options["profile"])
    gs = prob.args[-1]
    m: dict[str, Any] = {"group_sizes": gs.tolist(), "out_dtype": prob.out_dtype,
                         "exact_partials": prob.exact_partials,
                         "n_compared": int(out[:prob.rows].size)}
    from fp8check.reports.plotdata import plot_data

    crit = output_criteria(out, prob, prof, m, plots=plot_data,
                           accum=options["accum"],
                           acc_unit_roundoff=options["acc_unit_roundoff"])
    if options["accum"] is not None and not prob.exact_partials:
        m["bit_exact_note"] = ("partials not provably exact in float32 on this data: "
                               "bit_exact not checked (the error bound still is)")
    saved = saved | {"out": out, "group_sizes": gs}
    where = _where_gmm(gs) if kind == "gmm" else _where_tgmm(gs)
    return _finish(kind, crit, m, saved, options, where)


def _finish(kind: str, crit: list[Criterion], m: dict[str, Any], saved: dict[str, np.ndarray],
            options: dict[str, Any], where: Callable[[list[int]], str]) -> CaseResult:
    """Record the result, tell the listeners, raise the AssertionError when it failed."""
    ctx = _context.get()
    if ctx is not None:
        ctx.count += 1
    gate = ctx.gate_case if ctx is not None else None
    label = ctx.label if ctx is not None and ctx.label else f"fp8check.testing.{kind}"
    case = gate.case.id if gate is not None else _shape_label(kind, saved)
    if ctx is not None and ctx.count > 1:
        case += f" #{ctx.count}"
    res = CaseResult(kernel=label, layer=LAYER, case=case, passed=None, metrics=m,
                     criteria=crit)
    res.decide()
    if not res.passed:
        path = _save(kind, saved, options)
        res.repro = _replay_command(path)
        gate_line = gate.gate_command() if gate is not None else None
        message = _message(kind, res, where, options, gate_line)
    for fn in list(_listeners):
        fn(res)
    if not res.passed:
        raise AssertionError(message)
    return res


def _shape_label(kind: str, saved: dict[str, np.ndarray]) -> str:
    if kind in ("gmm", "tgmm"):
        o = saved["out"]
        return f"{kind} out{list(o.shape)} {o.dtype} groups={saved['group_sizes'].tolist()}"
    if kind == "quantizer":
        return f"quantizer x{list(saved['x'].shape)} {saved['x'].dtype}"
    return f"bitexact {saved['a'].dtype}{list(saved['a'].shape)}"


def _group_of(gs: np.ndarray, row: int) -> tuple[int, int, int]:
    """(group, its first row, its end row) of output row `row`."""
    ends = np.cumsum(gs)
    g = int(np.searchsorted(ends, row, side="right"))
    return g, int(ends[g] - gs[g]), int(ends[g])


def _tile(axis: str, i: int) -> str:
    t = i // BLOCK
    return f"{axis} tile {t} ({axis.lower()} {t * BLOCK}-{t * BLOCK + BLOCK - 1})"


def _where_gmm(gs: np.ndarray) -> Callable[[list[int]], str]:
    def where(idx: list[int]) -> str:
        r, c = idx
        g, r0, r1 = _group_of(gs, r)
        return (f"group {g} (rows {r0}-{r1 - 1}), row {r - r0} of the group, "
                f"{_tile('N', c)}")
    return where


def _where_tgmm(gs: np.ndarray) -> Callable[[list[int]], str]:
    def where(idx: list[int]) -> str:
        g, k, n = idx
        r0 = int(np.sum(gs[:g]))
        return (f"group {g} (rows {r0}-{r0 + int(gs[g]) - 1}, M_g = {int(gs[g])}), "
                f"{_tile('K', k)}, {_tile('N', n)}")
    return where


def _where_quantizer(block: tuple[int, int]) -> Callable[[list[int]], str]:
    def where(idx: list[int]) -> str:
        *lead, r, c = idx
        return f"block ({r // block[0]}, {c // block[1]}) of {block[0]}x{block[1]}"
    return where


def _message(kind: str, res: CaseResult, where: Callable[[list[int]], str],
             options: dict[str, Any], gate_line: str | None) -> str:
    failed = [c for c in res.criteria if not c.passed]
    total = int(res.metrics["n_compared"])
    prof = options.get("profile")
    lines = [f"fp8check: {kind} output fails {len(failed)} layer-1 criteri"
             f"{'on' if len(failed) == 1 else 'a'}" + (f" (profile {prof})" if prof else "")]
    shown = None  # the worst element printed last: repeated ones say so instead
    for c in failed:
        lines.append("")
        lines.append(f"{c.name}: {c.verdict()}  [{c.meaning or c.question}]")
        if c.n_bad is not None:
            pct = f" ({100.0 * c.n_bad / total:.3g}%)" if total else ""
            lines.append(f"  {c.bad_means or 'mismatched elements'}: {c.n_bad} / {total}{pct}")
        w = c.worst
        if not w:
            continue
        label = w.get("what", "element")
        key = (label, tuple(w["index"]), w["ref"])
        if key == shown:
            lines.append(f"  worst {label}: the same as above")
            continue
        shown = key
        place = where(w["index"]) if label != "scale" else "block grid index"
        lines.append(f"  worst {label}: index {tuple(w['index'])}, {place}")
        lines.append(f"    value:        {w['out']!r}")
        lines.append(f"    reference:    {w['ref']!r}"
                     + (" (unquantized)" if c.question == "impact" else ""))
        lines.append(f"    ULP distance: {w['ulp']}"
                     + (f", bound: {w['bound']:.4g} (|value - reference| allowed)"
                        if w.get("bound") else ""))
    lines.append("")
    if gate_line:
        lines.append(f"Reproduce in the gate: {gate_line}")
    lines.append(f"Reproduce these inputs: {res.repro}")
    return "\n".join(lines)


def _save(kind: str, saved: dict[str, np.ndarray], options: dict[str, Any]) -> Path:
    """Write the inputs to <dir>/<kind>-<content hash>.npz (bits and dtype names, so
    ml_dtypes formats survive) and return the path."""
    arrays, dtypes = {}, {}
    for name, a in saved.items():
        a = np.ascontiguousarray(a)
        dtypes[name] = a.dtype.name
        bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(a.dtype.itemsize)
        arrays[name] = a.view(bits) if bits is not None and a.dtype.kind not in "iub" else a
    meta = json.dumps({"kind": kind, "options": options, "dtypes": dtypes}, sort_keys=True)
    digest = hashlib.sha1(meta.encode())
    for name in sorted(arrays):
        digest.update(arrays[name].tobytes())
    path = _save_dir() / f"{kind}-{digest.hexdigest()[:12]}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, __meta__=np.array(meta), **arrays)
    return path


def _replay_command(path: Path) -> str:
    code = f"from fp8check.testing import replay; replay({str(path)!r})"
    if not set(code) & set('"$`\\'):  # readable double quotes whenever they are safe
        return f'python -c "{code}"'
    return shlex.join(["python", "-c", code])


def replay(path: str | Path) -> CaseResult:
    """Re-run the assertion saved in `path` (an .npz written by a failing assertion)."""
    from fp8check.references import QTensor

    by_name = {d.name: d for d in NUMPY_DTYPES.values()}  # ml_dtypes are not np.dtype(name)
    with np.load(path) as f:
        meta = json.loads(str(f["__meta__"]))
        a = {name: f[name].view(by_name.get(dt) or np.dtype(dt))
             for name, dt in meta["dtypes"].items()}
    kind, opt = meta["kind"], meta["options"]
    unq = (a["x"], a["w"]) if "x" in a and kind != "quantizer" else None
    if kind == "gmm":
        if "lhs_values" in a:
            lq = QTensor(a["lhs_values"], a["lhs_scales"], (1, BLOCK),
                         a["lhs_values"].dtype.name.replace("float8_", ""), "as given")
            rq = QTensor(a["rhs_values"], a["rhs_scales"], (BLOCK, BLOCK),
                         a["rhs_values"].dtype.name.replace("float8_", ""), "as given")
            return assert_gmm_matches(a["out"], lq, rq, a["group_sizes"], unquantized=unq,
                                      **opt)
        return assert_gmm_matches(a["out"], a["lhs"], a["rhs"], a["group_sizes"],
                                  unquantized=unq, **opt)
    if kind == "tgmm":
        opt.pop("accum")
        return assert_tgmm_matches(a["out"], a["lhs"], a["dy"], a["group_sizes"],
                                   unquantized=unq, **opt)
    if kind == "quantizer":
        return assert_quantizer_matches(a["values"], a["scales"], a["x"],
                                        tuple(opt["block"]), opt["recipe"], opt["fmt"])
    return assert_bitexact(a["a"], a["b"])


# --- a gate case as a pytest fixture value ----------------------------------------------------


@dataclass
class GateCase:
    """One case of a gate suite under a matmul contract: the value of the pytest
    `fp8check_case` fixture.  `args` are the kernel's arguments exactly as the gate
    passes them (numpy; `args_as("torch")` / `"jax"` converts them bit for bit) and
    `assert_matches(out)` applies the gate's criteria to the kernel's output on the
    gate's own Problem, so the verdict is the gate's (determinism aside: call the kernel
    twice and `assert_bitexact`)."""

    case: Case
    contract: str = "gmm-fp8"
    profile: str = "strict"
    suite: str = "ci"
    seed: int = 0
    # the kernel as the gate names it (module:attr), its framework and declarations:
    # only for the gate repro line
    kernel: str | None = None
    framework: str = "numpy"
    out_dtypes: tuple[str, ...] = ("f32", "bf16")
    m_align: int = 1
    _problems: ProblemCache = field(default_factory=lambda: ProblemCache(capacity=1),
                                    repr=False)

    def __post_init__(self) -> None:
        if self.contract not in ("gmm-fp8", "gmm", "tgmm"):
            raise ValueError(f"fp8check_case: contract {self.contract!r} is not a matmul "
                             "contract (gmm-fp8, gmm, tgmm); for quantizers use "
                             "assert_quantizer_matches on case.inputs")
        get_profile(self.profile)

    @property
    def id(self) -> str:
        return self.case.id

    @property
    def problem(self) -> Problem:
        return self._problems.get(self.contract, self.case)[0]

    @property
    def args(self) -> tuple[np.ndarray, ...]:
        return self.problem.args

    @property
    def inputs(self) -> CaseInputs:
        """The case's unquantized float32 operands (x, w, dy, group_sizes)."""
        return case_inputs(self.case)

    @property
    def out_dtype(self) -> str:
        return self.case.out_dtype

    def args_as(self, framework: str) -> tuple[Any, ...]:
        """`args` as "numpy", "jax" or "torch" arrays (fp8 as the framework's fp8 dtype)."""
        return tuple(to_framework(a, framework) for a in self.args)

    def out_dtype_as(self, framework: str) -> Any:
        """The case's output dtype as `framework`'s dtype object (np.float32, torch.bfloat16)."""
        return framework_dtype(framework, self.case.out_dtype)

    def unsupported(self) -> str | None:
        """Why a kernel with the declared out_dtypes / m_align skips this case (None: it
        runs it)."""
        return supported(self.case, tuple(self.out_dtypes), self.m_align)

    def gate_command(self) -> str:
        """The gate command that reruns this case on the kernel (module:attr)."""
        plain = PlainDeclarations(contract=self.contract, framework=self.framework,
                                  out_dtypes=",".join(self.out_dtypes), m_align=self.m_align)
        return gate_command(self.kernel or "<module:attr of your kernel>", LAYER,
                            suite=self.suite, seed=self.seed, profile=self.profile,
                            case=self.case.id, plain=plain)

    def assert_matches(self, out: Any, *, accum: str | None = None,
                       acc_unit_roundoff: float = 2.0**-24) -> CaseResult:
        """Assert the kernel's output on `args` passes the gate's criteria for this case."""
        if accum is not None and self.contract != "gmm-fp8":
            raise ValueError("accum is only meaningful for the gmm-fp8 contract")
        o = _array(out, "out")
        prob = self.problem
        if o.dtype != NUMPY_DTYPES[prob.out_dtype] or o.shape != prob.exact.shape:
            raise ValueError(f"out is {o.dtype}{list(o.shape)}; case {self.case.id} expects "
                             f"{NUMPY_DTYPES[prob.out_dtype]}{list(prob.exact.shape)}")
        names = {"gmm-fp8": ("lhs_values", "lhs_scales", "rhs_values", "rhs_scales"),
                 "gmm": ("lhs", "rhs"), "tgmm": ("lhs", "dy")}[self.contract]
        saved = dict(zip(names, prob.args[:-1], strict=True))
        unq = (self.inputs.x, self.inputs.dy if self.contract == "tgmm" else self.inputs.w)
        if prob.impact_not_gated is None:  # replay measures impact the same way
            saved.update(x=unq[0], w=unq[1])
        options = {"accum": accum, "profile": self.profile,
                   "acc_unit_roundoff": acc_unit_roundoff}
        token = None
        ctx = _context.get()
        if ctx is None or ctx.gate_case is not self:
            token = _context.set(_Context(label=ctx.label if ctx else None, gate_case=self))
        try:
            return _check_matmul("tgmm" if self.contract == "tgmm" else "gmm", o, prob,
                                 saved, options)
        finally:
            if token is not None:
                _context.reset(token)
