"""Run under mpirun: checks AllToAllV values, its gradient, and the S1 byte count. Exit 0 = pass.

Usage: mpirun -np P python tests/mpi/alltoall_check.py T N F [block|cyclic]
Prints one JSON line per rank with the bytes this rank counted for one
forward redistribution, for the pytest side to sum and compare.
"""

import json
import sys

import numpy as np
import torch

from hpcdgnn.comm import Communicator, all_to_all_rows
from hpcdgnn.partition import balanced_bounds
from hpcdgnn.partition.plan import PartitionPlan
from hpcdgnn.strategies.snapshot import SnapshotStrategy


def main() -> None:
    T, N, F = (int(a) for a in sys.argv[1:4])
    layout = sys.argv[4] if len(sys.argv) > 4 else "block"
    comm = Communicator()
    P, me = comm.size, comm.rank
    torch.manual_seed(0)

    # 1. AllToAllV against a single-process permutation: every rank knows the global tensor
    rows = [[(p * 7 + q * 3) % 5 for q in range(P)] for p in range(P)]  # rows p sends to q (some zero)
    glob = {(p, q): torch.randn(rows[p][q], F, dtype=torch.float64,
                                generator=torch.Generator().manual_seed(p * 100 + q))
            for p in range(P) for q in range(P)}
    send = torch.cat([glob[(me, q)] for q in range(P)]).requires_grad_(True)
    recv = all_to_all_rows(send, comm, rows[me], [rows[p][me] for p in range(P)], tag="test")
    expect = torch.cat([glob[(p, me)] for p in range(P)])
    assert torch.equal(recv.detach(), expect), f"rank {me}: wrong rows received"
    # gradient: loss = sum(w * recv) with w known globally -> d send = w routed back
    wts = {(p, q): torch.full((rows[p][q], F), float(1 + p + 10 * q), dtype=torch.float64)
           for p in range(P) for q in range(P)}
    (recv * torch.cat([wts[(p, me)] for p in range(P)])).sum().backward()
    assert torch.equal(send.grad, torch.cat([wts[(me, q)] for q in range(P)])), f"rank {me}: wrong gradient"

    # 2. one S1 forward redistribution: values land where IBM §4.2 says, bytes are counted
    sb, vb = balanced_bounds(T, P), balanced_bounds(N, P)
    if layout == "cyclic":
        owner, sb = [t % P for t in range(T)], None
    else:
        owner = [p for p in range(P) for _ in range(sb[p + 1] - sb[p])]
    plan = PartitionPlan(kind="snapshot", num_ranks=P, num_snapshots=T, num_vertices=N, snapshot_owner=owner,
                         snapshot_bounds=sb, vertex_bounds=vb, ranks=[])
    strat = SnapshotStrategy.__new__(SnapshotStrategy)
    strat.comm = comm
    strat._init_exchange(plan)
    full = torch.arange(T * N * F, dtype=torch.float32).reshape(T, N, F)  # value encodes (t, v, f)
    y = full[plan.snapshots_of(me)].clone()
    before = comm.stats.snapshot()
    z = strat._to_vertex(y, "test.v")
    fwd_bytes = comm.stats.since(before, "redistribute.fwd").bytes_sent
    assert torch.equal(z.detach(), full[:, vb[me] : vb[me + 1]]), f"rank {me}: vertex layout wrong"
    back = strat._to_snapshot(z, "test.s")
    assert torch.equal(back.detach(), y), f"rank {me}: round trip wrong"

    # 3. point to point (pipelines, placement fetch): a ring of nested payloads; each side counts the arrays'
    # bytes of the same object, so what a rank counts as received is what its left neighbour counted as sent
    def payload(p: int) -> list:
        return [(p, np.zeros(p + 2, dtype=np.int64), torch.ones(3, p + 1)),
                {"x": torch.zeros(p, dtype=torch.float64)}, None]

    def size(p: int) -> int:
        return 8 * (p + 2) + 4 * 3 * (p + 1) + 8 * p

    before = comm.stats.snapshot()
    req = comm.isend_obj(payload(me), (me + 1) % P, 7, "test.p2p")
    got = comm.recv_obj((me - 1) % P, 7, "test.p2p")
    comm.wait_all([req], "test.p2p")
    assert torch.equal(got[0][2], payload((me - 1) % P)[0][2]), f"rank {me}: wrong object received"
    s = comm.stats.since(before, "test.p2p")
    assert (s.bytes_sent, s.bytes_recv) == (size(me), size((me - 1) % P)), (me, s)
    print(json.dumps({"rank": me, "fwd_bytes": fwd_bytes}), flush=True)


if __name__ == "__main__":
    main()
