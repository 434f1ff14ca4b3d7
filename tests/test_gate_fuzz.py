"""Fuzzing the gate itself (issue 22): whatever a user types or feeds it, every command
keeps the contract: no Python traceback, an exit status in `fp8check.exitcodes` and never
3 (an internal error), never 0 when a requested result is missing or failed, inputs never
modified, nothing written on bad input.

In this process (`fp8check.cli.main`): argument vectors drawn from each sub-command's
real argparse options; mutated JSON documents and JSONL streams for `report`, `merge`,
`compare` and `curves`; mutated loss logs; mutated `[tool.fp8check]` tables.  Hostile
kernels, which need the gate's worker processes, are in `test_gate_fuzz_kernels.py`.  Every
`gate` that may run is one smoke case with a numpy kernel and `--no-isolate` (seconds);
`tune` only reaches its argument checks.  The example counts are the `fp8check-ci`
profile's `FUZZ_*` settings (`fp8check.inputs.hypothesis_profiles`), sized so that the fuzz files
take about a minute under `make test`.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fuzz_support import (
    CASE,
    CASE2,
    GOOD_KERNEL,
    NUMBERS,
    TEXT,
    call,
    digests,
    paths,
)
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from fp8check import registry
from fp8check.cli import parser
from fp8check.inputs.hypothesis_profiles import fuzz_settings
from fp8check.results import documents, read_document

# capfd and tmp_path are shared by a test's examples on purpose: each example reads the
# captured output it made, and works in its own fresh directory (`Workdir`)
_HEALTH = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
           HealthCheck.data_too_large]


def fuzz(kind: str):
    return fuzz_settings(kind, suppress_health_check=_HEALTH)


@pytest.fixture(scope="module")
def gate_run(tmp_path_factory):
    """A real gate run on two smoke cases with a numpy kernel (in this process, not
    isolated): its kernel file, JSON document and JSONL stream."""
    d = tmp_path_factory.mktemp("gate")
    (d / "k.py").write_text(GOOD_KERNEL)
    cwd = Path.cwd()
    os.chdir(d)
    try:
        from fp8check.cli import main
        rc = main(["gate", "--no-progress", "--no-isolate", "--suite", "smoke", "--layers",
                   "1", "--case", CASE, "--case", CASE2, "--kernel", f"{d / 'k.py'}:good",
                   "--json", str(d / "g.json")])
    finally:
        os.chdir(cwd)
    doc = json.loads((d / "g.json").read_text())
    assert rc in (0, 1) and len(doc["results"]) == 2
    return d


@contextmanager
def Workdir(root: Path) -> Iterator[Path]:
    """A fresh directory per example (the examples of one test share tmp_path), with an
    empty `sub/`, the process's cwd while the example runs."""
    d = Path(tempfile.mkdtemp(dir=root, prefix="ex"))
    (d / "sub").mkdir()
    cwd = Path.cwd()
    os.chdir(d)
    try:
        yield d
    finally:
        os.chdir(cwd)


# --- argument vectors -------------------------------------------------------------------

def _subparsers() -> dict[str, argparse.ArgumentParser]:
    p = parser()
    action = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


SUBPARSERS = _subparsers()
BUILTIN = set(registry.BUILTIN_KERNELS) | set(registry.FAMILIES)


def _options(command: str) -> list[argparse.Action]:
    return [a for a in SUBPARSERS[command]._actions
            if a.option_strings and not isinstance(a, argparse._HelpAction)]


def _positionals(command: str) -> list[argparse.Action]:
    return [a for a in SUBPARSERS[command]._actions if not a.option_strings]


# values that make sense, by option (drawn half of the time, so that runs get past the
# argument checks): a run on one smoke case and the numpy kernel, documents that exist
SENSIBLE = {
    "profile": ["strict", "explore"], "seed": ["0", "1"], "accum": ["deepgemm", "cublas"],
    "out_dtypes": ["f32", "f32,bf16", "bf16"], "m_align": ["1", "128"], "layers": ["1"],
    "targets": ["v5e", "sm_90a"], "case": [CASE], "kernel": ["k.py:good"],
    "json": ["r.json", "sub/r.json"], "jsonl": ["s.jsonl", "sub/s.jsonl"],
    "junit": ["j.xml"], "report": ["r.html"], "shard": ["1/1", "1/2", "2/2"],
    "jobs": ["1", "2"], "timeout": ["60", "0.001"], "output": ["o.json", "o.html"],
    "results": ["g.json", "g.jsonl"], "inputs": ["g.json", "g.jsonl"],
    "base": ["g.json", "g.jsonl"], "head": ["g.json", "g.jsonl"], "summary_md": ["s.md"],
    "candidate": ["loss.csv", "g.json@fp8"], "baseline": ["loss.csv"], "label": ["a", "b"],
    "suite": ["smoke"], "emit": ["e.json"], "rounds": ["1"], "population": ["2"],
}


def _value(action: argparse.Action, files: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A value for `action`: a sensible one half of the time, else one of its choices, a
    number, a path where it names a file, or any text."""
    kinds = [TEXT, NUMBERS]
    if action.choices:
        kinds.append(st.sampled_from(sorted(map(str, action.choices))))
    dest = action.dest
    if dest in ("json", "jsonl", "junit", "report", "output", "emit", "results", "inputs",
                "candidate", "baseline", "base", "head", "summary_md"):
        kinds += [files, files]
    wild = st.one_of(kinds)
    sensible = SENSIBLE.get(dest) or (sorted(map(str, action.choices)) if action.choices
                                      else None)
    return st.one_of(st.sampled_from(sensible), wild) if sensible else wild


@st.composite
def argvs(draw, command: str, files: st.SearchStrategy[str],
          values: dict[str, st.SearchStrategy[str]] | None = None) -> list[str]:
    """`command` with random options drawn from its parser (each with random values,
    repeated, abbreviated or mangled now and then) and random positionals."""
    values = values or {}
    argv = [command]
    for action in draw(st.lists(st.sampled_from(_options(command)), max_size=5)):
        flag = draw(st.sampled_from(action.option_strings))
        if draw(st.integers(0, 19)) == 0:  # an abbreviation or a typo
            flag = flag[: draw(st.integers(1, len(flag)))]
        nargs = action.nargs
        if nargs == 0:
            argv.append(flag)
            continue
        n = nargs if isinstance(nargs, int) else 1
        if draw(st.integers(0, 9)) == 0:
            n = draw(st.sampled_from([0, n + 1]))
        strategy = values[action.dest] if action.dest in values else _value(action, files)
        vals = [draw(strategy) for _ in range(n)]
        if vals and draw(st.booleans()) and not vals[0].startswith("-"):
            argv.append(f"{flag}={vals[0]}")
            argv += vals[1:]
        else:
            argv += [flag, *vals]
    for action in _positionals(command):
        count = 1 if action.nargs is None else draw(st.integers(1, 3))
        if draw(st.integers(0, 9)) == 0:
            count = draw(st.sampled_from([0, count + 1]))
        strategy = values[action.dest] if action.dest in values else _value(action, files)
        argv += [draw(strategy) for _ in range(count)]
    if draw(st.integers(0, 19)) == 0:
        argv.insert(draw(st.integers(1, len(argv))), draw(TEXT))
    return argv


def _inputs(d: Path) -> list[Path]:
    return [p for p in d.iterdir() if p.is_file()]


def _tree(d: Path) -> set[str]:
    """What is in `d` (an imported kernel's __pycache__ left out)."""
    return {str(p.relative_to(d)) for p in d.rglob("*") if "__pycache__" not in p.parts}


@pytest.mark.parametrize("command", ["list", "report", "merge", "compare", "curves"])
@fuzz("FUZZ_ARGV")
@given(data=st.data())
def test_argument_vectors_keep_the_contract(command, data, gate_run, tmp_path, capfd):
    files = ["g.json", "g.jsonl", "loss.csv", "sub", "nosuch.json", "g.json@fp8", "k.py"]
    with Workdir(tmp_path) as d:
        for name in ("g.json", "g.jsonl", "k.py"):
            (d / name).write_bytes((gate_run / name).read_bytes())
        (d / "loss.csv").write_text("step,loss\n0,2.5\n1,2.25\n2,2.0\n")
        values = {"seed": NUMBERS} if command == "list" else None
        argv = data.draw(argvs(command, paths(d, files), values), label="argv")
        before = digests(_inputs(d))
        rc, out, err = call(argv, capfd)
        assert digests(before) == before, f"{argv} modified an input"
        if command == "merge" and rc == 0:
            merged = read_document(_merge_output(argv))
            assert merged["summary"]["passed"] and merged["summary"]["complete"]


def _merge_output(argv: list[str]) -> str:
    """The -o / --output value of a merge command line (the last one given)."""
    ns = SUBPARSERS["merge"].parse_args(argv[1:])
    return ns.output


# FP8CHECK_FUZZ_ISOLATED=1 runs these gates isolated, as a user's would (each then starts
# a worker process: ~10 s an example here; for hunting, not for `make test`)
GATE_FORCED = ["--case", CASE, "--kernel", "k.py:good", "--no-progress",
               *([] if os.environ.get("FP8CHECK_FUZZ_ISOLATED") else ["--no-isolate"])]


@fuzz("FUZZ_GATE_ARGV")
@given(data=st.data())
def test_gate_argument_vectors_keep_the_contract(data, gate_run, tmp_path, capfd):
    """Random gate options, then one smoke case and the numpy kernel (so that whatever
    runs takes seconds), never a built-in kernel (each would run for minutes)."""
    safe_layers = st.sampled_from(["1", "", "-1", "5", "x", "1,", ",", "1,1", "١",
                                   "99999999999999999999", "1.0", " 1"])
    safe_kernels = st.one_of(st.sampled_from(["k.py:good", "k.py:nosuch", "nosuch.py:f",
                                              "os:getcwd", "k.py", ":", "fp8check:"]),
                             TEXT.filter(lambda s: s not in BUILTIN))
    suites = st.sampled_from(["smoke", "smoke", "ci", "full", "x"])
    with Workdir(tmp_path) as d:
        (d / "k.py").write_bytes((gate_run / "k.py").read_bytes())
        argv = data.draw(argvs("gate", paths(d), {"layers": safe_layers,
                                                   "kernel": safe_kernels,
                                                   "suite": suites}), label="argv")
        argv = ["gate", "--suite", "smoke", *argv[1:], *GATE_FORCED]
        before, tree = digests(_inputs(d)), _tree(d)
        rc, out, err = call(argv, capfd)
        assert digests(before) == before, f"{argv} modified an input"
        if rc == 2:
            assert _tree(d) == tree, f"{argv}: bad usage wrote {_tree(d) - tree}"
        if rc == 0:
            _assert_everything_passed(argv, d)


def _assert_everything_passed(argv: list[str], d: Path) -> None:
    """A gate that exited 0 (in the fresh directory `d`) wrote a complete stream whose
    every result passed (wherever the options or [tool.fp8check] put it)."""
    streams = []
    for p in d.rglob("*"):
        if p.is_file() and p.suffix not in (".py", ".toml"):
            text = p.read_text(errors="replace")
            if documents.is_stream(text):
                streams.append(read_document(p))
    assert streams, f"{argv}: exit 0 without a stream"
    for doc in streams:
        assert doc["summary"]["complete"] and doc["results"], argv
        assert all(r["passed"] for r in doc["results"]), argv


TUNE_BAD_SHAPES = st.sampled_from(["x", "", "M=0,K=128,N=128,G=1", "M=1,K=1,N=128,G=1",
                                   "M=1,M=2", "M=-1,K=128,N=128,G=1", "K=128", "wi,wo"])


@fuzz("FUZZ_TUNE_ARGV")
@given(data=st.data())
def test_tune_bad_usage_keeps_the_contract(data, tmp_path, capfd):
    """`tune` with random options and a bad shape: it must stop at its argument checks
    (a search runs for minutes)."""
    with Workdir(tmp_path) as d:
        argv = data.draw(argvs("tune", paths(d)), label="argv")
        argv += ["--shape", data.draw(TUNE_BAD_SHAPES, label="shape")]
        rc, _, _ = call(argv, capfd)
        assert rc == 2, argv


# --- mutated documents ------------------------------------------------------------------

ODD_VALUES = st.sampled_from([None, "", "x", 0, -1, 1, 2, 99, 1.5, -1e308, 1e308, True,
                              False, [], {}, [None], {"": None}, "NaN", "1/2", [1, "a"],
                              "\ud800", "a\x00\x01<&>\x1b[31m\n", "\U0001f600"])


@st.composite
def mutated_values(draw, value):
    """`value` (parsed JSON) with one random change somewhere inside: a key dropped or
    added, a value of another type, a list item dropped or duplicated."""
    if isinstance(value, dict | list) and value and draw(st.integers(0, 3)):
        keys = list(value) if isinstance(value, dict) else list(range(len(value)))
        k = draw(st.sampled_from(keys))
        out = copy.copy(value)
        out[k] = draw(mutated_values(value[k]))
        return out
    op = draw(st.sampled_from(["replace", "drop", "add", "dup"]))
    if op == "replace" or not isinstance(value, dict | list) or not value:
        return draw(ODD_VALUES)
    out = copy.copy(value)
    if isinstance(out, dict):
        if op == "add":
            out[draw(TEXT)] = draw(ODD_VALUES)
        else:
            out.pop(draw(st.sampled_from(sorted(out))))
        return out
    i = draw(st.integers(0, len(out) - 1))
    if op == "dup":
        out.insert(i, out[i])
    else:
        del out[i]
    return out


@st.composite
def mutated_bytes(draw, data: bytes) -> bytes:
    """`data` truncated, with bytes flipped or inserted."""
    op = draw(st.sampled_from(["truncate", "flip", "insert", "empty"]))
    if op == "empty":
        return b""
    i = draw(st.integers(0, len(data)))
    if op == "truncate":
        return data[:i]
    if op == "flip":
        i = min(i, len(data) - 1)
        return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
    return data[:i] + draw(st.binary(min_size=1, max_size=4)) + data[i:]


@st.composite
def mutated_streams(draw, text: str) -> str:
    """A JSONL stream with lines dropped, duplicated, swapped, mutated or cut short."""
    lines = text.splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["drop", "dup", "swap", "mutate", "cut", "blank", "junk"]))
        i = draw(st.integers(0, len(lines) - 1)) if lines else 0
        if not lines:
            lines = [draw(TEXT) + "\n"]
        elif op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "mutate":
            try:
                obj = json.loads(lines[i])
            except ValueError:
                continue
            lines[i] = json.dumps(draw(mutated_values(obj))) + "\n"
        elif op == "cut":
            lines[-1] = lines[-1][: draw(st.integers(0, max(len(lines[-1]) - 1, 0)))]
        elif op == "blank":
            lines.insert(i, "\n")
        else:
            lines.insert(i, draw(TEXT) + "\n")
    return "".join(lines)


@st.composite
def documents_(draw, gate_run: Path) -> tuple[str, bytes]:
    """(file name, content): the gate's JSON document or stream, mutated."""
    kind = draw(st.sampled_from(["json", "json", "jsonl", "jsonl", "bytes"]))
    if kind == "json":
        doc = json.loads((gate_run / "g.json").read_text())
        version = draw(st.sampled_from([None, None, None, 1, 3, 99, "2", -2]))
        if version is not None:
            doc["version"] = version
        doc = draw(mutated_values(doc))
        return "m.json", json.dumps(doc, allow_nan=draw(st.booleans())).encode()
    if kind == "jsonl":
        return "m.jsonl", draw(mutated_streams((gate_run / "g.jsonl").read_text())).encode()
    name = draw(st.sampled_from(["g.json", "g.jsonl"]))
    return "m" + Path(name).suffix, draw(mutated_bytes((gate_run / name).read_bytes()))


def _planned_results_all_passed(doc: dict) -> bool:
    """Every result the run planned is in the document and passed."""
    s = doc["summary"]
    return (s["complete"] and s["n_results"] == len(doc["results"]) >= 1
            and all(r["passed"] for r in doc["results"]))


@fuzz("FUZZ_DOCUMENTS")
@given(data=st.data())
def test_mutated_documents_keep_the_contract(data, gate_run, tmp_path, capfd):
    with Workdir(tmp_path) as d:
        name, content = data.draw(documents_(gate_run), label="document")
        (d / name).write_bytes(content)
        before = digests([d / name])
        rc, _, _ = call(["report", name, "-o", "r.html"], capfd)
        assert rc in (0, 2) and (d / "r.html").exists() == (rc == 0)
        if rc == 0:
            read_document(d / name)  # what report rendered reads as a document

        # against the intact run as its baseline: no regression only when every result
        # of the baseline is there and passed (each of the baseline's did)
        (d / "base.json").write_bytes((gate_run / "g.json").read_bytes())
        rc, _, _ = call(["compare", "base.json", name, "--summary-md", "s.md"], capfd)
        assert rc in (0, 1, 2) and (d / "s.md").exists() == (rc in (0, 1))
        if rc == 0:
            head = {(r["kernel"], r["layer"], r["case"]): r
                    for r in read_document(d / name)["results"]}
            base = read_document(d / "base.json")["results"]
            assert all(head[(r["kernel"], r["layer"], r["case"])]["passed"] for r in base)

        pair = data.draw(st.booleans(), label="merge two shards")
        inputs = [name]
        if pair:  # the mutated document as shard 1/2 of a run whose shard 2/2 is intact
            other = json.loads((gate_run / "g.json").read_text())
            other["environment"]["shard"] = "2/2"
            other["results"] = []
            (d / "s2.json").write_text(json.dumps(other))
            try:
                doc = json.loads(content)
                doc["environment"]["shard"] = "1/2"
                (d / name).write_text(json.dumps(doc))
            except (ValueError, TypeError, KeyError, AttributeError):
                pass
            inputs.append("s2.json")
            before = digests([d / p for p in inputs])
        rc, _, _ = call(["merge", *inputs, "-o", "merged.json", "--junit", "j.xml"], capfd)
        assert (d / "merged.json").exists() == (rc in (0, 1))
        if rc in (0, 1):
            ET.parse(d / "j.xml")  # well-formed XML, whatever the documents' strings hold
        if rc == 0:
            merged = read_document(d / "merged.json")
            assert _planned_results_all_passed(merged)
            assert _planned_results_all_passed(read_document(d / name)), \
                "merge passed a document that is incomplete or failed"

        rc, _, _ = call(["curves", f"{name}@fp8", f"{name}@bf16"], capfd)
        assert rc == 2  # a layer-1 run has no loss curves
        assert digests(before) == before, "an input was modified"


LOSS_CSV = "step,loss\n" + "".join(f"{i},{3 - 0.01 * i:.4f}\n" for i in range(40))
LOSS_JSONL = "".join(json.dumps({"step": i, "loss": 3 - 0.01 * i}) + "\n" for i in range(40))
CELLS = st.one_of(NUMBERS, st.sampled_from(["nan", "inf", "", "step", "loss", "1e400"]))


SAMPLE_LOGS = sorted(p for p in (Path(__file__).parent / "data" / "logs").iterdir()
                     if p.is_file() and p.suffix in (".log", ".jsonl", ".csv"))


@st.composite
def sample_logs(draw) -> tuple[str, bytes]:
    """A real training log of one of the stacks `fp8check.logs` reads (tests/data/logs),
    with lines dropped, duplicated, swapped, mutated or cut short, or bytes flipped."""
    path = draw(st.sampled_from(SAMPLE_LOGS))
    text = path.read_text()
    if draw(st.booleans()):
        return path.name, draw(mutated_streams(text)).encode()
    return path.name, draw(mutated_bytes(text.encode()))


@st.composite
def loss_logs(draw) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(["csv", "csv", "jsonl", "bytes", "sample", "sample"]))
    if kind == "sample":
        return draw(sample_logs())
    if kind == "csv":
        rows = [r.split(",") for r in LOSS_CSV.splitlines()]
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(rows) - 1))
            op = draw(st.sampled_from(["cell", "drop", "dup", "short", "long"]))
            if op == "cell":
                rows[i][draw(st.integers(0, 1))] = draw(CELLS)
            elif op == "drop":
                del rows[i]
            elif op == "dup":
                rows.insert(i, list(rows[i]))
            elif op == "short":
                rows[i] = rows[i][:1]
            else:
                rows[i] = rows[i] + [draw(CELLS)]
            if not rows:
                break
        return "l.csv", "".join(",".join(r) + "\n" for r in rows).encode()
    if kind == "jsonl":
        return "l.jsonl", draw(mutated_streams(LOSS_JSONL)).encode()
    return "l.csv", draw(mutated_bytes(LOSS_CSV.encode()))


@fuzz("FUZZ_LOSS_LOGS")
@given(log=loss_logs(), profile=st.sampled_from(["strict", "explore", "off", ""]),
       swap=st.booleans(), base=st.sampled_from(["base.csv", *(p.name for p in SAMPLE_LOGS)]))
def test_mutated_loss_logs_keep_the_contract(log, profile, swap, base, tmp_path, capfd):
    """`curves` on a mutated loss log against an intact one (the same stack's, or CSV)."""
    with Workdir(tmp_path) as d:
        name, content = log
        if base == name:
            base = "base.csv"
        (d / "base.csv").write_text(LOSS_CSV)
        if base != "base.csv":
            (d / base).write_bytes((Path(__file__).parent / "data" / "logs" / base).read_bytes())
        (d / name).write_bytes(content)
        before = digests([d / name, d / base])
        a, b = (name, base) if not swap else (base, name)
        rc, _, _ = call(["curves", a, b, "--profile", profile, "--json", "c.json"], capfd)
        assert (d / "c.json").exists() == (rc in (0, 1))
        if rc in (0, 1):
            assert json.loads((d / "c.json").read_text())["passed"] == (rc == 0)
        assert digests(before) == before


# --- mutated [tool.fp8check] tables --------------------------------------------------------

_KEYS = ["suite", "profile", "layers", "seed", "backend", "json", "junit", "report", "jsonl",
         "kernels", "isolate", "timeout"]
_SCALARS = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(
        lambda x: "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf") if math.isinf(x)
        else repr(x)),
    st.sampled_from(["true", "false", "1979-05-27T07:32:00Z", "07:32:00", "1979-05-27",
                     '"smoke"', '"strict"', '"explore"', '"1"', '"1,2"', '"r.json"',
                     '"nosuch/x.json"', '"sub"', '""', '"auto"', "0", "-1", "0.001", "1e9"]),
    TEXT.map(json.dumps),
)


# half of a known key's values make sense, so that valid tables run
_SENSIBLE_TOML = {
    "suite": ['"smoke"'], "profile": ['"strict"', '"explore"'], "layers": ["[1]", "1"],
    "seed": ["0"], "backend": ['"auto"', '"interpret"'], "json": ['"r.json"'],
    "junit": ['"j.xml"'], "report": ['"r.html"'], "jsonl": ['"s.jsonl"'],
    "kernels": ['["k.py:good"]'], "isolate": ["true", "false"], "timeout": ["60", "0.5"],
}


def _toml_values(depth: int = 0) -> st.SearchStrategy[str]:
    if depth >= 2:
        return _SCALARS
    inner = _toml_values(depth + 1)
    return st.one_of(
        _SCALARS, _SCALARS,
        st.lists(inner, max_size=3).map(lambda v: "[" + ", ".join(v) + "]"),
        st.dictionaries(st.sampled_from(["a", "b", "suite"]), inner, max_size=2).map(
            lambda d: "{" + ", ".join(f"{k} = {v}" for k, v in d.items()) + "}"),
    )


@st.composite
def pyprojects(draw) -> bytes:
    """A pyproject.toml whose [tool.fp8check] has random known and unknown keys with values
    of any TOML type, or a `tool` / `tool.fp8check` that is not a table, or bytes flipped."""
    keys = draw(st.lists(st.one_of(st.sampled_from(_KEYS), st.sampled_from(["x", "Suite",
                                                                             "layer"])),
                         max_size=4, unique=True))
    table = ""
    for k in keys:
        values = _toml_values()
        if k in _SENSIBLE_TOML:
            values = st.one_of(st.sampled_from(_SENSIBLE_TOML[k]), values)
        table += f"{k} = {draw(values)}\n"
    shape = draw(st.sampled_from(["table", "table", "table", "subtable", "tool-scalar",
                                  "fp8check-scalar", "bytes"]))
    if shape == "subtable":
        text = f"[tool.fp8check]\n{table}[tool.fp8check.nested]\na = 1\n"
    elif shape == "tool-scalar":
        text = f"tool = {draw(_toml_values())}\n"
    elif shape == "fp8check-scalar":
        text = f"[tool]\nfp8check = {draw(_toml_values())}\n"
    else:
        text = f"[project]\nname = \"x\"\n\n[tool.fp8check]\n{table}"
    if shape == "bytes":
        return draw(mutated_bytes(text.encode()))
    return text.encode()


@fuzz("FUZZ_CONFIG")
@given(data=st.data())
def test_mutated_config_tables_keep_the_contract(data, gate_run, tmp_path, capfd):
    """`fp8check gate` under a random [tool.fp8check] (the command line names the one
    smoke case and the numpy kernel, so a valid table runs for seconds)."""
    with Workdir(tmp_path) as d:
        (d / "k.py").write_bytes((gate_run / "k.py").read_bytes())
        content = data.draw(pyprojects(), label="pyproject.toml")
        (d / "pyproject.toml").write_bytes(content)
        before, tree = digests(_inputs(d)), _tree(d)
        argv = ["gate", "--suite", "smoke", "--layers", "1", *GATE_FORCED]
        rc, _, err = call(argv, capfd)
        assert digests(before) == before, "an input was modified"
        if rc == 2:
            assert len(err.strip().splitlines()) == 1, err
            assert _tree(d) == tree, f"bad input wrote {_tree(d) - tree}"
        if rc == 0:
            _assert_everything_passed(argv, d)


def _layer3_document() -> dict:
    """A gate document with layer-3 loss curves (as `fp8check curves FILE@fp8` reads)."""
    from test_documents import make_document

    base = [3 - 0.02 * i for i in range(30)]
    res = [{"kernel": f"pallas-train-{v}", "layer": 3, "case": "markov-s0", "passed": True,
            "metrics": {"curves": {"fp8": [x * 1.001 for x in base], "bf16": base,
                                   "f32": base}}}
           for v in ("fp8", "bf16")]
    return {**make_document([]), "version": 1, "results": res}


SELECTORS = st.sampled_from(["fp8", "bf16", "f32", "pallas/fp8", "pallas/markov-s0/f32",
                             "triton/fp8", "", "/", "a/b/c/d", "pallas-train-fp8/fp8"])


@fuzz("FUZZ_GATE_CURVES")
@given(doc=st.builds(_layer3_document).flatmap(mutated_values), a=SELECTORS, b=SELECTORS)
def test_mutated_gate_curves_keep_the_contract(doc, a, b, tmp_path, capfd):
    with Workdir(tmp_path) as d:
        (d / "g.json").write_text(json.dumps(doc))
        before = digests([d / "g.json"])
        rc, _, _ = call(["curves", f"g.json@{a}", f"g.json@{b}", "--json", "c.json"], capfd)
        assert (d / "c.json").exists() == (rc in (0, 1))
        assert digests(before) == before
