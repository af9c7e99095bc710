"""Run under mpirun with P = 2: the communicator's array collectives on more than 2^31 − 1 elements, which one
MPI-3 call cannot name (its counts and displacements are C ints: MPI_ERR_ARG or MPI_ERR_COUNT).

Usage: mpirun -np 2 python tests/mpi/big_array_check.py MODE
MODE ``bcast``: rank 0 broadcasts (2^31 + 8) patterned uint8s with ``bcast_``. ``allreduce``: a min ``allreduce_`` of
as many, rank 0's patterned and rank 1's 255s. Prints one JSON line per rank: the array's length, the CRC-32 of its
bytes before and after, its last byte, and the bytes counted under the tag. ``alltoallv``: the exchanges of
``ROWS`` with ``exchange.alltoallv`` in rows of one uint8; one JSON line per rank: per exchange, the rows and CRC-32
of each block it sent and received, the received length and the bytes counted.
"""

import json
import sys
import traceback
import zlib

import numpy as np
import torch

from hpcdgnn.comm import Communicator

N = (1 << 31) + 8


def fill(a: np.ndarray, first: int = 0) -> np.ndarray:
    """Fill ``a`` (uint8s) counting ``first``..250 and 0..250 over and over: a piece landing at the wrong offset
    changes the CRC."""
    n = a.shape[0]
    a[: min(n, 251)] = (np.arange(min(n, 251)) + first) % 251
    done = min(n, 251)
    while done < n:  # doubling copies: a broadcast assignment of this pattern is several times slower
        k = min(done, n - done)
        a[done : done + k] = a[:k]
        done += k
    return a


def patterned(n: int) -> np.ndarray:
    """``n`` uint8s of :func:`fill`'s pattern."""
    return fill(np.empty(n, dtype=np.uint8))


#: per exchange, the rows (uint8s) rank p sends rank q: ``ROWS[tag][p][q]``
ROWS = {
    # a pair's count past a C int (0 -> 1), and rank 1's own rows landing behind them (displacement 2^31 + 8)
    "r.pair": [[4, N], [3, 5]],
    # rank 0's own rows past a C int, with its rows to and from rank 1 behind them (both displacements 2^31 + 8)
    "r.self": [[N, 3], [5, 7]],
}


def alltoallv(comm: Communicator) -> dict:
    """The all-to-all-v of ``ROWS``, in rows of one uint8: per exchange and peer, the (rows, CRC-32) sent and
    received, the received length and the bytes counted."""
    me, crcs, out = comm.rank, {}, {}
    if me == 0:  # one buffer: 4 rows for rank 0, N rows, 3 rows for rank 1; r.pair sends the first 4 + N, r.self N + 3
        x = np.empty(4 + N + 3, dtype=np.uint8)
        for a, b in ((0, 4), (4, 4 + N), (4 + N, N + 7)):
            fill(x[a:b], first=a % 7)
        sends = {"r.pair": x[: 4 + N], "r.self": x[4:]}
    else:
        sends = {tag: fill(np.empty(sum(rows[1]), dtype=np.uint8), first=5) for tag, rows in ROWS.items()}
    for tag, rows in ROWS.items():
        sent, at = [], 0
        for n in rows[me]:
            block = sends[tag][at : at + n]
            key = (block.ctypes.data, n)
            crcs[key] = crcs[key] if key in crcs else zlib.crc32(block)
            sent.append([n, crcs[key]])
            at += n
        got = comm.exchange.alltoallv(torch.from_numpy(sends[tag]).view(-1, 1), rows[me],
                                      [rows[p][me] for p in range(comm.size)], tag=tag).numpy()
        blocks, at = [], 0
        for p in range(comm.size):
            n = rows[p][me]
            blocks.append([n, zlib.crc32(got[at : at + n])])
            at += n
        s = comm.stats.snapshot()[tag]
        out[tag] = {"sent": sent, "got": blocks, "length": int(got.shape[0]), "bytes": [s.bytes_sent, s.bytes_recv]}
        del got
    return out


def main(comm: Communicator, mode: str) -> None:
    if mode == "alltoallv":
        print(json.dumps({"rank": comm.rank, **alltoallv(comm)}), flush=True)
        return
    # rank 1's 255s (above the pattern's 250) written here: receiving into pages not yet touched is slower
    a = patterned(N) if comm.rank == 0 else np.full(N, 255, dtype=np.uint8)
    before = zlib.crc32(a)
    if mode == "bcast":
        comm.bcast_(torch.from_numpy(a), root=0, tag="r.big")
    elif mode == "allreduce":
        comm.allreduce_(torch.from_numpy(a), "min", tag="r.big")
    else:
        raise SystemExit(f"big_array_check.py: unknown mode {mode!r}")
    s = comm.stats.snapshot()["r.big"]
    print(json.dumps({"rank": comm.rank, "length": int(a.shape[0]), "before": before, "after": zlib.crc32(a),
                      "last": int(a[-1]), "sent": s.bytes_sent, "got": s.bytes_recv}), flush=True)


if __name__ == "__main__":
    world = Communicator()
    try:
        main(world, sys.argv[1])
    except BaseException:
        traceback.print_exc()
        world.abort(1)  # the other rank may wait in the collective for ever
