"""Run under mpirun with P = 2: ``Communicator.isend_obj`` / ``recv_obj`` of an object holding more than 2 GiB
(``sequences``' fetched snapshots, ``pss``' states, at scale), which one pickled MPI-3 message cannot carry
(MPI_ERR_ARG, or an OverflowError in mpi4py).

Usage: mpirun -np 2 python tests/mpi/big_p2p_check.py
Rank 0 sends rank 1 a list holding one (2 GiB + 8)-byte array and a small tensor (the fetch's payload shape), then
both send each other a small object under the same tag. Prints one JSON line per rank: what it received (the big
array's length, first and last bytes; the small objects) and the bytes counted under the tag.
"""

import json
import traceback

import numpy as np
import torch

from hpcdgnn.comm import Communicator

N = (1 << 31) + 8


def main(comm: Communicator) -> None:
    me, other = comm.rank, 1 - comm.rank
    out: dict = {"rank": me}
    if me == 0:
        table = np.zeros(N, dtype=np.uint8)
        table[0], table[-1] = 7, 9
        comm.wait_all([comm.isend_obj([(3, table, torch.arange(4))], 1, 11, "r.big")], "r.big")
        del table
    else:
        ((t, table, x),) = comm.recv_obj(0, 11, "r.big")
        out.update(length=int(table.shape[0]), ends=[int(table[0]), int(table[-1])], t=t, x=x.tolist(),
                   writeable=bool(table.flags.writeable))
        del table
    # after the big one, small objects both ways under one tag: order and matching as before
    sends = [comm.isend_obj({"from": me, "n": k}, other, 11, "r.big") for k in range(2)]
    out["small"] = [comm.recv_obj(other, 11, "r.big") for _ in range(2)]
    comm.wait_all(sends, "r.big")
    s = comm.stats.snapshot()["r.big"]
    out.update(sent=s.bytes_sent, got=s.bytes_recv)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    world = Communicator()
    try:
        main(world)
    except BaseException:
        traceback.print_exc()
        world.abort(1)  # the other rank would wait in its receive for ever
