"""Run under mpirun: whom the wait accounting blames (``hpcdgnn.metrics.waits``). Exit 0 = ran.

Usage: mpirun -np P python tests/mpi/waits_check.py DELAY

Three exchanges among all ranks, each with one straggler that sleeps DELAY seconds first:

* ``block``: a blocking all-to-all; rank P-1 arrives late;
* ``posted``: a non-blocking one that every rank waits for at once; rank 0 posts late;
* ``hidden``: a non-blocking one; rank 1 posts late, and rank 0 computes (sleeps 2 DELAY) after its post
  before it waits, so by then every rank has arrived: nothing of its wait is the straggler's.

Then :func:`late_waits` on the same records once with rank 0 naming one exchange differently, once with
rank 0 missing one: both must give None on every rank. Prints one JSON line per rank.
"""

import json
import sys
import time

import torch

from hpcdgnn.comm import Communicator
from hpcdgnn.comm.exchange_log import ExchangeLog
from hpcdgnn.metrics.waits import late_waits


def main() -> None:
    """The three exchanges, then this rank's late and exposed seconds per tag."""
    delay = float(sys.argv[1])
    comm = Communicator()
    P, me = comm.size, comm.rank
    x = torch.stack([torch.full((5, 3), 100.0 * me + q) for q in range(P)])
    send = [((q, q + 1), (0, 5)) for q in range(P)]
    recv_boxes = [((s, s + 1), (0, 5)) for s in range(P)]
    before = comm.stats.snapshot()
    comm.stats.keep_exchanges = True
    comm.stats.take_exchanges()  # the setup's

    if me == P - 1:
        time.sleep(delay)
    comm.exchange.alltoall_boxes(x, send, (P, 5, 3), recv_boxes, tag="block")

    if me == 0:
        time.sleep(delay)
    p = comm.exchange.ialltoall_boxes(x, send, torch.empty(P, 5, 3), recv_boxes, tag="posted")
    comm.exchange.wait(p)

    if me == 1:
        time.sleep(delay)
    p = comm.exchange.ialltoall_boxes(x, send, torch.empty(P, 5, 3), recv_boxes, tag="hidden")
    if me == 0:
        time.sleep(2 * delay)
    comm.exchange.wait(p)

    exchanges, _ = comm.stats.take_exchanges()
    exposed = {k: v.exposed for k, v in comm.stats.delta(before).items()}
    late = late_waits(comm, exchanges)
    records = list(exchanges.records())
    no_tag = late_waits(comm, ExchangeLog.of((("other" if i == 1 and me == 0 else tag), a, b)
                                             for i, (tag, a, b) in enumerate(records)))
    no_count = late_waits(comm, ExchangeLog.of(records[1:] if me == 0 else records))
    print(json.dumps({"rank": me, "late": late, "exposed": exposed,
                      "renamed": no_tag, "missing": no_count}), flush=True)


if __name__ == "__main__":
    main()
