"""Run under mpirun: the bytes each small collective of the communicator counts as sent. Exit 0 = pass.

Usage: mpirun -np P python tests/mpi/counts_check.py
Prints one JSON line per rank: per tag, the bytes this rank counted (docs/results.md: an all-reduce's buffer
once, a broadcast's or all-gather's once per rank that receives it).
"""

import json
import pickle

import torch

from hpcdgnn.comm import Communicator


def main() -> None:
    comm = Communicator()
    me = comm.rank
    obj = {"rank": me, "pad": "x" * (10 + me)}  # a size of its own on each rank
    comm.allreduce_array([1.0, 2.0, 3.0], tag="c.allreduce")
    comm.gather_array([float(me)] * 5, tag="c.gather")
    got = comm.allgather_obj(obj, tag="c.allgather")
    assert [g["rank"] for g in got] == list(range(comm.size))
    comm.bcast_obj(obj, root=1, tag="c.bcast_obj")
    comm.bcast_(torch.zeros(7, dtype=torch.float64), root=0, tag="c.bcast")
    now = comm.stats.snapshot()
    counted = {tag: now[tag].bytes_sent for tag in
               ("c.allreduce", "c.gather", "c.allgather", "c.bcast_obj", "c.bcast")}
    print(json.dumps({"rank": me, "counted": counted, "obj": len(pickle.dumps(obj)),
                      "root_obj": len(pickle.dumps({"rank": 1, "pad": "x" * 11}))}))


if __name__ == "__main__":
    main()
