"""Accuracy-gated evolutionary search of the Pallas FP8 GMM kernel's per-phase tilings.

`shapes` (the problem and each phase's dimensions), `space` (hard constraints, directed
mutations), `cost_model` (the analytic fitness used without a TPU), `measure` (measured
fitness on a TPU), `accuracy` (explore / strict checks through the gate's layer 1, on
proxy shapes), `search` (the loop), `output` (tables, JSON section, snippet).  The command
is `fp8check tune` (`fp8check.commands.tune`); docs/tuning.md explains the method.
"""

from fp8check.tune.accuracy import AccuracyChecker, PallasKernels, Verdict, proxy_for
from fp8check.tune.cost_model import MACHINE, Cost, phase_cost
from fp8check.tune.search import Candidate, SearchResult, TilingSearch
from fp8check.tune.shapes import NAMED_SHAPES, GmmShape, parse_shape

__all__ = [
    "MACHINE", "NAMED_SHAPES", "AccuracyChecker", "Candidate", "Cost", "GmmShape",
    "PallasKernels", "SearchResult", "TilingSearch", "Verdict", "parse_shape", "phase_cost",
    "proxy_for",
]
