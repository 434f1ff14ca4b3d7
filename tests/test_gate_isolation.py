"""Nothing a kernel does ends the gate or turns it green: exits, BaseExceptions, signals
and hangs become that result's error, the other kernels' results are kept (on the same
case too), exit 1; SIGINT / SIGTERM write the results so far marked incomplete, exit
130 / 143 with one line; `--no-isolate` says isolation is off; the exit codes are in
`--help`.  Every gate here is a real `fp8check gate` process on one smoke case."""

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fp8check import exitcodes
from fp8check.cli import main, parser

TESTS = Path(__file__).parent
CASE = "wi-m256-k512-n256-g4-zero-middle-fp8-ties-f32-s0"
CASE2 = "wi-m256-k512-n256-g4-zero-middle-smallint-f32-s0"
GOOD = "numpy-fp8-deepgemm"  # the name of the `good` spec below
HOSTILE = f"""
import ctypes, os, sys, time
sys.path.insert(0, {str(TESTS)!r})
from seeded_bugs.kernels import CORRECT

good = CORRECT[{GOOD!r}]

def sys_exit(*args, **kw):
    sys.exit(0)

def os_exit(*args, **kw):
    os._exit(0)

def keyboard_interrupt(*args, **kw):
    raise KeyboardInterrupt

def segfault(*args, **kw):
    ctypes.string_at(0)

def abort(*args, **kw):
    os.abort()

def oom_killed(*args, **kw):  # what the kernel's OOM killer does
    os.kill(os.getpid(), 9)

def hang(*args, **kw):
    time.sleep(3600)
"""
# hostile kernel -> what its error must name
CAUSES = {
    "sys_exit": "raised SystemExit(0)",
    "os_exit": "exited with code 0",
    "keyboard_interrupt": "raised KeyboardInterrupt()",
    "hang": "timed out after 5 s",
    "segfault": "killed by SIGSEGV",
    "abort": "killed by SIGABRT",
    "oom_killed": "killed by SIGKILL (out of memory?)",
}


@pytest.fixture()
def kernels(tmp_path):
    path = tmp_path / "hostile.py"
    path.write_text(HOSTILE)
    return path


def _gate_process(tmp_path, kernels, names, *args, **popen):
    cmd = [sys.executable, "-m", "fp8check", "gate", "--no-progress", "--suite", "smoke",
           "--contract", "gmm-fp8", "--framework", "numpy", "--json", str(tmp_path / "g.json"),
           *[a for n in names for a in ("--kernel", f"{kernels}:{n}")], *args]
    return subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **popen)


def _by_kernel(tmp_path):
    doc = json.loads((tmp_path / "g.json").read_text())
    return doc, {(r["kernel"], r["case"]): r for r in doc["results"]}


def test_hostile_kernels_are_errors_and_the_good_kernel_is_kept(tmp_path, kernels):
    """Each hostile kernel between good ones on one case: each is an error naming its
    cause, the good kernel (run after the exits and the hang) passes, exit 1."""
    names = ["sys_exit", "os_exit", "keyboard_interrupt", "hang", "good", "segfault", "abort",
             "oom_killed"]
    proc = _gate_process(tmp_path, kernels, names, "--case", CASE, "--timeout", "5")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == exitcodes.FAIL, err
    assert "Traceback" not in err
    doc, results = _by_kernel(tmp_path)
    assert results[(GOOD, CASE)]["passed"] is True
    for name, cause in CAUSES.items():
        r = results[(f"{kernels}:{name}", CASE)]
        assert r["passed"] is False and cause in r["error"], (name, r["error"])
        assert f"FAIL {kernels}:{name} {CASE}: " in err and r["repro"]
    assert doc["summary"]["complete"] is True and doc["summary"]["passed"] is False
    assert doc["summary"]["n_results"] == len(names)


def test_a_crash_with_jobs_2_keeps_every_other_result(tmp_path, kernels):
    proc = _gate_process(tmp_path, kernels, ["os_exit", "good"], "--case", CASE,
                         "--case", CASE2, "--jobs", "2")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == exitcodes.FAIL, err
    doc, results = _by_kernel(tmp_path)
    assert [(r["kernel"], r["case"]) for r in doc["results"]] == [
        (f"{kernels}:os_exit", CASE), (GOOD, CASE), (f"{kernels}:os_exit", CASE2),
        (GOOD, CASE2)]  # a serial run's order
    for case in (CASE, CASE2):
        assert results[(GOOD, case)]["passed"] is True
        assert "exited with code 0" in results[(f"{kernels}:os_exit", case)]["error"]


def _workers(pid: int) -> list[int]:
    """The live worker processes whose parent is `pid`."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if (int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid
                    and b"spawn_main" in (stat.parent / "cmdline").read_bytes()):
                out.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            pass
    return out


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_writes_the_results_so_far_marked_incomplete(tmp_path, kernels, signum):
    """The good kernel's result is made, the next kernel hangs: the signal ends the run
    with one line, exit 128 + signum, and a JSON that is incomplete and not passed."""
    proc = _gate_process(tmp_path, kernels, ["good", "hang"], "--case", CASE)
    stream = tmp_path / "g.jsonl"
    deadline = time.monotonic() + 120
    while not (stream.exists() and f'"kernel": "{GOOD}"' in stream.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    workers = _workers(proc.pid)
    assert workers
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == exitcodes.interrupted(signum)
    assert not [p for p in workers if Path(f"/proc/{p}").exists()]  # workers stopped
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    name = signal.Signals(signum).name
    assert f"interrupted by {name}: 1 of 2 results kept in {tmp_path / 'g.json'}" in lines[0]
    doc, results = _by_kernel(tmp_path)
    assert doc["summary"]["complete"] is False and doc["summary"]["passed"] is False
    assert list(results) == [(GOOD, CASE)] and results[(GOOD, CASE)]["passed"] is True
    events = [json.loads(line).get("event") for line in stream.read_text().splitlines()]
    assert events == ["start", None]  # one result, no end event: the stream is incomplete


def test_no_isolate_runs_in_process_and_says_so(tmp_path, kernels):
    proc = _gate_process(tmp_path, kernels, ["good"], "--case", CASE, "--no-isolate")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == exitcodes.PASS, err
    assert "isolation is off" in err
    _, results = _by_kernel(tmp_path)
    assert results[(GOOD, CASE)]["passed"] is True


def test_isolation_and_timeout_in_the_config(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.fp8check]\ntimeout = "soon"\n')
    assert main(["gate", "--kernel", "pallas-quantizer"]) == exitcodes.USAGE
    assert "timeout" in (err := capsys.readouterr().err) and "positive number" in err
    (tmp_path / "pyproject.toml").write_text("[tool.fp8check]\nisolate = false\n")
    assert main(["gate", "--kernel", "pallas-quantizer", "--jobs", "2"]) == exitcodes.USAGE
    assert "--jobs runs worker processes" in capsys.readouterr().err
    assert main(["gate", "--timeout", "0"]) == exitcodes.USAGE


def test_exit_codes_are_in_the_help():
    for text in (parser().format_help(),
                 subprocess.run([sys.executable, "-m", "fp8check", "gate", "--help"],
                                capture_output=True, text=True, check=True).stdout):
        assert "exit status:" in text
        for code in (0, 1, 2, 3, 130, 143):
            assert f"\n  {code} " in text, code


def test_layers_2_and_3_run_in_workers(tmp_path):
    """The Pallas family's MoE layer and training on the smoke suite, through the workers:
    every planned result made and passed, in the order a serial run makes them."""
    out = tmp_path / "g.json"
    proc = subprocess.run(
        [sys.executable, "-m", "fp8check", "gate", "--no-progress", "--suite", "smoke",
         "--kernel", "pallas", "--layers", "2,3", "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == exitcodes.PASS, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    layers = [r["layer"] for r in doc["results"]]
    assert layers == sorted(layers) and set(layers) == {2, 3}
    assert all(r["passed"] for r in doc["results"])
    assert doc["summary"]["complete"] is True and doc["environment"]["isolated"] is True


def test_workers_of_a_parallel_gate_get_their_share_of_the_cores(monkeypatch):
    """With --jobs N each worker starts with N-th of the cores for its thread pools (BLAS,
    numba, OpenMP read these when they load), so workers do not oversubscribe the
    machine; one worker keeps the user's environment; the parent's is restored."""
    from fp8check.gate import isolation

    seen = []

    class FakeProcess:
        def __init__(self, **kw):
            pass

        def start(self):
            seen.append({v: isolation.os.environ.get(v) for v in isolation._THREAD_VARS})

    class Ctx:
        Pipe = staticmethod(lambda: (None, type("End", (), {"close": lambda self: None})()))
        Process = FakeProcess

    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    isolation._Worker(Ctx(), None, dict.fromkeys(isolation._THREAD_VARS, "3"))
    isolation._Worker(Ctx(), None, {})
    assert seen[0] == dict.fromkeys(isolation._THREAD_VARS, "3")
    assert seen[1]["OMP_NUM_THREADS"] == "7" and seen[1]["NUMBA_NUM_THREADS"] is None
    assert isolation.os.environ["OMP_NUM_THREADS"] == "7"
    assert "NUMBA_NUM_THREADS" not in isolation.os.environ


def test_workers_share_a_jax_compilation_cache_of_the_process(monkeypatch):
    """The workers get a compilation cache folder of the gate's process, every compile
    kept; a cache the user names is theirs, left as it is."""
    from fp8check.gate import isolation
    from fp8check.gate.isolation import shared_compile_cache

    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    env = shared_compile_cache()
    assert os.path.isdir(env["JAX_COMPILATION_CACHE_DIR"])
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    assert shared_compile_cache() == env  # one folder for the process
    # A worker's jax reads each variable as the setting the parent gives its own config.
    settings = isolation._shared_cache_settings()
    read = subprocess.run(
        [sys.executable, "-c",
         f"import jax; print([getattr(jax.config, n) for n, _ in {settings}])"],
        env={**os.environ, **env}, capture_output=True, text=True, check=True)
    assert ast.literal_eval(read.stdout) == [v for _, v in settings]
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/theirs")
    assert shared_compile_cache() == {}



def test_parallel_workers_start_the_long_batches_first():
    """With more than one worker, the batches of layers 0, 2 and 3 (a family's whole
    compile, MoE layer or training run) start before layer 1's one-case batches, each
    group in plan order; one worker keeps the plan's order."""
    from fp8check.gate.isolation import start_order
    from fp8check.gate.runner import Batch

    layers = [0, 0, 1, 1, 1, 2, 3, 3]
    batches = [Batch(1, f"b{i}", layer, lambda start: iter(()), str)
               for i, layer in enumerate(layers)]
    assert start_order(batches, 1) == list(range(len(layers)))
    assert start_order(batches, 2) == [0, 1, 5, 6, 7, 2, 3, 4]
