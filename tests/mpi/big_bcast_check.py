"""Run under mpirun: ``Communicator.bcast_obj`` of an object holding more than 2 GiB (a plan's (T, N) tables at
scale), which one pickled MPI-3 message cannot carry (MPI_ERR_ARG, or an OverflowError in mpi4py).

Usage: mpirun -np P python tests/mpi/big_bcast_check.py
Prints one JSON line per rank: the received array's length, its first and last bytes, and the bytes counted.
"""

import json

import numpy as np

from hpcdgnn.comm import Communicator

N = (1 << 31) + 8


def main() -> None:
    comm = Communicator()
    obj = None
    if comm.rank == 0:
        table = np.zeros(N, dtype=np.uint8)
        table[0], table[-1] = 7, 9
        obj = {"kind": "chunk", "table": table}
    got = comm.bcast_obj(obj, tag="r.big")
    table = got["table"]
    print(json.dumps({"rank": comm.rank, "length": int(table.shape[0]), "ends": [int(table[0]), int(table[-1])],
                      "kind": got["kind"], "sent": comm.stats.snapshot()["r.big"].bytes_sent}), flush=True)


if __name__ == "__main__":
    main()
