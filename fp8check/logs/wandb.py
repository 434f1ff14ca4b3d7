"""Weights & Biases CSV exports, in the two shapes W&B writes:

* history (format `wandb`): a run's logged rows (`wandb.Api().run(...).history()` saved
  with pandas' `to_csv`, or the run table's "Export as CSV"): columns `_step`,
  `_runtime`, `_timestamp` and every logged key (`train/loss`, Megatron's `lm loss`,
  torchtitan's `loss_metrics/global_avg_loss`, ...); a row logged without the loss (an
  eval row) has an empty cell and is no record.  Read as a keyed CSV log
  (`fp8check.logs.keyed`).
* panel (format `wandb-panel`): a line plot's "Export panel data" CSV, written by W&B's
  web app (closed source, so no source file to cite: this is the exported files' shape),
  one column triple per run:
  `"Step","fp8 - train/loss","fp8 - train/loss__MIN","fp8 - train/loss__MAX",...`.  The
  step column is `Step` (`--step-key` another: the panel's x axis); the run is `--run`
  (needed when the panel shows several runs); the metric is the one after " - "
  (`--loss-key` when the panel plots several).  The __MIN / __MAX columns (the range of a
  sampled bucket) are not read.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from fp8check.logs.keyed import read_csv
from fp8check.logs.records import LogOptions, LogRecords, number, pick_key

SEP = " - "


def read_history(path: Path, text: str, opts: LogOptions) -> LogRecords:
    """Records of a W&B history CSV export (module docstring)."""
    return read_csv(path, text, opts, "wandb")


def panel_series(header: list[str]) -> dict[str, dict[str, str]]:
    """run -> metric -> column name of a panel export's value columns."""
    out: dict[str, dict[str, str]] = {}
    for h in header:
        if SEP in h and not h.endswith(("__MIN", "__MAX")):
            run, _, metric = h.rpartition(SEP)
            out.setdefault(run, {})[metric] = h
    return out


def read_panel(path: Path, text: str, opts: LogOptions) -> LogRecords:
    """Records of one run of a W&B panel CSV export (module docstring)."""
    src = str(path)
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader, [])]
    series = panel_series(header)
    if not series:
        raise ValueError(f"{src}: no 'RUN - METRIC' columns; found keys: "
                         f"{', '.join(header) or 'none'}")
    if opts.run is None and len(series) > 1:
        raise ValueError(f"{src}: {len(series)} runs in this panel export: "
                         f"{', '.join(series)} (use --run)")
    run = opts.run if opts.run is not None else next(iter(series))
    if run not in series:
        raise ValueError(f"{src}: no run {run!r}; found runs: {', '.join(series)} "
                         f"(use --run)")
    metrics = list(series[run])
    metric = (metrics[0] if len(metrics) == 1 and opts.loss_key is None
              else pick_key(metrics, opts.loss_key, (), "loss", src))
    col = header.index(series[run][metric])
    sc = header.index(pick_key(header, opts.step_key, ("step",), "step", src))
    pairs = []
    for row in reader:
        if len(row) <= max(col, sc) or not row[col].strip() or not row[sc].strip():
            continue  # a step another run logged
        pairs.append((number(row[sc], "step", src, reader.line_num),
                      number(row[col], metric, src, reader.line_num)))
    return LogRecords.of(pairs, "wandb-panel", src, (f"run {run!r}, {metric}",))
