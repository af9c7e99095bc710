"""train.threads: 0 — a rank's torch threads from its CPU set and the node's other ranks' (hpcdgnn.train.setup)."""

from __future__ import annotations

import pytest

from hpcdgnn.train.setup import share_cpus


@pytest.mark.parametrize("mine, node, threads", [
    (range(64), [range(64)] * 4, 16),  # unbound on a whole 64-CPU node, 4 ranks
    (range(32), [range(32)] * 4, 8),  # unbound inside the job's 32 CPUs of a shared node: 32 each before
    (range(8, 16), [range(i, i + 8) for i in range(0, 32, 8)], 8),  # bound to 8 CPUs each: all of them
    ([3], [[0], [1], [2], [3]], 1),  # one core each (Open MPI's default binding at np <= 2)
    (range(2), [range(2)] * 3, 1),  # more ranks than CPUs: at least one
    (range(16), [range(16), range(8, 24)], 8),  # overlapping sets share what overlaps
])
def test_a_rank_shares_its_cpus_with_the_ranks_that_may_run_on_them(mine, node, threads):
    assert share_cpus(list(mine), [list(s) for s in node]) == threads


def test_omp_num_threads_and_the_slurm_cpu_request_set_the_automatic_threads():
    """``train.threads: 0``: OMP_NUM_THREADS as torch and OpenMP codes take it (first level; malformed ignored),
    else the rank's CPU share capped by SLURM_CPUS_PER_TASK (Slurm without binding gave every rank the node's
    cores); train.threads overrides both."""
    from hpcdgnn.comm.communicator import alone
    from hpcdgnn.train.setup import cpu_affinity, threads_per_rank

    share = len(cpu_affinity())
    comm = alone()
    assert threads_per_rank(comm, 0, {}) == share
    assert threads_per_rank(comm, 0, {"OMP_NUM_THREADS": "3"}) == 3
    assert threads_per_rank(comm, 0, {"OMP_NUM_THREADS": "3,2"}) == 3
    assert threads_per_rank(comm, 0, {"OMP_NUM_THREADS": "x"}) == share
    assert threads_per_rank(comm, 0, {"OMP_NUM_THREADS": "²"}) == share  # a digit int() refuses
    assert threads_per_rank(comm, 0, {"SLURM_CPUS_PER_TASK": "1"}) == 1
    assert threads_per_rank(comm, 0, {"SLURM_CPUS_PER_TASK": "999"}) == share
    assert threads_per_rank(comm, 5, {"OMP_NUM_THREADS": "3", "SLURM_CPUS_PER_TASK": "1"}) == 5
