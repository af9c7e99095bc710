"""The bytes the small collectives count as sent and received (docs/results.md's convention), under
the default tags and others (tests/mpi/counts_recv_check.py)."""

from __future__ import annotations

from tests.conftest import REPO, json_records


def test_small_collectives_count_sent_and_received_bytes(launcher):
    """P = 3: an all-reduce counts its 24-byte buffer both ways; an all-gather a rank's own part once per other
    rank, both ways (5 or 4 float64s × 2); a broadcast the root's buffer once per other rank as sent (7 float64s
    from rank 0, 6 float32s from rank 2) and nothing received, on any rank."""
    P = 3
    proc = launcher.run(P, [str(REPO / "tests" / "mpi" / "counts_recv_check.py")], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {r["rank"]: r for r in json_records(proc.stdout)}
    assert sorted(out) == list(range(P))
    for me, r in out.items():
        assert r["counted"] == {
            "r.allreduce": [24, 24],
            "metrics": [5 * 8 * 2, 5 * 8 * 2],
            "r.gather": [4 * 8 * 2, 4 * 8 * 2],
            "r.allgather": [r["obj"] * 2, r["obj"] * 2],
            "r.bcast_obj": [r["root_obj"] * 2 if me == 1 else 0, 0],
            "setup": [7 * 8 * 2 if me == 0 else 0, 0],
            "r.bcast": [6 * 4 * 2 if me == 2 else 0, 0],
        }, me
