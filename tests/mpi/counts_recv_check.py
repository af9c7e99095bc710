"""Run under mpirun: the bytes each small collective of the communicator counts as sent and received.

Usage: mpirun -np P python tests/mpi/counts_recv_check.py
Prints one JSON line per rank: per tag, [bytes_sent, bytes_recv] this rank counted. Broadcasts run under the
default tag ("setup") and an evaluation tag ("metrics"), gathers under their default ("metrics") and another.
"""

import json
import pickle

import torch

from hpcdgnn.comm import Communicator


def main() -> None:
    comm = Communicator()
    me = comm.rank
    obj = {"rank": me, "pad": "x" * (10 + me)}  # a size of its own on each rank
    comm.allreduce_array([1.0, 2.0, 3.0], tag="r.allreduce")
    got = comm.gather_array([float(me)] * 5)  # tag "metrics"
    assert got.tolist() == [[float(r)] * 5 for r in range(comm.size)]
    comm.gather_array([float(me)] * 4, tag="r.gather")
    comm.allgather_obj(obj, tag="r.allgather")
    comm.bcast_obj(obj, root=1, tag="r.bcast_obj")
    t = torch.full((7,), float(me), dtype=torch.float64)
    comm.bcast_(t)  # tag "setup"
    assert t.tolist() == [0.0] * 7
    comm.bcast_(torch.zeros(6, dtype=torch.float32), root=comm.size - 1, tag="r.bcast")
    now = comm.stats.snapshot()
    counted = {tag: [now[tag].bytes_sent, now[tag].bytes_recv] for tag in
               ("r.allreduce", "metrics", "r.gather", "r.allgather", "r.bcast_obj", "setup", "r.bcast")}
    print(json.dumps({"rank": me, "counted": counted, "obj": len(pickle.dumps(obj)),
                      "root_obj": len(pickle.dumps({"rank": 1, "pad": "x" * 11}))}))


if __name__ == "__main__":
    main()
