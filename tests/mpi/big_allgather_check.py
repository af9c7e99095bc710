"""Run under mpirun: ``Communicator.allgather_obj`` of pickles past what one MPI-3 all-gather can name (its counts
and displacements are C ints: MPI_ERR_ARG past 2 GiB).

Usage: mpirun -np P python tests/mpi/big_allgather_check.py MODE
MODE ``big`` (P = 2): rank 0's object holds a (2 GiB + 8)-byte array, rank 1's a small one. MODE ``lowered``:
objects of every kind (arrays, tensors, one rank's empty) with ``ALLGATHER_BYTES`` lowered below their total, then
again at the default. Prints one JSON line per rank: what it gathered (for each rank, its rank, the big array's
length and first and last bytes, or a digest of the small objects), the bytes counted under the tag and its peak
resident memory.
"""

import json
import resource
import sys
import traceback

import numpy as np
import torch

import hpcdgnn.comm.communicator as communicator
from hpcdgnn.comm import Communicator

N = (1 << 31) + 8


def small(rank: int) -> dict:
    """A rank's object in mode ``lowered``."""
    return {"rank": rank, "t": torch.arange(rank * 1000, dtype=torch.float64).reshape(-1, 2).t(),
            "bf16": torch.full((rank + 1,), rank + 0.5, dtype=torch.bfloat16), "a": np.arange(rank * 3),
            "text": "x" * rank}


def digest(obj: dict) -> list:
    """What a gathered small object holds, as JSON."""
    t = obj["t"]
    return [obj["rank"], list(t.shape), t.sum().item(), t.is_contiguous(), obj["bf16"].float().tolist(),
            obj["a"].tolist(), obj["text"]]


def main(comm: Communicator, mode: str) -> None:
    me = comm.rank
    out: dict = {"rank": me}
    if mode == "big":
        table = np.zeros(N if me == 0 else 8, dtype=np.uint8)
        table[0], table[-1] = 7 + me, 9 + me
        got = comm.allgather_obj({"rank": me, "table": table}, tag="r.big")
        del table
        out["got"] = [[g["rank"], int(g["table"].shape[0]), int(g["table"][0]), int(g["table"][-1])] for g in got]
        del got
        tags = ["r.big"]
    else:
        communicator.ALLGATHER_BYTES = 64  # below any rank's object: the point-to-point way
        out["lowered"] = [digest(g) for g in comm.allgather_obj(small(me), tag="r.lowered")]
        communicator.ALLGATHER_BYTES = communicator.MAX_COUNT
        out["default"] = [digest(g) for g in comm.allgather_obj(small(me), tag="r.default")]
        out["want"] = [digest(small(r)) for r in range(comm.size)]
        tags = ["r.lowered", "r.default"]
    s = comm.stats.snapshot()
    out["counted"] = {t: [s[t].bytes_sent, s[t].bytes_recv] for t in tags}
    out["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    world = Communicator()
    try:
        main(world, sys.argv[1])
    except BaseException:
        traceback.print_exc()
        world.abort(1)  # the other ranks would wait in the collective for ever
