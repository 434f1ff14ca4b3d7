"""The gate's documents as inputs: the schema every reader checks (`report`, `merge`,
`curves`), the JSONL stream as a document of its own, `merge`'s completeness checks and
output paths whose directory does not exist.  Bad input is exit 2 with one line naming
the file and the path into it, never a traceback; an incomplete run never passes."""

import copy
import json
from pathlib import Path

import pytest

from fp8check.cli import main
from fp8check.results import (
    CaseResult,
    Criterion,
    document,
    environment,
    read_document,
    tally,
)


def make_results(n: int = 3, kernel: str = "k", offset: int = 0) -> list[CaseResult]:
    """`n` passing layer-1 results with one criterion each."""
    crit = [Criterion.check("bound_ratio", "correctness", 0.5, "<=", 1.0, meaning="m")]
    return [CaseResult(kernel=kernel, layer=1, case=f"c{offset + i}", passed=True,
                       metrics={"bound_ratio_max": 0.5}, criteria=list(crit), repro=None)
            for i in range(n)]


def make_document(results: list[CaseResult] | None = None, *, shard: str = "1/1",
                  **env_overrides) -> dict:
    """A valid version-2 document as the gate writes it (no kernels loaded: a result's
    kernel need not be a loaded one)."""
    results = make_results() if results is None else results
    env = environment([], suite="smoke", seed=0, profile="strict", backend="auto",
                      load_errors={})
    env.update({"layers": [1], "shard": shard, **env_overrides})
    return document(results, tally(results, env["kernel_load_errors"]), env)


def write(path: Path, doc: dict) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def write_stream(path: Path, doc: dict, *, planned: int | None = None,
                 end: bool = True) -> list[str]:
    """`doc` as the JSONL stream a gate run writes; returns its lines."""
    lines = [json.dumps({"event": "start", "environment": doc["environment"],
                         "planned": len(doc["results"]) if planned is None else planned})]
    lines += [json.dumps(r) for r in doc["results"]]
    if end:
        lines.append(json.dumps({"event": "end", "n_results": len(doc["results"])}))
    path.write_text("\n".join(lines) + "\n")
    return lines


def one_line_error(capsys) -> str:
    """The single stderr line of a command that exited 2."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("fp8check: error: ")
    return err[len("fp8check: error: "):].rstrip("\n")


# --- the schema: report, merge and curves ------------------------------------------------------


def _break(doc: dict, how: str) -> dict:
    doc = copy.deepcopy(doc)
    if how == "criteria-list":
        doc["results"][1]["criteria"] = []
    elif how == "no-passed":
        del doc["results"][2]["passed"]
    elif how == "summary-string":
        doc["summary"] = "all good"
    elif how == "version-99":
        doc["version"] = 99
    elif how == "layer-7":
        doc["results"][0]["layer"] = 7
    elif how == "seed-string":
        doc["environment"]["seed"] = "0"
    elif how == "criterion-passed":
        doc["results"][0]["criteria"]["bound_ratio"]["passed"] = "yes"
    elif how == "a-list":
        return [doc]  # type: ignore[return-value]
    return doc


BROKEN = [
    ("criteria-list", "results[1].criteria: expected an object"),
    ("no-passed", "results[2]: missing key 'passed'"),
    ("summary-string", "summary: expected an object"),
    ("version-99", "results document version 99; this fp8check reads versions 1, 2"),
    ("layer-7", "results[0].layer: expected one of 0, 1, 2, 3, 4"),
    ("seed-string", "environment.seed: expected an integer"),
    ("criterion-passed", "results[0].criteria.bound_ratio.passed: expected a boolean"),
    ("a-list", "not a gate results document (a JSON object with keys version, summary, "
               "environment, results)"),
]


@pytest.mark.parametrize("how, msg", BROKEN)
def test_a_malformed_document_is_exit_2_naming_the_path_into_it(tmp_path, capsys, how, msg):
    bad = write(tmp_path / "bad.json", _break(make_document(), how))
    good = write(tmp_path / "good.json", make_document(shard="2/2"))
    commands = [
        ["report", bad, "-o", str(tmp_path / "r.html")],
        ["merge", bad, good, "-o", str(tmp_path / "m.json")],
    ]
    if how != "a-list":  # curves takes a JSON list for a loss log, not a gate file
        commands.append(["curves", f"{bad}@fp8", f"{good}@fp8"])
    for argv in commands:
        assert main(argv) == 2, argv
        assert one_line_error(capsys) == f"{bad}: {msg}", argv
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "m.json").exists()


def test_a_binary_file_is_named_not_decoded(tmp_path, capsys):
    """A TensorBoard event file (binary) given where a log or document belongs."""
    binary = tmp_path / "events.out.tfevents"
    binary.write_bytes(b"\x18\x00\x00\x00\x00\x00\x00\x00\xa3\x7fK\x22\t\x00\x00\x00\xff")
    log = tmp_path / "b.csv"
    log.write_text("step,loss\n1,2.0\n2,1.5\n")
    assert main(["report", str(binary), "-o", str(tmp_path / "r.html")]) == 2
    line = one_line_error(capsys)
    assert line.startswith(f"{binary}: not a text file (byte 0xa3 at offset 8 is not UTF-8)")
    assert "codec" not in line
    # as a loss log it is read as the TensorBoard event file its name says it is
    assert main(["curves", str(binary), str(log)]) == 2
    assert one_line_error(capsys).startswith(f"{binary}: no scalars in 1 TensorBoard event")
    blob = tmp_path / "weights.bin"
    blob.write_bytes(binary.read_bytes())
    assert main(["curves", str(blob), str(log)]) == 2
    assert one_line_error(capsys).startswith(f"{blob}: a binary file, not a loss log")


def test_version_1_documents_are_still_read(tmp_path):
    doc = make_document()
    doc["version"] = 1
    for r in doc["results"]:
        r["layer"] = "op"
        for c in r["criteria"].values():
            del c["relation"]
    got = read_document(write(tmp_path / "v1.json", doc))
    assert got["version"] == 2 and [r["layer"] for r in got["results"]] == [1, 1, 1]
    assert got["summary"]["complete"] is True


# --- output paths ------------------------------------------------------------------------------


def test_an_output_directory_that_does_not_exist_is_exit_2_and_not_created(
        tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    doc = write(tmp_path / "a.json", make_document())
    missing = tmp_path / "no" / "such"
    for argv, option in [
        (["report", doc, "-o", str(missing / "x.html")], "-o"),
        (["merge", doc, "-o", str(missing / "m.json")], "-o"),
        (["merge", doc, "-o", "m.json", "--report", str(missing / "m.html")], "--report"),
        (["gate", "--json", str(missing / "g.json")], "--json"),
        (["gate", "--junit", str(missing / "g.xml")], "--junit"),
        (["gate", "--report", str(missing / "g.html")], "--report"),
        (["curves", doc, doc, "--json", str(missing / "c.json")], "--json"),
    ]:
        assert main(argv) == 2, argv
        path = argv[argv.index(option) + 1]
        assert one_line_error(capsys) == (
            f"{option} {path}: directory {missing} does not exist"), argv
    assert not (tmp_path / "no").exists() and not (tmp_path / "m.json").exists()


# --- the JSONL stream --------------------------------------------------------------------------


def test_a_finished_stream_reads_as_its_document(tmp_path):
    doc = make_document()
    write_stream(tmp_path / "s.jsonl", doc)
    got = read_document(tmp_path / "s.jsonl")
    assert got["results"] == doc["results"] and got["environment"] == doc["environment"]
    assert got["summary"] == doc["summary"] and got["summary"]["passed"] is True


def test_a_stream_cut_short_is_an_incomplete_run_that_never_passes(tmp_path, capsys):
    """A run killed mid-write: no end event, the last line cut in the middle."""
    doc = make_document(make_results(5))
    lines = write_stream(tmp_path / "s.jsonl", doc, planned=8, end=False)
    (tmp_path / "s.jsonl").write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:25])
    got = read_document(tmp_path / "s.jsonl")
    s = got["summary"]
    assert len(got["results"]) == 4 and s["complete"] is False and s["passed"] is False
    assert s["incomplete"] == ("the stream has no end event: the run stopped after 4 of 8 "
                               "planned results; its cut-short last line 6 was dropped")
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "s.jsonl"), "-o", str(out)]) == 0
    assert "is incomplete: the stream has no end event" in capsys.readouterr().err
    html = out.read_text()
    assert "Incomplete run" in html and "FAIL" in html and "4 of 8 planned" in html
    # and merged, alone as the one shard of its run, it makes an incomplete merge: exit 1
    assert main(["merge", str(tmp_path / "s.jsonl"), "-o", str(tmp_path / "m.json")]) == 1
    merged = json.loads((tmp_path / "m.json").read_text())["summary"]
    assert merged["complete"] is False and merged["passed"] is False
    assert merged["incomplete"].startswith(f"{tmp_path / 's.jsonl'} is incomplete (the stream")


def test_a_stream_with_fewer_results_than_planned_is_incomplete(tmp_path):
    write_stream(tmp_path / "s.jsonl", make_document(), planned=4)
    s = read_document(tmp_path / "s.jsonl")["summary"]
    assert s["complete"] is False and s["incomplete"] == "3 of 4 planned results"


@pytest.mark.parametrize("where, text, msg", [
    (31, "{not json", "31: not JSON (Expecting property name enclosed in double quotes)"),
    (5, '{"kernel": "k", "layer": 1, "case": "c", "passed": true}', "5: missing key"),
    (7, json.dumps({**make_document()["results"][0], "criteria": []}),
     "7: criteria: expected an object"),
    (2, json.dumps({"event": "end", "n_results": 0}), "3: a line after the end event"),
])
def test_a_bad_stream_line_is_exit_2_naming_its_line(tmp_path, capsys, where, text, msg):
    lines = write_stream(tmp_path / "s.jsonl", make_document(make_results(40)))
    lines[where - 1] = text
    (tmp_path / "s.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["report", str(tmp_path / "s.jsonl"), "-o", str(tmp_path / "r.html")]) == 2
    assert one_line_error(capsys).startswith(f"{tmp_path / 's.jsonl'}:{msg}")


def test_a_loss_log_names_its_bad_line(tmp_path, capsys):
    lines = [json.dumps({"step": i, "loss": 2.0 - i / 100}) for i in range(40)]
    lines[30] = '{"step": 30, "loss": '
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "b.csv").write_text("step,loss\n1,2.0\n2,1.5\n")
    assert main(["curves", str(tmp_path / "a.jsonl"), str(tmp_path / "b.csv")]) == 2
    assert one_line_error(capsys).startswith(f"{tmp_path / 'a.jsonl'}:31: not JSON")


# --- merge: one complete run -------------------------------------------------------------------


def _shard(tmp_path: Path, name: str, i: int, n: int, **env) -> str:
    return write(tmp_path / name, make_document(make_results(2, offset=2 * i),
                                                shard=f"{i}/{n}", **env))


def test_merge_of_every_shard_passes_and_records_the_whole_run(tmp_path):
    a, b = _shard(tmp_path, "a.json", 1, 2), _shard(tmp_path, "b.json", 2, 2)
    write_stream(tmp_path / "b.jsonl", json.loads(Path(b).read_text()))
    for second in (b, str(tmp_path / "b.jsonl")):  # a JSONL stream merges like its document
        assert main(["merge", a, second, "-o", str(tmp_path / "m.json")]) == 0
        m = json.loads((tmp_path / "m.json").read_text())
        assert m["environment"]["shard"] == "1/1" and m["summary"]["passed"] is True
        assert m["environment"]["merged_from"] == [a, second] and len(m["results"]) == 4


def test_merge_names_what_is_missing_or_mismatched(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the messages name the files as given
    a = _shard(tmp_path, "a.json", 1, 2)
    cases = [  # (the second input's shard and environment, or None), the message
        (None, "shard 2/2 missing (--allow-partial merges without them)"),
        ((4, 4, {}), "shards 2/4, 3/4 missing (--allow-partial merges without them)"),
        ((1, 3, {}), "shard count differs: 2 in a.json, 3 in b.json"),
        ((1, 2, {}), "shard 1 appears in a.json and b.json"),
        ((2, 2, {"seed": 1}), "seed differs: 0 in a.json, 1 in b.json"),
        ((2, 2, {"suite": "ci"}), "suite differs: smoke in a.json, ci in b.json"),
        ((2, 2, {"profile": "explore"}), "profile differs: strict in a.json, explore in b.json"),
        ((2, 2, {"layers": [1, 2]}), "layers differs: [1] in a.json, [1, 2] in b.json"),
        ((2, 2, {"kernel_load_errors": {"x": "boom"}}),
         "kernels differ: none in a.json, x in b.json"),
    ]
    for second, msg in cases:
        inputs = ["a.json"]
        if second is not None:
            i, n, env = second
            inputs.append(Path(_shard(tmp_path, "b.json", i, n, **env)).name)
        if msg.startswith("shards 2/4"):  # both of 4
            inputs[0] = Path(_shard(tmp_path, "c.json", 1, 4)).name
        assert main(["merge", *inputs, "-o", "m.json"]) == 2, msg
        assert one_line_error(capsys) == msg.replace("a.json", inputs[0])
    doc = json.loads(Path(a).read_text())
    doc["environment"]["packages"]["numpy"] = "0.1"
    doc["environment"]["shard"] = "2/2"
    write(tmp_path / "old.json", doc)
    assert main(["merge", "a.json", "old.json", "-o", "m.json"]) == 2
    assert one_line_error(capsys).startswith("numpy version differs: ")
    assert not (tmp_path / "m.json").exists()


def test_allow_partial_merges_an_incomplete_run_that_never_passes(tmp_path, capsys):
    a = _shard(tmp_path, "a.json", 1, 3)
    out = tmp_path / "m.json"
    assert main(["merge", a, "-o", str(out), "--allow-partial"]) == 1
    captured = capsys.readouterr()
    assert "incomplete: shards 2/3, 3/3 missing" in captured.err
    m = json.loads(out.read_text())
    assert m["summary"]["complete"] is False and m["summary"]["passed"] is False
    assert m["environment"]["shard"] == "1/3" and m["summary"]["n_failed"] == 0
    # the partial merge, itself an input, stays partial
    assert main(["merge", str(out), _shard(tmp_path, "b.json", 2, 3), "-o",
                 str(tmp_path / "m2.json"), "--allow-partial"]) == 1
    m2 = json.loads((tmp_path / "m2.json").read_text())
    assert m2["environment"]["shard"] == "1,2/3" and "shard 3/3 missing" in m2["summary"][
        "incomplete"]


def test_a_kernel_that_failed_to_load_in_a_shard_fails_the_merge(tmp_path):
    """The merged environment keeps every shard's kernel_load_errors (merge read a key the
    gate never wrote, so a kernel that failed to load was forgotten and the merge passed)."""
    doc_b = make_document(make_results(2, offset=9), shard="2/2")
    doc_b["environment"]["kernel_load_errors"] = {"k": "ImportError: no module x"}
    doc_b["summary"] = tally([CaseResult.from_dict(r) for r in doc_b["results"]],
                             doc_b["environment"]["kernel_load_errors"])
    doc_a = make_document(shard="1/2")
    doc_a["environment"]["kernel_load_errors"] = {"k": "ImportError: no module x"}
    doc_a["summary"] = tally([CaseResult.from_dict(r) for r in doc_a["results"]],
                             doc_a["environment"]["kernel_load_errors"])
    out = tmp_path / "m.json"
    assert main(["merge", write(tmp_path / "a.json", doc_a), write(tmp_path / "b.json", doc_b),
                 "-o", str(out)]) == 1
    m = json.loads(out.read_text())
    assert m["summary"]["kernel_load_errors"] == {"k": "ImportError: no module x"}
    assert m["summary"]["passed"] is False and m["summary"]["n_failed"] == 0


def test_figure_data_is_checked_too(tmp_path, capsys):
    """The report draws a result's figure data: wrong types or lengths there are bad
    input (exit 2), not a crash in the plotting code."""
    from fp8check.inputs.cases import build_suite
    from fp8check.layers.op import validate_case
    from fp8check.profiles import get_profile
    from fp8check.reports.plotdata import plot_data
    from tests.seeded_bugs.kernels import CORRECT

    res = validate_case(CORRECT["numpy-fp8-deepgemm"], build_suite("smoke")[0],
                        get_profile("strict"), plots=plot_data)
    doc = make_document([res])
    read_document(write(tmp_path / "ok.json", doc))
    plots = doc["results"][0]["metrics"]["plots"]
    n_groups = len(plots["group_sqnr"]["group_sizes"])
    n_edges = len(plots["ulp_hist"]["edges"])
    where = "results[0].metrics.plots"
    for change, msg in [
        (lambda p: p["group_sqnr"]["impact"].__setitem__(0, "x"),
         f'{where}.group_sqnr.impact[0]: expected a number, "nan", "inf", "-inf" or null'),
        (lambda p: p["group_sqnr"]["vs_exact"].pop(),
         f"{where}.group_sqnr.vs_exact: expected {n_groups} items, got {n_groups - 1}"),
        (lambda p: p["ulp_hist"]["counts"].append(3),
         f"{where}.ulp_hist.counts: expected {n_edges} items, got {n_edges + 1}"),
        (lambda p: p["err_vs_ab"]["points"].__setitem__(0, [1.0]),
         f"{where}.err_vs_ab.points[0]: expected at least 3 items"),
        (lambda p: p.pop("bound_tiles"), f"{where}: missing key 'bound_tiles'"),
    ]:
        bad = copy.deepcopy(doc)
        change(bad["results"][0]["metrics"]["plots"])
        path = write(tmp_path / "bad.json", bad)
        assert main(["report", path, "-o", str(tmp_path / "r.html")]) == 2
        assert one_line_error(capsys) == f"{path}: {msg}"
