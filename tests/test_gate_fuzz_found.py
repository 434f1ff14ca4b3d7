"""What fuzzing the gate found (`tests/test_gate_fuzz*.py`), each shrunk example as a
regular test: bad input, exit 2 with one line, never an internal error (3)."""

import json
import xml.etree.ElementTree as ET

import pytest
from test_documents import make_document, make_results

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
    files the extra fields under the key None); main's log readers (fp8check.logs) now
    say so too."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "l.csv").write_text("step\n0,3.0\n1,2.9\n")
    (tmp_path / "base.csv").write_text("step,loss\n0,3.0\n1,2.9\n")
    err = _one_line_usage_error(["curves", "l.csv", "base.csv"], capsys)
    assert "l.csv:2: 2 fields, the header has 1" in err


def test_a_csv_field_over_the_size_limit_is_bad_input(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "l.csv").write_text("step,loss\n0," + "9" * 200_000 + "\n")
    err = _one_line_usage_error(["curves", "l.csv", "l.csv"], capsys)
    assert "l.csv:2: not CSV: field larger than field limit" in err
    (tmp_path / "h.csv").write_text("step," + "x" * 200_000 + "\n0,1\n")
    err = _one_line_usage_error(["curves", "h.csv", "l.csv"], capsys)
    assert "h.csv:1: not CSV: field larger than field limit" in err


@pytest.mark.parametrize("value", ["inf", "1e308", "nan"])
def test_a_timeout_that_is_not_a_wait_is_bad_input(value, tmp_path, monkeypatch, capsys):
    """--timeout inf was exit 3 (the document's environment is JSON without infinities);
    1e308 was exit 3 (OverflowError in the workers' wait)."""
    monkeypatch.chdir(tmp_path)
    err = _one_line_usage_error(["gate", "--timeout", value], capsys)
    assert "--timeout must be a positive number of seconds, at most 604800" in err
    (tmp_path / "pyproject.toml").write_text(f"[tool.fp8check]\ntimeout = {value}\n")
    err = _one_line_usage_error(["gate"], capsys)
    assert "[tool.fp8check] timeout = " in err and "expected a positive number of seconds" in err


def _gate_document(tmp_path, kernel: str) -> dict:
    """A valid results document with one passed result of `kernel`."""
    return make_document(make_results(1, kernel=kernel))


def test_a_lone_surrogate_in_a_document_is_bad_input(tmp_path, monkeypatch, capsys):
    """`"\\ud800"` is valid JSON but no text: `report` was exit 3 (matplotlib could not
    draw it); now every reader names where it is."""
    monkeypatch.chdir(tmp_path)
    doc = _gate_document(tmp_path, "\ud800")
    (tmp_path / "d.json").write_text(json.dumps(doc))
    for argv in (["report", "d.json", "-o", "r.html"], ["merge", "d.json", "-o", "m.json"]):
        err = _one_line_usage_error(argv, capsys)
        assert "d.json: summary.kernels.\\ud800: a string with a lone surrogate" in err
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "m.json").exists()


def test_junit_stays_well_formed_whatever_the_strings_hold(tmp_path, monkeypatch):
    """A control character in a kernel name or error (a colored message) made JUnit XML
    that no reader parses; they are written as escapes now."""
    monkeypatch.chdir(tmp_path)
    doc = _gate_document(tmp_path, "k\x01<&>\x1b[31m")
    (tmp_path / "d.json").write_text(json.dumps(doc))
    assert main(["merge", "d.json", "-o", "m.json", "--junit", "j.xml"]) in (0, 1)
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("name") == "k\\x01<&>\\x1b[31m"
