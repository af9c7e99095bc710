"""The epoch's time split: communication under way counted once however many tags overlap, and the rank whose
split is printed (hpcdgnn/metrics/timers.py, the spans of hpcdgnn.comm.communicator.CommStats)."""

from __future__ import annotations

import time

import numpy as np

from hpcdgnn.comm.communicator import CommStats
from hpcdgnn.metrics.timers import summarize_over_ranks, union_seconds


def test_union_of_intervals():
    assert union_seconds([]) == 0.0
    assert union_seconds([(0.0, 1.0), (2.0, 3.0)]) == 2.0
    assert union_seconds([(0.0, 2.0), (1.0, 3.0), (1.5, 1.7)]) == 3.0
    assert union_seconds([(5.0, 6.0), (0.0, 10.0)]) == 10.0


def test_two_tags_under_way_at_once_count_once():
    """A gradient bucket's all-reduce posted while the backward redistribution's chunk is in flight: each tag's
    seconds are its own, the spans' union is the time anything was under way (before, the epoch's comm summed the
    tags and exceeded the epoch)."""
    stats = CommStats()
    stats.keep_exchanges = True
    t0 = time.perf_counter()
    stats.posted("redistribute.bwd", 8, 8, t0)
    time.sleep(0.02)
    t1 = time.perf_counter()
    stats.posted("grad.bucket0", 8, 8, t1)
    time.sleep(0.02)
    stats.finished("redistribute.bwd", time.perf_counter())
    time.sleep(0.01)
    stats.finished("grad.bucket0", time.perf_counter())
    stats.add("grad.allreduce", 8, 8, 0.005)  # a blocking call after both
    spans = stats.take_spans()
    assert [tag for tag, _, _ in spans] == ["redistribute.bwd", "grad.bucket0", "grad.allreduce"]
    summed = sum(v.seconds for v in stats.tags.values())
    union = union_seconds([(a, b) for _, a, b in spans])
    assert union < summed - 0.015  # the >= 20 ms both were in flight counted once
    assert union <= time.perf_counter() - t0  # never more than the time that passed
    assert stats.take_spans() == []


def test_the_printed_split_is_the_rank_that_worked_longest():
    """Ranks end an epoch within microseconds (a collective); the one whose epoch is longest by chance may have
    spent it waiting. The split shown is the rank with the most load + compute."""
    per_rank = np.array([[1.000000, 0.0, 0.9, 0.1],    # worked 0.9 s
                         [1.000002, 0.0, 0.2, 0.8]])   # ended 2 us later, waited 0.8 s
    out = summarize_over_ranks(per_rank)
    assert out["slowest_rank"] == 0 and out["slowest"]["compute"] == 0.9
    assert out["epoch"]["max"] == 1.000002
