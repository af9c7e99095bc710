"""The bytes the small collectives count as sent and received (docs/results.md's convention), under
the default tags and others (tests/mpi/counts_recv_check.py)."""

from __future__ import annotations

import pytest

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


def test_an_object_over_2_gib_broadcasts(launcher):
    """A plan's (T, N) chunk table passes 2 GiB at T·N ≈ 2.7·10⁸ (int64): one pickled MPI-3 message cannot carry
    it (MPI_ERR_ARG on every rank's set-up). ``bcast_obj`` sends arrays out of band, in messages of any length:
    2 GiB + 8 bytes reach the other rank whole, and the root counts them once per other rank."""
    proc = launcher.run(2, [str(REPO / "tests" / "mpi" / "big_bcast_check.py")], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {r["rank"]: r for r in json_records(proc.stdout)}
    assert sorted(out) == [0, 1]
    for r in out.values():
        assert (r["length"], r["ends"], r["kind"]) == ((1 << 31) + 8, [7, 9], "chunk"), r
    assert (1 << 31) + 8 < out[0]["sent"] < (1 << 31) + 1024 and out[1]["sent"] == 0, out


def test_an_object_over_2_gib_goes_point_to_point(launcher):
    """``sequences``' fetched snapshots and ``pss``' states pass 2 GiB at scale: one pickled MPI-3 message cannot
    carry them (MPI_ERR_ARG in ``isend_obj``; the receiving rank then waits for ever). 2 GiB + 8 bytes and a small
    tensor reach the other rank whole; small objects after it, both ways under the same tag, arrive in order; each
    side counts the payload's array bytes, as for small objects."""
    proc = launcher.run(2, [str(REPO / "tests" / "mpi" / "big_p2p_check.py")], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {r["rank"]: r for r in json_records(proc.stdout)}
    assert sorted(out) == [0, 1]
    got = out[1]
    assert (got["length"], got["ends"], got["t"], got["x"], got["writeable"]) == (
        (1 << 31) + 8, [7, 9], 3, [0, 1, 2, 3], True), got
    for me, r in out.items():
        assert r["small"] == [{"from": 1 - me, "n": 0}, {"from": 1 - me, "n": 1}], r
    payload = (1 << 31) + 8 + 4 * 8  # the array and torch.arange(4)'s int64s
    assert (out[0]["sent"], out[0]["got"], out[1]["sent"], out[1]["got"]) == (payload, 0, 0, payload), out


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["bcast", "allreduce"])
def test_an_array_over_2_31_elements(launcher, mode):
    """A trained run hands out its (T, N, F) embeddings with ``bcast_`` (T·N·F ≈ 3·10⁹ float32s at scale), a
    parameter is broadcast at set-up, gradients are all-reduced flat: one MPI-3 call cannot name 2^31 elements
    (MPI_ERR_ARG). (2^31 + 8) patterned uint8s arrive whole on both ranks (the root's CRC-32; rank 1's array of
    255s before it differs; the all-reduce takes the minimum), and the bytes are counted as for a small array: a
    broadcast's once per other rank as the root's sent, an all-reduce's both ways."""
    proc = launcher.run(2, [str(REPO / "tests" / "mpi" / "big_array_check.py"), mode], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {r["rank"]: r for r in json_records(proc.stdout)}
    assert sorted(out) == [0, 1]
    n, root = (1 << 31) + 8, out[0]["before"]
    assert out[1]["before"] != root, out
    for r in out.values():
        assert (r["length"], r["after"], r["last"]) == (n, root, (n - 1) % 251), r
    counted = {"bcast": [[n, 0], [0, 0]], "allreduce": [[n, n], [n, n]]}[mode]
    assert [[out[k]["sent"], out[k]["got"]] for k in (0, 1)] == counted, out


@pytest.mark.mpi
def test_an_alltoallv_past_2_31_rows(launcher):
    """``alltoallv``'s counts and displacements are rows (a row datatype), and an MPI-3 count is a C int: a
    keyed fetch's int32 positions travel as rows of one byte (2^31 of them name 5·10⁸ rows), and a halo's rows
    past 2^31 at scale. A pair's 2^31 + 8 rows (count past a C int) and blocks behind them (displacements past it:
    rank 1's own rows in the first exchange; in the second, rank 0's rows to and from rank 1 behind its own
    2^31 + 8) arrive whole: each block as its sender sent it (rows and CRC-32); the bytes counted leave out a rank's
    own rows, as for small exchanges."""
    proc = launcher.run(2, [str(REPO / "tests" / "mpi" / "big_array_check.py"), "alltoallv"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {r["rank"]: r for r in json_records(proc.stdout)}
    assert sorted(out) == [0, 1]
    for tag in ("r.pair", "r.self"):
        for q in (0, 1):
            r = out[q][tag]
            assert r["got"] == [out[p][tag]["sent"][q] for p in (0, 1)], (tag, q, out)
            assert r["length"] == sum(n for n, _ in r["got"]), r
            assert r["bytes"] == [r["sent"][1 - q][0], r["got"][1 - q][0]], r
    assert max(n for r in out.values() for n, _ in r["r.pair"]["sent"]) > 2**31, out


def test_an_all_gather_past_2_gib(launcher):
    """Every rank's pickles in one MPI-3 all-gather: past 2 GiB in all its counts and displacements, C ints, fail
    (MPI_ERR_ARG; a checkpoint's or a planner's tables at scale). Rank 0's (2 GiB + 8)-byte array
    reaches both ranks whole, after it rank 1's small one; each rank counts its own pickle once per other rank."""
    proc = launcher.run(2, [str(REPO / "tests" / "mpi" / "big_allgather_check.py"), "big"], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {r["rank"]: r for r in json_records(proc.stdout)}
    assert sorted(out) == [0, 1]
    for r in out.values():
        assert r["got"] == [[0, (1 << 31) + 8, 7, 9], [1, 8, 8, 10]], r
    sent = out[0]["counted"]["r.big"][0]
    assert (1 << 31) + 8 < sent < (1 << 31) + 1024 and out[0]["counted"]["r.big"] == [sent, sent], out
    assert out[1]["counted"]["r.big"][0] < 1024, out


def test_an_all_gather_past_its_limit_goes_point_to_point(launcher):
    """P = 3, ``ALLGATHER_BYTES`` lowered below every rank's pickle: the point-to-point way gathers objects of
    every kind (a non-contiguous float64 tensor, bfloat16, arrays, one rank's empty ones) as the one all-gather
    does at the default limit, tensors contiguous; the bytes counted are the same both ways."""
    proc = launcher.run(3, [str(REPO / "tests" / "mpi" / "big_allgather_check.py"), "lowered"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {r["rank"]: r for r in json_records(proc.stdout)}
    assert sorted(out) == [0, 1, 2]
    for r in out.values():
        want = [[*d[:3], True, *d[4:]] for d in r["want"]]  # sent transposed, arrived contiguous
        assert r["lowered"] == want and r["default"] == want, r
        assert r["counted"]["r.lowered"] == r["counted"]["r.default"] != [0, 0], r
