"""AllToAllV under real MPI: values, gradient (reverse exchange), and S1's byte count."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import REPO


def expected_bytes(T: int, N: int, F: int, P: int, itemsize: int) -> int:
    """Bytes crossing ranks in one snapshot->vertex redistribution, computed without hpcdgnn:
    rank p owns np.array_split's p-th block of snapshots and sends rank q != p its block of rows.
    """
    tk = [len(a) for a in np.array_split(np.arange(T), P)]
    nv = [len(a) for a in np.array_split(np.arange(N), P)]
    return sum(tk[p] * nv[q] * F * itemsize for p in range(P) for q in range(P) if p != q)


# each shape once, each layout on two of them (the full 4 x 2 grid: 8 mpirun launches)
@pytest.mark.parametrize(("P", "T", "N", "layout"), [(2, 7, 23, "cyclic"), (3, 7, 23, "block"), (3, 2, 23, "cyclic"),
                                                     (3, 7, 2, "block")])
def test_alltoall_values_gradient_and_volume(launcher, P, T, N, layout):
    """Remainder rows (P divides neither T nor N), a rank with no snapshot (T < P), one with no vertex (N < P);
    contiguous snapshot blocks and cyclic ownership (row-list boxes).
    """
    F = 5
    assert T % P and N % P
    script = str(REPO / "tests" / "mpi" / "alltoall_check.py")
    proc = launcher.run(P, [script, str(T), str(N), str(F), layout], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counted = sum(json.loads(line)["fwd_bytes"] for line in proc.stdout.splitlines() if line.startswith("{"))
    exact = expected_bytes(T, N, F, P, 4)
    assert counted == exact
    # IBM §4.2's T·N·F·(P−1)/P·itemsize, up to the remainder rows
    nominal = T * N * F * (P - 1) / P * 4
    assert abs(counted - nominal) <= (T + N) * F * 4


@pytest.mark.parametrize("P", [2, 3])
def test_small_collectives_count_what_each_rank_hands_on(launcher, P):
    """The byte convention of docs/results.md: an all-reduce counts its buffer once on every rank; an
    all-gather a rank's own part once per other rank; a broadcast the root's buffer once per other rank, the
    receivers nothing (tests/mpi/counts_check.py)."""
    proc = launcher.run(P, [str(REPO / "tests" / "mpi" / "counts_check.py")], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {r["rank"]: r for r in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))}
    assert sorted(out) == list(range(P))
    for me, r in out.items():
        assert r["counted"] == {"c.allreduce": 3 * 8, "c.gather": 5 * 8 * (P - 1), "c.allgather": r["obj"] * (P - 1),
                                "c.bcast_obj": r["root_obj"] * (P - 1) if me == 1 else 0,
                                "c.bcast": 7 * 8 * (P - 1) if me == 0 else 0}, me
