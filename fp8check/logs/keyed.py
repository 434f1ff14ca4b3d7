"""Keyed loss logs: CSV with a header row, JSONL (one object per line), and the gate's own
result file (JSON document or JSONL stream) with a layer-3 curve selector.

CSV / JSONL: the step and loss columns are `--step-key` / `--loss-key` or the first of
`records.STEP_KEYS` / `records.LOSS_KEYS` the log has; a row or object without a value
for either (an eval record, an lr-only row) is skipped; "nan" / "inf" are kept.  These
readers also serve the formats that are keyed logs under another name (W&B history
exports, MaxText's metrics file): `fmt` names the format in messages.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from fp8check.logs.records import (
    LOSS_KEYS,
    STEP_KEYS,
    LogOptions,
    LogRecords,
    number,
    pick_key,
)
from fp8check.results import documents


def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip())


def _keyed(rows: list[tuple[int, dict[str, Any]]], keys: list[str], src: str,
           opts: LogOptions, fmt: str) -> LogRecords:
    """Records from (line, row) pairs whose union of keys is `keys`."""
    sk = pick_key(keys, opts.step_key, STEP_KEYS, "step", src)
    lk = pick_key(keys, opts.loss_key, LOSS_KEYS, "loss", src)
    pairs = []
    for line, r in rows:
        s, v = r.get(sk), r.get(lk)
        if _empty(s) or _empty(v):
            continue
        pairs.append((number(str(s), sk, src, line), number(str(v), lk, src, line)))
    return LogRecords.of(pairs, fmt, src)


def read_csv(path: Path, text: str, opts: LogOptions, fmt: str = "csv") -> LogRecords:
    """A CSV log with a header row (module docstring)."""
    src = str(path)
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader, None)
    except csv.Error as e:
        raise ValueError(f"{src}:1: not CSV: {e}") from None
    if not header:
        raise ValueError(f"{src}: empty CSV file")
    header = [h.strip() for h in header]
    rows = []
    try:
        for row in reader:  # reader.line_num: the physical line the row ends on
            if not any(c.strip() for c in row):
                continue
            if len(row) > len(header):
                raise ValueError(f"{src}:{reader.line_num}: {len(row)} fields, the header "
                                 f"has {len(header)}")
            rows.append((reader.line_num, dict(zip(header, row, strict=False))))
    except csv.Error as e:  # a field over csv's size limit
        raise ValueError(f"{src}:{reader.line_num}: not CSV: {e}") from None
    return _keyed(rows, header, src, opts, fmt)


def json_lines(text: str, src: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line; ValueError at the first line that is
    not a JSON object (a cut-short last line too: a loss log is read whole)."""
    records, cut = documents.jsonl_records(text, src)
    if cut is not None:
        raise ValueError(f"{src}:{cut}: not JSON (a cut-short last line)")
    for i, obj in records:
        if not isinstance(obj, dict):
            raise ValueError(f"{src}:{i}: a JSONL line must be an object")
    return records


def read_jsonl(path: Path, text: str, opts: LogOptions, fmt: str = "jsonl") -> LogRecords:
    """A JSONL log (module docstring)."""
    rows = json_lines(text, str(path))
    keys = list(dict.fromkeys(k for _, r in rows for k in r))
    return _keyed(rows, keys, str(path), opts, fmt)


def _gate_document(text: str) -> dict[str, Any] | None:
    """`text` parsed as a gate JSON document (a JSON object with "results"), else None."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) and "results" in doc else None


def is_gate_file(text: str) -> bool:
    """Whether `text` is shaped as a gate JSON document or JSONL stream (not validated)."""
    return _gate_document(text) is not None or documents.is_stream(text)


def gate_results(text: str, src: str) -> list[dict[str, Any]] | None:
    """The result dicts of a gate JSON document or JSONL stream (checked against the
    documents' schema: ValueError naming the path into it), or None if `text` is neither."""
    doc = _gate_document(text)
    if doc is not None:
        return list(documents.parse_document(doc, src)["results"])
    if documents.is_stream(text):
        return list(documents.parse_stream(text, src)["results"])
    return None


def read_gate(path: Path, text: str, opts: LogOptions) -> LogRecords:
    """The curve `opts.selector` = "[KERNEL/][CASE/]NAME" (NAME: fp8, bf16 or f32) of a gate
    result file's layer-3 results; KERNEL may be a family ("pallas").  Steps 0, 1, ..."""
    src = str(path)
    results = gate_results(text, src)
    if results is None:
        raise ValueError(f"{src}: not a gate result file (JSON document or JSONL stream)")
    if not opts.selector:
        raise ValueError(f"{src} is a gate result file: say which curve, e.g. "
                         f"{src}@fp8 or {src}@pallas/fp8")
    *where, name = opts.selector.split("/")
    found: dict[tuple[str, str], list[Any]] = {}
    for r in results:
        curves = (r.get("metrics") or {}).get("curves")
        if r.get("layer") != 3 or not isinstance(curves, dict) or name not in curves:
            continue
        family = str(r["kernel"]).split("-")[0]
        if where and where[0] not in (r["kernel"], family):
            continue
        if len(where) > 1 and where[1] != r["case"]:
            continue
        found[(family, r["case"])] = curves[name]  # the fp8 and bf16 results share curves
    if len(found) != 1:
        have = ", ".join(f"{f}/{c}" for f, c in found) or "none"
        raise ValueError(f"{src}: selector {opts.selector!r} matches {len(found)} layer-3 "
                         f"curves ({have}); name one as FILE@FAMILY/CASE/CURVE")
    values = [math.nan if isinstance(v, str) else float(v) for v in next(iter(found.values()))]
    return LogRecords.of(list(zip(np.arange(len(values)).tolist(), values, strict=True)),
                         "gate", src)
