"""The time halo's exchange (:func:`hpcdgnn.comm.autograd.time_halo`) under ``mpirun -np 2`` / ``-np 3``."""

from __future__ import annotations

import pytest

from tests.conftest import REPO, json_records


@pytest.mark.parametrize("P", [2, 3])
def test_time_halo_defers_send_only_exchanges(launcher, P):
    """tests/mpi/time_halo_check.py: the time halo's values and gradient are exact, a rank that only sends
    (the first forward, the last backward) defers its exchange and nothing hangs or stays in flight."""
    proc = launcher.run(P, [str(REPO / "tests" / "mpi" / "time_halo_check.py")], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {r["rank"]: r for r in json_records(proc.stdout)}
    assert sorted(out) == list(range(P))
    assert [out[p]["deferred_fwd"] for p in range(P)] == [1] + [0] * (P - 1)
    assert [out[p]["deferred_bwd"] for p in range(P)] == [0] * (P - 1) + [1]
    # two ranks back: only rank 0 receives nothing forward, only the last rank sends nothing (so
    # receives nothing backward)
    assert [out[p]["two"] for p in range(P)] == [[1, 0]] + [[0, 0]] * (P - 2) + [[0, 1]]
