"""What the fuzz tests of the gate itself share (`tests/test_gate_fuzz*.py`): the
contract every command must keep whatever it is given (`check_contract`), the in-process
call that checks it, and strategies for the values a user can type.  For hunting,
FUZZ_LOG=FILE appends every call's exit status, argv and stderr to FILE."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from hypothesis import event
from hypothesis import strategies as st

from fp8check import exitcodes
from fp8check.cli import main

TESTS = Path(__file__).parent
TRACEBACK = "Traceback (most recent call last)"
# the documented exit statuses; 3 (internal error) is documented too, but fuzzing must
# never reach it: any input a user can give is a pass, a failure or bad input
ALLOWED = {exitcodes.PASS, exitcodes.FAIL, exitcodes.USAGE, exitcodes.SIGINT_EXIT,
           exitcodes.SIGTERM_EXIT}

CASE = "wi-m256-k512-n256-g4-zero-middle-smallint-f32-s0"
CASE2 = "wi-m256-k512-n256-g4-zero-middle-fp8-ties-f32-s0"
GOOD_NAME = "numpy-fp8-deepgemm"
GOOD_KERNEL = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from seeded_bugs.kernels import CORRECT

good = CORRECT[{GOOD_NAME!r}]
"""


def internal_error_detail(err: str) -> str:
    """The traceback file an internal error's one line names, for the failure message."""
    if "(traceback in " not in err:
        return ""
    path = err.rsplit("(traceback in ", 1)[1].split(")")[0]
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def check_contract(argv: list[str], rc: object, out: str, err: str) -> None:
    """No traceback on stdout or stderr, an exit status in the contract, never 3."""
    where = f"fp8check {argv!r}: exit {rc}\nstderr: {err[-2000:]}"
    assert TRACEBACK not in err and TRACEBACK not in out, where
    assert rc in ALLOWED, where + "\n" + internal_error_detail(err)


def call(argv: list[str], capfd) -> tuple[int, str, str]:
    """`fp8check argv` in this process (file-descriptor capture, so that a worker
    process's stderr is seen too), checked against the contract."""
    capfd.readouterr()
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's --help prints and exits 0, as the real command
        rc = e.code if isinstance(e.code, int) else 0
    out, err = capfd.readouterr()
    event(f"{argv[0] if argv else ''} exit {rc}")  # --hypothesis-show-statistics
    if os.environ.get("FUZZ_LOG"):
        with open(os.environ["FUZZ_LOG"], "a") as fh:
            fh.write(f"{rc} {argv!r}\n   {err.strip()[:300]!r}\n")
    check_contract(argv, rc, out, err)
    return int(rc), out, err


def digests(paths: Iterable[Path]) -> dict[Path, str | None]:
    """Each path's content hash (None for what is not a file): inputs never change."""
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
            for p in paths}


# --- values a user can type -----------------------------------------------------------

# what a command line can hold: no NUL (argv cannot), no lone surrogates (the test's own
# stdout cannot encode them); unicode, spaces, dashes and digits of other scripts included
_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                max_size=12)
NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["0", "-1", "1", "2", "nan", "inf", "-inf", "1e309", "0x10", " 1",
                     "1_000", "١", "+3", "1.5", "", "-0"]),
)
TEXT = st.one_of(_TEXT, st.sampled_from(["", "-", "--", "-x", "--json", " ", "ü", "\t",
                                         "a" * 300, "1/2", "0/0", "2/1", "-1/2", "1/0",
                                         "1,2", ",", "x:y", "@", "%s", "{}"]))


def paths(tmp: Path, existing: Iterable[str] = ()) -> st.SearchStrategy[str]:
    """Output or input paths: in `tmp`, in a directory that does not exist, a directory,
    the empty string, unicode names, and the given existing files."""
    fixed = ["out.json", "ü-out.html", "", ".", "-", "sub", "sub/x.json", "nosuch/x.json",
             "nosuch/deeper/x.html", str(tmp / "abs.json"), "/nonexistent-dir/x.json",
             "x" * 300, " ", "out.json/x"]
    return st.one_of(st.sampled_from(fixed + list(existing)), _TEXT)


def pyexe() -> str:
    return sys.executable
