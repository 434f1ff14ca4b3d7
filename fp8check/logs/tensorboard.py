"""TensorBoard event files (`events.out.tfevents.*`), as written by
`torch.utils.tensorboard.SummaryWriter` (Megatron-LM: tag `lm loss`, step = iteration;
torchtitan: `loss_metrics/global_avg_loss`, pytorch/torchtitan
torchtitan/components/metrics.py `TensorBoardLogger`) or `tf.summary` (MaxText:
`learning/loss`, MaxText/metric_logger.py `write_metrics_to_tensorboard`).

Read through the `tensorboard` package's own event reader
(`tensorboard.backend.event_processing.event_file_loader.EventFileLoader`, which also
migrates TF1 `simple_value` scalars to the tensor form), installed by the optional
extra `fp8check[tensorboard]`.  A path is one event file or a directory: its event files
are read in name order (their names start with the creation time, so a restarted run's
later file comes last and its repeated steps win).  The loss tag is `--loss-key` or the
first of `records.LOSS_KEYS` the file has.  Like TensorBoard itself, the reader stops
at a file's first damaged or incomplete record (a run still writing, a cut copy): the
records before it are read, a file without any is an error.
"""

from __future__ import annotations

from pathlib import Path

from fp8check.logs.records import LOSS_KEYS, LogOptions, LogRecords, pick_key

EXTRA = "fp8check[tensorboard]"


def event_files(path: Path) -> list[Path]:
    """The event files at `path` (a file, or a directory searched recursively)."""
    if path.is_dir():
        return sorted(path.rglob("*tfevents*"), key=lambda p: (p.name, str(p)))
    return [path]


def scalars(files: list[Path], src: str) -> dict[str, list[tuple[float, float]]]:
    """tag -> (step, value) of every scalar summary in `files`, in file order."""
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util
    except ImportError:
        raise ValueError(f"{src}: reading TensorBoard event files needs the tensorboard "
                         f"package: pip install '{EXTRA}'") from None
    out: dict[str, list[tuple[float, float]]] = {}
    for f in files:
        for ev in EventFileLoader(str(f)).Load():
            for v in ev.summary.value:
                if v.metadata.plugin_data.plugin_name == "scalars":
                    val = float(tensor_util.make_ndarray(v.tensor).item())
                    out.setdefault(v.tag, []).append((float(ev.step), val))
    return out


def read(path: Path, text: str, opts: LogOptions) -> LogRecords:
    """Records of the loss tag of the event file(s) at `path` (module docstring); `text`
    is unused (event files are binary)."""
    src = str(path)
    files = event_files(path)
    if not files:
        raise ValueError(f"{src}: no TensorBoard event files (events.out.tfevents.*)")
    tags = scalars(files, src)
    if not tags:
        raise ValueError(f"{src}: no scalars in {len(files)} TensorBoard event file(s) "
                         f"(empty, truncated, or not an event file)")
    tag = pick_key(list(tags), opts.loss_key, LOSS_KEYS, "loss", src)
    notes = (f"{len(files)} event files",) if len(files) > 1 else ()
    return LogRecords.of(tags[tag], "tensorboard", src, notes + (f"tag {tag!r}",))
