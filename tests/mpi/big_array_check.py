"""Run under mpirun with P = 2: the communicator's array collectives on more than 2^31 − 1 elements, which one
MPI-3 call cannot name (its counts and displacements are C ints: MPI_ERR_ARG or MPI_ERR_COUNT).

Usage: mpirun -np 2 python tests/mpi/big_array_check.py MODE
MODE ``bcast``: rank 0 broadcasts (2^31 + 8) patterned uint8s with ``bcast_``. ``allreduce``: a max ``allreduce_`` of
as many, rank 0's patterned and rank 1's zero. Prints one JSON line per rank: the array's length, the CRC-32 of its
bytes before and after, its last byte, and the bytes counted under the tag.
"""

import json
import sys
import traceback
import zlib

import numpy as np
import torch

from hpcdgnn.comm import Communicator

N = (1 << 31) + 8


def patterned(n: int) -> np.ndarray:
    """``n`` uint8s counting 0..250 over and over: a piece landing at the wrong offset changes the CRC."""
    a = np.empty(n, dtype=np.uint8)
    a[:251] = np.arange(251, dtype=np.uint8)
    done = 251
    while done < n:  # doubling copies: a broadcast assignment of this pattern is several times slower
        k = min(done, n - done)
        a[done : done + k] = a[:k]
        done += k
    return a


def main(comm: Communicator, mode: str) -> None:
    a = patterned(N) if comm.rank == 0 else np.zeros(N, dtype=np.uint8)
    before = zlib.crc32(a)
    if mode == "bcast":
        comm.bcast_(torch.from_numpy(a), root=0, tag="r.big")
    elif mode == "allreduce":
        comm.allreduce_(torch.from_numpy(a), "max", tag="r.big")
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
