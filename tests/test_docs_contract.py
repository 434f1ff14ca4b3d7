"""docs/contract.md runs as written: every `$ fp8check gate` command of its console blocks
is run as from the repository root (from a copy of docs/examples/ in a temporary
directory, whose outputs and [tool.fp8check] are not the repository's; smoke suite, layer
1, in this process); a block that
shows FAIL lines must exit 1 and print those FAIL lines' kernel, case and criterion, every
other must pass.  Every example file under docs/examples/ is run by some command, and the
README, `fp8check gate --help` and the errors about a bad kernel point to the page."""

import re
import shlex
import shutil
from pathlib import Path

import pytest

from fp8check.cli import main
from fp8check.contracts import CONTRACT_DOC

ROOT = Path(__file__).parent.parent
DOC = ROOT / CONTRACT_DOC
CONSOLE = re.compile(r"```console\n(.*?)```", re.S)


def _blocks() -> list[tuple[str, list[str]]]:
    """(command, the FAIL lines shown after it) for every `$ fp8check gate` line."""
    out: list[tuple[str, list[str]]] = []
    for block in CONSOLE.findall(DOC.read_text()):
        for line in block.splitlines():
            if line.startswith("$ fp8check gate "):
                out.append((line[2:], []))
            elif line.startswith("FAIL "):
                out[-1][1].append(line)
    return out


BLOCKS = _blocks()


def _kernel(command: str) -> str:
    """The file name of the kernel a command runs."""
    argv = shlex.split(command)
    return Path(argv[argv.index("--kernel") + 1].split(":")[0]).name


def _where_it_fails(fail_line: str) -> str:
    """`FAIL kernel case: criterion`, the part of a FAIL line that does not depend on the
    machine's float32 summation order."""
    head, _, why = fail_line.partition(": ")
    return f"{head}: {why.split()[0]}"


def test_the_page_has_an_example_per_framework_and_contract_and_a_failure():
    commands = [c for c, _ in BLOCKS]
    for framework in ("numpy", "jax", "torch"):
        assert any(f"--contract gmm-fp8 --framework {framework}" in c for c in commands)
    for contract in ("gmm", "tgmm", "quantizer"):
        assert any(f"--contract {contract} " in c for c in commands)
    assert any(":SPEC " in c for c in commands)
    assert any(fails for _, fails in BLOCKS)
    used = {_kernel(c) for c in commands}
    imported = {"numpy_gmm_fp8.py"}  # by numpy_spec.py, and run on its own too
    assert {p.name for p in (ROOT / "docs/examples").glob("*.py")} == used | imported


@pytest.mark.slow
@pytest.mark.parametrize("command, fails", BLOCKS, ids=[_kernel(c) for c, _ in BLOCKS])
def test_a_documented_command_does_what_the_page_says(command, fails, monkeypatch, capsys,
                                                      tmp_path):
    shutil.copytree(ROOT / "docs/examples", tmp_path / "docs/examples")
    monkeypatch.chdir(tmp_path)
    argv = shlex.split(command)[1:] + ["--no-progress", "--no-isolate"]
    rc = main(argv)
    err = capsys.readouterr().err
    printed = [_where_it_fails(line) for line in err.splitlines() if line.startswith("FAIL ")]
    if fails:
        assert rc == 1
        assert {_where_it_fails(line) for line in fails} <= set(printed)
    else:
        assert rc == 0 and not printed, err


def test_help_readme_and_bad_kernel_errors_point_to_the_contract(capsys, tmp_path,
                                                                 monkeypatch):
    assert CONTRACT_DOC in (ROOT / "README.md").read_text()
    with pytest.raises(SystemExit):
        main(["gate", "--help"])
    assert CONTRACT_DOC in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.py").write_text("VALUE = 3\n")
    for argv in (["--kernel", "pallsa"], ["--kernel", "k.py:VALUE"],
                 ["--kernel", "k.py:missing", "--contract", "gmm", "--framework", "numpy"],
                 ["--kernel", "numpy:matmul"]):
        assert main(["gate", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and CONTRACT_DOC in err, err
