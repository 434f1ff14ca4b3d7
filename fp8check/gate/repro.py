"""The one builder of `fp8check gate` command lines that rerun a result: the gate's
failure lines and JSON `repro`, `fp8check.testing`'s "Reproduce in the gate" line."""

from __future__ import annotations

import shlex

from fp8check.gate.declarations import BareDeclarations


def gate_command(kernel: str, layer: int, *, suite: str, seed: int | None = None,
                 profile: str | None = None, backend: str | None = None,
                 case: str | None = None, target: str | None = None,
                 bare: BareDeclarations | None = None) -> str:
    """The shell command that reruns one result.

    Args:
        kernel: what `--kernel` takes: a built-in name, a family or a module:attr target.
        layer: the result's layer (0-3).
        suite, seed, profile, backend: the run's settings (None: not part of the result's
            identity, e.g. a compile has no seed).
        case: the case id (`--case`), layers 1-3.
        target: layer 0's compile target (`--targets`).
        bare: declarations of a user's kernel, repeated so it loads the same way (the
            backward kernels only for layers 2 and 3).
    """
    parts = ["fp8check", "gate", "--kernel", kernel]
    if bare is not None:
        parts += bare.for_layer(layer).arguments()
    parts += ["--layers", str(layer), "--suite", suite]
    for flag, value in (("--seed", seed), ("--profile", profile), ("--backend", backend),
                        ("--targets", target), ("--case", case)):
        if value is not None:
            parts += [flag, str(value)]
    return shlex.join(parts)
