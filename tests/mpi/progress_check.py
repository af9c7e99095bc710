"""Run under mpirun: exchanges moved by the progress thread (``comm.progress: thread``). Exit 0 = pass.

Usage: mpirun -np P python tests/mpi/progress_check.py [dedicated]

The thread is started on the run's communicator *after* a split was made from it (as the gradient
buckets' is, at model setup): exchanges posted on the parent and on the split must both go to the
thread. Rank r sends to rank q the box of rows [q, q + 1) of a (P, 5, 3) tensor filled with 100 r + q,
so every received box, its own included (which the thread copies), names its sender. The training thread
computes (an unrelated product) while they move, then waits; an all-reduce on the split sums ranks.
Prints one JSON line per rank: whether both exchanges were the thread's, what arrived, and
``progress.everywhere`` on the communicator and the split, then after ``progress.stop``.

Then the thread must take up an exchange posted while it waits on another that cannot complete yet: rank 0
posts A on the communicator and B on the split, and waits for B; the other ranks complete B, sleep
``HOLD_S``, and only then post A. Rank 0's wait for B must not last until A completes (``b_wait_s``).

``dedicated``: every rank is told it has a spare core, so its thread waits inside ``MPI_Waitsome`` (and
only a message to itself ends that wait for B); without it, on a node without spare cores, it polls.
"""

import json
import sys
import time

import torch

import hpcdgnn.comm.progress as progress
from hpcdgnn.comm import Communicator

HOLD_S = 2.0


def main() -> None:
    """Post, compute, wait; print this rank's findings."""
    comm = Communicator()
    P, me = comm.size, comm.rank
    child = comm.split(0)
    started = comm.progress.start("thread", 1)
    x = torch.stack([torch.full((5, 3), 100.0 * me + q) for q in range(P)])
    recv = torch.full((P, 5, 3), -1.0)
    p = comm.exchange.ialltoall_boxes(x, [((q, q + 1), (0, 5)) for q in range(P)], recv,
                             [((s, s + 1), (0, 5)) for s in range(P)], tag="check")
    total = torch.full((4,), float(me + 1), dtype=torch.float64)
    r = child.iallreduce_(total, tag="check.sum")
    a = torch.randn(300, 300)
    for _ in range(20):  # the training thread computes meanwhile
        a = torch.tanh(a @ a * 1e-3)
    comm.exchange.test([p])
    got = comm.exchange.wait(p)
    child.exchange.wait(r)
    ok = all(bool((got[s] == 100.0 * s + me).all()) for s in range(P))
    everywhere = [comm.progress.everywhere, child.progress.everywhere]  # the split reads its root's
    a, b = torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    if me == 0:
        pa = comm.iallreduce_(a, tag="check.a")
        thread, deadline = comm.progress.thread, time.perf_counter() + 10.0
        while thread.dedicated and not thread._in_wait:  # inside Waitsome on A now: only the bell can end it
            assert time.perf_counter() < deadline, "the thread never waited inside MPI"
            time.sleep(1e-3)
        time.sleep(0.1)
        t0 = time.perf_counter()
        child.exchange.wait(child.iallreduce_(b, tag="check.b"))
        b_wait = time.perf_counter() - t0
        comm.exchange.wait(pa)
    else:
        child.exchange.wait(child.iallreduce_(b, tag="check.b"))
        time.sleep(HOLD_S)
        comm.exchange.wait(comm.iallreduce_(a, tag="check.a"))
        b_wait = 0.0
    dedicated = comm.progress.thread.dedicated
    comm.progress.stop()
    everywhere.append(comm.progress.everywhere)
    print(json.dumps({"rank": me, "threads": started, "adopted": [p.completed is not None, r.completed is not None],
                      "boxes_ok": ok, "sum": total.tolist(), "everywhere": everywhere, "dedicated": dedicated,
                      "b_wait_s": b_wait, "ab": a.tolist() + b.tolist()}), flush=True)
    child.free()


if __name__ == "__main__":
    if sys.argv[1:] == ["dedicated"]:
        progress.spare_core = lambda comm, threads: True  # as on a node with a core to spare per rank
    main()
