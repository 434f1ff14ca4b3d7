"""`fp8check gate`: the accuracy gate.  Also `fp8check list` (kernels and case ids).

Exit status: 0 every case passed, 1 any accuracy failure (or a built-in kernel that failed
to load), 2 bad usage or bad input (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import time
from pathlib import Path
from typing import NoReturn

from fp8check import cases as cases_mod
from fp8check import registry, results
from fp8check.commands import register_all
from fp8check.config import GateConfig, load_config
from fp8check.contracts import CONTRACTS, FRAMEWORKS, OUT_DTYPES, KernelSpec, spec_from_target
from fp8check.layers import LAYERS, native
from fp8check.layers.op import (
    LAYER,
    CaseResult,
    Problem,
    build_problem,
    skipped_result,
    validate_case,
)
from fp8check.profiles import PROFILES, get_profile

DEFAULT_JSONL = "fp8check-gate.jsonl"


class UsageError(Exception):
    """Bad usage or bad input: reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fp8check", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("gate", help="run the accuracy gate")
    g.add_argument("--kernel", action="append", default=None,
                   help="built-in name, module:attr or file.py:attr (repeatable; "
                        "default: every built-in kernel)")
    g.add_argument("--contract", choices=CONTRACTS, help="contract of a plain function")
    g.add_argument("--framework", choices=FRAMEWORKS, help="framework of a plain function")
    g.add_argument("--accum", help="accumulation recipe a plain gmm-fp8 function follows")
    g.add_argument("--out-dtypes", help=f"comma list of {OUT_DTYPES} a plain function supports")
    g.add_argument("--m-align", type=int, help="group-size alignment a plain function needs")
    g.add_argument("--suite", choices=cases_mod.SUITES)
    g.add_argument("--profile", help=f"one of {', '.join(PROFILES)} (never off)")
    g.add_argument("--layers", help="comma list of layers to run (e.g. 1,2)")
    g.add_argument("--seed", type=int)
    g.add_argument("--backend", choices=registry.BACKENDS)
    g.add_argument("--targets", help="layer 0: comma list of v5e, v6e, v5p, sm_90a "
                                     "(default: all)")
    g.add_argument("--case", action="append", default=None, help="run only this case id")
    g.add_argument("--json", help="write the JSON results document here")
    g.add_argument("--jsonl", help=f"stream results here (default: beside --json, or "
                                   f"./{DEFAULT_JSONL})")
    g.add_argument("--junit", help="write JUnit XML here")
    g.add_argument("--report", help="write the HTML report here")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--shard", help="run only shard i of n (i/n, 1-based): case k of layers "
                                   "1-2 (family k of layer 3) goes to shard k mod n + 1; join "
                                   "with `fp8check merge`")
    g.add_argument("--jobs", type=int, default=1,
                   help="worker processes for layer 1 (results identical to --jobs 1)")
    ls = sub.add_parser("list", help="list built-in kernels and the case ids of a suite")
    ls.add_argument("--suite", choices=cases_mod.SUITES, default="ci")
    ls.add_argument("--seed", type=int, default=0)
    register_all(sub)
    return p


def _merged(args: argparse.Namespace, cfg: GateConfig) -> GateConfig:
    layers = cfg.layers
    if args.layers is not None:
        try:
            layers = tuple(int(v) for v in args.layers.split(",") if v.strip())
        except ValueError as e:
            raise UsageError(f"--layers must be comma-separated integers: {args.layers!r}") from e
    return GateConfig(
        suite=args.suite or cfg.suite, profile=args.profile or cfg.profile, layers=layers,
        seed=cfg.seed if args.seed is None else args.seed, backend=args.backend or cfg.backend,
        json=args.json or cfg.json, junit=args.junit or cfg.junit,
        report=args.report or cfg.report, jsonl=args.jsonl or cfg.jsonl,
        kernels=tuple(args.kernel) if args.kernel else cfg.kernels,
    )


def _plain_declarations(args: argparse.Namespace) -> dict:
    declared: dict = {}
    if args.accum:
        declared["accum"] = args.accum
    if args.out_dtypes:
        declared["out_dtypes"] = tuple(d.strip() for d in args.out_dtypes.split(","))
    if args.m_align is not None:
        declared["m_align"] = args.m_align
    return declared


def _load_kernels(
    cfg: GateConfig, args: argparse.Namespace
) -> tuple[list[tuple[KernelSpec, str]], dict[str, str]]:
    """[(spec, what --kernel named it by)], {built-in name: load error}."""
    if not cfg.kernels:
        specs, errors = registry.load_builtins(backend=cfg.backend)
        return [(s, s.name) for s in specs], errors
    loaded = []
    names = [b for n in cfg.kernels
             for b in (registry.family_kernels(n) if n in registry.FAMILIES else [n])]
    for name in names:
        if name in registry.BUILTIN_KERNELS:
            try:
                loaded.append((registry.load_builtin(name, cfg.backend), name))
            except registry.KernelLoadError as e:
                raise UsageError(f"kernel {e}") from e
        else:
            spec = spec_from_target(name, args.contract, args.framework,
                                    **_plain_declarations(args))
            loaded.append((spec, name))
    names = [s.name for s, _ in loaded]
    if len(set(names)) != len(names):
        raise UsageError(f"two kernels share a name: {names}")
    return loaded, {}


def _repro(spec: KernelSpec, origin: str, cfg: GateConfig, args: argparse.Namespace,
           tail: list[str]) -> str:
    """The command that reruns one result of `spec`; `tail` names the layer and its case
    (layer 1: --layers 1 --case ID; layer 0: --layers 0 --targets T)."""
    parts = ["fp8check", "gate", "--kernel", origin]
    if origin not in registry.BUILTIN_KERNELS:
        parts += ["--contract", spec.contract, "--framework", spec.framework]
        if args.accum:
            parts += ["--accum", args.accum]
        if args.out_dtypes:
            parts += ["--out-dtypes", args.out_dtypes]
        if args.m_align is not None:
            parts += ["--m-align", str(args.m_align)]
    parts += ["--suite", cfg.suite, "--seed", str(cfg.seed), "--profile", cfg.profile,
              "--backend", cfg.backend, *tail]
    return shlex.join(parts)


def _jsonl_path(cfg: GateConfig) -> Path:
    if cfg.jsonl:
        return Path(cfg.jsonl)
    if cfg.json:
        return Path(cfg.json).with_suffix(".jsonl")
    return Path(DEFAULT_JSONL)


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, file=sys.stderr, unit="case", disable=not enabled,
                dynamic_ncols=True, mininterval=0.5)


def _run_one(
    spec: KernelSpec, case: cases_mod.Case, profile, problems: dict[str, Problem | Exception]
) -> CaseResult:
    if spec.contract == "quantizer":  # quantizes the case's operand: no output dtype
        return validate_case(spec, case, profile)
    reason = cases_mod.supported(case, spec.out_dtypes, spec.m_align)
    if reason is not None:
        return skipped_result(spec, case, reason)
    built = None
    if spec.contract not in problems:
        t = time.perf_counter()
        try:
            problems[spec.contract] = build_problem(spec.contract, case)
        except Exception as e:  # reported per result; the other contracts still run
            problems[spec.contract] = e
        built = time.perf_counter() - t
    prob = problems[spec.contract]
    if isinstance(prob, Exception):
        return CaseResult(kernel=spec.name, layer=LAYER, case=case.id, passed=False,
                          error=f"reference failed: {type(prob).__name__}: {prob}")
    res = validate_case(spec, case, profile, prob)
    if built is not None:  # the kernel whose case built the shared references carries them
        res.timing["reference"] = built
        res.seconds += built
    return res


def _families(cfg: GateConfig) -> list[str]:
    """Kernel families (their MoE layers) that layers 2 and 3 run: all without --kernel,
    else those named by a family name or one of the family's built-in kernels."""
    if not cfg.kernels:
        return list(registry.FAMILIES)
    fams = []
    for name in cfg.kernels:
        fam = name.split("-")[0]
        if fam in registry.FAMILIES and fam not in fams and (
                name == fam or name in registry.BUILTIN_KERNELS):
            fams.append(fam)
    return fams


def _family_repro(layer: int, family: str, cfg: GateConfig, case_id: str) -> str:
    return shlex.join(["fp8check", "gate", "--kernel", family, "--layers", str(layer),
                       "--suite", cfg.suite, "--seed", str(cfg.seed), "--profile",
                       cfg.profile, "--backend", cfg.backend, "--case", case_id])


def _native_repro(family: str, cfg: GateConfig, res: CaseResult) -> str:
    """Layer 0 of a family on the result's target (a compile has no seed or case)."""
    return shlex.join(["fp8check", "gate", "--kernel", family, "--layers", "0", "--suite",
                       cfg.suite, "--targets", str(res.metrics.get("target"))])


class _Sink:
    """Where every result goes as it completes: the JSONL stream, the progress bar, the
    list for the final documents, and a FAIL line with its repro on stderr."""

    def __init__(self, stream: results.JsonlStream, bar) -> None:
        self.stream, self.bar, self.done = stream, bar, []

    def __call__(self, res: CaseResult, repro: str) -> None:
        if res.passed is False:
            res.repro = repro
            why = res.error or ", ".join(res.failed_criteria)
            self.bar.write(f"FAIL {res.kernel} {res.case}: {why}\n  repro: {repro}",
                           file=sys.stderr)
        elif res.passed is None and res.layer == native.LAYER:  # one per kernel: say why
            self.bar.write(f"SKIP {res.kernel} {res.case}: {res.skipped}", file=sys.stderr)
        self.stream.write(res.to_dict())
        self.done.append(res)
        self.bar.update(1)


def _case_results(loaded, case, profile, cfg, args) -> list[tuple[CaseResult, str]]:
    """Every loaded kernel on one case, each with its repro command.  One set of
    references per (case, contract) serves every kernel of that contract."""
    problems: dict[str, Problem | Exception] = {}
    return [(_run_one(spec, case, profile, problems),
             _repro(spec, origin, cfg, args, ["--layers", "1", "--case", case.id]))
            for spec, origin in loaded]


_WORKER: dict = {}


def _init_worker(cfg: GateConfig, args: argparse.Namespace) -> None:
    loaded, _ = _load_kernels(cfg, args)
    _WORKER.update(loaded=loaded, profile=get_profile(cfg.profile), cfg=cfg, args=args)


def _worker_case(case) -> list[tuple[CaseResult, str]]:
    w = _WORKER
    return _case_results(w["loaded"], case, w["profile"], w["cfg"], w["args"])


def _run_layer1(loaded, suite_cases, profile, cfg, args, sink: _Sink) -> None:
    if args.jobs > 1:
        # Spawned workers (jax and torch do not survive fork) each load the kernels once;
        # map() hands results back in case order, so the output equals a serial run's.
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_init_worker, initargs=(cfg, args)) as pool:
            for pairs in pool.map(_worker_case, suite_cases):
                for res, repro in pairs:
                    sink(res, repro)
        return
    for case in suite_cases:
        sink.bar.set_description(case.id[:60])
        for res, repro in _case_results(loaded, case, profile, cfg, args):
            sink(res, repro)


def parse_shard(text: str | None) -> tuple[int, int]:
    """"i/n" -> (i, n) with 1 <= i <= n; None -> (1, 1)."""
    if text is None:
        return 1, 1
    try:
        i, n = (int(v) for v in text.split("/"))
    except ValueError as e:
        raise UsageError(f"--shard must look like i/n, got {text!r}") from e
    if not 1 <= i <= n:
        raise UsageError(f"--shard {text}: need 1 <= i <= n")
    return i, n


def _in_shard(items: list, shard: tuple[int, int]) -> list:
    i, n = shard
    return [x for k, x in enumerate(items) if k % n == i - 1]


def _family_cases(layer: int, fam: str, cfg: GateConfig,
                  args: argparse.Namespace) -> list[str] | None:
    """Case ids of a layer-2/3 run of family `fam`: --case, else this shard's (None = all).
    Layer 2 shards by scenario; layer 3 by family, since its across-seed result needs every
    seed's run of the family in one process."""
    if args.case:
        return args.case
    shard = parse_shard(args.shard)
    if shard == (1, 1):
        return None
    if layer == 3:
        return None if fam in _in_shard(list(registry.FAMILIES), shard) else []
    from fp8check.layers.moe import SUITES

    return _in_shard([s.case_id(cfg.seed) for s in SUITES[cfg.suite]], shard)


def _run_family_layer(layer: int, families, cfg, args, sink: _Sink) -> None:
    """Layer 2 (MoE layer) or 3 (training) for each kernel family."""
    if layer == 2:
        from fp8check.layers.moe import iter_layer2 as run
    else:
        from fp8check.layers.training import iter_layer3 as run
    for fam in families:
        sink.bar.set_description(f"layer {layer} {fam}")
        for res in run(fam, cfg.suite, cfg.seed, cfg.profile,
                       cases=_family_cases(layer, fam, cfg, args)):
            sink(res, _family_repro(layer, fam, cfg, res.case))


def _family_size(layer: int, fam: str, cfg, args) -> int:
    cases = _family_cases(layer, fam, cfg, args)
    if layer == 2:
        from fp8check.layers.moe import layer2_size

        return layer2_size(cfg.suite, cases)
    from fp8check.layers.training import layer3_size

    return layer3_size(cfg.suite, cases, seed=cfg.seed, family=fam)


def run_gate(args: argparse.Namespace) -> int:
    cfg = _merged(args, load_config(Path.cwd()))
    profile = get_profile(cfg.profile)
    unknown_layers = [n for n in cfg.layers if n not in LAYERS]
    if unknown_layers or not cfg.layers:
        raise UsageError(f"--layers {cfg.layers}: this build has layers {sorted(LAYERS)}")
    if cfg.backend not in registry.BACKENDS:
        raise UsageError(f"unknown backend {cfg.backend!r}")
    shard = parse_shard(args.shard)
    if args.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
    families = _families(cfg) if any(n != 1 for n in cfg.layers) else []
    targets = native.parse_targets(args.targets) if 0 in cfg.layers else ()
    dropped: list[int] = []
    if any(n >= 2 for n in cfg.layers) and not families:
        # Layers 2 and 3 run a family's MoE layer and training; a user's kernel has none.
        # Asked for on the command line that is bad usage; from the config's default it
        # narrows the run to layers 0-1, said on stderr and in the results.
        if args.layers is not None or not {0, 1} & set(cfg.layers):
            raise UsageError(f"layers {cfg.layers} need a kernel family "
                             f"({', '.join(registry.FAMILIES)}); --kernel names none")
        dropped = [n for n in cfg.layers if n >= 2]
        cfg = dataclasses.replace(cfg, layers=tuple(n for n in cfg.layers if n < 2))
        print(f"fp8check: layers {dropped} skipped: they need a kernel family "
              f"({', '.join(registry.FAMILIES)}) and --kernel names none", file=sys.stderr)
    loaded, load_errors, suite_cases = [], {}, []
    if 0 in cfg.layers or 1 in cfg.layers:
        loaded, load_errors = _load_kernels(cfg, args)
    if 1 in cfg.layers:
        if args.case:
            suite_cases = [cases_mod.find_case(cfg.suite, cfg.seed, cid) for cid in args.case]
        else:
            suite_cases = _in_shard(cases_mod.build_suite(cfg.suite, cfg.seed), shard)
    specs = [s for s, _ in loaded] if 1 in cfg.layers else []
    # Layer 0 compiles each family's own builds (`kernels.<family>.native`) and every other
    # kernel (a user's, a third-party adapter) from its contract; it shards by family and
    # the other kernels go with shard 1.
    family_kernels = {n for f in registry.FAMILIES for n in registry.family_kernels(f)}
    native_families = _in_shard([f for f in registry.FAMILIES if f in families], shard)
    native_users = ([(s, o) for s, o in loaded if o not in family_kernels]
                    if 0 in cfg.layers and shard[0] == 1 else [])
    env = results.environment([s for s, _ in loaded], suite=cfg.suite, seed=cfg.seed,
                              profile=cfg.profile, backend=cfg.backend,
                              load_errors=load_errors)
    env["layers"] = list(cfg.layers)
    env["layers_skipped"] = dropped
    env["families"] = families
    env["shard"] = f"{shard[0]}/{shard[1]}"
    # Exit 2 before anything is reported when a needed compiler is missing.
    native_plan = (native.plan_layer0(native_families, cfg.suite, targets,
                                      [s for s, _ in native_users])
                   if 0 in cfg.layers else [])
    if 0 in cfg.layers:
        env["native_targets"] = list(targets)
    for name, err in load_errors.items():
        print(f"fp8check: kernel {name} not loaded: {err}", file=sys.stderr)

    total = sum(batch.size for batch in native_plan)
    total += len(specs) * len(suite_cases) + sum(
        _family_size(layer, fam, cfg, args) for layer in cfg.layers if layer >= 2
        for fam in families)
    with results.JsonlStream(_jsonl_path(cfg)) as stream, \
            _progress(total, not args.no_progress) as bar:
        stream.write({"event": "start", "environment": env})
        sink = _Sink(stream, bar)
        if native_plan:
            bar.set_description("layer 0 native compile")
        by_name = {s.name: (s, o) for s, o in native_users}
        for batch in native_plan:
            for res in batch.run():
                if res.kernel in by_name:  # a user's kernel: rerun it by its --kernel target
                    target = str(res.metrics.get("target", ",".join(targets)))
                    repro = _repro(*by_name[res.kernel], cfg, args,
                                   ["--layers", "0", "--targets", target])
                else:
                    repro = _native_repro(res.kernel.split("-")[0], cfg, res)
                sink(res, repro)
        if 1 in cfg.layers:
            _run_layer1(loaded, suite_cases, profile, cfg, args, sink)
        for layer in sorted(n for n in cfg.layers if n >= 2):
            _run_family_layer(layer, families, cfg, args, sink)
    done = sink.done
    summary = results.summarize(done, load_errors)
    doc = results.document(done, summary, env)
    if cfg.json:
        results.write_json(cfg.json, doc)
    if cfg.junit:
        results.write_junit(cfg.junit, done)
    if cfg.report:
        from fp8check.reports.html import write_html

        write_html(cfg.report, doc, workers=None)  # the command has a main guard
    print(f"fp8check gate: suite={cfg.suite} profile={cfg.profile} seed={cfg.seed} "
          f"layers={','.join(map(str, cfg.layers))}: "
          f"{summary['n_passed']} passed, {summary['n_failed']} failed, "
          f"{summary['n_skipped']} skipped, {len(load_errors)} kernels not loaded")
    return 0 if summary["passed"] else 1


def run_list(args: argparse.Namespace) -> int:
    print("built-in kernels:")
    for name, target in registry.BUILTIN_KERNELS.items():
        print(f"  {name:20s} {target}")
    print(f"cases of suite {args.suite} (seed {args.seed}):")
    for case in cases_mod.build_suite(args.suite, args.seed):
        print(f"  {case.id}  groups={list(case.group_sizes)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        if args.command == "gate":
            return run_gate(args)
        if args.command == "list":
            return run_list(args)
        return args.func(args)
    except (UsageError, ValueError) as e:
        print(f"fp8check: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
              file=sys.stderr)
        return 2
