"""The exchanges of tensor blocks between all ranks (``comm.exchange``), blocking and posted.

Rows (``alltoallv``) or strided boxes (``alltoall_boxes``: MPI_Alltoallw with subarray datatypes, so neither
side packs), blocking or posted and completed by :meth:`Exchange.test` / :meth:`Exchange.wait` or deferred;
receive buffers and datatypes are reused between calls. Over gloo / nccl boxes are packed and all is blocking.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["MAX_COUNT", "Box", "Exchange", "Pending", "Requests"]

#: The most elements (or datatype items) one MPI-3 call's count or displacement can name: a C int. Buffers past
#: it go in pieces (Open MPI 5 is an MPI-3.1 library, without MPI-4's large-count calls).
MAX_COUNT = 2**31 - 1

#: A box ``(rows, (b0, b1))``: rows a range ``(a0, a1)`` or a ``list`` (then dimension 1 whole); trailing dims whole.
Box = tuple[tuple[int, int] | list[int], tuple[int, int]]


def _box_rows(spec: tuple[int, int] | list[int]) -> list[int] | range:
    return spec if isinstance(spec, list) else range(spec[0], spec[1])


def _row_index(spec: tuple[int, int] | list[int]) -> slice | list[int]:
    """Torch index of a box's rows: a strided slice when evenly spaced (a plain copy, not a gather)."""
    if not isinstance(spec, list):
        return slice(spec[0], spec[1])
    if len(spec) == 1:
        return slice(spec[0], spec[0] + 1)
    step = spec[1] - spec[0]
    if step > 0 and all(b - a == step for a, b in zip(spec, spec[1:], strict=False)):
        return slice(spec[0], spec[-1] + 1, step)
    return spec


class Pending:
    """A non-blocking exchange in flight, holding its buffers until :meth:`Exchange.wait`."""

    __slots__ = ("request", "tag", "recv", "keep", "done", "entry")

    def __init__(self, request: Any, tag: str, recv: torch.Tensor, keep: tuple) -> None:
        self.request, self.tag, self.recv, self.keep = request, tag, recv, keep
        self.done = request is None  # completed at post (one rank, or a blocking backend)
        #: its record in ``CommStats.exchanges`` (None: not kept)
        self.entry: tuple | None = None


#: the tag of :meth:`Exchange.alltoallv`'s point-to-point messages (below 32767, the least ``MPI_TAG_UB``)
_ROWS_TAG = 32_001


def _messages(buf: np.ndarray, start: int, n: int, rowt: Any) -> list[list]:
    """Buffer specs of rows ``start .. start + n`` of ``buf`` in messages of at most :data:`MAX_COUNT` rows."""
    start, stop = int(start), int(start + n)
    return [[buf[a : min(a + MAX_COUNT, stop)], min(MAX_COUNT, stop - a), rowt] for a in range(start, stop, MAX_COUNT)]


class Requests:
    """Several MPI requests completed as one (a posted collective cut into pieces): what :class:`Pending` holds."""

    __slots__ = ("MPI", "requests")

    def __init__(self, MPI: Any, requests: list[Any]) -> None:
        self.MPI, self.requests = MPI, requests

    def Test(self) -> bool:
        """Whether all completed (all or none: on False none is completed)."""
        return bool(self.MPI.Request.Testall(self.requests))

    def Wait(self) -> None:
        """Block until all completed."""
        self.MPI.Request.Waitall(self.requests)


def _run(copy: Callable[[], None] | None) -> None:
    if copy is not None:
        copy()


class Exchange:
    """The all-to-all exchanges of ``comm`` and their kept receive buffers, datatypes and deferred posts."""

    def __init__(self, comm: Any) -> None:
        self._owner = comm
        self._row_types: dict[tuple[Any, int], Any] = {}
        self._buffers: dict[str, torch.Tensor] = {}
        self._box_types: dict[tuple, Any] = {}
        #: posted exchanges this rank only sends in, completed at :meth:`complete_deferred`
        self._deferred: list[Pending] = []

    def _row_type(self, dtype: torch.dtype, unit: int) -> Any:
        """A contiguous MPI datatype of ``unit`` elements, so counts in rows stay below int32's limit."""
        c = self._owner
        key = (dtype, unit)
        if key not in self._row_types:
            self._row_types[key] = c._mpi_type(dtype).Create_contiguous(unit).Commit()
        return self._row_types[key]

    def alltoallv(
        self,
        send: torch.Tensor,
        send_rows: Sequence[int],
        recv_rows: Sequence[int] | None = None,
        tag: str = "alltoallv",
        reuse: str | None = None,
    ) -> torch.Tensor:
        """MPI_Alltoallv of a 2-D tensor in rows: ``send[rows for q]`` go to rank q, in rank order.

        Counts and displacements are rows (a datatype of ``unit`` elements), of any number: where a rank's rows
        pass ``MAX_COUNT // P`` a side, a C int (MPI-3's count) may not name them, and
        :meth:`_alltoallv_large` sends the larger pairs point to point.

        Args:
            send: (sum(send_rows), unit) tensor, blocks for ranks 0..P-1 one after another.
            send_rows: rows destined to each rank.
            recv_rows: rows arriving from each rank; exchanged with an integer Alltoall if None.
            tag: counter name.
            reuse: key of a receive buffer kept between calls (fresh ones cost more in page faults than
                the transfer); the result is valid until the next call with that key.

        Returns:
            (sum(recv_rows), unit) tensor, blocks from ranks 0..P-1 in order.
        """
        c = self._owner
        t0 = c.stats.enter(tag)
        if send.dim() != 2:
            raise ValueError("alltoallv: send must be 2-D (rows, unit)")
        unit = int(send.shape[1])
        scounts = np.asarray(send_rows, dtype=np.int64)
        if recv_rows is None:
            rcounts = np.empty(c.size, dtype=np.int64)
            c._comm.Alltoall(scounts, rcounts)
        else:
            rcounts = np.asarray(recv_rows, dtype=np.int64)
        if scounts.sum() != send.shape[0]:
            raise ValueError(f"alltoallv: send has {send.shape[0]} rows, counts sum to {scounts.sum()}")
        if c.size == 1:
            c._counted(tag, 0, 0, t0)
            return send.detach()
        if c._dist is not None:
            recv = self._dist_alltoall(send, [int(n) * unit for n in scounts], [int(n) * unit for n in rcounts])
            recv = recv.view(int(rcounts.sum()), unit)
            row_bytes = unit * send.element_size()
            sent = int(scounts.sum() - scounts[c.rank]) * row_bytes
            got = int(rcounts.sum() - rcounts[c.rank]) * row_bytes
            c._counted(tag, sent, got, t0)
            return recv.to(send.device)
        host = c._host(send)
        recv = self._recv_buffer(int(rcounts.sum()), unit, send.dtype, reuse)
        entered = time.perf_counter()
        if unit > 0:
            rowt = self._row_type(send.dtype, unit)
            limit = MAX_COUNT // c.size
            if send.shape[0] <= limit and recv.shape[0] <= limit:  # no pair passes limit: every count fits
                sdispl = np.concatenate([[0], np.cumsum(scounts)[:-1]])
                rdispl = np.concatenate([[0], np.cumsum(rcounts)[:-1]])
                c._comm.Alltoallv(
                    [host.numpy(), (scounts.astype(np.int32), sdispl.astype(np.int32)), rowt],
                    [recv.numpy(), (rcounts.astype(np.int32), rdispl.astype(np.int32)), rowt],
                )
            else:
                self._alltoallv_large(host, scounts, recv, rcounts, rowt, limit)
        row_bytes = unit * send.element_size()
        me = c.rank
        sent = int(scounts.sum() - scounts[me]) * row_bytes
        got = int(rcounts.sum() - rcounts[me]) * row_bytes
        c._counted(tag, sent, got, t0, entered)
        return recv.to(send.device)

    def _alltoallv_large(self, host: torch.Tensor, scounts: np.ndarray, recv: torch.Tensor, rcounts: np.ndarray,
                         rowt: Any, limit: int) -> None:
        """:meth:`alltoallv`'s transfer where a count or displacement in rows may pass a C int (MPI-3's).

        A pair's rows go point to point, in messages of at most :data:`MAX_COUNT` rows, where they pass ``limit``
        (``MAX_COUNT // P``; both ranks of a pair know its count, so they agree with no further message), this
        rank's own by a copy; the others go in the one MPI_Alltoallv every rank makes, at most ``P · limit`` rows
        a side, sent from and received into packed copies where a displacement would not fit (each rank's own
        choice: displacements are local).

        Shapes:
            host (sum(scounts), unit), recv (sum(rcounts), unit); ``rowt``: the datatype of one row.
        """
        c = self._owner
        me = c.rank
        hn, rn = host.numpy(), recv.numpy()
        sdispl, rdispl = np.cumsum(scounts) - scounts, np.cumsum(rcounts) - rcounts
        sbig, rbig = scounts > limit, rcounts > limit

        reqs = [c._comm.Irecv(m, source=int(p), tag=_ROWS_TAG)
                for p in np.flatnonzero(rbig) if p != me for m in _messages(rn, rdispl[p], rcounts[p], rowt)]
        reqs += [c._comm.Isend(m, dest=int(q), tag=_ROWS_TAG)
                 for q in np.flatnonzero(sbig) if q != me for m in _messages(hn, sdispl[q], scounts[q], rowt)]
        if sbig[me]:
            n = int(scounts[me])
            rn[rdispl[me] : rdispl[me] + n] = hn[sdispl[me] : sdispl[me] + n]
        scounts, rcounts = np.where(sbig, 0, scounts), np.where(rbig, 0, rcounts)
        sbuf, sd = hn, np.where(scounts > 0, sdispl, 0)
        if sd.max() > MAX_COUNT:  # a block behind the big ones: send from a packed copy
            sbuf = np.concatenate([hn[a : a + n] for a, n in zip(sdispl, scounts, strict=True) if n])
            sd = np.cumsum(scounts) - scounts
        rbuf, rd = rn, np.where(rcounts > 0, rdispl, 0)
        if rd.max() > MAX_COUNT:
            rbuf = np.empty((int(rcounts.sum()), rn.shape[1]), dtype=rn.dtype)
            rd = np.cumsum(rcounts) - rcounts
        c._comm.Alltoallv([sbuf, (scounts.astype(np.int32), sd.astype(np.int32)), rowt],
                          [rbuf, (rcounts.astype(np.int32), rd.astype(np.int32)), rowt])
        if rbuf is not rn:
            for p in np.flatnonzero(rcounts):
                rn[rdispl[p] : rdispl[p] + rcounts[p]] = rbuf[rd[p] : rd[p] + rcounts[p]]
        c._MPI.Request.Waitall(reqs)

    def _dist_alltoall(self, send: torch.Tensor, scounts: list[int], rcounts: list[int]) -> torch.Tensor:
        """all_to_all_single of a flat buffer over torch.distributed (counts in elements)."""
        c = self._owner
        import torch.distributed as dist

        dev = c._dist_device
        flat = send.detach().reshape(-1).to(dev)
        out = torch.empty(sum(rcounts), dtype=send.dtype, device=dev)
        with c._dist_call("all_to_all_single", c.stats.current):
            dist.all_to_all_single(out, flat, rcounts, scounts, group=c._dist)
        return out

    def _recv_buffer(self, rows: int, unit: int, dtype: torch.dtype, key: str | None) -> torch.Tensor:
        if key is None:
            return torch.empty((rows, unit), dtype=dtype)
        buf = self._buffers.get(key)
        if buf is None or buf.dtype != dtype or buf.numel() < rows * unit:
            buf = torch.empty(rows * unit, dtype=dtype)
            self._buffers[key] = buf
        return buf[: rows * unit].view(rows, unit)

    def buffer(self, key: str, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A host tensor of ``shape`` kept under ``key`` from call to call (see ``reuse`` in :meth:`alltoallv`)."""
        shape = tuple(int(d) for d in shape)
        return self._recv_buffer(int(np.prod(shape)), 1, dtype, key).view(shape)

    def _box_type(self, shape: tuple[int, ...], box: Box, dtype: torch.dtype) -> tuple[int, Any]:
        """(count, datatype) selecting ``box`` of a C-ordered tensor of ``shape``; (0, BYTE) if empty."""
        c = self._owner
        rows, (b0, b1) = box
        nrows = len(_box_rows(rows))
        if nrows == 0 or b1 <= b0 or min(shape[2:], default=1) <= 0:
            return 0, c._MPI.BYTE
        key = (shape, tuple(rows) if isinstance(rows, list) else rows, isinstance(rows, list), (b0, b1), dtype)
        if key not in self._box_types:
            base = c._mpi_type(dtype)
            if isinstance(rows, list):
                if (b0, b1) != (0, shape[1]):
                    raise ValueError("alltoall_boxes: a row-list box must take dimension 1 whole")
                row = base.Create_contiguous(int(np.prod(shape[1:])))
                t = row.Create_indexed_block(1, rows)
                row.Free()
            else:
                a0, a1 = rows
                sub = [a1 - a0, b1 - b0, *shape[2:]]
                t = base.Create_subarray(list(shape), sub, [a0, b0] + [0] * (len(shape) - 2))
            self._box_types[key] = t.Commit()
        return 1, self._box_types[key]

    def alltoall_boxes(
        self,
        send: torch.Tensor,
        send_boxes: Sequence[Box],
        recv_shape: Sequence[int],
        recv_boxes: Sequence[Box],
        tag: str = "alltoall",
        reuse: str | None = None,
    ) -> torch.Tensor:
        """MPI_Alltoallw between sub-boxes of two tensors, with no packing copies on our side.

        Rank q receives ``send[send_boxes[q]]``; rank p's box lands in ``recv[recv_boxes[p]]``. Elements no
        box covers keep the reused buffer's old data: a caller leaving some out clears them itself.

        Args:
            send: contiguous tensor of at least 2 dimensions.
            send_boxes: per destination rank, the box of ``send`` to send.
            recv_shape: shape of the result.
            recv_boxes: per source rank, where its box lands in the result.
            tag: counter name (bytes of boxes for other ranks are counted).
            reuse: receive-buffer key (see :meth:`alltoallv`).
        """
        c = self._owner
        t0 = c.stats.enter(tag)
        recv_shape = tuple(int(d) for d in recv_shape)
        shape = tuple(send.shape)
        if c.size == 1:
            if list(send_boxes[0]) == [(0, shape[0]), (0, shape[1])] and recv_shape == shape:
                c._counted(tag, 0, 0, t0)
                return send.detach()
        sent, got = self._box_volumes(send, send_boxes, recv_shape, recv_boxes)
        if c._dist is not None:
            recv = self._boxes_over_dist(send, send_boxes, recv_shape, recv_boxes)
            c._counted(tag, sent, got, t0)
            return recv.to(send.device)
        host = c._host(send)
        recv = self._recv_buffer(int(np.prod(recv_shape)), 1, send.dtype, reuse).view(recv_shape)
        _run(self._own_box_copy(host, send_boxes, recv, recv_boxes))
        args = self._boxes_args(host, send_boxes, recv, recv_boxes)
        entered = time.perf_counter()
        c._comm.Alltoallw(*args)
        c._counted(tag, sent, got, t0, entered)
        return recv.to(send.device)

    def _box_volumes(self, send: torch.Tensor, send_boxes: Sequence[Box], recv_shape: tuple[int, ...],
                     recv_boxes: Sequence[Box]) -> tuple[int, int]:
        """Bytes of the boxes for other ranks and of those from other ranks (the counters' figures)."""
        c = self._owner
        inner = int(np.prod(send.shape[2:])) if send.dim() > 2 else 1
        item, me = send.element_size(), c.rank

        def volume(box: Box) -> int:
            rows, (b0, b1) = box
            return len(_box_rows(rows)) * max(0, b1 - b0) * inner * item

        return (sum(volume(b) for q, b in enumerate(send_boxes) if q != me),
                sum(volume(b) for p, b in enumerate(recv_boxes) if p != me))

    def _own_box_copy(self, host: torch.Tensor, send_boxes: Sequence[Box], recv: torch.Tensor,
                      recv_boxes: Sequence[Box]) -> Callable[[], None] | None:
        """This rank's own box as a strided torch copy (None if empty): MPI would pack a self-send."""
        c = self._owner
        (srows, (b0, b1)), (rrows, (d0, d1)) = send_boxes[c.rank], recv_boxes[c.rank]
        if not (len(_box_rows(srows)) and b1 > b0):
            return None
        ri = _row_index(rrows)

        def copy() -> None:
            block = host[_row_index(srows)][:, b0:b1]
            if isinstance(ri, list):
                recv[ri] = block  # a list box takes dimension 1 whole
            else:
                recv[ri][:, d0:d1].copy_(block)

        return copy

    def _boxes_args(self, host: torch.Tensor, send_boxes: Sequence[Box], recv: torch.Tensor,
                    recv_boxes: Sequence[Box]) -> tuple[list, list]:
        """The Alltoallw buffer specs of the boxes of other ranks (this rank's own: :meth:`_own_box_copy`)."""
        c = self._owner
        me = c.rank
        st = [self._box_type(tuple(host.shape), b, host.dtype) for b in send_boxes]
        rt = [self._box_type(tuple(recv.shape), b, host.dtype) for b in recv_boxes]
        st[me] = rt[me] = (0, c._MPI.BYTE)
        zeros = [0] * c.size
        return ([host.numpy(), ([n for n, _ in st], zeros), [t for _, t in st]],
                [recv.numpy(), ([n for n, _ in rt], zeros), [t for _, t in rt]])

    def ialltoall_boxes(
        self,
        send: torch.Tensor,
        send_boxes: Sequence[Box],
        recv: torch.Tensor,
        recv_boxes: Sequence[Box],
        tag: str = "alltoall",
    ) -> Pending:
        """Post :meth:`alltoall_boxes` as MPI_Ialltoallw into host tensor ``recv``; returns at once.

        ``send`` and ``recv``'s boxes stay untouched until :meth:`wait`; every rank posts the same exchanges
        in the same order. Blocking over gloo / nccl.
        """
        c = self._owner
        t0 = c.stats.enter(tag)
        if recv.device.type != "cpu" or not recv.is_contiguous():
            raise ValueError("ialltoall_boxes: recv must be a contiguous host tensor")
        sent, got = self._box_volumes(send, send_boxes, tuple(recv.shape), recv_boxes)
        if c._dist is not None or c.size == 1:
            if c._dist is not None:
                recv.copy_(self._boxes_over_dist(send, send_boxes, tuple(recv.shape), recv_boxes).cpu())
            else:
                _run(self._own_box_copy(c._host(send), send_boxes, recv, recv_boxes))
            c._counted(tag, sent, got, t0)
            return Pending(None, tag, recv, ())
        host = c._host(send)
        sbuf, rbuf = self._boxes_args(host, send_boxes, recv, recv_boxes)
        own = self._own_box_copy(host, send_boxes, recv, recv_boxes)
        entered = time.perf_counter()
        req = c._comm.Ialltoallw(sbuf, rbuf)
        _run(own)  # after the post, so that peers' data is already on its way meanwhile
        p = Pending(req, tag, recv, (host, sbuf, rbuf))
        p.entry = c.stats.posted(tag, sent, got, t0, c._every_rank, entered)
        return p

    def _finish(self, p: Pending, t: float) -> None:
        """Count ``p`` complete at ``t`` and let go of its buffers."""
        c = self._owner
        p.done = True
        c.stats.finished(p.tag, t)
        p.request, p.keep = None, ()

    def ibarrier(self, tag: str = "barrier") -> Pending:
        """Post MPI_Ibarrier; it completes, for :meth:`test` / :meth:`wait`, once every rank posted it."""
        c = self._owner
        t0 = c.stats.enter(tag)
        if c.size == 1:
            return Pending(None, tag, torch.empty(0), ())
        p = Pending(c._comm.Ibarrier(), tag, torch.empty(0), ())
        p.entry = c.stats.posted(tag, 0, 0, t0, c._every_rank)
        return p

    def test(self, pending: Sequence[Pending]) -> None:
        """Let MPI progress the exchanges in flight and note those that completed; never blocks."""
        c = self._owner
        live = [p for p in pending if not p.done]
        if not live:
            return
        t0 = c.stats.enter(live[0].tag)
        for p in live:
            if p.request.Test():
                self._finish(p, time.perf_counter())
        c.stats.blocked(live[0].tag, time.perf_counter() - t0)

    def wait(self, p: Pending) -> torch.Tensor:
        """Complete a posted exchange (the time blocked here is exposed); returns its receive tensor."""
        c = self._owner
        if not p.done:
            t0 = c.stats.enter(p.tag)
            p.request.Wait()
            t1 = time.perf_counter()
            self._finish(p, t1)
            c.stats.blocked(p.tag, t1 - t0, p.entry)
        return p.recv

    def defer(self, p: Pending) -> None:
        """Complete ``p`` (an exchange this rank only sends in) later, at :meth:`complete_deferred`."""
        if not p.done:
            self._deferred.append(p)

    @property
    def deferred(self) -> list[Pending]:
        """The deferred exchanges not yet completed (:meth:`defer`)."""
        self._deferred = [p for p in self._deferred if not p.done]
        return self._deferred

    def complete_deferred(self) -> None:
        """Wait for every deferred exchange (called at gradient sync and epoch end: none outlives a step)."""
        pending, self._deferred = self._deferred, []
        for p in pending:
            self.wait(p)

    def _boxes_over_dist(
        self, send: torch.Tensor, send_boxes: Sequence[Box], recv_shape: tuple[int, ...], recv_boxes: Sequence[Box]
    ) -> torch.Tensor:
        """alltoall_boxes over torch.distributed: pack, all_to_all_single, unpack (no derived datatypes)."""
        c = self._owner
        dev = c._dist_device
        src = send.detach().to(dev)
        parts = []
        for rows, (b0, b1) in send_boxes:
            parts.append(src[_row_index(rows)][:, b0:b1].reshape(-1) if len(_box_rows(rows)) and b1 > b0 else
                         src.new_empty(0))
        rcounts = []
        for rows, (d0, d1) in recv_boxes:
            rcounts.append(len(_box_rows(rows)) * max(0, d1 - d0) * int(np.prod(recv_shape[2:], dtype=np.int64)))
        flat = torch.cat(parts) if parts else src.new_empty(0)
        out = self._dist_alltoall(flat, [p.numel() for p in parts], rcounts)
        recv = torch.empty(recv_shape, dtype=send.dtype, device=dev)
        offset = 0
        for (rows, (d0, d1)), n in zip(recv_boxes, rcounts, strict=True):
            if n:
                nrows = len(_box_rows(rows))
                block = out[offset : offset + n].view(nrows, d1 - d0, *recv_shape[2:])
                ri = _row_index(rows)
                if isinstance(ri, list):
                    recv[ri] = block
                else:
                    recv[ri][:, d0:d1].copy_(block)
            offset += n
        return recv
