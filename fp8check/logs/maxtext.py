"""MaxText's two loss logs (AI-Hypercomputer/maxtext, MaxText/metric_logger.py,
`MetricLogger`):

* `metrics_file` (format `maxtext`): `write_metrics_locally` appends one JSON object per
  step, the scalar metrics by name plus a float `step` and `run_name`:
  `{"learning/loss": 10.87, "learning/grad_norm": 3.1, "perf/step_time_seconds": 1.2,
  ..., "step": 12.0, "run_name": "fp8"}`; loss key `learning/loss` (`--loss-key` another);
* its console (format `maxtext-log`), one line per step from
  `write_metrics_to_tensorboard`: `completed step: 12, seconds: 1.234, TFLOP/s/device:
  123.456, Tokens/s/device: 4567.890, total_weights: 65536, loss: 10.877`, usually behind
  absl's `I0301 10:00:00.123456 140 metric_logger.py:123]` prefix.

A run resumed from a checkpoint appends the steps after the checkpoint again: the last
occurrence of a step wins (`fp8check.measures.curves.make_curve`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from fp8check.logs.keyed import read_jsonl
from fp8check.logs.records import LogOptions, LogRecords, number, scan_lines

LINE = re.compile(r"\bcompleted step:\s*(\d+),.*\bloss:\s*([^,\s]+)")


def read_metrics(path: Path, text: str, opts: LogOptions) -> LogRecords:
    """Records of a MaxText `metrics_file` (module docstring)."""
    return read_jsonl(path, text, replace(opts, loss_key=opts.loss_key or "learning/loss"),
                      "maxtext")


def read_console(path: Path, text: str, opts: LogOptions) -> LogRecords:
    """Records of MaxText's console log (module docstring)."""

    def match(line: str, src: str, i: int) -> tuple[float, float] | None:
        m = LINE.search(line)
        return None if m is None else (float(m.group(1)), number(m.group(2), "loss", src, i))

    return scan_lines(text, str(path), "maxtext-log", match)
