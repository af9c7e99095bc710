"""Run under mpirun: the time halo's exchange (hpcdgnn.comm.autograd.time_halo) with deferred sends. Exit 0 = pass.

Usage: mpirun -np P python tests/mpi/time_halo_check.py

Rank p holds rows (p, 0..2) of a (3, 4, 2) block and sends its last two rows to rank p + 1 (the halo of a
window of 3). Rank 0 receives nothing forward and the last rank receives nothing backward: each must
defer its exchange (it only sends) and still complete it — at the next blocking collective of the
main communicator it must not hang, and at ``complete_deferred`` nothing may be left. The halo's values
and the gradient (the rows rank p + 1 read get its halo gradient added) are checked exactly; one JSON
line per rank reports how many exchanges each direction deferred.
"""

import json

import torch

from hpcdgnn.comm import Communicator
from hpcdgnn.comm.autograd import time_halo


def main() -> None:
    comm = Communicator()
    P, me = comm.size, comm.rank
    S, N, F = 3, 4, 2
    y = (torch.arange(S * N * F, dtype=torch.float64).view(S, N, F) + 100.0 * me).requires_grad_()
    # the last two rows go to the next rank; the previous rank's last two rows land in my halo
    send = [((S - 2, S), (0, N)) if q == me + 1 else ((0, 0), (0, N)) for q in range(P)]
    need = 2 if me > 0 else 0
    recv = [((0, need), (0, N)) if p == me - 1 else ((0, 0), (0, N)) for p in range(P)]
    y2, halo = time_halo(y, comm, (need, N, F), send, recv, tag="th", reuse="th")
    deferred_fwd = len(comm._deferred)
    if me > 0:
        expect = torch.arange(S * N * F, dtype=torch.float64).view(S, N, F)[S - 2 :] + 100.0 * (me - 1)
        assert torch.equal(halo, expect), (me, halo)
    # a blocking collective while a rank still has its send in flight: ordered after it, no hang
    comm.allreduce_(torch.ones(1), "sum", tag="between")
    loss = (y2 * 2.0).sum() + (halo * 3.0).sum()
    loss.backward()
    deferred_bwd = len(comm._deferred) - deferred_fwd
    comm.complete_deferred()
    assert not comm._deferred
    grad = torch.full((S, N, F), 2.0, dtype=torch.float64)
    if me < P - 1:
        grad[S - 2 :] += 3.0  # the next rank read these rows as its halo
    assert torch.equal(y.grad, grad), (me, y.grad)
    comm.barrier()
    print(json.dumps({"rank": me, "deferred_fwd": deferred_fwd, "deferred_bwd": deferred_bwd}), flush=True)


if __name__ == "__main__":
    main()
