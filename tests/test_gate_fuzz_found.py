"""What fuzzing the gate found (`tests/test_gate_fuzz*.py`), each shrunk example as a
regular test: bad input, exit 2 with one line, never an internal error (3)."""

import pytest

from fp8check import exitcodes
from fp8check.cli import main

LONG = "x" * 300  # longer than a file name may be (255 bytes): os.stat raises ENAMETOOLONG


def _one_line_usage_error(argv, capsys) -> str:
    assert main(argv) == exitcodes.USAGE
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "internal error" not in err, err
    return err


@pytest.mark.parametrize("argv", [
    ["curves", LONG, "base.csv"],
    ["report", LONG, "-o", "r.html"],
    ["merge", LONG, "-o", "m.json"],
])
def test_an_input_name_too_long_is_bad_input(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.csv").write_text("step,loss\n0,2\n")
    assert "cannot read it: File name too long" in _one_line_usage_error(argv, capsys)


@pytest.mark.parametrize("argv", [
    ["report", "g.json", "-o", LONG],
    ["merge", "g.json", "-o", LONG],
    ["curves", "base.csv", "base.csv", "--json", LONG],
    ["gate", "--json", LONG],
])
def test_an_output_name_too_long_is_bad_input(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.csv").write_text("step,loss\n0,2\n")
    (tmp_path / "g.json").write_text("{}")
    assert "cannot write it: File name too long" in _one_line_usage_error(argv, capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.csv", "g.json"]


def test_a_csv_row_longer_than_its_header_names_its_line(tmp_path, monkeypatch, capsys):
    """Was AttributeError: 'NoneType' object has no attribute 'strip' (csv.DictReader
    files the extra fields under the key None)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "l.csv").write_text("step\n0,3.0\n1,2.9\n")
    (tmp_path / "base.csv").write_text("step,loss\n0,3.0\n1,2.9\n")
    err = _one_line_usage_error(["curves", "l.csv", "base.csv"], capsys)
    assert "l.csv: line 2: 2 fields, the header has 1" in err


def test_a_csv_field_over_the_size_limit_is_bad_input(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "l.csv").write_text("step,loss\n0," + "9" * 200_000 + "\n")
    err = _one_line_usage_error(["curves", "l.csv", "l.csv"], capsys)
    assert "l.csv: line 2: not CSV: field larger than field limit" in err


@pytest.mark.parametrize("value", ["inf", "1e308", "nan"])
def test_a_timeout_that_is_not_a_wait_is_bad_input(value, tmp_path, monkeypatch, capsys):
    """--timeout inf was exit 3 (the document's environment is JSON without infinities);
    1e308 was exit 3 (OverflowError in the workers' wait)."""
    monkeypatch.chdir(tmp_path)
    err = _one_line_usage_error(["gate", "--timeout", value], capsys)
    assert "--timeout must be a positive number of seconds, at most 604800" in err
    (tmp_path / "pyproject.toml").write_text(f"[tool.fp8check]\ntimeout = {value}\n")
    err = _one_line_usage_error(["gate"], capsys)
    assert "[tool.fp8check] timeout must be a positive number of seconds" in err
