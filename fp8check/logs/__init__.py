"""Loss logs of real training runs -> (step, loss) records, for layer 4
(`fp8check curves`).  One module per stack's format (each cites the source file that
writes it), `detect` picks one from the content, `read_log` is the entry point.

Formats: `megatron`, `maxtext` (metrics file), `maxtext-log`, `torchtitan`, `wandb`
(history CSV), `wandb-panel`, `tensorboard`, `csv`, `jsonl`, `gate` (the gate's own
result file with `@selector`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fp8check.logs.detect import FORMATS, detect
from fp8check.logs.records import LogOptions, LogRecords
from fp8check.userfiles import exists, read_text

__all__ = ["FORMATS", "LogOptions", "LogRecords", "read_log"]

FLAGS = {"step_key": "--step-key", "loss_key": "--loss-key", "run": "--run",
         "selector": "@selector"}


def read_log(spec: str, opts: LogOptions | None = None) -> LogRecords:
    """The (step, loss) records of the log `spec` = PATH or PATH@SELECTOR (a gate result
    file's layer-3 curve), in the format `opts.fmt` or the detected one.  ValueError, one
    line naming the file (and the line, where one is at fault), for a missing, binary or
    unreadable file, an unknown format, an option the format does not take, or a log
    without step / loss records."""
    path_s, selector = spec, ""
    if "@" in spec and not exists(spec):  # a path may hold an @ itself
        path_s, _, selector = spec.rpartition("@")
    opts = replace(opts or LogOptions(), selector=selector)
    path = Path(path_s)
    if not exists(path):
        raise ValueError(f"{path_s}: no such file")
    fmt = opts.fmt or detect(path)
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; expected one of {', '.join(FORMATS)}")
    reader, takes = FORMATS[fmt]
    for name, flag in FLAGS.items():
        if getattr(opts, name) not in (None, "") and name not in takes:
            raise ValueError(f"{spec}: {flag} does not apply to {fmt} logs")
    if fmt == "tensorboard":
        return reader(path, "", opts)
    if path.is_dir():
        raise ValueError(f"{path_s}: a directory (only TensorBoard logs are directories)")
    return reader(path, read_text(path, f"a {fmt} log (text)"), opts)
