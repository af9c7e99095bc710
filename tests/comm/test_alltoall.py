"""AllToAllV under real MPI: values, gradient (reverse exchange), and S1's byte count."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import REPO, json_records


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
    counted = sum(r["fwd_bytes"] for r in json_records(proc.stdout))
    exact = expected_bytes(T, N, F, P, 4)
    assert counted == exact
    # IBM §4.2's T·N·F·(P−1)/P·itemsize, up to the remainder rows
    nominal = T * N * F * (P - 1) / P * 4
    assert abs(counted - nominal) <= (T + N) * F * 4

