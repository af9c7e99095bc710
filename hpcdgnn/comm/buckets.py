"""The gradient all-reduce in buckets, started during the backward pass (IBM §6.5, future work there).

With one flat all-reduce after ``backward`` (``comm.grad_buckets: 1``) every rank first finishes its
whole backward pass, then waits for the slowest, then reduces. :class:`GradientBuckets` cuts the
parameters into buckets in reverse order of registration (the last layers' gradients are complete
first, as in PyTorch DDP's reducer) and posts each bucket's non-blocking ``MPI_Iallreduce`` as soon as
all its gradients are complete, so the reductions move while earlier layers still backpropagate.

When is a gradient complete? A parameter's gradient may be accumulated several times in one step
(checkpoint blocks run the layers once per block; chunked time encoders once per chunk), so each
parameter's accumulations are counted by a post-accumulate hook, and a gradient counts as complete
when it has been accumulated as often as in the previous step. The first step posts nothing early.

What keeps it exact and deadlock-free:

* buckets are posted in bucket order on every rank (a ready bucket waits for the ones before it), on
  a communicator of their own, so their order never interleaves with the strategy's collectives,
  which ranks may reach at different points of their backward pass;
* if a gradient is accumulated again after its bucket was posted (a step that differs from the one
  before), the bucket is reduced again after the backward pass; ranks agree on which buckets with a
  small all-reduce of flags posted last, so they all repeat the same ones;
* the sum of a bucket is the sum the flat all-reduce computes, element for element (for P = 2 it is
  bit for bit; for larger P the MPI library may add in another order, a rounding difference).
"""

from __future__ import annotations

import torch

from hpcdgnn.comm.communicator import Communicator, Pending

__all__ = ["GradientBuckets", "bucket_bounds"]


def bucket_bounds(sizes: list[int], buckets: int) -> list[tuple[int, int]]:
    """Cut parameters of ``sizes`` (elements, in bucket order) into at most ``buckets`` runs of about equal
    elements; returns ``(first, last + 1)`` index ranges, none empty."""
    total = sum(sizes)
    k = max(1, min(buckets, len(sizes)))
    out, start, acc = [], 0, 0
    for i, n in enumerate(sizes):
        acc += n
        remaining_params = len(sizes) - (i + 1)
        remaining_buckets = k - len(out) - 1
        if remaining_buckets > 0 and (acc * k >= total * (len(out) + 1) or remaining_params == remaining_buckets):
            out.append((start, i + 1))
            start = i + 1
    out.append((start, len(sizes)))
    return [b for b in out if b[1] > b[0]]


class GradientBuckets:
    """Bucketed, overlapped sum all-reduce of ``params``' gradients over ``comm``'s ranks.

    Args:
        comm: the run's communicator; the buckets get a split of it of their own (counted in its stats).
        params: the model's parameters (the same list, in the same order, on every rank).
        buckets: how many buckets (at most one per parameter).
        tag: counter name of the reductions.
    """

    def __init__(self, comm: Communicator, params: list[torch.nn.Parameter], buckets: int,
                 tag: str = "grad_allreduce") -> None:
        self.comm = comm.split(0)  # collective: every rank builds its buckets at the same point
        self.params, self.tag = list(params), tag
        order = list(range(len(self.params)))[::-1]  # the last registered parameters finish first
        ranges = bucket_bounds([self.params[i].numel() for i in order], buckets)
        self.members = [order[a:b] for a, b in ranges]
        self.bucket_of = {i: b for b, m in enumerate(self.members) for i in m}
        self.flat = [torch.zeros(sum(self.params[i].numel() for i in m), dtype=self.params[m[0]].dtype)
                     for m in self.members]
        self.expected: list[int] | None = None
        #: buckets posted during a backward pass (not at :meth:`synchronize`) so far: the overlap taken
        self.early = 0
        self._reset()
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(self.params)]

    def _reset(self) -> None:
        self.count = [0] * len(self.params)
        self.posted: list[Pending | None] = [None] * len(self.members)
        self.stale = [False] * len(self.members)

    def _hook(self, i: int):
        def on_accumulate(_p: torch.Tensor) -> None:
            self.count[i] += 1
            b = self.bucket_of[i]
            if self.posted[b] is not None:
                self.stale[b] = True  # accumulated after its bucket left: reduce it again after backward
            elif self.expected is not None:
                self._post_ready()
        return on_accumulate

    def _complete(self, b: int) -> bool:
        assert self.expected is not None
        return all(self.count[i] >= self.expected[i] > 0 for i in self.members[b])

    def _post_ready(self) -> None:
        """Post, in bucket order, every bucket whose gradients are all complete."""
        for b in range(len(self.members)):
            if self.posted[b] is not None:
                continue
            if not self._complete(b):
                return
            self._post(b)
            self.early += 1

    def _post(self, b: int) -> None:
        flat, offset = self.flat[b], 0
        for i in self.members[b]:
            p, n = self.params[i], self.params[i].numel()
            if p.grad is None:
                flat[offset : offset + n].zero_()
            else:
                flat[offset : offset + n].copy_(p.grad.detach().reshape(-1))
            offset += n
        self.posted[b] = self.comm.iallreduce_(flat, tag=self.tag)

    def synchronize(self) -> None:
        """After the backward pass: post what is left, wait for every bucket, redo the buckets some rank
        accumulated into after posting, and write the summed gradients back to ``.grad``."""
        for b in range(len(self.members)):
            if self.posted[b] is None:
                self._post(b)
        flags = torch.tensor([float(s) for s in self.stale], dtype=torch.float64)
        agree = self.comm.iallreduce_(flags, tag=self.tag)
        for p in self.posted:
            self.comm.exchange.wait(p)
        self.comm.exchange.wait(agree)
        for b in range(len(self.members)):
            if flags[b] > 0:  # every rank sees the same flags, so all repeat the same buckets, in order
                self._post(b)
                self.comm.exchange.wait(self.posted[b])
        for b, members in enumerate(self.members):
            flat, offset = self.flat[b], 0
            for i in members:
                p, n = self.params[i], self.params[i].numel()
                p.grad = flat[offset : offset + n].view_as(p).clone()
                offset += n
        self.expected = self.count
        self._reset()

    def serves(self, params: list[torch.nn.Parameter]) -> bool:
        """Whether these are the parameters the buckets were built for (the same objects, in order)."""
        return len(params) == len(self.params) and all(p is q for p, q in zip(params, self.params, strict=True))

    def close(self) -> None:
        """Remove the hooks (the parameters outlive this object) and free the buckets' communicator
        (every rank closes at the same point, after :meth:`synchronize`: nothing is pending on it)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self.comm is not None:
            self.comm.free()
            self.comm = None
