"""perf/bench_incremental.py: the first call of what it times (one-off costs, ~30x a steady pass on a small window)
is left out of the median, so from-scratch, timed first, does not carry it alone at ``--repeat`` 1 or 2."""

from __future__ import annotations

import time

from tests.conftest import perf_script


def test_median_time_leaves_out_the_first_call():
    mod = perf_script("bench_incremental")
    calls = []

    def fn():
        calls.append(None)
        if len(calls) == 1:
            time.sleep(0.2)  # the one-off cost of a first call

    for repeat in (1, 2):
        calls.clear()
        assert mod.median_time(fn, repeat) < 100.0  # ms: the slow first call is not among the timed ones
        assert len(calls) == repeat + 1
