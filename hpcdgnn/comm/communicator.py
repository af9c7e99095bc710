"""The one communicator every byte crosses (STYLE G3; heat's ``MPICommunication``).

:class:`Communicator` wraps a duplicate of ``MPI_COMM_WORLD`` with a small, typed set of collectives and no
``__getattr__`` pass-through, so its :class:`~hpcdgnn.comm.stats.CommStats` is complete by construction. Its
parts ``exchange`` (:class:`~hpcdgnn.comm.exchange.Exchange`) and ``world`` (:class:`~hpcdgnn.comm.world.World`)
count into the same stats. The training step's
tensor collectives run over MPI, or ``torch.distributed`` with gloo / nccl (``comm.backend``); set-up, metrics,
control (a pre-emption's agreement) and object collectives always use MPI. CUDA buffers go to MPI directly when
it is CUDA-aware, else through pinned host memory.
"""

from __future__ import annotations

import array
import contextlib
import copyreg
import io
import itertools
import pickle
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from hpcdgnn.comm.exchange import MAX_COUNT, Box, Exchange, Pending, Requests
from hpcdgnn.comm.stats import CommStats, TagStats, payload_bytes
from hpcdgnn.comm.world import World, await_world, init_mpi
from hpcdgnn.errors import PeerLostError, StalledError

__all__ = ["Box", "Communicator", "CommStats", "Pending", "TagStats", "alone", "payload_bytes"]


def _mpi_buffer(t: torch.Tensor) -> Any:
    """A numpy view of a contiguous CPU tensor, or a CUDA tensor itself (CUDA-aware MPI)."""
    return t.numpy() if t.device.type == "cpu" else t


def _pieces(t: torch.Tensor) -> list[torch.Tensor]:
    """``t`` itself, or where it holds more than :data:`~hpcdgnn.comm.exchange.MAX_COUNT` elements (an MPI-3
    count is a C int: one call refuses it, MPI_ERR_ARG) its flat view cut into the fewest equal pieces within that,
    for collectives that act element by element (broadcast, all-reduce) and so give the same result piece by piece.
    Equal, not full pieces and a rest: an all-reduce's temporary buffers in MPI are a piece's size."""
    n = t.numel()
    if n <= MAX_COUNT:
        return [t]
    size = -(-n // -(-n // MAX_COUNT))
    flat = t.view(-1)
    return [flat[a : a + size] for a in range(0, n, size)]


#: bytes of pickles (every rank's, in total) :meth:`Communicator.allgather_obj` gathers in one MPI all-gather,
#: whose counts and displacements MPI-3 names in C ints; past it they go point to point, in messages of any length
ALLGATHER_BYTES = MAX_COUNT


def _tensor_from(array: np.ndarray, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor :func:`_reduce_tensor` sent: ``array``'s memory (received, uncopied) as ``dtype`` of ``shape``."""
    if not array.flags.writeable:  # in band from a read-only buffer: torch writes where it likes
        array = array.copy()
    t = torch.from_numpy(array)
    return (t if t.dtype == dtype else t.view(dtype)).view(shape)


def _reduce_tensor(t: torch.Tensor) -> tuple:
    """How :func:`_pack` pickles a strided host tensor: its data as a flat numpy view, which pickle protocol 5 sends
    out of band, uncopied (torch's own reduction copies the storage into the stream). A non-contiguous tensor
    travels as a contiguous copy; a dtype numpy lacks (bfloat16, the float8s) as its bytes. Its data only: no
    gradient crosses ranks through a pickle, so the tensor arrives detached (``requires_grad`` False)."""
    if t.layout != torch.strided or t.is_quantized or t.is_nested:
        return t.__reduce_ex__(5)  # no flat view of their data: torch's own reduction, in band
    if t.device.type != "cpu":
        raise ValueError(f"Communicator: an object to send holds a {t.device} tensor; move it to the host first "
                         "(.cpu()): objects travel through host memory")
    flat = t.detach().resolve_conj().resolve_neg().contiguous().view(-1)
    try:
        array = flat.numpy()
    except TypeError:  # numpy has no such dtype: the bytes, viewed back on arrival
        array = flat.view(torch.uint8).numpy()
    return _tensor_from, (array, t.dtype, tuple(t.shape))


def _pack(obj: Any) -> list[pickle.PickleBuffer]:
    """``obj`` pickled (protocol 5): its stream, then its out-of-band buffers — contiguous numpy arrays' and host
    tensors' memory (:func:`_reduce_tensor`), uncopied. As ``PickleBuffer`` objects, so that ``mpi4py.util.pkl5`` sends
    them out of band in turn; :func:`_unpack` rebuilds ``obj`` from them (or from copies of their bytes)."""
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    pickler = pickle.Pickler(stream, protocol=5, buffer_callback=buffers.append)
    # by exact type: a subclass (Parameter) keeps torch's reduction, whose plain data tensor then comes here
    pickler.dispatch_table = {**copyreg.dispatch_table, torch.Tensor: _reduce_tensor}
    pickler.dump(obj)
    return [pickle.PickleBuffer(stream.getbuffer()), *buffers]


def _unpack(parts: Sequence[Any]) -> Any:
    """The object :func:`_pack` made ``parts`` of (any bytes-like objects holding the same bytes)."""
    return pickle.loads(parts[0], buffers=parts[1:])


def _unframe(block: memoryview) -> Any:
    """The object in one rank's ``block`` of :meth:`Communicator.allgather_obj`: the count k of :func:`_pack`'s
    parts and their k lengths (int64s), then the parts. Its buffers are copied out of ``block`` (unaligned there,
    and every rank's object its own memory, as a pickle's)."""
    (k,) = struct.unpack_from("<q", block)
    parts, at = [], 8 * (k + 1)
    for n in struct.unpack_from(f"<{k}q", block, 8):
        parts.append(block[at : at + n] if not parts else bytearray(block[at : at + n]))
        at += n
    return _unpack(parts)


def _nbytes(parts: Sequence[pickle.PickleBuffer]) -> int:
    """Bytes of :func:`_pack`'s parts: the stream and the out-of-band buffers."""
    return sum(p.raw().nbytes for p in parts)


def alone() -> Communicator:
    """A communicator of this process alone (``MPI_COMM_SELF``): what rank 0 computes by itself (the planner's
    counts under ``strategy: auto``) must not run a collective on ``COMM_WORLD``, which no other rank joins."""
    return Communicator(init_mpi().COMM_SELF)


class Communicator:
    """Typed, counted collectives over a duplicate of ``comm`` (``None``: ``MPI.COMM_WORLD``)."""

    def __init__(self, comm: Any = None) -> None:
        MPI = init_mpi()
        self._attach(MPI, (comm or MPI.COMM_WORLD).Dup(), CommStats())

    @classmethod
    def start(cls, timeout_s: float, stop: Callable[[], bool] = lambda: False,
              call: str | None = None) -> Communicator:
        """The world's communicator, made once every rank runs hpcdgnn (``call``: a trained run's later call, as
        :func:`~hpcdgnn.comm.world.await_world` names it).

        Raises:
            StalledError: a rank did not start within ``timeout_s``, or ``stop()`` became true; the caller
                must end the job (:func:`~hpcdgnn.comm.world.abort_world`).
        """
        error = await_world(init_mpi().COMM_WORLD, timeout_s, stop, call=call)
        if error:
            raise StalledError(f"stalled at the start: {error}")
        return cls()

    def _attach(self, MPI: Any, raw: Any, stats: CommStats, root: Communicator | None = None) -> None:
        """Wrap ``raw``, counting into ``stats``; ``root``: the communicator it was split from."""
        self._MPI = MPI
        self._comm = raw
        self.rank: int = self._comm.Get_rank()
        self.size: int = self._comm.Get_size()
        self.stats = stats
        #: ``mpi``, ``gloo`` or ``nccl``: who carries the training step's tensor collectives
        self.backend = "mpi"
        self._dist: Any = None
        self._dist_timeout_s = 0.0
        self._cuda_aware = False
        self._root: Communicator = root or self
        #: the parts
        self.exchange = Exchange(self)
        self.world = World(self)

    @contextlib.contextmanager
    def _dist_call(self, what: str, tag: str) -> Iterator[None]:
        """Turn a torch.distributed timeout or closed connection into a one-line error naming the call."""
        try:
            yield
        except RuntimeError as e:
            text = str(e).lower()
            if "connection reset by peer" in text or "connection closed by peer" in text:
                raise PeerLostError(f"the {self.backend} {what} ({tag!r}) lost a peer (its connection closed): "
                                    "another rank ended first; its error says why") from None
            if "timed out" not in text:
                raise
            raise StalledError(
                f"stalled: the {self.backend} {what} ({tag!r}) waited longer than comm.timeout_s = "
                f"{self._dist_timeout_s:g} s for a peer (lost, or slower than that); raise comm.timeout_s if a "
                "rank is only slow") from None

    @property
    def _every_rank(self) -> bool:
        """Whether this communicator spans every rank of its root (not a node's split)."""
        return self.size == self._root.size

    def _counted(self, tag: str, sent: int, got: int, t0: float, entered: float | None = None) -> None:
        """Count a completed collective begun at ``t0`` that entered MPI at ``entered`` (default ``t0``)."""
        self.stats.add(tag, sent, got, time.perf_counter() - t0, self._every_rank, entered)

    def close(self) -> None:
        """Tear down the torch.distributed group, if any (MPI itself finalises at exit)."""
        if self._dist is not None:
            import torch.distributed as dist

            dist.destroy_process_group()
            self._dist = None

    @staticmethod
    def _host(t: torch.Tensor) -> torch.Tensor:
        """``t`` on the host for Alltoallw (it packs strided boxes there): itself, or a pinned copy."""
        if t.device.type == "cpu":
            return t.detach().contiguous()
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        host.copy_(t.detach())
        return host

    def _staged(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` as a buffer MPI can read: itself on the CPU or with CUDA-aware MPI, else a pinned host copy."""
        if t.device.type == "cpu" or self._cuda_aware:
            return t.detach().contiguous()
        return self._host(t)

    def split(self, color: int, key: int | None = None) -> Communicator:
        """The ranks of the same ``color`` as a communicator counting into these stats (collective)."""
        return self._child(self._comm.Split(color, self.rank if key is None else key))

    def free(self) -> None:
        """Free a communicator made by :meth:`split` (collective): MPI caps how many may exist."""
        self.world._free()
        if self._comm is not None and self._comm not in (self._MPI.COMM_WORLD, self._MPI.COMM_SELF):
            self._comm.Free()
        self._comm = None

    def _child(self, raw: Any) -> Communicator:
        """A communicator over ``raw`` (a split of this one) counting into this one's stats."""
        sub = object.__new__(Communicator)
        sub._attach(self._MPI, raw, self.stats, self._root)
        sub._cuda_aware = self._cuda_aware
        return sub

    def _mpi_type(self, dtype: torch.dtype) -> Any:
        MPI = self._MPI
        table = {
            torch.float32: MPI.FLOAT,
            torch.float64: MPI.DOUBLE,
            torch.int64: MPI.INT64_T,
            torch.int32: MPI.INT32_T,
            torch.uint8: MPI.UINT8_T,
        }
        if dtype not in table:
            # Half types have no portable MPI reduction: refuse explicitly (STYLE G3).
            raise TypeError(f"Communicator: dtype {dtype} is not supported; cast to float32 first")
        return table[dtype]

    def allreduce_(self, tensor: torch.Tensor, op: str = "sum", tag: str = "allreduce") -> torch.Tensor:
        """In-place all-reduce (``sum``, ``max`` or ``min``) of a contiguous tensor of any size; returns it.

        Over MPI in pieces of at most :data:`~hpcdgnn.comm.exchange.MAX_COUNT` elements (:func:`_pieces`)."""
        t0 = self.stats.enter(tag)
        entered = None
        ops = {"sum": self._MPI.SUM, "max": self._MPI.MAX, "min": self._MPI.MIN}
        if self.size > 1 and self._dist is not None and not tag.startswith(("setup", "metrics", "control")):
            import torch.distributed as dist

            buf = tensor.detach().contiguous().to(self._dist_device)
            with self._dist_call("all_reduce", tag):
                dist.all_reduce(buf, {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                                      "min": dist.ReduceOp.MIN}[op], group=self._dist)
            if buf.data_ptr() != tensor.data_ptr():
                tensor.detach().copy_(buf)
        elif self.size > 1:
            buf = self._staged(tensor)
            entered = time.perf_counter()
            for piece in _pieces(buf):
                self._comm.Allreduce(self._MPI.IN_PLACE, [_mpi_buffer(piece), self._mpi_type(tensor.dtype)], ops[op])
            if buf.data_ptr() != tensor.data_ptr():
                tensor.detach().copy_(buf)
        nbytes = tensor.numel() * tensor.element_size() if self.size > 1 else 0
        self._counted(tag, nbytes, nbytes, t0, entered)
        return tensor

    def iallreduce_(self, tensor: torch.Tensor, tag: str = "allreduce") -> Pending:
        """Post an in-place sum all-reduce of a host tensor of any size; complete with ``exchange.wait``.

        Blocking over gloo / nccl or on one rank. Over MPI, one request per piece of at most
        :data:`~hpcdgnn.comm.exchange.MAX_COUNT` elements (:func:`_pieces`), completed together.
        """
        t0 = self.stats.enter(tag)
        if tensor.device.type != "cpu" or not tensor.is_contiguous():
            raise ValueError("iallreduce_: tensor must be a contiguous host tensor")
        nbytes = tensor.numel() * tensor.element_size() if self.size > 1 else 0
        if self.size == 1 or self._dist is not None:
            self.allreduce_(tensor, "sum", tag)
            return Pending(None, tag, tensor, ())
        reqs = [self._comm.Iallreduce(self._MPI.IN_PLACE, [piece.numpy(), self._mpi_type(tensor.dtype)], self._MPI.SUM)
                for piece in _pieces(tensor)]
        p = Pending(reqs[0] if len(reqs) == 1 else Requests(self._MPI, reqs), tag, tensor, (tensor,))
        p.entry = self.stats.posted(tag, nbytes, nbytes, t0, self._every_rank)
        return p

    def bcast_(self, tensor: torch.Tensor, root: int = 0, tag: str = "setup") -> torch.Tensor:
        """In-place broadcast of a contiguous tensor of any size from ``root``; returns it.

        In pieces of at most :data:`~hpcdgnn.comm.exchange.MAX_COUNT` elements (:func:`_pieces`): the (T, N, F)
        embeddings a trained run hands out pass 2^31 elements at scale."""
        t0 = self.stats.enter(tag)
        if self.size > 1:
            buf = self._staged(tensor)
            for piece in _pieces(buf):
                self._comm.Bcast([_mpi_buffer(piece), self._mpi_type(tensor.dtype)], root=root)
            if buf.data_ptr() != tensor.data_ptr():
                tensor.detach().copy_(buf)
        nbytes = tensor.numel() * tensor.element_size() if self.size > 1 and self.rank == root else 0
        self._counted(tag, nbytes * (self.size - 1), 0, t0)
        return tensor

    def allreduce_array(self, values: Sequence[float] | np.ndarray, op: str = "sum",
                        tag: str = "metrics") -> np.ndarray:
        """All-reduce a small float64 vector (metrics, counts); returns a new array."""
        t = torch.as_tensor(np.asarray(values, dtype=np.float64)).clone()
        return self.allreduce_(t, op, tag).numpy()

    def gather_array(self, values: Sequence[float] | np.ndarray, tag: str = "metrics") -> np.ndarray:
        """All-gather a float64 vector of the same length from every rank: shape (P, len)."""
        t0 = self.stats.enter(tag)
        send = np.ascontiguousarray(values, dtype=np.float64)
        out = np.empty((self.size, send.shape[0]), dtype=np.float64)
        self._comm.Allgather(send, out)
        nbytes = send.nbytes * (self.size - 1)  # this rank's vector reaches each other rank (as a broadcast's)
        self._counted(tag, nbytes, nbytes, t0)
        return out

    def isend_obj(self, obj: Any, dest: int, tag: int, name: str) -> Any:
        """Non-blocking send of a picklable object of any size to ``dest``; complete with :meth:`wait_all`.

        By pickle protocol 5 (``mpi4py.util.pkl5``), as :meth:`bcast_obj`: contiguous numpy arrays and host
        tensors (:func:`_reduce_tensor`: detached, contiguous, as numpy views) travel out of band, uncopied, in
        messages of any length (a fetch's snapshots or a pipeline's state pass 2 GiB at scale, where an MPI-3
        library refuses one pickled message); they must stay unchanged until :meth:`wait_all`. A tensor on a
        device is refused (ValueError): move it to the host first."""
        from mpi4py.util import pkl5

        t0 = self.stats.enter(name)
        req = pkl5.Intracomm(self._comm).isend(_pack(obj), dest=dest, tag=tag)
        self.stats.add(name, payload_bytes(obj), 0, time.perf_counter() - t0)
        return req

    def recv_obj(self, source: int, tag: int, name: str) -> Any:
        """Blocking receive of an object sent with :meth:`isend_obj`: its arrays and tensors in the received
        buffers, writable; its tensors on the host, not requiring grad."""
        from mpi4py.util import pkl5

        t0 = self.stats.enter(name)
        obj = _unpack(pkl5.Intracomm(self._comm).recv(source=source, tag=tag))
        self.stats.add(name, 0, payload_bytes(obj), time.perf_counter() - t0)
        return obj

    def wait_all(self, requests: list[Any], name: str) -> None:
        """Complete sends posted by :meth:`isend_obj` (each its object's several messages)."""
        from mpi4py.util import pkl5

        t0 = self.stats.enter(name)
        pkl5.Request.waitall(requests)
        self.stats.add(name, 0, 0, time.perf_counter() - t0)

    def bcast_obj(self, obj: Any, root: int = 0, tag: str = "setup") -> Any:
        """Broadcast a picklable object from ``root``, of any size.

        By pickle protocol 5 (``mpi4py.util.pkl5``): arrays and host tensors (as :meth:`isend_obj`'s) travel out
        of band, uncopied, in messages of any length — a plan's (T, N) tables pass 2 GiB, where an MPI-3 library
        refuses one pickled message. On ``root`` those mpi4py sends out of band (past ``pkl5.pickle.THRESHOLD``
        bytes) come back sharing ``obj``'s memory. The root counts its pickle (stream and buffers) once per other
        rank."""
        from mpi4py.util import pkl5

        t0 = self.stats.enter(tag)
        parts = _pack(obj) if self.rank == root else None
        out = _unpack(pkl5.Intracomm(self._comm).bcast(parts, root=root))
        n = _nbytes(parts) if self.size > 1 and parts is not None else 0
        self._counted(tag, n * (self.size - 1), 0, t0)
        return out

    def allgather_obj(self, obj: Any, tag: str = "setup") -> list[Any]:
        """All-gather a picklable object of any size from every rank: each rank's, in rank order, a copy.

        Pickled as :meth:`bcast_obj`'s (host tensors as numpy views). Every rank's pickle in one MPI all-gather
        while they total at most :data:`ALLGATHER_BYTES`, else (past 2 GiB, where MPI-3 cannot name the counts and
        displacements) point to point in messages of any length (``mpi4py.util.pkl5``), arrays and tensors out of
        band. Each rank counts its pickle (stream and buffers) once per other rank, sent and received."""
        t0 = self.stats.enter(tag)
        parts = _pack(obj)
        lens = [p.raw().nbytes for p in parts]
        sizes = array.array("q", [0]) * self.size
        self._comm.Allgather([array.array("q", [8 * (len(lens) + 1) + sum(lens)]), self._MPI.INT64_T],
                             [sizes, self._MPI.INT64_T])
        if sum(sizes) <= ALLGATHER_BYTES:
            send = b"".join([struct.pack(f"<{len(lens) + 1}q", len(lens), *lens), *parts])
            recv = memoryview(bytearray(sum(sizes)))
            displs = list(itertools.accumulate(sizes[:-1], initial=0))
            self._comm.Allgatherv([send, self._MPI.BYTE], [recv, (sizes.tolist(), displs), self._MPI.BYTE])
            out = [_unframe(recv[d : d + k]) for d, k in zip(displs, sizes, strict=True)]
        else:
            from mpi4py.util import pkl5

            out = [_unpack(got) for got in pkl5.Intracomm(self._comm).allgather(parts)]
        n = sum(lens) * (self.size - 1)  # this rank's object reaches each other rank
        self._counted(tag, n, n, t0)
        return out

    def barrier(self, tag: str = "barrier") -> None:
        """Synchronise all ranks (time recorded under its own tag, never inside 'comm')."""
        t0 = self.stats.enter(tag)
        self._comm.Barrier()
        self._counted(tag, 0, 0, t0)

    def abort(self, code: int = 1) -> None:
        """End the whole MPI job (every rank) with ``code``."""
        self._comm.Abort(code)
