"""Layer 3 (training): the tiny MoE model of `fp8check.layers.training.model`, trained with
AdamW in three precisions (the FP8 expert matmuls, the bf16 ones, and the f32 dense model)
from the same initialisation on the same batches, seed by seed.  The expert matmuls are an
`ExpertMatmuls` (`fp8check.layers.moe.matmuls`): a kernel family's, or a user's kernels
(`fp8check.layers.moe.user`), whose model is the one of their framework (`jax_model`,
`torch_model`); only the tested variants give results (a user's gmm-fp8 kernel: the
`-train-fp8` results, against fp8check's own bf16 run, `baseline_note`; a gmm kernel: the
`-train-bf16` results, and no seed test).

A case trains on a task (`task.py`): "markov", a random chain whose entropy rate is the
achievable loss, or "text", the bytes of the Python standard library's sources, whose
conditional bigram entropy is the achievable loss of this one-token-context model (the
corpus follows the Python version; results record its sha256).

Per seed and case, two results (case `<task>-...-s<seed>`):

* `<family>-train-fp8`: the FP8 loss curve against the bf16 one (`fp8check.measures.curves`:
  per-step gap raw and EMA, AUC gap, final-loss gap, NaN / spikes), and the gradient SNR
  of the FP8 model against the f32 dense model at the FP8 run's own weights and batch,
  every `snr_every` steps: its median and its fitted decline over the run (trend);
* `<family>-train-bf16`: the bf16 curve against the f32 one, the same way: the baseline
  must itself be sound, or "FP8 matches bf16" means nothing.

Both also check that the run learned: the loss closes at least `MIN_LEARNED` of the
distance from its first value to the task's entropy rate (the best achievable loss).
Every result carries `metrics["curves"] = {"fp8": [...], "bf16": [...], "f32": [...]}`.

Across seeds, one more result (case `<task>-...-seeds<a>-<b>`, kernel
`<family>-train-fp8`): the paired one-sided t-test of the per-seed AUC gaps
(`curves.seed_test`); it fails only on the verdict "fp8-worse" (significant and beyond
the AUC limit), and is skipped with one seed.

What each suite runs (`SUITES`, by framework: JAX models are the Pallas family's and a
user's JAX kernels', torch models the Triton family's and a user's torch kernels'), 64
tokens a step: the ci suite trains JAX for 4 seeds x 60 steps (the whole step is one
jitted XLA program, cheap even with Pallas in interpret mode) and torch for 2 seeds x 50
steps (Triton's interpret mode runs every kernel call in Python, so fewer), so each
framework's seed test runs in ci too (2 seeds: a weak test, it can only flag a gap
consistent across both); `full` runs 1000 steps on the Markov task (8 seeds for JAX, 3
for torch) and on text (vocab 256; 3 seeds for JAX, 2 for torch); `smoke` one JAX seed of
50 steps and one torch seed of 8 steps (a wiring check that cannot show learning, so its
learning criterion is reported, not gated).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from fp8check.layers.moe.matmuls import VARIANTS, ExpertMatmuls, resolve
from fp8check.layers.training.dense import dense_f32_grad_fn
from fp8check.layers.training.model import GradFn, ModelConfig
from fp8check.layers.training.optimizer import Schedule
from fp8check.layers.training.task import (
    BYTE_VOCAB,
    TextTask,
    TrainingTask,
    make_task,
    stdlib_corpus,
    text_task,
)
from fp8check.layers.training.trainer import TrainLog, train
from fp8check.measures.curves import Curve, compare, get_limits, seed_test, trend
from fp8check.profiles import MIN_LEARNED
from fp8check.results.model import CaseResult, Criterion

LAYER = 3
# (model config, "fp8" | "bf16") -> the GradFn of the model under test.
ModelImpl = Callable[[ModelConfig, str], GradFn]
BASELINE = {"fp8": "bf16", "bf16": "f32"}  # the run each variant's curve is compared with


TASKS = ("markov", "text")
TEXT_MODEL = ModelConfig(vocab=BYTE_VOCAB)


@dataclass(frozen=True)
class TrainingCase:
    """One layer-3 schedule of a framework in a suite: `seeds` runs of `schedule` on `task`
    ("markov": the random chain; "text": the standard library's bytes, vocab 256)."""

    schedule: Schedule
    seeds: int
    model: ModelConfig = ModelConfig()
    gate_learning: bool = True
    task: str = "markov"

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown layer-3 task {self.task!r}; expected one of {TASKS}")
        if self.task == "text" and self.model.vocab != BYTE_VOCAB:
            raise ValueError(f"the text task predicts bytes: vocab must be {BYTE_VOCAB}, "
                             f"got {self.model.vocab}")

    def make_task(self) -> TrainingTask:
        """The task this case trains on (the text corpus is read here, once a run)."""
        if self.task == "text":
            return text_task(*stdlib_corpus())
        return make_task(self.model.vocab)

    def case_id(self, seed: int) -> str:
        c, s = self.model, self.schedule
        return (f"{self.task}-v{c.vocab}-d{c.d_model}-e{c.experts}-k{c.top_k}-t{s.tokens}"
                f"-n{s.steps}-s{seed}")

    def seeds_case_id(self, seed: int) -> str:
        return self.case_id(seed).rsplit("-s", 1)[0] + f"-seeds{seed}-{seed + self.seeds - 1}"


_LONG = Schedule(steps=1000, warmup=50, snr_every=25)
SUITES: dict[str, dict[str, tuple[TrainingCase, ...]]] = {
    "smoke": {"jax": (TrainingCase(Schedule(steps=50), seeds=1),),
              "torch": (TrainingCase(Schedule(steps=8, warmup=2, snr_every=4), seeds=1,
                                     gate_learning=False),)},
    "ci": {"jax": (TrainingCase(Schedule(steps=60), seeds=4),),
           "torch": (TrainingCase(Schedule(steps=50), seeds=2),)},
    "full": {"jax": (TrainingCase(_LONG, seeds=8),
                     TrainingCase(_LONG, seeds=3, model=TEXT_MODEL, task="text")),
             "torch": (TrainingCase(_LONG, seeds=3),
                       TrainingCase(_LONG, seeds=2, model=TEXT_MODEL, task="text"))},
}


def _check(framework: str, suite: str) -> tuple[TrainingCase, ...]:
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; expected one of {', '.join(SUITES)}")
    if framework not in SUITES[suite]:
        raise ValueError(f"layer 3 trains in {' or '.join(SUITES[suite])}, not {framework!r}")
    return SUITES[suite][framework]


def _case_ids(tc: TrainingCase, seed: int) -> set[str]:
    return {tc.case_id(seed + i) for i in range(tc.seeds)} | (
        {tc.seeds_case_id(seed)} if tc.seeds > 1 else set())


def _plan(suite: str, tc: TrainingCase, seed: int, cases: Sequence[str] | None
          ) -> tuple[list[int], bool]:
    """(seeds to train, whether the across-seed result is wanted) for `cases`.  A case of
    another framework's schedule selects nothing here; one of none's is a ValueError."""
    all_seeds = [seed + i for i in range(tc.seeds)]
    if cases is None:
        return all_seeds, tc.seeds > 1
    wanted = set(cases)
    known = set().union(*(_case_ids(t, seed) for tcs in SUITES[suite].values() for t in tcs))
    if wanted - known:
        raise ValueError(f"unknown layer-3 case(s) {sorted(wanted - known)}; suite {suite} "
                         f"has {', '.join(sorted(known))}")
    stats = tc.seeds > 1 and tc.seeds_case_id(seed) in wanted
    picked = [s for s in all_seeds if tc.case_id(s) in wanted]
    return (all_seeds if stats else picked), stats


def layer3_size(suite: str, cases: Sequence[str] | None = None, *, seed: int = 0,
                framework: str | None = None, tested: Sequence[str] = VARIANTS) -> int:
    """Number of results `iter_layer3` yields for expert matmuls of `framework` with the
    `tested` variants (for progress bars); without a framework, the largest count over
    the frameworks (their schedules differ)."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; expected one of {', '.join(SUITES)}")
    frameworks = list(SUITES[suite]) if framework is None else [framework]
    sizes = []
    for fw in frameworks:
        size = 0
        for tc in _check(fw, suite):
            seeds, stats = _plan(suite, tc, seed, cases)
            size += len(tested) * len(seeds) + int(stats and "fp8" in tested)
        sizes.append(size)
    return max(sizes)


def _learned(curve: list[float], achievable: float) -> float:
    """Fraction of the way from the first loss to the achievable one that the final loss
    (mean of the last tenth of the steps) has come; NaN for a diverged curve."""
    from fp8check.measures.curves import final_window

    y = np.asarray(curve, np.float64)
    if not np.all(np.isfinite(y)) or y[0] <= achievable:
        return math.nan
    final = float(np.mean(y[-final_window(len(y)):]))
    return (y[0] - final) / (y[0] - achievable)


def _seed_result(matmuls: ExpertMatmuls, variant: str, tc: TrainingCase, seed: int,
                 profile: str, logs: dict[str, TrainLog], task: TrainingTask,
                 seconds: float) -> CaseResult:
    base = BASELINE[variant]
    cid = tc.case_id(seed)
    res = CaseResult(kernel=f"{matmuls.name}-train-{variant}", layer=LAYER, case=cid,
                     passed=None)
    limits = get_limits(profile)
    cmp = compare(Curve.of(logs[variant].loss, variant), Curve.of(logs[base].loss, base),
                  limits)
    m = res.metrics
    s = tc.schedule
    m.update(baseline=base, steps=s.steps, tokens_per_step=s.tokens, lr=s.lr, seed=seed,
             model=vars(tc.model), task=tc.task, achievable_loss=task.entropy_rate,
             curves={v: log.loss for v, log in logs.items()},
             diverged_at={v: log.diverged_at for v, log in logs.items()})
    m.update(matmuls.notes)
    if base in matmuls.variants and base not in matmuls.tested:
        m["baseline_note"] = (f"the {base} run is fp8check's own {base} grouped matmul "
                              f"(bf16 operands, float32 accumulation), not a kernel under test")
    if isinstance(task, TextTask):  # the corpus follows the Python version: say which
        m.update(corpus=task.source, corpus_sha256=task.digest, corpus_bytes=task.data.size)
    m.update(cmp.metrics)
    crit = list(cmp.criteria)
    log = logs[variant]
    snr = np.asarray(log.snr_db, np.float64)
    med = float(np.median(snr)) if snr.size else math.nan
    tr = trend(log.snr_steps, log.snr_db)
    m.update(grad_snr=log.snr_db, grad_snr_steps=log.snr_steps, grad_snr_median_db=med)
    m["grad_snr_trend"] = {"slope_db_per_100_steps": tr.slope_per_100, "p_value": tr.p_value,
                           "fitted_change_db": tr.fitted_change}
    crit.append(Criterion.check("grad_snr_median_db", "training", med, ">=",
                                limits.min_grad_snr_db,
                                meaning="median gradient SNR (dB) of the FP8 run"))
    if snr.size < 3:  # smoke: fewer than 3 samples fit no trend
        m["grad_snr_drop_note"] = "fewer than 3 gradient-SNR samples: no trend, not gated"
    else:  # a NaN drop is a -inf SNR: it fails
        crit.append(Criterion.check("grad_snr_drop_db", "training", -tr.fitted_change, "<=",
                                    limits.max_snr_drop_db,
                                    meaning="fitted fall of the gradient SNR (dB) over the run"))
    learned = _learned(log.loss, task.entropy_rate)
    m["learned_fraction"] = learned
    if tc.gate_learning:
        crit.append(Criterion.check("learned_fraction", "sanity", learned, ">=", MIN_LEARNED,
                                    meaning="fraction of the learnable loss the run learned"))
    else:
        m["learned_note"] = f"{s.steps} steps is a wiring check: learning is not gated"
    res.criteria = crit
    res.decide()
    res.seconds = seconds
    return res


def _seeds_result(name: str, tc: TrainingCase, seed: int, profile: str,
                  per_seed: list[tuple[int, dict[str, TrainLog]]]) -> CaseResult:
    from fp8check.measures.curves import auc, rel_gap

    cid = tc.seeds_case_id(seed)
    res = CaseResult(kernel=f"{name}-train-fp8", layer=LAYER, case=cid, passed=None)
    limit = get_limits(profile).max_auc_gap
    gaps, base_aucs = [], []
    for _, logs in per_seed:
        fp8, bf16 = Curve.of(logs["fp8"].loss), Curve.of(logs["bf16"].loss)
        n = min(len(fp8.loss), len(bf16.loss))
        a_f, a_b = auc(fp8.steps[:n], fp8.loss[:n]), auc(bf16.steps[:n], bf16.loss[:n])
        gaps.append(float(rel_gap(a_f, a_b)) if n == len(bf16.loss) else math.inf)
        base_aucs.append(a_b)
    v = seed_test(gaps, base_aucs, limit)
    res.metrics.update(seeds=[s for s, _ in per_seed], auc_gaps=gaps, verdict=v.verdict,
                       mean_auc_gap=v.mean_gap, t_stat=v.t_stat, p_value=v.p_value,
                       alpha=v.alpha, seed_noise=v.seed_noise,
                       test="one-sided one-sample t-test of per-seed AUC gaps (paired by "
                            "seed), H0: mean gap <= 0")
    worse = v.verdict == "fp8-worse"
    res.criteria = [Criterion.check("seed_test_fp8_worse", "training", worse, "==", False,
                                    meaning="the seeds show FP8 training worse than bf16")]
    res.decide()
    return res


def iter_layer3(
    family: str | ExpertMatmuls, suite: str = "ci", seed: int = 0, profile: str = "strict", *,
    cases: Sequence[str] | None = None, model_impl: ModelImpl | None = None,
) -> Iterator[CaseResult]:
    """Layer 3 of `suite` for a kernel family (its name) or a user's `ExpertMatmuls`, case
    by case (`SUITES` of their framework): per seed (seeds seed, seed+1, ...) a
    `<name>-train-<variant>` result per tested variant, yielded as each seed finishes, then
    the case's across-seed result (when "fp8" is tested).  `cases` keeps only the named
    case ids (naming an across-seed case runs its every seed); `model_impl` replaces the
    model of every variant."""
    matmuls = resolve(family)
    tcs = _check(matmuls.framework, suite)
    get_limits(profile)  # unknown profile or "off": ValueError before any training
    plans = [(tc, *_plan(suite, tc, seed, cases)) for tc in tcs]
    model = model_impl or _framework_model(matmuls)
    for tc, seeds, stats in plans:
        if seeds:
            yield from _iter_case(matmuls, tc, seeds, stats and "fp8" in matmuls.tested, seed,
                                  profile, model)


def _framework_model(matmuls: ExpertMatmuls) -> ModelImpl:
    """The model of `matmuls`' framework, its expert matmuls those of the variant asked."""
    if matmuls.framework == "jax":
        from fp8check.layers.training.jax_model import make_grad_fn
    else:
        from fp8check.layers.training.torch_model import make_grad_fn  # type: ignore[assignment]

    def model(cfg: ModelConfig, variant: str) -> GradFn:
        return make_grad_fn(cfg, matmuls.variant(variant))

    return model


def _trained(tested: Sequence[str]) -> list[str]:
    """The variants a run of `tested` trains: each, and each one's baseline but f32 (the
    dense model), in VARIANTS order."""
    return [v for v in VARIANTS if v in tested or any(BASELINE[t] == v for t in tested)]


def _iter_case(matmuls: ExpertMatmuls, tc: TrainingCase, seeds: list[int], stats: bool,
               seed: int, profile: str, model: ModelImpl) -> Iterator[CaseResult]:
    """`iter_layer3` for one TrainingCase: its `seeds`, then (`stats`) the seed test."""
    task = tc.make_task()
    f32 = dense_f32_grad_fn(tc.model)
    trained = _trained(matmuls.tested)
    fns = {v: model(tc.model, v) for v in trained}
    per_seed = []
    for s in seeds:
        t0 = time.perf_counter()
        logs = {"f32": train(f32, tc.model, tc.schedule, task, s)}
        errors = {}
        for v in trained:
            try:
                logs[v] = train(fns[v], tc.model, tc.schedule, task, s, snr_ref=f32)
            except Exception as e:  # the model under test may raise anything: report it
                errors[v] = f"{type(e).__name__}: {e}"
        seconds = time.perf_counter() - t0
        if errors:
            for v in matmuls.tested:
                yield CaseResult(kernel=f"{matmuls.name}-train-{v}", layer=LAYER,
                                 case=tc.case_id(s), passed=False, error=errors.get(v) or next(
                                     iter(errors.values())), seconds=seconds)
            continue
        per_seed.append((s, logs))
        for v in matmuls.tested:
            yield _seed_result(matmuls, v, tc, s, profile, logs, task, seconds)
    if stats:
        if len(per_seed) == len(seeds):
            yield _seeds_result(matmuls.name, tc, seed, profile, per_seed)
        else:
            yield CaseResult(kernel=f"{matmuls.name}-train-fp8", layer=LAYER,
                             case=tc.seeds_case_id(seed), passed=False,
                             error="a seed's training raised: no seed test")
