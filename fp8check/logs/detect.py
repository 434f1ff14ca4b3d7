"""Which reader a log needs, from its content (not its extension): the format names of
`--format` and how each is recognised.

Order: a directory, or a binary file named `*tfevents*`, is TensorBoard (any other binary
file is an error naming it); then console logs, by the line their stack prints for a
training step (Megatron `iteration N/ M |`, MaxText `completed step: N,`, torchtitan
`step: N  loss:`), anywhere in the log (start-up output can be long); then JSON (the
gate's own result file, a MaxText metrics file by its `learning/loss` key, else JSONL);
then CSV (a W&B panel export by its `RUN - METRIC` / `__MIN` columns, W&B history by
`_step`, else CSV).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from pathlib import Path

from fp8check.logs import keyed, maxtext, megatron, tensorboard, torchtitan, wandb
from fp8check.logs.records import LogOptions, LogRecords, strip_ansi

Reader = Callable[[Path, str, LogOptions], LogRecords]

# name -> (reader, the options it takes besides --format)
FORMATS: dict[str, tuple[Reader, frozenset[str]]] = {
    "megatron": (megatron.read, frozenset({"loss_key"})),
    "maxtext": (maxtext.read_metrics, frozenset({"step_key", "loss_key"})),
    "maxtext-log": (maxtext.read_console, frozenset()),
    "torchtitan": (torchtitan.read, frozenset()),
    "wandb": (wandb.read_history, frozenset({"step_key", "loss_key"})),
    "wandb-panel": (wandb.read_panel, frozenset({"step_key", "loss_key", "run"})),
    "tensorboard": (tensorboard.read, frozenset({"loss_key"})),
    "csv": (keyed.read_csv, frozenset({"step_key", "loss_key"})),
    "jsonl": (keyed.read_jsonl, frozenset({"step_key", "loss_key"})),
    "gate": (keyed.read_gate, frozenset({"selector"})),
}
CONSOLE = (("megatron", megatron.LINE), ("maxtext-log", maxtext.LINE),
           ("torchtitan", torchtitan.LINE))


def is_binary(head: bytes) -> bool:
    """A NUL byte or invalid UTF-8 in the first bytes of a file (a cut multi-byte
    character at the end of `head` is not invalid)."""
    if b"\0" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start < len(head) - 3
    return False


def detect_text(text: str) -> str:
    """The format of a text log (module docstring)."""
    stripped = strip_ansi(text)
    for name, pat in CONSOLE:
        if pat.search(stripped):
            return name
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if first.startswith("{"):
        if keyed.is_gate_file(text):
            return "gate"
        return "maxtext" if re.search(r'"learning/loss"\s*:', text) else "jsonl"
    try:
        header = [h.strip() for h in next(csv.reader(io.StringIO(first)), [])]
    except csv.Error:  # not a CSV header (a field over csv's size limit): the CSV reader says so
        return "csv"
    if wandb.panel_series(header) or any(h.endswith("__MIN") for h in header):
        return "wandb-panel"
    return "wandb" if "_step" in header else "csv"


def detect(path: Path) -> str:
    """The format of the log at `path` (module docstring); ValueError for a binary file
    that is no event file."""
    if path.is_dir():
        return "tensorboard"
    with path.open("rb") as f:
        head = f.read(8192)
    if is_binary(head):
        if "tfevents" in path.name:
            return "tensorboard"
        raise ValueError(f"{path}: a binary file, not a loss log (TensorBoard event files "
                         f"are named events.out.tfevents.*; or use --format tensorboard)")
    return detect_text(path.read_text(errors="replace"))
