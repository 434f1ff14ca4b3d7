"""The user's files as the commands meet them: an input read as text, an output path
checked before anything runs.  Both fail with a one-line ValueError naming the file (the
commands' `usage_errors` turns it into exit status 2); nothing here creates a directory."""

from __future__ import annotations

import os
from pathlib import Path


def read_text(path: str | Path, expected: str) -> str:
    """The UTF-8 text of the file at `path`.

    Raises:
      ValueError: one line naming the file when it does not exist or is not UTF-8 text;
        `expected` says what it should have been ("a gate results document").
    """
    p = Path(path)
    try:
        if not p.is_file():
            raise ValueError(f"{p}: no such file")
        data = p.read_bytes()
    except OSError as e:  # a name too long, a file we may not read
        raise ValueError(f"{_short(p)}: cannot read it: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: not a text file (byte 0x{data[e.start]:02x} at offset "
                         f"{e.start} is not UTF-8); expected {expected}") from None


def exists(path: str | Path) -> bool:
    """Whether `path` exists.

    Raises:
      ValueError: one line naming it when the system cannot say (a name too long, a
        directory we may not search).
    """
    p = Path(path)
    try:
        return p.exists()
    except OSError as e:
        raise ValueError(f"{_short(p)}: cannot read it: {e.strerror or e}") from None


def check_output(path: str | Path, option: str) -> None:
    """Check, before anything is written, that the output `path` given as `option`
    ("-o", "--json") can be written: its directory exists and it is not a directory.

    Raises:
      ValueError: one line, e.g. "-o out/x.html: directory out does not exist".
    """
    p = Path(path)
    parent = p.parent
    try:
        if not parent.is_dir():
            raise ValueError(f"{option} {p}: directory {parent} does not exist")
        if p.is_dir():
            raise ValueError(f"{option} {p}: is a directory")
        if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
            raise ValueError(f"{option} {p}: not writable")
    except OSError as e:  # a name too long, a directory we may not search
        raise ValueError(f"{option} {_short(p)}: cannot write it: {e.strerror or e}") from None


def _short(p: Path) -> str:
    """`p` for a one-line message (a name too long for the file system is cut short)."""
    s = str(p)
    return s if len(s) <= 80 else s[:60] + "..." + s[-16:]
