"""The one JSON schema of the gate's documents (`fp8check.results.documents`), checked on
every read: `report`, `merge` and `curves` read documents only through it.

A document that breaks it is bad input: `check` raises a one-line ValueError naming the
path into the document and what was expected (`results[17].criteria: expected an
object`).  The schema asks for what the readers use (the result model, the summary and
environment the report shows) and types what it names; keys it does not name are
allowed (later versions may add them), and metric values are free-form.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from fp8check.results.model import LAYER_NAMES, RELATIONS

if TYPE_CHECKING:
    from jsonschema import ValidationError

_STR, _INT, _NUM, _BOOL = ({"type": t} for t in ("string", "integer", "number", "boolean"))
_OBJ = {"type": "object"}


def _nullable(t: str) -> dict[str, Any]:
    return {"type": [t, "null"]}


def _map_of(values: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": values}


def _obj(required: Iterable[str], **props: Any) -> dict[str, Any]:
    return {"type": "object", "required": list(required), "properties": props}


# A measured float as `jsonable` writes it: non-finite values are strings.
_FLOAT = {"type": ["number", "string", "null"], "pattern": "^(nan|-?inf)$",
          "description": 'a number, "nan", "inf", "-inf" or null'}
_FLOATS = {"type": "array", "items": _FLOAT}
_INTS = {"type": "array", "items": _INT}


def _tuple(n: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item, "minItems": n, "maxItems": n}


_CRITERION = _obj(
    ("question", "value", "limit", "passed"),
    question=_STR, relation={"enum": [*RELATIONS, None]}, passed=_BOOL, meaning=_STR,
    n_bad=_nullable("integer"), bad_means=_nullable("string"), worst=_nullable("object"))
# the SQNR criteria, whose limits the report draws
_SQNR_CRITERION = {**_CRITERION, "properties": {**_CRITERION["properties"], "limit": _FLOAT}}

# The report's figure data (`fp8check.reports.plotdata`, layers 2 and 3), as the figures
# read it; lengths that must agree are checked by `_figure_lengths`.
_PLOTS = _obj(
    ("ulp_hist", "err_vs_ab", "bound_tiles", "group_sqnr"),
    ulp_hist=_obj(("edges", "counts"), edges={"type": "array", "items": {
        "type": "integer", "minimum": 0}}, counts=_INTS, over=_INTS, nan=_INT),
    # a point is [|A||B|, error, bound ratio, bound]; documents written before the
    # bound was kept (and `ulp_hist.over`) lack it, and the figures say so
    err_vs_ab=_obj(("gamma", "n_elements", "points"), gamma=_NUM, n_elements=_INT,
                   points={"type": "array", "items": {**_tuple(3, _FLOAT), "maxItems": 4}}),
    bound_tiles=_obj(
        ("row_tile", "col_tile", "rows", "cols", "max", "group_starts", "residual_rows",
         "row_axis"),
        row_tile=_INT, col_tile=_INT, rows=_INT, cols=_INT,
        max={"type": "array", "items": _FLOATS}, group_starts={"type": "array", "items": _NUM},
        residual_rows={"type": "array", "items": _tuple(2, _NUM)}, row_axis=_STR),
    group_sqnr=_obj(("group_sizes", "impact", "vs_exact"), group_sizes=_INTS,
                    impact=_FLOATS, vs_exact=_FLOATS))
_METRICS = {
    **_obj((), plots=_PLOTS, group_sizes=_INTS, impact_sqnr_db=_FLOAT,
           curves=_map_of(_FLOATS),
           grad_snr={"type": ["array", "object"], "items": _FLOAT,
                     "additionalProperties": _FLOATS}, grad_snr_steps=_INTS),
    "patternProperties": {r"^(st_)?sqnr_db\.(?!.*\.expert$)": _FLOAT,
                          r"^(st_)?sqnr_db\..*\.expert$": _FLOATS},
}

# Every key `CaseResult.to_dict` writes.  A version-1 result needs only the first four and
# named layer 1 "op" (`documents.read_json` rewrites it as version 2).
RESULT_KEYS = ("kernel", "layer", "case", "passed", "metrics", "criteria", "failed",
               "skipped", "error", "repro", "seconds")


def _result(layers: list[Any], required: Iterable[str]) -> dict[str, Any]:
    return _obj(
        required, kernel=_STR, layer={"enum": layers}, case=_STR,
        passed=_nullable("boolean"), metrics=_METRICS,
        criteria={**_map_of(_CRITERION), "patternProperties": {"sqnr_db": _SQNR_CRITERION}},
        failed={"type": "array", "items": _STR}, skipped=_nullable("string"),
        error=_nullable("string"), repro=_nullable("string"), seconds=_NUM,
        timing=_map_of(_NUM))


RESULT = _result(list(LAYER_NAMES), RESULT_KEYS)
_RESULT_V1 = _result([*LAYER_NAMES, "op"], RESULT_KEYS[:4])

_COUNTS = _map_of(_INT)
_SUMMARY = _obj(
    ("passed", "n_passed", "n_failed", "n_skipped", "n_errors", "skipped_reasons",
     "kernel_load_errors"),
    passed=_BOOL, complete=_BOOL, incomplete=_STR, n_results=_INT, n_passed=_INT,
    n_failed=_INT, n_skipped=_INT, n_errors=_INT, kernels=_map_of(_COUNTS),
    failed_criteria=_COUNTS, skipped_reasons=_COUNTS, kernel_load_errors=_map_of(_STR))

_KERNEL = _obj(
    ("contract", "framework", "backend", "accum", "out_dtypes", "m_align", "fidelity_fixes"),
    contract=_STR, framework=_STR, backend=_STR, accum=_nullable("string"),
    out_dtypes={"type": "array", "items": _STR}, m_align=_INT,
    fidelity_fixes={"type": "array", "items": _STR})
ENVIRONMENT = _obj(
    ("python", "platform", "packages", "suite", "seed", "profile", "backend_requested",
     "kernels"),
    python=_STR, platform=_STR, packages=_map_of(_nullable("string")), suite=_STR,
    seed=_INT, profile=_STR, backend_requested=_STR, kernels=_map_of(_KERNEL),
    kernel_load_errors=_map_of(_STR), layers={"type": "array", "items": _INT},
    shard=_STR, result_ids=_INT)

DOCUMENT = {
    **_obj(("version", "summary", "environment", "results"),
           version={"enum": [1, 2]}, summary=_SUMMARY, environment=ENVIRONMENT,
           results={"type": "array"}, tune=_OBJ),
    "if": {"properties": {"version": {"const": 1}}},
    "then": {"properties": {"results": {"items": _RESULT_V1}}},
    "else": {"properties": {"results": {"items": RESULT}}},
}
# The JSONL stream's lines: the start event, each result (`RESULT`, as in a version-2
# document), the end event.
START_EVENT = _obj(("event", "environment"), event={"const": "start"},
                   environment=ENVIRONMENT, planned=_INT)
END_EVENT = _obj(("event", "n_results"), event={"const": "end"}, n_results=_INT)

_TYPE_NAMES = {"object": "an object", "array": "a list", "string": "a string",
               "integer": "an integer", "number": "a number", "boolean": "a boolean",
               "null": "null"}


def _where(path: Iterable[Any]) -> str:
    """`results[17].criteria`, from jsonschema's path of keys and indices."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _expected(e: ValidationError) -> str:
    """What the schema expected where `e` happened, in words."""
    v = e.validator_value
    if "description" in e.schema:
        return f"expected {e.schema['description']}"
    if e.validator == "type":
        names = [v] if isinstance(v, str) else list(v)
        return "expected " + " or ".join(_TYPE_NAMES[n] for n in names)
    if e.validator == "required":
        missing = [k for k in v if k not in e.instance]
        return f"missing key {missing[0]!r}"
    if e.validator in ("enum", "const"):
        values = v if e.validator == "enum" else [v]
        return f"expected one of {', '.join(json.dumps(x) for x in values)}"
    if e.validator in ("minItems", "maxItems"):
        return f"expected {'at least' if e.validator == 'minItems' else 'at most'} {v} items"
    if e.validator == "minimum":
        return f"expected a value >= {v}"
    return e.message.splitlines()[0][:200]


def check(instance: Any, schema: dict[str, Any], src: str) -> None:
    """Check `instance` against `schema` (one of DOCUMENT, START_EVENT, RESULT,
    END_EVENT).

    Raises:
      ValueError: "SRC: PATH: what was expected" for the first problem found, one line.
    """
    import jsonschema  # here: importing the results package stays light

    where = _lone_surrogate(instance, [])
    if where is not None:  # valid JSON ("\\ud800"), but no text: it cannot be written out
        at = _at(_where(where)).encode("utf-8", "backslashreplace").decode()
        raise ValueError(f"{src}: {at}a string with a lone surrogate (U+D800-U+DFFF): "
                         f"expected text")
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(instance),
                    key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        e = jsonschema.exceptions.best_match(errors)
        raise ValueError(f"{src}: {_at(_where(e.absolute_path))}{_expected(e)}")
    if schema is DOCUMENT:
        for i, r in enumerate(instance["results"]):
            _figure_lengths(r, f"results[{i}].", src)
    elif schema is RESULT:
        _figure_lengths(instance, "", src)


def _lone_surrogate(value: Any, path: list[Any]) -> list[Any] | None:
    """The path to the first key or string in `value` that holds a lone surrogate (not
    encodable as UTF-8), or None."""
    if isinstance(value, str):
        return None if value.isascii() or _encodes(value) else path
    if isinstance(value, dict):
        for k, v in value.items():
            if not _encodes(k):
                return [*path, k]
            found = _lone_surrogate(v, [*path, k])
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, str | dict | list):
                found = _lone_surrogate(v, [*path, i])
                if found is not None:
                    return found
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _at(where: str) -> str:
    return f"{where}: " if where else ""


def _figure_lengths(result: dict[str, Any], where: str, src: str) -> None:
    """ValueError when the figure data of a result (checked by the schema) has lists
    whose lengths must agree and do not."""
    m = result.get("metrics", {})
    snr, steps = m.get("grad_snr"), m.get("grad_snr_steps")
    for name, series in (snr.items() if isinstance(snr, dict) else [("", snr)]):
        if steps is not None and series is not None and len(series) != len(steps):
            raise ValueError(f"{src}: {where}metrics.grad_snr{'.' if name else ''}{name}: "
                             f"expected {len(steps)} items (grad_snr_steps), got {len(series)}")
    p = m.get("plots")
    if not p:
        return
    at = f"{where}metrics.plots"
    pairs = [("ulp_hist.counts", p["ulp_hist"]["counts"], p["ulp_hist"]["edges"]),
             ("ulp_hist.over", p["ulp_hist"].get("over", p["ulp_hist"]["edges"]),
              p["ulp_hist"]["edges"]),
             ("group_sqnr.impact", p["group_sqnr"]["impact"], p["group_sqnr"]["group_sizes"]),
             ("group_sqnr.vs_exact", p["group_sqnr"]["vs_exact"],
              p["group_sqnr"]["group_sizes"])]
    pairs += [(f"bound_tiles.max[{i}]", row, p["bound_tiles"]["max"][0])
              for i, row in enumerate(p["bound_tiles"]["max"])]
    for name, got, like in pairs:
        if len(got) != len(like):
            raise ValueError(f"{src}: {at}.{name}: expected {len(like)} items, got {len(got)}")
