"""The gate's plan: the command line merged over `[tool.fp8check]`, checked and frozen
before anything runs.  Every check of the user's input happens here (`UsageError`);
what the plan then runs (`fp8check.gate.runner`) can fail only as results or as an
internal error."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fp8check import registry
from fp8check.config import MAX_TIMEOUT, GateConfig, valid_timeout
from fp8check.contracts import LAYER_CONTRACTS, contract_of
from fp8check.errors import UsageError, usage_errors
from fp8check.gate.declarations import BareDeclarations
from fp8check.inputs import cases as cases_mod
from fp8check.profiles import get_profile
from fp8check.userfiles import check_output

# Where the gate writes what no option places: the working directory's fp8check-out/.
OUT_DIR = Path("fp8check-out")
LAYERS = (0, 1, 2, 3)  # layers the gate runs; layer 4 is `fp8check curves`


@dataclass(frozen=True)
class GateOptions:
    """What the command line gave (None: not given, the config or default decides)."""

    kernels: tuple[str, ...] = ()
    bare: BareDeclarations = BareDeclarations()
    suite: str | None = None
    profile: str | None = None
    layers: str | None = None  # comma list, as typed
    seed: int | None = None
    backend: str | None = None
    targets: str | None = None
    cases: tuple[str, ...] = ()
    json: str | None = None
    jsonl: str | None = None
    junit: str | None = None
    report: str | None = None
    summary_md: str | None = None
    report_url: str | None = None
    baseline: str | None = None  # a whole earlier run's document to compare this run with
    shard: str | None = None
    jobs: int = 1
    progress: bool = True
    isolate: bool | None = None  # False: --no-isolate
    timeout: float | None = None  # seconds per result


@dataclass(frozen=True)
class GatePlan:
    """A checked, frozen gate run.

    `config`: the merged settings (its `layers` are the layers that run); `dropped`: layers
    the config asked for that need a kernel family none of the kernels has; `families`:
    the kernel families layers 0, 2 and 3 run; `layer_kernel`: the user's `--kernel` target
    layers 2 and 3 build a MoE layer around (with `options.bare`'s `--tgmm`, `--dgrad`),
    if any; `cases`: `--case` ids (empty: the suite, this shard's part); `shard` (i, n),
    1-based; `jsonl`: the streaming log.
    """

    config: GateConfig
    options: GateOptions
    dropped: tuple[int, ...]
    families: tuple[str, ...]
    targets: tuple[str, ...]
    shard: tuple[int, int]
    jsonl: Path
    layer_kernel: str | None = None
    baseline: dict[str, Any] | None = None

    @property
    def layers(self) -> tuple[int, ...]:
        return self.config.layers

    @property
    def cases(self) -> tuple[str, ...]:
        return self.options.cases

    def in_shard(self, items: list) -> list:
        """This shard's part of `items`: item k goes to shard k mod n + 1."""
        i, n = self.shard
        return [x for k, x in enumerate(items) if k % n == i - 1]


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


def _merged(opts: GateOptions, cfg: GateConfig) -> GateConfig:
    layers = cfg.layers
    if opts.layers is not None:
        try:
            layers = tuple(int(v) for v in opts.layers.split(",") if v.strip())
        except ValueError as e:
            raise UsageError(f"--layers must be comma-separated integers: {opts.layers!r}") from e
    return GateConfig(
        suite=opts.suite or cfg.suite, profile=opts.profile or cfg.profile, layers=layers,
        seed=cfg.seed if opts.seed is None else opts.seed, backend=opts.backend or cfg.backend,
        json=opts.json or cfg.json, junit=opts.junit or cfg.junit,
        report=opts.report or cfg.report, jsonl=opts.jsonl or cfg.jsonl,
        kernels=opts.kernels or cfg.kernels,
        isolate=cfg.isolate if opts.isolate is None else opts.isolate,
        timeout=cfg.timeout if opts.timeout is None else opts.timeout,
    )


def _baseline(opts: GateOptions, cfg: GateConfig, shard: tuple[int, int]
              ) -> dict[str, Any] | None:
    """The `--baseline` document, read and checked against this run before it starts
    (UsageError: not a whole run, or one of another suite, seed, profile or package
    versions; comparing shards is for `fp8check compare` after `merge`)."""
    if opts.baseline is None:
        return None
    if shard != (1, 1):
        raise UsageError("--baseline compares whole runs: run the shards, `fp8check merge` "
                         "them, then `fp8check compare BASE merged.json`")
    from fp8check.results import documents
    from fp8check.results.compare import check_same_run, check_whole

    with usage_errors():
        doc = documents.read_document(opts.baseline)
        check_whole(doc, opts.baseline)
        check_same_run(doc["environment"], {
            "suite": cfg.suite, "seed": cfg.seed, "profile": cfg.profile,
            "result_ids": documents.RESULT_IDS, "packages": documents.package_versions()},
            opts.baseline, "this run")
    return doc


def check_kernel_names(kernels: tuple[str, ...]) -> None:
    """UsageError for a `--kernel` name without a colon (so not FILE.py:NAME or
    module:NAME) that is neither a built-in kernel nor a family."""
    for name in kernels:
        if ":" not in name and name not in registry.BUILTIN_KERNELS and (
                name not in registry.FAMILIES):
            raise UsageError(registry.unknown_kernel(name))


def check_bare(bare: BareDeclarations) -> None:
    """UsageError (one line, naming the flag) for a declaration of a bare function that
    is none: with `--contract`, the claims it declares are made (`BareDeclarations.
    claims`: every rule of the claims); without one the kernel must be a KernelSpec,
    whose own claims the declarations are compared with when it loads."""
    with usage_errors():
        if bare.contract is None:
            bare.declared()
        else:
            bare.claims(contract_of(bare.contract))


def families_of(kernels: tuple[str, ...]) -> tuple[str, ...]:
    """Kernel families (their MoE layers) that layers 0, 2 and 3 run: all without kernels,
    else those named by a family name or one of the family's built-in kernels."""
    if not kernels:
        return registry.FAMILIES
    fams: list[str] = []
    for name in kernels:
        fam = name.split("-")[0]
        if fam in registry.FAMILIES and fam not in fams and (
                name == fam or name in registry.BUILTIN_KERNELS):
            fams.append(fam)
    return tuple(fams)


def _user_kernels(kernels: tuple[str, ...]) -> list[str]:
    """The `--kernel` values that are the user's targets (neither built-in nor a family)."""
    return [k for k in kernels if k not in registry.BUILTIN_KERNELS and k not in registry.FAMILIES]


def _layer_kernel(opts: GateOptions, cfg: GateConfig) -> tuple[str | None, str | None]:
    """(the user's kernel layers 2 and 3 build around, None), or (None, why none is) when
    they run; (None, None) when they do not.  UsageError for --tgmm / --dgrad that have no
    MoE layer to go into."""
    from fp8check.layers.moe.matmuls import LAYER_FRAMEWORKS

    bare = opts.bare
    user = _user_kernels(cfg.kernels)
    backward = "/".join(f for f, v in (("--tgmm", bare.tgmm), ("--dgrad", bare.dgrad)) if v)
    layered = any(n >= 2 for n in cfg.layers)
    if backward and not layered:
        raise UsageError(f"{backward} is the backward of the MoE layer of layers 2 and 3; "
                         f"layers {list(cfg.layers)} run neither")
    builtin = [k for k in cfg.kernels if k not in user]
    if backward and (builtin or not user):
        raise UsageError(f"{backward} goes with one --kernel FILE.py:NAME of yours (the "
                         f"forward); the built-in {', '.join(builtin) or 'families'} run "
                         f"their own backward")
    if not layered or not user:
        return None, None
    if len(user) > 1:
        return None, (f"layers 2 and 3 build one MoE layer around one forward kernel; "
                      f"--kernel names {len(user)} of yours")
    if bare.contract is not None and contract_of(bare.contract).layer_variant is None:
        return None, (f"layers 2 and 3 build a MoE layer around a forward kernel of "
                      f"contract {' or '.join(LAYER_CONTRACTS)}; --contract is "
                      f"{bare.contract}")
    if bare.framework is not None and bare.framework not in LAYER_FRAMEWORKS:
        return None, (f"layers 2 and 3 build the MoE layer in "
                      f"{' or '.join(LAYER_FRAMEWORKS)}; --framework is {bare.framework}")
    return user[0], None


def jsonl_path(cfg: GateConfig) -> Path:
    """The streaming log: --jsonl, else beside --json, else fp8check-out/gate.jsonl."""
    if cfg.jsonl:
        return Path(cfg.jsonl)
    if cfg.json:
        return Path(cfg.json).with_suffix(".jsonl")
    return OUT_DIR / "gate.jsonl"


def make_plan(opts: GateOptions, cfg: GateConfig) -> tuple[GatePlan, str | None]:
    """The plan of `opts` over `cfg`, and a notice for stderr (None: nothing to say).
    UsageError for bad usage or input."""
    from fp8check.targets.chips import parse_targets

    cfg = _merged(opts, cfg)
    check_kernel_names(cfg.kernels)
    check_bare(opts.bare)
    if not cfg.layers or any(n not in LAYERS for n in cfg.layers):
        raise UsageError(f"--layers {cfg.layers}: this build has layers {list(LAYERS)}")
    if cfg.backend not in registry.BACKENDS:
        raise UsageError(f"unknown backend {cfg.backend!r}")
    if cfg.suite not in cases_mod.SUITES:
        raise UsageError(f"unknown suite {cfg.suite!r}; expected one of "
                         f"{', '.join(cases_mod.SUITES)}")
    if opts.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {opts.jobs}")
    if opts.jobs > 1 and not cfg.isolate:
        raise UsageError("--jobs runs worker processes; with isolation off everything runs "
                         "in this process: drop --jobs or --no-isolate")
    if not valid_timeout(cfg.timeout):
        raise UsageError(f"--timeout must be a positive number of seconds, at most "
                         f"{MAX_TIMEOUT:.0f}, got {cfg.timeout}")
    shard = parse_shard(opts.shard)
    with usage_errors():
        for option in ("json", "jsonl", "junit", "report"):  # fp8check-out/ is made if needed
            path = getattr(cfg, option)
            if path and Path(path).parent != OUT_DIR:
                check_output(path, f"--{option}")
        if opts.summary_md:
            check_output(opts.summary_md, "--summary-md")
        get_profile(cfg.profile)
        targets = parse_targets(opts.targets) if 0 in cfg.layers else ()
        if 1 in cfg.layers:
            for cid in opts.cases:
                cases_mod.find_case(cfg.suite, cfg.seed, cid)
    families = families_of(cfg.kernels) if any(n != 1 for n in cfg.layers) else ()
    layer_kernel, why_not = _layer_kernel(opts, cfg)
    dropped: tuple[int, ...] = ()
    notices = []
    if why_not is not None or (any(n >= 2 for n in cfg.layers) and not families
                               and layer_kernel is None):
        # Layers 2 and 3 run a family's MoE layer and training, or the ones built around
        # one kernel of the user's.  Asked for on the command line, a kernel they cannot
        # run is bad usage; from the config's default it narrows the run (to layers 0-1,
        # or to the families), said on stderr and in the results.
        why = why_not or (f"they need a kernel family ({', '.join(registry.FAMILIES)}) or "
                          f"one forward kernel of yours, and --kernel names neither")
        if opts.layers is not None or not {0, 1} & set(cfg.layers):
            raise UsageError(f"layers {list(n for n in cfg.layers if n >= 2)}: {why}")
        notices.append(f"fp8check: layers 2 and 3 skip your kernels: {why}")
        if not families:
            dropped = tuple(n for n in cfg.layers if n >= 2)
            cfg = replace(cfg, layers=tuple(n for n in cfg.layers if n < 2))
    missing = [f for f, v in (("--dgrad", opts.bare.dgrad), ("--tgmm", opts.bare.tgmm)) if not v]
    if layer_kernel is not None and missing:
        notices.append(f"fp8check: layers 2 and 3 of {layer_kernel}: no {' or '.join(missing)}"
                       f", so that backward is fp8check's bf16 reference, not a kernel of yours")
    plan = GatePlan(config=cfg, options=opts, dropped=dropped, families=families,
                    targets=targets, shard=shard, jsonl=jsonl_path(cfg),
                    layer_kernel=layer_kernel, baseline=_baseline(opts, cfg, shard))
    return plan, "\n".join(notices) or None
