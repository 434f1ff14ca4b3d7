"""The CI recipes of docs/ci.md (docs/examples/ci/) run as written.

The YAML parses and has the structure the docs describe; every `fp8check` command line of
both recipes runs end to end in a temporary project (a small [tool.fp8check]: suite smoke,
layer 1, one numpy kernel), in the recipe's order, with bash as the runner runs it and the
variables the CI would set; and each recipe's command is one the README's "In CI" section
documents.  What only the CI's servers can do is simulated here: GitHub's actions
(checkout, setup-python, upload/download-artifact, the JUnit report) by the simulator
below, `gh` and `curl` (the baseline's download) by stubs that serve the artifacts an
earlier simulated run of the default branch kept.  Installing (pip) is not run: the venv
running these tests is the install.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GITHUB = ROOT / "docs/examples/ci/github-actions.yml"
GITLAB = ROOT / "docs/examples/ci/gitlab-ci.yml"
BIN = Path(sys.executable).parent  # the venv's bin, where `fp8check` is installed

# The project the recipes run in: the smallest gate whose results have a criterion with a
# value (bound_ratio), so that a doctored baseline can regress: 5 results of a numpy
# kernel (docs/examples' KernelSpec) on the smoke suite, about 5 s a shard here.
PYPROJECT = """\
[tool.fp8check]
suite = "smoke"
layers = [1]
kernels = ["numpy_spec.py:SPEC"]
"""
KERNEL_FILES = ("numpy_spec.py", "numpy_gmm_fp8.py")

# the sub-commands a recipe may call; a line starting with anything else is not fp8check's
COMMAND = re.compile(r"\bfp8check\s+(gate|merge|compare|report|list|curves|tune)\b")


# ---------------------------------------------------------------------------------------
# Reading the recipes


def load(path: Path) -> dict[str, Any]:
    """A recipe's YAML as a mapping (the file must be one)."""
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict), f"{path.name}: not a YAML mapping"
    return doc


def logical_lines(script: str) -> list[str]:
    """`script`'s shell lines, backslash continuations joined, each stripped."""
    return [line.strip() for line in script.replace("\\\n", " ").splitlines()]


def fp8check_lines(script: str) -> list[str]:
    """The fp8check command lines of a shell script.  Every fp8check command must start its
    line (not hide after `&&`, `;`, `if` or in `$(...)`), so that none is missed."""
    lines = [line for line in logical_lines(script) if COMMAND.match(line)]
    hidden = [line for line in logical_lines(script)
              if COMMAND.search(line) and not COMMAND.match(line)]
    assert not hidden, f"fp8check commands not at the start of their line: {hidden}"
    return lines


def github_scripts(workflow: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(job id, step) of every `run:` step, in the workflow's order."""
    return [(job_id, step) for job_id, job in workflow["jobs"].items()
            for step in job["steps"] if "run" in step]


def gitlab_jobs(ci: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The jobs of a .gitlab-ci.yml in the order of their stages (then of the file)."""
    stages = ci.get("stages", ["build", "test", "deploy"])
    jobs = {name: job for name, job in ci.items()
            if isinstance(job, dict) and "script" in job and not name.startswith(".")}
    return dict(sorted(jobs.items(), key=lambda kv: stages.index(kv[1].get("stage", "test"))))


def script_text(lines: list[str] | str) -> str:
    """A GitLab script (a list of lines or one string) as one shell text."""
    return lines if isinstance(lines, str) else "\n".join(lines)


def recipe_lines(path: Path) -> list[str]:
    """Every fp8check command line of a recipe, in the recipe's order."""
    if path == GITHUB:
        scripts = [step["run"] for _, step in github_scripts(load(path))]
    else:
        ci = load(path)
        scripts = [script_text(job["script"]) for job in gitlab_jobs(ci).values()]
        scripts.append(script_text(ci.get("default", {}).get("before_script", [])))
    return [line for s in scripts for line in fp8check_lines(s)]


def signature(line: str) -> tuple[str, frozenset[str]]:
    """An fp8check command line's sub-command and options, without their values."""
    words = shlex.split(line, comments=True)
    assert words[0] == "fp8check", line
    return words[1], frozenset(w.split("=")[0] for w in words[2:] if w.startswith("-"))


def readme_ci_section() -> str:
    """The text of README.md's "In CI" section, up to the next heading outside code."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("### In CI")
    section, in_code = [], False
    for line in lines[start + 1:]:
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            break
        section.append(line)
    return "\n".join(section)


def is_install(script: str) -> bool:
    """A step that installs the project: not run here (this venv is the install)."""
    return "pip install" in script


# ---------------------------------------------------------------------------------------
# Fast checks: structure, and the README documents the recipes' commands


def test_github_recipe_structure():
    wf = load(GITHUB)
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` key as true
    assert set(on) >= {"push", "pull_request"} and on["push"]["branches"] == ["main"]
    gate, merge = wf["jobs"]["gate"], wf["jobs"]["merge"]
    shards = gate["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1)) and len(shards) >= 2
    assert gate["strategy"]["fail-fast"] is False
    assert merge["needs"] == "gate" or "gate" in merge["needs"]
    assert "cancelled()" in merge["if"]  # merges after a failing shard too
    uses = {s["uses"].split("@")[0] for job in wf["jobs"].values() for s in job["steps"]
            if "uses" in s}
    assert uses == set(ACTIONS)  # each one simulated below
    commands = [signature(line)[0] for line in recipe_lines(GITHUB)]
    assert commands == ["gate", "merge", "compare"]
    for job_id, step in github_scripts(wf):
        # bash runs `run:` as written: expressions go through env, never into the script
        assert "${{" not in step["run"], (job_id, step.get("name"))
        assert "|| true" not in step["run"] and "continue-on-error" not in step
    uploads = [s for job in wf["jobs"].values() for s in job["steps"]
               if s.get("uses", "").startswith("actions/upload-artifact")]
    # the shards' results and the report upload also when the gate failed
    assert all("always()" in s["if"] or "!cancelled()" in s["if"] for s in uploads
               if s["with"]["name"] != "fp8check-baseline")


def test_gitlab_recipe_structure():
    ci = load(GITLAB)
    jobs = gitlab_jobs(ci)
    gate, merge, compare = jobs["fp8check-gate"], jobs["fp8check-merge"], jobs["fp8check-compare"]
    assert isinstance(gate["parallel"], int) and gate["parallel"] >= 2
    assert "$CI_NODE_INDEX/$CI_NODE_TOTAL" in script_text(gate["script"])
    assert merge["needs"] == ["fp8check-gate"] and merge["when"] == "always"
    assert merge["artifacts"]["reports"]["junit"] == "out/gate.xml"
    assert compare["needs"] == ["fp8check-merge"]
    assert any("merge_request_event" in r["if"] for r in compare["rules"])
    for name, job in jobs.items():
        assert job["artifacts"]["when"] == "always", name
        assert job.get("allow_failure") in (None, {"exit_codes": [NO_BASELINE]}), name
        assert "|| true" not in script_text(job["script"]), name
    assert [signature(line)[0] for line in recipe_lines(GITLAB)] == ["gate", "merge", "compare"]


def test_the_readme_documents_the_recipes_commands():
    section = readme_ci_section()
    documented = {signature(line) for line in fp8check_lines(section)}
    assert {cmd for cmd, _ in documented} >= {"gate", "merge", "compare"}
    assert "docs/ci.md" in section
    for recipe in (GITHUB, GITLAB):
        for line in recipe_lines(recipe):
            assert signature(line) in documented, (
                f"{recipe.name}: `{line}` is not among README.md's In CI commands "
                f"{sorted((c, sorted(o)) for c, o in documented)}")


# ---------------------------------------------------------------------------------------
# Running the recipes: the project, the stubs and shell steps


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The repository a CI job checks out: [tool.fp8check] and the kernel it names."""
    assert (BIN / "fp8check").is_file(), f"no fp8check in {BIN}: run with the venv's python"
    d = tmp_path_factory.mktemp("project")
    (d / "pyproject.toml").write_text(PYPROJECT)
    for name in KERNEL_FILES:
        shutil.copy(ROOT / "docs/examples" / name, d / name)
    return d


GH_STUB = """\
#!{python}
# `gh run list` / `gh run download` as the GitHub recipe calls them: the target branch's
# latest successful push run (4242) when FAKE_BASELINE_DIR holds its artifact, else none.
import os, shutil, sys

args, store = sys.argv[1:], os.environ.get("FAKE_BASELINE_DIR", "")
opt = lambda name: args[args.index(name) + 1] if name in args else None
if args[:2] == ["run", "list"]:
    want = dict(branch="main", event="push", status="success", limit="1")
    assert all(opt("--" + k) == v for k, v in want.items()), args
    assert opt("--workflow") == os.environ["FAKE_WORKFLOW"], args
    print("4242" if store else "")
elif args[:3] == ["run", "download", "4242"] and store:
    name = opt("--name")
    src = os.path.join(store, name)
    if not os.path.isdir(src):
        sys.exit(f"no artifact matches any of the names or patterns provided: {{name}}")
    shutil.copytree(src, opt("--dir") or ".", dirs_exist_ok=True)
else:
    sys.exit(f"gh stub: unexpected call {{args}}")
"""

CURL_STUB = """\
#!{python}
# curl of GitLab's job-artifacts API as the GitLab recipe calls it: serves
# FAKE_ARTIFACTS_DIR/<ref>/<job>/<path> (the latest successful pipeline of <ref>), else 404.
import os, re, shutil, sys, urllib.parse

LONG = {{"-H": "--header", "-o": "--output", "-w": "--write-out"}}
args, i, opts, urls = sys.argv[1:], 0, {{}}, []
while i < len(args):
    a = LONG.get(args[i], args[i])
    if a in ("--header", "--output", "--write-out"):
        opts[a], i = args[i + 1], i + 2
    elif a in ("--silent", "-s", "--show-error", "-S", "--location", "-L"):
        i += 1
    elif a.startswith("-"):
        sys.exit(f"curl stub: unexpected option {{a}}")
    else:
        urls.append(a); i += 1
header, out, write_out = opts.get("--header"), opts["--output"], opts.get("--write-out")
api = re.escape(os.environ["CI_API_V4_URL"] + "/projects/" + os.environ["CI_PROJECT_ID"])
m = re.fullmatch(api + r"/jobs/artifacts/([^/]+)/raw/(.+)\\?job=(.+)", urls[0])
assert m and len(urls) == 1, urls
assert header == "JOB-TOKEN: " + os.environ["CI_JOB_TOKEN"], header
ref, path, job = urllib.parse.unquote(m[1]), m[2], m[3]
src = os.path.join(os.environ.get("FAKE_ARTIFACTS_DIR", "/nonexistent"), ref, job, path)
code = "200" if os.path.isfile(src) else "404"
if code == "200":
    shutil.copy(src, out)
else:
    open(out, "w").write('{{"message":"404 Not Found"}}')
sys.stdout.write((write_out or "").replace("%{{http_code}}", code))
"""


@pytest.fixture(scope="module")
def stubs(tmp_path_factory) -> Path:
    """A directory of the `gh` and `curl` stubs, for PATH."""
    d = tmp_path_factory.mktemp("stubs")
    for name, text in (("gh", GH_STUB), ("curl", CURL_STUB)):
        (d / name).write_text(text.format(python=sys.executable))
        (d / name).chmod(0o755)
    return d


@dataclass
class Shell:
    """One shell step as run: its exit status and output."""

    rc: int
    out: str


def run_bash(script: str, cwd: Path, env: dict[str, str], args: list[str]) -> Shell:
    """`script` run by bash with `args` (the runner's flags) in `cwd`, stdout and stderr
    together."""
    path = cwd.parent / f".step-{os.getpid()}-{abs(hash(script))}.sh"
    path.write_text(script)
    p = subprocess.run(["bash", *args, str(path)], cwd=cwd, env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    return Shell(p.returncode, p.stdout)


def base_env(stubs: Path, extra: dict[str, str]) -> dict[str, str]:
    """The environment of a CI job here: the venv's bin first on PATH (the install), then
    the stubs of the CI's servers."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GITHUB_", "CI_", "FAKE_", "PYTEST_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{stubs}{os.pathsep}{env.get('PATH', '')}"
    env["CI"] = "true"
    return {**env, **extra}


def fresh_checkout(project: Path, where: Path) -> Path:
    """A new job's working copy of the project."""
    shutil.copytree(project, where)
    return where


def files_under(root: Path, paths: list[str]) -> dict[str, bytes]:
    """The files at `paths` (files or directories) under `root`, by path below `root`."""
    out = {}
    for p in paths:
        full = root / p
        found = [full] if full.is_file() else sorted(f for f in full.rglob("*") if f.is_file())
        out.update({str(f.relative_to(root)): f.read_bytes() for f in found})
    return out


def write_files(root: Path, files: dict[str, bytes]) -> None:
    """`files` (path below `root` -> contents) written under `root`."""
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def doctor_bound_ratio(doc_bytes: bytes) -> tuple[bytes, str]:
    """A baseline document in which the first result with a bound_ratio had half its value
    (a better baseline: the unchanged run then regressed); and that result's case."""
    doc = json.loads(doc_bytes)
    result = next(r for r in doc["results"] if "bound_ratio" in (r["criteria"] or {}))
    result["criteria"]["bound_ratio"]["value"] /= 2
    return json.dumps(doc).encode(), result["case"]


def check_junit(path: Path) -> int:
    """The number of test cases of a JUnit XML file (which must parse)."""
    return len(ET.parse(path).getroot().findall(".//testcase"))


# ---------------------------------------------------------------------------------------
# GitHub Actions, simulated

ACTIONS: dict[str, str] = {
    "actions/checkout": "the job's directory is a fresh copy of the project",
    "actions/setup-python": "this venv's python",
    "actions/upload-artifact": "GitHubRun.upload",
    "actions/download-artifact": "GitHubRun.download",
    "mikepenz/action-junit-report": "GitHubRun.junit_report",
}

_STATUS = ("always", "success", "failure", "cancelled")


def gh_eval(expr: str, ctx: dict[str, Any], funcs: dict[str, Callable[..., Any]]) -> Any:
    """A GitHub expression (the subset the recipe uses: contexts, string literals, ==, !=,
    !, &&, ||, parentheses and the functions in `funcs`), evaluated as Python."""
    expr = expr.strip()
    if expr.startswith("${{") and expr.endswith("}}"):
        expr = expr[3:-2]
    parts = re.split(r"('(?:[^']|'')*')", expr)
    py = []
    for i, part in enumerate(parts):
        if i % 2:
            py.append(repr(part[1:-1].replace("''", "'")))
            continue
        part = part.replace("&&", " and ").replace("||", " or ")
        part = re.sub(r"!(?!=)", " not ", part)
        part = re.sub(r"\b([A-Za-z_]\w*)\(", r"_f_\1(", part)
        part = re.sub(r"\b(?<!_f_)[A-Za-z_][\w-]*(?:\.[\w-]+)+",
                      lambda m: f"_ctx({m[0]!r})", part)
        part = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", part))
        py.append(part)

    def lookup(name: str) -> Any:
        if name in ctx:
            return ctx[name]
        if name.startswith("steps.") and ".outputs." in name:
            return ""  # an output never set
        raise KeyError(f"the recipe uses {name}, unknown to this simulation")

    names = {"_ctx": lookup, **{f"_f_{k}": v for k, v in funcs.items()}}
    return eval("".join(py), {"__builtins__": {}}, names)


def gh_text(value: Any) -> str:
    """A value as GitHub substitutes it into a string."""
    if isinstance(value, bool):
        return str(value).lower()
    return "" if value is None else str(value)


def gh_sub(value: Any, ctx: dict[str, Any], funcs: dict[str, Callable[..., Any]]) -> str:
    """A workflow value (env, with) with each `${{ expression }}` in it substituted."""
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: gh_text(gh_eval(m[1], ctx, funcs)), gh_text(value))


@dataclass
class StepRun:
    name: str
    outcome: str  # success, failure, skipped
    rc: int | None = None
    out: str = ""
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class JobRun:
    workdir: Path
    steps: dict[str, StepRun]
    summary: str  # what the steps appended to $GITHUB_STEP_SUMMARY

    @property
    def failed(self) -> bool:
        return any(s.outcome == "failure" for s in self.steps.values())

    def rc(self, step: str) -> int | None:
        return self.steps[step].rc


class GitHubRun:
    """One run of the GitHub recipe on `event`: jobs run on request, each in a fresh copy
    of the project, sharing the run's artifacts (seed `artifacts` to reuse another run's
    shard results instead of running the shards again)."""

    def __init__(self, tmp: Path, project: Path, stubs: Path, *, event: str,
                 artifacts: dict[str, dict[str, bytes]] | None = None,
                 baseline_store: Path | None = None):
        self.wf = load(GITHUB)
        self.tmp, self.project, self.stubs, self.event = tmp, project, stubs, event
        self.artifacts = copy.deepcopy(artifacts or {})
        self.baseline_store = baseline_store  # gh stub: the baseline run's artifacts
        tmp.mkdir(parents=True, exist_ok=True)
        self.github = {
            "github.event_name": event,
            "github.ref": "refs/heads/main" if event == "push" else "refs/pull/7/merge",
            "github.base_ref": "main" if event == "pull_request" else "",
            "github.workflow": self.wf["name"], "github.token": "fake-token",
            "github.server_url": "https://github.example", "github.repository": "o/r",
            "github.run_id": "1001", "github.sha": "0" * 40,
        }
        assert event in self.wf.get("on", self.wf.get(True))

    def run_job(self, job_id: str, matrix: dict[str, Any] | None = None) -> JobRun:
        job = self.wf["jobs"][job_id]
        label = job_id + "".join(f"-{v}" for v in (matrix or {}).values())
        workdir = fresh_checkout(self.project, self.tmp / f"{self.event}-{label}")
        ctx = dict(self.github)
        if matrix:
            ctx.update({f"matrix.{k}": v for k, v in matrix.items()})
            ctx["strategy.job-total"] = len(job["strategy"]["matrix"]["shard"])
        steps: dict[str, StepRun] = {}
        summary = []

        def failed() -> bool:
            return any(s.outcome == "failure" for s in steps.values())

        funcs = {"always": lambda: True, "cancelled": lambda: False,
                 "success": lambda: not failed(), "failure": failed,
                 "hashFiles": lambda *pats: "h" if any(any(workdir.glob(p)) for p in pats) else ""}
        if "if" in job:
            assert gh_eval(job["if"], ctx, funcs)
        env_job = {k: gh_sub(v, ctx, funcs)
                   for k, v in {**self.wf.get("env", {}), **job.get("env", {})}.items()}
        for n, step in enumerate(job["steps"]):
            name = step.get("name") or step.get("uses") or f"step {n}"
            cond = step.get("if", "success()")
            if not any(f"{f}(" in str(cond) for f in _STATUS):
                cond = f"success() && ({cond})"
            if not gh_eval(str(cond), ctx, funcs):
                steps[name] = StepRun(name, "skipped")
            elif "uses" in step:
                with_ = {k: gh_sub(v, ctx, funcs) for k, v in step.get("with", {}).items()}
                action = step["uses"].split("@")[0]
                ok = {"actions/checkout": lambda w, d: True,
                      "actions/setup-python": lambda w, d: True,
                      "actions/upload-artifact": self.upload,
                      "actions/download-artifact": self.download,
                      "mikepenz/action-junit-report": self.junit_report}[action](with_, workdir)
                steps[name] = StepRun(name, "success" if ok else "failure")
            elif is_install(step["run"]):
                assert not fp8check_lines(step["run"]), name
                steps[name] = StepRun(name, "success")
            else:
                steps[name] = self._run_step(name, step, workdir, ctx, funcs, env_job, summary)
            if "id" in step:
                ctx[f"steps.{step['id']}.outcome"] = steps[name].outcome
                ctx.update({f"steps.{step['id']}.outputs.{k}": v
                            for k, v in steps[name].outputs.items()})
        return JobRun(workdir, steps, "".join(summary))

    def _run_step(self, name: str, step: dict[str, Any], workdir: Path, ctx: dict[str, Any],
                  funcs: dict[str, Callable[..., Any]], env_job: dict[str, str],
                  summary: list[str]) -> StepRun:
        files = {k: self.tmp / f".{k}-{abs(hash((str(workdir), name)))}"
                 for k in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY")}
        for f in files.values():
            f.write_text("")
        env_step = {k: gh_sub(v, ctx, funcs) for k, v in step.get("env", {}).items()}
        env = base_env(self.stubs, {
            **env_job, **env_step, **{k: str(v) for k, v in files.items()},
            "GITHUB_REPOSITORY": ctx["github.repository"], "GITHUB_EVENT_NAME": self.event,
            "GITHUB_WORKSPACE": str(workdir), "FAKE_WORKFLOW": self.wf["name"],
            "FAKE_BASELINE_DIR": str(self.baseline_store or "")})
        shell = run_bash(step["run"], workdir, env, ["--noprofile", "--norc", "-eo", "pipefail"])
        summary.append(files["GITHUB_STEP_SUMMARY"].read_text())
        outputs = dict(line.split("=", 1) for line in
                       files["GITHUB_OUTPUT"].read_text().splitlines() if "=" in line)
        return StepRun(name, "success" if shell.rc == 0 else "failure", shell.rc,
                       shell.out, outputs)

    def upload(self, w: dict[str, str], workdir: Path) -> bool:
        paths = [p for p in w["path"].splitlines() if p.strip()]
        assert len(paths) == 1, "one path per artifact (its files lie below it)"
        root = workdir / paths[0]
        base = root if root.is_dir() else root.parent
        files = {str(Path(k).relative_to(base.relative_to(workdir))): v
                 for k, v in files_under(workdir, paths).items()}
        if not files and w.get("if-no-files-found") == "error":
            return False
        self.artifacts[w["name"]] = files
        return True

    def download(self, w: dict[str, str], workdir: Path) -> bool:
        names = ([w["name"]] if "name" in w else fnmatch.filter(self.artifacts, w["pattern"]))
        if not names or any(n not in self.artifacts for n in names):
            return False
        dest = workdir / w.get("path", ".")
        for n in names:
            flat = "name" in w or w.get("merge-multiple") == "true"
            write_files(dest if flat else dest / n, self.artifacts[n])
        return True

    def junit_report(self, w: dict[str, str], workdir: Path) -> bool:
        n = check_junit(workdir / w["report_paths"])
        return n > 0 or w.get("require_tests") != "true"


@pytest.mark.slow
def test_github_recipe_runs_as_written(tmp_path, project, stubs):
    # A push to main: every shard of the matrix, then the merge job, which keeps the
    # merged JSON as the baseline.
    push = GitHubRun(tmp_path, project, stubs, event="push")
    shards = push.wf["jobs"]["gate"]["strategy"]["matrix"]["shard"]
    for i in shards:
        job = push.run_job("gate", {"shard": i})
        assert job.rc("Gate, one shard") == 0, job.steps["Gate, one shard"].out
        assert (job.workdir / f"shards/shard-{i}.json").is_file()
    assert {f"fp8check-shard-{i}" for i in shards} <= set(push.artifacts)
    merge = push.run_job("merge")
    assert not merge.failed, {n: s.out for n, s in merge.steps.items() if s.rc}
    assert merge.rc("Merge the shards") == 0
    out = merge.workdir / "out"
    assert json.loads((out / "gate.json").read_text())["summary"]["passed"] is True
    assert check_junit(out / "gate.xml") == 5 and (out / "gate.html").stat().st_size > 0
    assert "PASS" in (out / "summary.md").read_text()
    assert (out / "summary.md").read_text() in merge.summary  # the job summary
    assert merge.steps["Compare with the baseline"].outcome == "skipped"
    assert set(push.artifacts["fp8check-report"]) >= {"gate.json", "gate.xml", "gate.html",
                                                      "summary.md"}
    assert set(push.artifacts["fp8check-baseline"]) == {"gate.json"}
    shard_artifacts = {k: v for k, v in push.artifacts.items() if "shard" in k}

    # A pull request before main has a baseline: said on the run and in the summary, the
    # comparison skipped, the job passes with the gate.  (Its shards are the push run's:
    # the same commit, so the same results.)
    pr = GitHubRun(tmp_path / "no-baseline", project, stubs, event="pull_request",
                   artifacts=shard_artifacts, baseline_store=None)
    job = pr.run_job("merge")
    assert not job.failed and job.steps["Download the baseline of the target branch"].outputs \
        == {"found": "false"}
    assert "::warning" in job.steps["Download the baseline of the target branch"].out
    assert "no fp8check baseline of main yet" in job.summary
    assert job.steps["Compare with the baseline"].outcome == "skipped"
    assert "fp8check-baseline" not in pr.artifacts  # pull requests never make one

    # A pull request against a baseline whose bound_ratio of one result was better: the
    # compare step fails the job, the summary names the criterion and the case.
    store = tmp_path / "baseline-run"
    doctored, case = doctor_bound_ratio(push.artifacts["fp8check-baseline"]["gate.json"])
    write_files(store / "fp8check-baseline", {"gate.json": doctored})
    pr = GitHubRun(tmp_path / "regressed", project, stubs, event="pull_request",
                   artifacts=shard_artifacts, baseline_store=store)
    job = pr.run_job("merge")
    assert job.rc("Merge the shards") == 0
    assert job.rc("Compare with the baseline") == 1, job.steps["Compare with the baseline"].out
    assert job.failed
    summary = (job.workdir / "out/summary.md").read_text()
    assert "bound_ratio" in summary and case in summary and summary in job.summary
    comparison = json.loads((job.workdir / "out/comparison.json").read_text())
    assert [(r["what"], r["case"]) for r in comparison["regressions"]] == [("bound_ratio", case)]
    assert "bound_ratio" in (job.workdir / "out/gate.html").read_text()
    assert check_junit(job.workdir / "out/gate.xml") == 5
    assert set(pr.artifacts["fp8check-report"]) >= {"gate.html", "summary.md",
                                                    "comparison.json"}
    assert job.steps["Keep as the baseline"].outcome == "skipped"


# ---------------------------------------------------------------------------------------
# GitLab CI, simulated

NO_BASELINE = 77  # the compare job's exit status for "no baseline yet" (allow_failure)


def gl_expand(value: str, env: dict[str, str]) -> str:
    """`$NAME` and `${NAME}` in a GitLab variable's value, from `env`."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m[1], ""), value)


def gl_rule(expr: str, env: dict[str, str]) -> bool:
    """A rule's `if:` of the one form the recipe uses: `$VAR == "text"` or `$A == $B`."""
    m = re.fullmatch(r'\s*(\$\w+|"[^"]*")\s*(==|!=)\s*(\$\w+|"[^"]*")\s*', expr)
    assert m, f"rule not understood by this simulation: {expr}"

    def value(x: str) -> str | None:
        return env.get(x[1:]) if x.startswith("$") else x[1:-1]

    return (value(m[1]) == value(m[3])) == (m[2] == "==")


@dataclass
class GitLabJob:
    workdir: Path
    rc: int
    out: str
    status: str  # success, failed, warning (an allowed failure)


class GitLabPipeline:
    """One pipeline of the GitLab recipe: jobs run on request, each in a fresh copy of
    the project with the artifacts of the jobs it needs."""

    def __init__(self, tmp: Path, project: Path, stubs: Path, *, source: str,
                 artifacts: dict[str, list[dict[str, bytes]]] | None = None,
                 api_store: Path | None = None):
        self.ci = load(GITLAB)
        self.jobs = gitlab_jobs(self.ci)
        self.tmp, self.project, self.stubs = tmp, project, stubs
        tmp.mkdir(parents=True, exist_ok=True)
        self.artifacts = copy.deepcopy(artifacts or {})
        self.env = {"CI_PIPELINE_SOURCE": source, "CI_DEFAULT_BRANCH": "main",
                    "CI_API_V4_URL": "https://gitlab.example/api/v4", "CI_PROJECT_ID": "17",
                    "CI_JOB_TOKEN": "fake-job-token",
                    "FAKE_ARTIFACTS_DIR": str(api_store or "")}
        if source == "merge_request_event":
            self.env["CI_MERGE_REQUEST_TARGET_BRANCH_NAME"] = "main"
        else:
            self.env["CI_COMMIT_BRANCH"] = "main"
        assert any(gl_rule(r["if"], self.env) for r in self.ci["workflow"]["rules"])

    def runs(self, name: str) -> bool:
        """Whether the job is in this pipeline (its rules)."""
        rules = self.jobs[name].get("rules")
        return rules is None or any(gl_rule(r["if"], self.env) for r in rules)

    def run_job(self, name: str, node: int | None = None) -> GitLabJob:
        job = self.jobs[name]
        assert self.runs(name), name
        workdir = fresh_checkout(self.project, self.tmp / f"{name}-{node or 0}")
        for need in job.get("needs", []):
            assert need in self.artifacts, f"{name} needs {need}, which has not run"
            for files in self.artifacts[need]:
                write_files(workdir, files)
        env = {**self.env, "CI_PROJECT_DIR": str(workdir),
               "CI_JOB_URL": f"https://gitlab.example/o/r/-/jobs/{500 + (node or 0)}"}
        if node:
            env.update(CI_NODE_INDEX=str(node), CI_NODE_TOTAL=str(job["parallel"]))
        for k, v in {**self.ci.get("variables", {}), **job.get("variables", {})}.items():
            env[k] = gl_expand(str(v), env)
        before = job.get("before_script", self.ci.get("default", {}).get("before_script", []))
        assert all(is_install(line) and not fp8check_lines(line) for line in before)
        script = "set -eo pipefail\n" + script_text(job["script"])
        shell = run_bash(script, workdir, base_env(self.stubs, env), ["--noprofile", "--norc"])
        allowed = (job.get("allow_failure") or {}).get("exit_codes", [])
        status = ("success" if shell.rc == 0 else
                  "warning" if shell.rc in allowed else "failed")
        art = job.get("artifacts", {})
        if art.get("when") == "always" or status != "failed":
            self.artifacts.setdefault(name, []).append(files_under(workdir, art["paths"]))
            if "junit" in art.get("reports", {}):
                assert check_junit(workdir / art["reports"]["junit"]) > 0
        return GitLabJob(workdir, shell.rc, shell.out, status)


@pytest.mark.slow
def test_gitlab_recipe_runs_as_written(tmp_path, project, stubs):
    # The default branch's pipeline: the parallel shards, the merge (its out/gate.json is
    # the baseline), no compare.
    main = GitLabPipeline(tmp_path / "main", project, stubs, source="push")
    n = main.jobs["fp8check-gate"]["parallel"]
    for i in range(1, n + 1):
        job = main.run_job("fp8check-gate", i)
        assert job.status == "success", job.out
        assert (job.workdir / f"shards/shard-{i}.json").is_file()
    merge = main.run_job("fp8check-merge")
    assert merge.status == "success", merge.out
    out = merge.workdir / "out"
    for name in ("gate.json", "gate.xml", "gate.html", "summary.md"):
        assert (out / name).stat().st_size > 0, name
    assert "PASS" in (out / "summary.md").read_text()
    assert "/jobs/500/artifacts/file/out/gate.html" in (out / "summary.md").read_text()
    assert not main.runs("fp8check-compare")
    merged = main.artifacts["fp8check-merge"][0]

    def merge_request(label: str, baseline: bytes | None) -> GitLabJob:
        """The compare job of a merge-request pipeline whose merge job made `merged` (the
        same commit's results), with `baseline` as the API's out/gate.json of main."""
        store = tmp_path / f"api-{label}"
        if baseline is not None:
            write_files(store / "main/fp8check-merge", {"out/gate.json": baseline})
        mr = GitLabPipeline(tmp_path / label, project, stubs, source="merge_request_event",
                            artifacts={"fp8check-merge": [merged]}, api_store=store)
        return mr.run_job("fp8check-compare")

    # no baseline yet: an allowed failure (a warning), never a silent pass
    job = merge_request("no-baseline", None)
    assert (job.rc, job.status) == (NO_BASELINE, "warning"), job.out
    assert "no fp8check baseline of main yet" in job.out

    # the default branch's own result as the baseline: nothing regressed
    job = merge_request("same", merged["out/gate.json"])
    assert job.status == "success", job.out
    assert "regression" in (job.workdir / "out/summary.md").read_text().lower()
    assert json.loads((job.workdir / "out/comparison.json").read_text())["regressions"] == []

    # a baseline whose bound_ratio of one result was better: the job fails, the summary
    # (the job's artifact) names the criterion and the case
    doctored, case = doctor_bound_ratio(merged["out/gate.json"])
    job = merge_request("regressed", doctored)
    assert (job.rc, job.status) == (1, "failed"), job.out
    summary = (job.workdir / "out/summary.md").read_text()
    assert "bound_ratio" in summary and case in summary
    assert (job.workdir / "out/gate.html").stat().st_size > 0


def test_stub_and_expression_helpers_understand_the_recipes():
    """The simulation's pieces on the recipes' own conditions, without running fp8check:
    a condition the evaluator misread would silently run or skip a step."""
    ctx = {"github.event_name": "pull_request", "github.ref": "refs/pull/7/merge",
           "steps.baseline.outputs.found": "true"}
    funcs = {"always": lambda: True, "cancelled": lambda: False, "success": lambda: False,
             "failure": lambda: True, "hashFiles": lambda *p: ""}
    assert gh_eval("${{ !cancelled() && steps.baseline.outputs.found == 'true' }}", ctx, funcs)
    assert not gh_eval("${{ !cancelled() && hashFiles('out/gate.json') != '' }}", ctx, funcs)
    assert not gh_eval("success() && github.event_name == 'push'", ctx, funcs)
    assert gh_eval("github.event_name == 'pull_request' || github.ref == 'x'", ctx, funcs)
    with pytest.raises(KeyError):
        gh_eval("github.actor == 'me'", ctx, funcs)
    env = {"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_BRANCH": "main", "CI_DEFAULT_BRANCH": "main"}
    assert gl_rule("$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH", env)
    assert not gl_rule('$CI_PIPELINE_SOURCE == "merge_request_event"', env)
    assert fp8check_lines(textwrap.dedent("""\
        mkdir -p out
        fp8check merge a.json \\
          -o out/gate.json
        """)) == ["fp8check merge a.json    -o out/gate.json"]
    with pytest.raises(AssertionError, match="not at the start"):
        fp8check_lines("test -f x && fp8check compare a b")
