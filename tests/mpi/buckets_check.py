"""Run under mpirun: GradientBuckets against a flat all-reduce, step by step. Exit 0 = pass.

Usage: mpirun -np P python tests/mpi/buckets_check.py

Five parameters of different sizes in 3 buckets. Each step, every rank runs a number of backward
passes that depends on the rank and the step (rank 1 in step 3 accumulates into the last parameters
once more than it did in step 2, after their bucket left), one parameter goes unused in step 4, and a
blocking collective of the main communicator runs after the first backward pass (as a strategy's
redistribution does). After each step the summed gradients must equal those of a flat all-reduce of
the same local gradients, bit for bit at P <= 2 and to 1e-12 otherwise; the reposted buckets are
printed so the test can see the path was taken.
"""

import json

import torch

from hpcdgnn.comm import Communicator
from hpcdgnn.comm.buckets import GradientBuckets


def main() -> None:
    comm = Communicator()
    P, me = comm.size, comm.rank
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, dtype=torch.float64)) for n in (7, 3, 11, 2, 5)]
    buckets = GradientBuckets(comm, params, 3)
    reposted = []
    for step in range(1, 6):
        passes = 1 + (me == 1 and step == 3)
        local = [torch.zeros_like(p) for p in params]
        for k in range(passes + (step == 1)):
            g = torch.Generator().manual_seed(1000 * step + 10 * me + k)
            used = [i for i in range(len(params)) if not (step == 4 and i == 2)]
            # the last parameters only in the extra pass: rank 1's step-3 second pass touches 3 and 4 again
            if k == passes and step == 1:
                used = [0, 1]
            loss = sum((params[i] * torch.randn(params[i].shape, dtype=torch.float64, generator=g)).sum()
                       for i in used)
            for i in used:
                local[i] += torch.autograd.grad(loss, params[i], retain_graph=True)[0]
            loss.backward()
            if k == 0:  # the strategy's collectives, the same on every rank, after buckets were posted
                comm.allreduce_(torch.ones(4, dtype=torch.float64), tag="other")
        stale_before = list(buckets.stale)
        buckets.synchronize()
        flat = torch.cat([g.reshape(-1) for g in local])
        comm.allreduce_(flat, tag="reference")
        got = torch.cat([p.grad.reshape(-1) for p in params])
        if P <= 2:
            assert torch.equal(got, flat), f"rank {me} step {step}: {got} vs {flat}"
        else:
            assert torch.allclose(got, flat, rtol=1e-12, atol=0), f"rank {me} step {step}"
        reposted.append(sum(stale_before))
        for p in params:
            p.grad = None
    raw = buckets.comm._comm
    buckets.close()  # frees the buckets' own communicator (a rebuilt strategy makes a new one)
    from mpi4py import MPI

    assert buckets.comm is None and raw == MPI.COMM_NULL, f"rank {me}: the buckets' communicator was not freed"
    print(json.dumps({"rank": me, "stale": reposted, "buckets": len(buckets.members),
                      "calls": comm.stats.tags["grad_allreduce"].calls, "early": buckets.early}))


if __name__ == "__main__":
    main()
