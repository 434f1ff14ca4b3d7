"""Layer 3 on real text: the byte-level task on the standard library's sources, its
achievable loss (the corpus's conditional bigram entropy), and a short run through the
layer's own path."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from fp8check.layers.training import SUITES, TrainingCase, iter_layer3
from fp8check.layers.training.model import ModelConfig
from fp8check.layers.training.optimizer import Schedule
from fp8check.layers.training.task import BYTE_VOCAB, stdlib_corpus, text_task
from fp8check.layers.training.validate import TEXT_MODEL


def test_entropy_rate_of_a_hand_made_corpus():
    # "abac" repeated: after a comes b or c (1/2 each), after b and c always a, and a is
    # the current byte of half the pairs: H(next | byte) = 1/2 log 2 exactly.
    task = text_task(b"abac" * 50 + b"a", "abac")
    assert task.entropy_rate == pytest.approx(0.5 * math.log(2), rel=1e-15)
    assert text_task(b"ab" * 100, "ab").entropy_rate == 0.0  # deterministic successor


def test_entropy_rate_is_the_conditional_entropy_of_the_bigrams():
    data, name = stdlib_corpus(1 << 16)
    pairs = Counter(zip(data[:-1], data[1:], strict=True))
    firsts = Counter(data[:-1])
    n = len(data) - 1
    expect = -sum(c / n * math.log(c / firsts[a]) for (a, _), c in pairs.items())
    task = text_task(data, name)
    assert task.entropy_rate == pytest.approx(expect, rel=1e-12)
    # Gibbs: the empirical conditional predicts no worse than the byte frequencies alone
    marginal = -sum(c / n * math.log(c / n) for c in Counter(data[1:]).values())
    assert 0 < task.entropy_rate < marginal < math.log(BYTE_VOCAB)


def test_batches_are_corpus_bigrams_and_a_pure_function_of_seed_and_step():
    data, name = stdlib_corpus(1 << 16)
    task = text_task(data, name)
    x, y = task.batch(3, 7, 512)
    assert x.dtype == y.dtype == np.int32 and x.shape == y.shape == (512,)
    corpus_pairs = set(zip(data[:-1], data[1:], strict=True))
    assert all((a, b) in corpus_pairs for a, b in zip(x.tolist(), y.tolist(), strict=True))
    again = task.batch(3, 7, 512)
    assert np.array_equal(again[0], x) and np.array_equal(again[1], y)
    assert not np.array_equal(task.batch(3, 8, 512)[0], x)


def test_corpus_and_case_validation():
    data, name = stdlib_corpus(1000)
    assert len(data) == 1000 and name.endswith("-stdlib")
    with pytest.raises(ValueError, match="at least 2 bytes"):
        text_task(b"x", "tiny")
    with pytest.raises(ValueError, match="vocab must be 256"):
        TrainingCase(Schedule(steps=10), seeds=1, task="text")
    with pytest.raises(ValueError, match="unknown layer-3 task"):
        TrainingCase(Schedule(steps=10), seeds=1, model=ModelConfig(), task="poetry")


def test_a_short_text_run_learns_and_records_its_corpus(monkeypatch):
    tc = TrainingCase(Schedule(steps=40), seeds=1, model=TEXT_MODEL, task="text",
                      gate_learning=False)
    monkeypatch.setitem(SUITES["smoke"], "jax", (tc,))
    out = [r.to_dict() for r in iter_layer3("pallas", "smoke")]
    assert [r["kernel"] for r in out] == ["pallas-train-fp8", "pallas-train-bf16"]
    for r in out:
        assert r["case"].startswith("text-v256-") and r["error"] is None
        assert r["passed"] is True, r["failed"]
        m = r["metrics"]
        data, name = stdlib_corpus()
        assert m["task"] == "text" and m["corpus"] == name
        assert m["corpus_sha256"] == text_task(data, name).digest
        assert m["achievable_loss"] == pytest.approx(text_task(data, name).entropy_rate)
        for v, curve in m["curves"].items():  # 40 steps already move every precision
            assert curve[-1] < curve[0] - 0.3, v
            assert min(curve) > m["achievable_loss"], v
