"""Run under mpirun: the time halo's exchange (hpcdgnn.comm.autograd.time_halo) with deferred sends. Exit 0 = pass.

Usage: mpirun -np P python tests/mpi/time_halo_check.py

Rank p holds rows (p, 0..2) of a (3, 4, 2) block and sends its last two rows to rank p + 1 (the halo of a
window of 3). Rank 0 receives nothing forward and the last rank receives nothing backward: each must
defer its exchange (it only sends) and still complete it — at the next blocking collective of the
main communicator it must not hang, and at ``complete_deferred`` nothing may be left. The halo's values
and the gradient (the rows rank p + 1 read get its halo gradient added) are checked exactly; one JSON
line per rank reports how many exchanges each direction deferred, also for a halo reaching two ranks
back whose gradient arrives through ``torch.cat`` (:func:`reach_two`).
"""

import json

import torch

from hpcdgnn.comm import Communicator
from hpcdgnn.comm.autograd import time_halo


def main() -> None:
    comm = Communicator()
    P, me = comm.size, comm.rank
    deferred: list[str] = []  # the tags this rank deferred (Exchange.defer counted, then run)
    defer = comm.exchange.defer
    comm.exchange.defer = lambda p: (deferred.append(p.tag), defer(p))[1]
    S, N, F = 3, 4, 2
    y = (torch.arange(S * N * F, dtype=torch.float64).view(S, N, F) + 100.0 * me).requires_grad_()
    # the last two rows go to the next rank; the previous rank's last two rows land in my halo
    send = [((S - 2, S), (0, N)) if q == me + 1 else ((0, 0), (0, N)) for q in range(P)]
    need = 2 if me > 0 else 0
    recv = [((0, need), (0, N)) if p == me - 1 else ((0, 0), (0, N)) for p in range(P)]
    y2, halo = time_halo(y, comm, (need, N, F), send, recv, tag="th", reuse="th")
    if me > 0:
        expect = torch.arange(S * N * F, dtype=torch.float64).view(S, N, F)[S - 2 :] + 100.0 * (me - 1)
        assert torch.equal(halo, expect), (me, halo)
    # a blocking collective while a rank still has its send in flight: ordered after it, no hang
    comm.allreduce_(torch.ones(1), "sum", tag="between")
    loss = (y2 * 2.0).sum() + (halo * 3.0).sum()
    loss.backward()
    comm.exchange.complete_deferred()
    assert not comm.exchange.deferred
    grad = torch.full((S, N, F), 2.0, dtype=torch.float64)
    if me < P - 1:
        grad[S - 2 :] += 3.0  # the next rank read these rows as its halo
    assert torch.equal(y.grad, grad), (me, y.grad)
    comm.barrier()
    reach_two(comm)
    print(json.dumps({"rank": me, "deferred_fwd": deferred.count("th.fwd"), "deferred_bwd": deferred.count("th.bwd"),
                      "two": [deferred.count("th2.fwd"), deferred.count("th2.bwd")]}), flush=True)


def reach_two(comm: Communicator) -> None:
    """A halo reaching two ranks back (rank p sends rows 1..2 to p + 1 and row 2 to p + 2), read through
    torch.cat as a banded encoder does (the gradient of the passed-through rows then arrives as a view:
    the copy-before-add path)."""
    P, me = comm.size, comm.rank
    S, N, F = 3, 4, 2
    y = (torch.arange(S * N * F, dtype=torch.float64).view(S, N, F) - 7.0 * me).requires_grad_()
    empty = ((0, 0), (0, N))
    send = [((1, S), (0, N)) if q == me + 1 else ((2, S), (0, N)) if q == me + 2 else empty for q in range(P)]
    older, newer = int(me >= 2), 2 * int(me >= 1)  # one row from me - 2 first (older), then two from me - 1
    recv = [((0, older), (0, N)) if p == me - 2 else ((older, older + newer), (0, N)) if p == me - 1 else empty
            for p in range(P)]
    y2, halo = time_halo(y, comm, (older + newer, N, F), send, recv, tag="th2")
    base = torch.arange(S * N * F, dtype=torch.float64).view(S, N, F)
    want = [base[2:] - 7.0 * (me - 2)] * (me >= 2) + [base[1:] - 7.0 * (me - 1)] * (me >= 1)
    assert torch.equal(halo, torch.cat(want) if want else halo), (me, halo)
    (torch.cat([halo, y2]) * 2.0).sum().backward()
    comm.exchange.complete_deferred()
    grad = torch.full((S, N, F), 2.0, dtype=torch.float64)
    grad[1:] += 2.0 * (me + 1 < P)  # read by me + 1
    grad[2:] += 2.0 * (me + 2 < P)  # read by me + 2
    assert torch.equal(y.grad, grad), (me, y.grad)


if __name__ == "__main__":
    main()
