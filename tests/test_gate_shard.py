"""Scale-out: `--shard i/n` + `fp8check merge` give the serial run's results, `--jobs N`
its verdicts."""

import json

import pytest

from fp8check.cli import main
from fp8check.commands.merge import merge_documents
from fp8check.errors import UsageError
from fp8check.gate.plan import parse_shard
from tests.test_gate_cli import KERNELS_FILE


@pytest.fixture()
def kernels(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "my_kernels.py"
    path.write_text(KERNELS_FILE)
    return path


def _gate(kernels, out, *extra) -> tuple[int, dict]:
    rc = main(["gate", "--no-progress", "--suite", "ci", "--kernel", f"{kernels}:good",
               "--kernel", f"{kernels}:truncating", "--json", str(out), *extra])
    return rc, json.loads(out.read_text())


def _untimed(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("seconds", "timing")}


def _comparable(doc: dict) -> list[dict]:
    """Results without wall-clock times, in a canonical order."""
    rows = [_untimed(r) for r in doc["results"]]
    return sorted(rows, key=lambda r: (r["kernel"], str(r["layer"]), r["case"]))


def test_shards_partition_the_suite_and_merge_equals_the_serial_run(kernels, tmp_path):
    rc, serial = _gate(kernels, tmp_path / "serial.json")
    shards = []
    for i in (1, 2, 3):
        rc_i, doc = _gate(kernels, tmp_path / f"s{i}.json", "--shard", f"{i}/3")
        assert rc_i in (0, 1) and doc["environment"]["shard"] == f"{i}/3"
        shards.append(doc)
    ids = [{r["case"] for r in d["results"]} for d in shards]
    assert all(ids) and not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    for i in (1, 2, 3):
        (tmp_path / f"s{i}.json").write_text(json.dumps(shards[i - 1]))
    out = tmp_path / "merged.json"
    rc_m = main(["merge", *(str(tmp_path / f"s{i}.json") for i in (1, 2, 3)), "-o", str(out),
                 "--junit", str(tmp_path / "m.xml")])
    merged = json.loads(out.read_text())
    assert _comparable(merged) == _comparable(serial)
    assert rc_m == rc == 1  # the truncating kernel fails in both
    assert merged["summary"]["n_failed"] == serial["summary"]["n_failed"] > 0


def _verdicts(doc: dict) -> list[tuple]:
    """Each result's identity, verdict and every criterion's verdict, in document order."""
    return [(r["kernel"], r["layer"], r["case"], r["passed"], r["error"],
             sorted((name, c["passed"]) for name, c in (r["criteria"] or {}).items()))
            for r in doc["results"]]


def test_jobs_give_the_serial_runs_verdicts_in_its_order(kernels, tmp_path):
    """Workers of `--jobs 2` run with half the cores' threads (a kernel's float32 BLAS sums
    may then differ in their bits, as on another machine), so the verdicts and their
    order are compared: every result's and every criterion's pass or fail, and errors."""
    _, serial = _gate(kernels, tmp_path / "a.json", "--suite", "smoke")
    _, parallel = _gate(kernels, tmp_path / "b.json", "--suite", "smoke", "--jobs", "2")
    assert _verdicts(parallel) == _verdicts(serial)
    assert any(not v[3] for v in _verdicts(serial))  # the truncating kernel fails in both


def test_merge_rejects_overlapping_or_mismatched_shards(kernels, tmp_path):
    _, doc = _gate(kernels, tmp_path / "a.json", "--suite", "smoke", "--shard", "1/2")
    _, doc2 = _gate(kernels, tmp_path / "b.json", "--suite", "smoke", "--shard", "2/2")
    with pytest.raises(ValueError, match="shard 1 appears in a.json and b.json"):
        merge_documents([("a.json", doc), ("b.json", doc)])
    dup = json.loads(json.dumps(doc2))
    dup["results"].append(doc["results"][0])
    with pytest.raises(ValueError, match=r"result \S+ layer 1 \S+ appears in a.json and b.json"):
        merge_documents([("a.json", doc), ("b.json", dup)])
    other = json.loads(json.dumps(doc2))
    other["environment"]["seed"] = 7
    with pytest.raises(ValueError, match="seed differs: 0 in a.json, 7 in b.json"):
        merge_documents([("a.json", doc), ("b.json", other)])
    assert merge_documents([("a.json", doc), ("b.json", doc2)])["summary"]["complete"]
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["merge", str(bad), "-o", str(tmp_path / "m.json")]) == 2


@pytest.mark.parametrize("text", ["0/2", "3/2", "a/b", "1"])
def test_bad_shard_is_usage_error(text):
    with pytest.raises(UsageError):
        parse_shard(text)
    assert main(["gate", "--shard", text, "--kernel", "pallas-fp8"]) == 2
