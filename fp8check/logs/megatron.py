"""Megatron-LM's console log: the line `training_log` prints every `--log-interval`
iterations (NVIDIA/Megatron-LM, megatron/training/training.py, `training_log`):

    [2025-03-01 10:00:00] iteration      100/  500000 | consumed samples: 51200 | ...
    | learning rate: 1.500000E-04 | global batch size:   512 | lm loss: 7.123456E+00 |
    loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 |
    number of nan iterations:   0 |

(one line).  Step: the iteration; loss: the field `lm loss` (`--loss-key` names another
field of the line, e.g. a MoE model's `load_balancing_loss`), the average over the log
interval.  Megatron leaves a non-finite iteration out of that average and counts it in
`number of nan iterations`; a line counting one is read as loss NaN, so the curve
criteria see the divergence the average hides.  A line without the loss field and without
NaN iterations (every iteration of the interval skipped) is no record.  Other lines
(arguments, `validation loss at iteration ...`, timers, warnings) are not records.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from fp8check.logs.records import LogOptions, LogRecords, number, scan_lines

LINE = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|(.*)")
NAN_ITERS = re.compile(r"\|\s*number of nan iterations:\s*(\d+)")


def read(path: Path, text: str, opts: LogOptions) -> LogRecords:
    """Records of a Megatron-LM console log (module docstring)."""
    field = re.compile(r"\|\s*" + re.escape(opts.loss_key or "lm loss") + r":\s*([^|]*)\|")

    def match(line: str, src: str, i: int) -> tuple[float, float] | None:
        m = LINE.search(line)
        if m is None:
            return None
        rest = "|" + m.group(2)
        nan = NAN_ITERS.search(rest)
        if nan is not None and int(nan.group(1)) > 0:
            return float(m.group(1)), math.nan
        loss = field.search(rest)
        if loss is None:
            return None
        return float(m.group(1)), number(loss.group(1), opts.loss_key or "lm loss", src, i)

    return scan_lines(text, str(path), "megatron", match)
