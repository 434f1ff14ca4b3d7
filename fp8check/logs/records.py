"""What every log reader returns, and the pieces they share: the default step and loss keys,
choosing a key among those a log has, parsing a number at a known line, and the options
the command line passes (`--step-key`, `--loss-key`, `--run`).

Contract of a reader: `read(path, text, opts) -> LogRecords`, the (step, loss) records in
log order, NaN / inf losses kept (divergence detection looks for them); a record of other
metrics (an eval line, a learning-rate row) is skipped, not an error.  A value that cannot
be parsed raises ValueError naming the file and its 1-based line: `run.log:31: ...`.
Repeated steps (a restarted run) are left to `fp8check.measures.curves.make_curve`: the last
occurrence of a step wins.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# Preferred first.  `_step` is W&B's own step, `iteration` Megatron's; the loss keys cover
# generic logs, W&B's `train/loss`, Megatron's `lm loss`, MaxText's `learning/loss` and
# torchtitan's `loss_metrics/global_avg_loss`.
STEP_KEYS = ("step", "iteration", "_step", "iter", "global_step", "steps",
             "trainer/global_step")
LOSS_KEYS = ("loss", "train/loss", "train_loss", "lm loss", "lm_loss", "train/lm_loss",
             "learning/loss", "loss_metrics/global_avg_loss")

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class LogOptions:
    """What the user named: a format to force, the step / loss key, the run of a multi-run
    export, and the `@selector` of a gate result file.  None / "": detect, the defaults."""

    fmt: str | None = None
    step_key: str | None = None
    loss_key: str | None = None
    run: str | None = None
    selector: str = ""


@dataclass(frozen=True)
class LogRecords:
    """(step, loss) records of one log in log order (float64; steps are checked to be
    integers by `make_curve`), the format that read them and notes for the user."""

    steps: np.ndarray
    loss: np.ndarray
    fmt: str
    notes: tuple[str, ...] = ()

    @staticmethod
    def of(pairs: Sequence[tuple[float, float]], fmt: str, src: str,
           notes: Sequence[str] = ()) -> LogRecords:
        """Records from (step, loss) pairs; ValueError naming `src` when there are none."""
        if not pairs:
            raise ValueError(f"{src}: no (step, loss) records in this {fmt} log")
        a = np.asarray(pairs, np.float64)
        nan = int(np.sum(~np.isfinite(a[:, 1])))
        extra = (f"{nan} non-finite losses kept",) if nan else ()
        return LogRecords(a[:, 0], a[:, 1], fmt, tuple(notes) + extra)


def scan_lines(text: str, src: str, fmt: str,
               match: Callable[[str, str, int], tuple[float, float] | None]) -> LogRecords:
    """Records of a console log: `match(line, src, number)` on every line, ANSI codes
    stripped, returns (step, loss) for a training-step line and None for any other."""
    pairs = []
    for i, raw in enumerate(text.splitlines(), 1):
        rec = match(strip_ansi(raw), src, i)
        if rec is not None:
            pairs.append(rec)
    return LogRecords.of(pairs, fmt, src)


def strip_ansi(line: str) -> str:
    """`line` without ANSI colour / cursor codes."""
    return ANSI.sub("", line)


def number(token: str, what: str, src: str, line: int) -> float:
    """float(token) ("nan", "NAN", "inf" included); ValueError naming `src:line`."""
    try:
        return float(token.strip().replace(",", ""))
    except ValueError:
        raise ValueError(f"{src}:{line}: bad {what} {token.strip()!r}") from None


def pick_key(keys: Sequence[str], given: str | None, defaults: Sequence[str], what: str,
             src: str) -> str:
    """The key of `keys` to read `what` ("step" / "loss") from: `given` exactly, else the
    first of `defaults` present (case-insensitive).  ValueError listing the keys found
    and the flag that chooses one."""
    if given is not None:
        if given in keys:
            return given
        found = f"no {what} key {given!r}"
    else:
        low = {k.strip().lower(): k for k in keys}
        for d in defaults:
            if d in low:
                return low[d]
        found = f"no {what} key"
    shown = ", ".join(keys[:20]) + (", ..." if len(keys) > 20 else "")
    raise ValueError(f"{src}: {found}; found keys: {shown or 'none'} "
                     f"(use --{what}-key)")
