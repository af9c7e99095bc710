"""The gradient all-reduce in buckets, started during the backward pass (IBM §6.5, future work there).

Buckets are cut in reverse registration order (as PyTorch DDP's reducer) and each is posted as a non-blocking
``MPI_Iallreduce`` once its gradients are complete: accumulated as often as in the previous step (checkpoint
blocks and chunks accumulate several times). Buckets go in bucket order on a communicator of their own, so
they never interleave with the strategy's collectives; a bucket accumulated into after posting is reduced again,
the ranks agreeing by a final all-reduce of flags. Sums equal the flat all-reduce's up to MPI's summation order.
"""

from __future__ import annotations

import torch

from hpcdgnn.comm.communicator import Communicator, Pending

__all__ = ["GradientBuckets", "bucket_bounds"]


def bucket_bounds(sizes: list[int], buckets: int) -> list[tuple[int, int]]:
    """``(first, last + 1)`` ranges cutting ``sizes`` into at most ``buckets`` non-empty runs of about equal size."""
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
    """Bucketed, overlapped sum all-reduce of ``params``' gradients (same list on every rank) over ``comm``."""

    def __init__(self, comm: Communicator, params: list[torch.nn.Parameter], buckets: int,
                 tag: str = "grad_allreduce") -> None:
        self.comm = comm.split(0)
        self.params, self.tag = list(params), tag
        order = list(range(len(self.params)))[::-1]  # the last registered parameters finish first
        ranges = bucket_bounds([self.params[i].numel() for i in order], buckets)
        self.members = [order[a:b] for a, b in ranges]
        self.bucket_of = {i: b for b, m in enumerate(self.members) for i in m}
        self.flat = [torch.zeros(sum(self.params[i].numel() for i in m), dtype=self.params[m[0]].dtype)
                     for m in self.members]
        self.expected: list[int] | None = None
        #: buckets posted during a backward pass so far
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
        """After backward: post the rest, wait, redo stale buckets, write the sums to ``.grad``."""
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

    def close(self, collective: bool = True) -> None:
        """Remove the hooks and free the buckets' communicator (collective, after :meth:`synchronize`);
        ``collective=False`` (an error unwinding this rank alone): the hooks only."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self.comm is not None and collective:
            self.comm.free()
            self.comm = None
