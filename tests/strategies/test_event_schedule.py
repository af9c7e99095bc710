"""strategy: memory's schedule and evaluation pieces without MPI (DistTGL §3.2, Fig. 7c): which segment each
memory copy walks per epoch, which copy evaluates, when the memory is reset, the k ≤ batches refusal, the
per-trainer negatives, fixed (TGB) negatives' padding and the AP's first negative. Values by hand."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hpcdgnn.errors import ConfigError
from hpcdgnn.partition.events import MemoryPlan, plan_memory
from hpcdgnn.strategies.memory import MemoryStrategy
from tests.nn.test_tgn import N, strategy_like, stream


def _plan(k: int, batches: int = 6, batch_events: int = 10, minibatch: int = 1, epoch: int = 1) -> MemoryPlan:
    E = batches * batch_events
    p = MemoryPlan("memory", minibatch * epoch * k, minibatch, epoch, k, batch_events,
                   {"train": [0, E], "val": [E, E + 4], "test": [E + 4, E + 4]})
    p.segments = [[s * batches // k, (s + 1) * batches // k] for s in range(k)]
    return p


# -- the schedule: in epoch e group c walks segment (c + e − 1) mod k --------------------------------------------

#: by hand, k = 3: SEGMENT[e][c] for epochs 1..4
SEGMENT_K3 = {1: [0, 1, 2], 2: [1, 2, 0], 3: [2, 0, 1], 4: [0, 1, 2]}


def test_segment_of_is_the_fig7c_schedule():
    """Epoch 1: copy c walks segment c; each later epoch every copy moves one segment on (so the copy that walked
    the last segment starts the next epoch at segment 0, from a reset memory)."""
    p = _plan(3)
    for e, row in SEGMENT_K3.items():
        assert [p.segment_of(c, e) for c in range(3)] == row, e
    p2 = _plan(2)
    assert [[p2.segment_of(c, e) for c in range(2)] for e in (1, 2, 3)] == [[0, 1], [1, 0], [0, 1]]
    assert [_plan(1).segment_of(0, e) for e in (1, 2, 5)] == [0, 0, 0]


# -- the refusal of more memory copies than batches ----------------------------------------------------------


def _job(k: int, batch_events: int = 100):
    return SimpleNamespace(strategy=SimpleNamespace(minibatch=1, epoch=1, memory=k),
                           task=SimpleNamespace(batch_events=batch_events), data=SimpleNamespace(path="/data/x"))


def test_more_memory_copies_than_batches_is_refused():
    """250 training events in batches of 100 make 3 batches: k = 3 gives one batch a segment, k = 2 cuts [0,1),
    [1,3); k = 4 is refused naming strategy.memory."""
    manifest = SimpleNamespace(split={"train": [0, 250], "val": [250, 300], "test": [300, 350]})
    assert plan_memory(manifest, 3, _job(3)).segments == [[0, 1], [1, 2], [2, 3]]
    assert plan_memory(manifest, 2, _job(2)).segments == [[0, 1], [1, 3]]
    with pytest.raises(ConfigError, match="strategy.memory"):
        plan_memory(manifest, 4, _job(4))
    with pytest.raises(ConfigError, match="strategy.memory"):
        plan_memory(manifest, 7, _job(7))


# -- which group evaluates, and the per-epoch memory reset ---------------------------------------------------


class _Evaluated(Exception):
    pass


class _Probe(MemoryStrategy):
    """Stops evaluate where the evaluating group goes on (its first read of the slice index)."""

    @property
    def a(self):
        raise _Evaluated


def _evaluates(k: int, c: int, epoch: int) -> bool:
    s = object.__new__(_Probe)
    s.plan, s.c, s.b = _plan(k), c, 0
    task = SimpleNamespace(stats_width=lambda: 4)
    try:
        out = s.evaluate(None, task, epoch)
    except _Evaluated:
        return True
    assert np.all(out == 0)
    return False


def test_the_group_that_walked_the_last_segment_evaluates():
    """k = 3: in epoch 1 group 2, epoch 2 group 1, epoch 3 group 0, epoch 4 group 2 (the copy just done with
    segment k − 1); k = 2: groups 1, 0, 1; k = 1: group 0. Exactly one group per epoch."""
    want = {3: {1: 2, 2: 1, 3: 0, 4: 2}, 2: {1: 1, 2: 0, 3: 1}, 1: {1: 0, 2: 0}}
    for k, by_epoch in want.items():
        for e, group in by_epoch.items():
            got = [c for c in range(k) if _evaluates(k, c, e)]
            assert got == [group], (k, e, got)
            assert _plan(k).segment_of(group, e) == k - 1


class _Memory:
    def __init__(self):
        self.resets = 0

    def reset(self):
        self.resets += 1


def _resets(k: int, c: int, epoch: int) -> int:
    s = object.__new__(MemoryStrategy)
    s.plan, s.c, s.a, s.b = _plan(k), c, 0, 0
    s.memory, s.group, s.pool, s._next, s._fifo = _Memory(), None, None, None, deque()
    s.ctx = SimpleNamespace(job=SimpleNamespace(task=SimpleNamespace(negatives=1)))
    gen = s.batches(epoch)
    first = next(gen)
    assert first.segment == (SEGMENT_K3[epoch][c] if k == 3 else 0)
    return s.memory.resets


def test_each_epoch_starts_segment_zero_from_a_reset_memory():
    """The group walking segment 0 resets its memory before its first batch, every epoch (DistTGL); the others
    carry theirs on. k = 3: epoch 1 group 0, epoch 2 group 2, epoch 3 group 1; k = 1: every epoch."""
    want = {1: [1, 0, 0], 2: [0, 0, 1], 3: [0, 1, 0], 4: [1, 0, 0]}
    for e, row in want.items():
        assert [_resets(3, c, e) for c in range(3)] == row, e
    assert [_resets(1, 0, e) for e in (1, 2, 3)] == [1, 1, 1]


# -- negatives -----------------------------------------------------------------------------------------------


def test_each_epoch_trainer_draws_its_own_negatives():
    """Under epoch parallelism the trainers b = 0, 1, 2 of one batch draw different negatives, each from the
    generator seeded (seed, split, epoch, batch, b); the same b draws the same ones again."""
    src, dst, t, efeat = stream(3)
    s = strategy_like(src, dst, t, efeat, batch_events=20, seed=7)
    n, m, q, epoch = 20, 3, 2, 1
    negs = []
    for b in range(3):
        w = s._work("train", q, epoch, b, 0, 1, m)
        neg = w.inp.roots[2 * n:].reshape(n, m)
        want = np.random.default_rng([7, 0, epoch, q, b]).integers(0, N, size=(n, m))
        np.testing.assert_array_equal(neg, want)
        negs.append(neg)
    assert not np.array_equal(negs[0], negs[1]) and not np.array_equal(negs[1], negs[2])
    np.testing.assert_array_equal(s._work("train", q, epoch, 1, 0, 1, m).inp.roots[2 * n:].reshape(n, m), negs[1])


def test_fixed_negatives_pad_and_an_empty_row_is_its_own_destination():
    """Fixed (TGB) negatives of counts 2, 0, 3, 1: rows padded to 3 with their first negative, the empty row all
    its own destination (never the next row's negatives); ``valid`` marks the real ones."""
    s = object.__new__(MemoryStrategy)
    s.plan = MemoryPlan("memory", 1, 1, 1, 1, 4, {"train": [0, 10], "val": [10, 14], "test": [14, 14]})
    s.dst = np.arange(14, dtype=np.int64) + 50  # destination of event e: 50 + e
    offsets = np.array([0, 2, 2, 5, 6])
    pool = np.array([100, 101, 102, 103, 104, 105], dtype=np.int64)
    s.fixed = {"val": (offsets, pool)}
    neg, valid = s._fixed_negatives("val", np.arange(10, 14))
    assert neg.tolist() == [[100, 101, 100], [61, 61, 61], [102, 103, 104], [105, 105, 105]]
    assert valid.tolist() == [[True, True, False], [False, False, False], [True, True, True],
                              [True, False, False]]


# -- the AP: each positive against its first negative ---------------------------------------------------------


def _evaluate_one_batch(own: np.ndarray | None) -> list:
    """(split, negatives' scores, batch AP) that ``MemoryStrategy.evaluate`` passes to eval_stats for one
    validation batch of 4 events, positives 0.8, 0.6, 0.4, 0.2, 3 negatives each (first column 0.1, 0.3, 0.5,
    0.7), ``own`` marking the negatives that are their event's own destination (``_Work.own``; None: none)."""
    s = object.__new__(MemoryStrategy)
    s.plan = MemoryPlan("memory", 1, 1, 1, 1, 4, {"train": [0, 8], "val": [8, 12], "test": [12, 12]})
    s.c, s.a, s.b, s.group, s.eager = 0, 0, 0, None, False
    s.memory = SimpleNamespace(leader=False, read=lambda nodes, device: None)
    s.ctx = SimpleNamespace(device=torch.device("cpu"), job=SimpleNamespace(task=SimpleNamespace(eval_negatives=3)))
    work = SimpleNamespace(inp=SimpleNamespace(memory=None, unique=np.arange(3)), events=np.arange(8, 12),
                           scored=None, negatives=3, valid=None, own=own)
    s._static = lambda key: work
    s._prefetch = lambda key: None
    s._write = lambda *args: None
    s._order = lambda: None
    pos = torch.tensor([0.8, 0.6, 0.4, 0.2], dtype=torch.float64)
    neg = torch.tensor([[0.1, 0.0, 0.0], [0.3, 0.05, 0.01], [0.5, 0.15, 0.02], [0.7, 0.25, 0.03]],
                       dtype=torch.float64)
    seen = []

    def eval_stats(split, p, n, ap, valid):
        seen.append((split, n.copy(), ap))
        return np.zeros(4)

    task = SimpleNamespace(stats_width=lambda: 4, scores=lambda emb: (pos, neg), eval_stats=eval_stats)
    model = type("Model", (), {"event_time": False, "__call__": lambda self, inp: (torch.zeros(20, 2), None)})()
    s.evaluate(model, task, 1)
    return seen


def test_evaluation_ap_ranks_each_positive_against_its_first_negative():
    """The first column interleaves with the positives: AP = (1 + 2/3 + 3/5 + 4/7) / 4 (the others, below every
    positive but one (AP 0.95) or below all (AP 1), are not its). A batch whose ``_Work.own`` is None (no
    negative is its event's own destination) passes its scores as they are; one took ``None.any()``."""
    seen = _evaluate_one_batch(None)
    assert len(seen) == 1 and seen[0][0] == "val"
    assert seen[0][1][:, 0].tolist() == [0.1, 0.3, 0.5, 0.7]
    assert seen[0][2] == pytest.approx((1 + 2 / 3 + 3 / 5 + 4 / 7) / 4, rel=1e-12)


def test_evaluation_gives_an_event_s_own_destination_its_positive_s_score():
    """A negative that is its event's own destination (the 4th event's first, 0.7) is scored as the positive
    (0.2), bit for bit; the others keep theirs, and the AP ranks the tie at the tied run's end:
    (1 + 1 + 3/4 + 4/7) / 4."""
    own = np.zeros((4, 3), dtype=bool)
    own[3, 0] = True
    ((split, neg, ap),) = _evaluate_one_batch(own)
    assert neg[:, 0].tolist() == [0.1, 0.3, 0.5, 0.2] and neg[:, 1:].tolist() == [
        [0.0, 0.0], [0.05, 0.01], [0.15, 0.02], [0.25, 0.03]]
    assert ap == pytest.approx((1 + 1 + 3 / 4 + 4 / 7) / 4, rel=1e-12)
