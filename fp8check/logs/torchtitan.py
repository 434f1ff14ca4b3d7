"""torchtitan's console log: the line its `MetricsProcessor.log` prints at every
`metrics.log_freq` step (pytorch/torchtitan, torchtitan/components/metrics.py), in
colour (`torchtitan/tools/utils.py`, `Color`), through the `[titan]` logger
(`torchtitan/tools/logging.py`), often behind torchrun's `[rank0]:` prefix:

    [rank0]:[titan] 2025-03-01 10:00:00,123 - root - INFO - \\x1b[31mstep: 10  \\x1b[32m
    loss:  9.8765  \\x1b[33mgrad_norm:  1.2345  \\x1b[38;2;54;234;195mmemory: 30.12GiB...

(one line).  Step: `step:`, loss: `loss:` of the same line, ANSI codes stripped; the
validator's `validate step: N  loss: x` lines are not training records.  torchtitan's
other metrics outputs (TensorBoard event files, W&B) are read by those formats (loss
key `loss_metrics/global_avg_loss`).
"""

from __future__ import annotations

import re
from pathlib import Path

from fp8check.logs.records import LogOptions, LogRecords, number, scan_lines

LINE = re.compile(r"(?<!validate )\bstep:\s*(\d+)\s+loss:\s*(\S+)")


def read(path: Path, text: str, opts: LogOptions) -> LogRecords:
    """Records of a torchtitan console log (module docstring)."""

    def match(line: str, src: str, i: int) -> tuple[float, float] | None:
        m = LINE.search(line)
        return None if m is None else (float(m.group(1)), number(m.group(2), "loss", src, i))

    return scan_lines(text, str(path), "torchtitan", match)
