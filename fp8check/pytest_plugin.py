"""pytest plugin of fp8check (entry point `pytest11`, loaded wherever fp8check is installed).

* `--fp8check-report PATH`: every `fp8check.testing` assertion of the run, passing and
  failing, goes into the gate's HTML report at PATH and its JSON document (at
  `--fp8check-json`, default PATH with suffix .json); failing inputs are saved as .npz
  files in `fp8check-failures/` beside the report.
* `@pytest.mark.fp8check(suite="ci", contract="gmm-fp8", seed=0, profile="strict",
  kernel=None, framework="numpy", **claims)` with the `fp8check_case` fixture: the test
  runs once per case of the gate suite (ids are the gate's case ids), its `GateCase`
  judging by `MatmulClaims(**claims)` (any claim by field name: `out_dtypes=("bf16",)`,
  `m_align=128`, `accum="deepgemm"`, ...); cases the claimed `out_dtypes` / `m_align` do
  not support are skipped with the gate's reason.  `kernel="module:attr"` only fills in
  the gate repro command; `framework` also resolves `flushes_subnormals`.
  `--fp8check-suite` overrides every marker's suite (e.g. `full` at night).
* registers the hypothesis profiles `fp8check-ci` and `fp8check-dev` when hypothesis is
  installed (the plugin and the gate run without it).

Loading it costs nothing for a run that does not use it: this module imports only pytest
at load time (no numpy, jax, torch, triton or hypothesis); fp8check itself is imported by
the hooks that need it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

MARKER = "fp8check"
FIXTURE = "fp8check_case"
_MARKER_ARGS = {"suite": "ci", "contract": "gmm-fp8", "seed": 0, "profile": "strict",
                "kernel": None, "framework": "numpy"}
_COLLECTOR = "fp8check-collector"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fp8check", "fp8check accuracy assertions")
    group.addoption("--fp8check-report", metavar="PATH", default=None,
                    help="write every fp8check.testing assertion of this run into the gate's "
                         "HTML report at PATH (and its JSON beside it)")
    group.addoption("--fp8check-json", metavar="PATH", default=None,
                    help="write the gate's JSON results document here (default: the report "
                         "path with suffix .json)")
    group.addoption("--fp8check-suite", default=None, choices=("smoke", "ci", "full"),
                    help="run every @pytest.mark.fp8check test over this suite instead")


@pytest.hookimpl(tryfirst=True)  # before hypothesis's plugin reads --hypothesis-profile
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "fp8check(suite='ci', contract='gmm-fp8', seed=0, profile='strict', kernel=None, "
        "framework='numpy', **claims): run the test once per case of an fp8check gate "
        "suite through the fp8check_case fixture, judged by MatmulClaims(**claims) "
        "(e.g. out_dtypes=('bf16',), m_align=128, accum='deepgemm')",
    )
    if importlib.util.find_spec("hypothesis") is not None:  # a test extra, not required
        import fp8check.inputs.hypothesis_profiles  # noqa: F401  (registers the profiles)
    report, json_path = config.getoption("--fp8check-report"), config.getoption("--fp8check-json")
    if report or json_path:
        config.pluginmanager.register(_Collector(config, report, json_path), _COLLECTOR)


def _marker_options(marker: pytest.Mark, config: pytest.Config) -> dict[str, Any]:
    """The marker's keywords over `_MARKER_ARGS`, its claims under "claims" (a dict by
    field name); UsageError for positional arguments or a keyword that is neither."""
    from dataclasses import fields

    from fp8check.contracts import MatmulClaims

    claim_names = [f.name for f in fields(MatmulClaims)]
    unknown = set(marker.kwargs) - set(_MARKER_ARGS) - set(claim_names)
    if marker.args or unknown:
        raise pytest.UsageError(
            f"@pytest.mark.fp8check takes keywords {', '.join(_MARKER_ARGS)} and the claims "
            f"{', '.join(claim_names)}; got {list(marker.args) + sorted(unknown)}")
    opts = {**_MARKER_ARGS, **{k: v for k, v in marker.kwargs.items() if k in _MARKER_ARGS}}
    opts["claims"] = {k: v for k, v in marker.kwargs.items() if k in claim_names}
    opts["suite"] = config.getoption("--fp8check-suite") or opts["suite"]
    return opts


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(MARKER)
    if FIXTURE not in metafunc.fixturenames:
        if marker is not None:
            raise pytest.UsageError(f"{metafunc.definition.nodeid}: @pytest.mark.fp8check "
                                    f"needs the {FIXTURE} fixture as an argument")
        return
    if marker is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: the {FIXTURE} fixture needs "
                                f"@pytest.mark.fp8check(suite=...)")
    from fp8check.inputs.cases import build_suite

    opts = _marker_options(marker, metafunc.config)
    try:
        cases = build_suite(opts["suite"], opts["seed"])
    except ValueError as e:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: {e}") from e
    # the fixture serves the matmul contracts: a quantizer-only case is not for them
    cases = [c for c in cases if c.applies_to(opts["contract"])]
    metafunc.parametrize(FIXTURE, cases, ids=[c.id for c in cases], indirect=True)


@pytest.fixture
def fp8check_case(request: pytest.FixtureRequest):
    """A `fp8check.testing.GateCase`: one gate case, its kernel arguments (`args`), and
    `assert_matches(out)`, which applies the gate's criteria."""
    from fp8check.contracts import MatmulClaims
    from fp8check.testing import GateCase
    from fp8check.testing.recording import assertion_context

    opts = _marker_options(request.node.get_closest_marker(MARKER), request.config)
    try:
        gate_case = GateCase(request.param, contract=opts["contract"], profile=opts["profile"],
                             suite=opts["suite"], seed=opts["seed"], kernel=opts["kernel"],
                             framework=opts["framework"],
                             claims=MatmulClaims(**opts["claims"]))
    except ValueError as e:
        raise pytest.UsageError(f"{request.node.nodeid}: {e}") from e
    reason = gate_case.unsupported()
    if reason is not None:
        pytest.skip(f"fp8check: {reason}")
    with assertion_context(label=_label(request.node), gate_case=gate_case):
        yield gate_case


def _label(item: pytest.Item) -> str:
    """The report's 'kernel' column: the test function without its parameters."""
    return item.nodeid.split("[", 1)[0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Label every assertion made by the test body with the test (when fp8check is
    already imported: a test that never used it is left alone)."""
    import sys

    if "fp8check.testing" not in sys.modules and FIXTURE not in getattr(item, "fixturenames",
                                                                           ()):
        return (yield)
    from fp8check.testing.recording import assertion_context, current_label

    if current_label():  # the fixture already set it (with the gate case)
        return (yield)
    with assertion_context(label=_label(item)):
        return (yield)


class _Collector:
    """Gathers every CaseResult of the run; writes the gate's JSON and HTML at the end."""

    def __init__(self, config: pytest.Config, report: str | None, json_path: str | None):
        self.config = config
        self.report = Path(report) if report else None
        if json_path:
            self.json = Path(json_path)
        elif self.report is not None:
            self.json = self.report.with_suffix(".json")
        else:
            raise ValueError("the fp8check collector needs a report or a JSON path")
        self.results: list[Any] = []

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        from fp8check.testing import recording

        recording.add_listener(self.results.append)
        recording.set_failure_dir((self.report or self.json).parent / "fp8check-failures")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from fp8check.results import documents
        from fp8check.testing import recording

        recording.remove_listener(self.results.append)
        recording.set_failure_dir(None)
        env = documents.environment([], suite=self.config.getoption("--fp8check-suite") or "",
                                  seed=0, profile="per assertion", backend="pytest",
                                  load_errors={})
        env["source"] = "pytest " + " ".join(self.config.invocation_params.args)
        doc = documents.document(self.results, documents.tally(self.results, {}), env)
        documents.write_json(self.json, doc)
        if self.report is not None:
            from fp8check.reports.html import write_html

            write_html(self.report, doc)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        n_fail = sum(1 for r in self.results if r.passed is False)
        where = self.report or self.json
        terminalreporter.write_line(f"fp8check: {len(self.results)} assertions recorded, "
                                    f"{n_fail} failed; report: {where}")
