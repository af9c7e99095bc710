"""The one communicator every byte crosses (STYLE G3; heat's ``MPICommunication``).

:class:`Communicator` wraps a duplicate of ``MPI_COMM_WORLD`` and exposes a
small, typed set of collectives. There is deliberately no ``__getattr__``
pass-through, so its :class:`~hpcdgnn.comm.stats.CommStats` — calls, bytes sent
and received and seconds per tag — is complete by construction (what the bytes
are: :mod:`hpcdgnn.comm.stats`).

Three parts of the same object hold what is not a small collective, each
over this communicator's MPI communicator and counting into its stats:

* ``comm.exchange`` (:class:`~hpcdgnn.comm.exchange.Exchange`): the training
  step's all-to-all exchanges of rows and boxes, blocking and posted, and the
  completion (``test``, ``wait``, ``defer``) of anything posted;
* ``comm.world`` (:class:`~hpcdgnn.comm.world.World`): the node (its split,
  shared-memory windows), the MPI library and the tensor backend;
* ``comm.progress`` (:class:`~hpcdgnn.comm.progress.Progress`): whether a
  progress thread moves the posted exchanges (one per root communicator,
  shared by its splits).

Backends (``comm.backend``, :meth:`~hpcdgnn.comm.world.World.init_tensor_backend`): the
training step's tensor collectives (``exchange.alltoallv``, ``exchange.alltoall_boxes``,
``allreduce_``) run over MPI by default, or over ``torch.distributed`` with
``gloo`` or ``nccl``, initialised from MPI (rank 0 opens a TCP store on a free
port and broadcasts its address; a finite timeout). Setup, metrics and object
collectives always use MPI. The byte counters count the same payload whatever
the backend, so runs on different backends report the same ``bytes_sent``.
With MPI and CUDA tensors, buffers go to MPI directly when the library is
CUDA-aware and are staged through pinned host memory otherwise.

Non-blocking exchanges (``exchange.ialltoall_boxes``, ``iallreduce_``) progress inside this rank's
own MPI calls, or in a progress thread (``comm.progress``, :mod:`hpcdgnn.comm.progress`).
"""

from __future__ import annotations

import contextlib
import pickle
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from hpcdgnn.comm.exchange import Box, Exchange, Pending
from hpcdgnn.comm.progress import Progress
from hpcdgnn.comm.stats import CommStats, TagStats, payload_bytes
from hpcdgnn.comm.world import World, await_world, init_mpi
from hpcdgnn.errors import PeerLostError, StalledError

# Box, Pending, TagStats and payload_bytes are re-exported: callers import them from here
__all__ = ["Box", "Communicator", "CommStats", "Pending", "TagStats", "payload_bytes"]


def _mpi_buffer(t: torch.Tensor) -> Any:
    """What mpi4py accepts for a contiguous tensor: a numpy view on the CPU, the tensor itself on
    CUDA (mpi4py reads ``__cuda_array_interface__``; only reached with CUDA-aware MPI).
    """
    return t.numpy() if t.device.type == "cpu" else t


class Communicator:
    """Typed collectives over a duplicated ``MPI_COMM_WORLD``, with per-tag byte and time counters; its
    exchanges, surroundings and progress thread are the parts ``exchange``, ``world`` and ``progress``
    (see the module docstring), which use its private helpers.

    Args:
        comm: an mpi4py communicator to duplicate; ``None`` = ``MPI.COMM_WORLD``.
    """

    def __init__(self, comm: Any = None) -> None:
        MPI = init_mpi()
        self._attach(MPI, (comm or MPI.COMM_WORLD).Dup(), CommStats())

    @classmethod
    def start(cls, timeout_s: float, stop: Callable[[], bool] = lambda: False) -> Communicator:
        """The world's communicator, made once every rank runs hpcdgnn (:func:`~hpcdgnn.comm.world.await_world`).

        Raises:
            StalledError: a rank did not start hpcdgnn within ``timeout_s``, or ``stop()`` became true while
                waiting (the message names it); nothing is collective yet and requests are still posted, so the
                caller reports it with this rank (:func:`~hpcdgnn.comm.world.world_rank_size`) and ends the job
                (:func:`~hpcdgnn.comm.world.abort_world`).
        """
        error = await_world(init_mpi().COMM_WORLD, timeout_s, stop)
        if error:
            raise StalledError(f"stalled at the start: {error}")
        return cls()

    def _attach(self, MPI: Any, raw: Any, stats: CommStats, root: Communicator | None = None) -> None:
        """Wrap the mpi4py communicator ``raw`` (kept as it is), counting into ``stats``; tensor collectives
        over MPI until :meth:`~hpcdgnn.comm.world.World.init_tensor_backend`. ``root``: the communicator this
        one was split from, whose progress thread it shares (None: this one is a root)."""
        self._MPI = MPI
        self._comm = raw
        self.rank: int = self._comm.Get_rank()
        self.size: int = self._comm.Get_size()
        self.stats = stats
        #: ``mpi``, ``gloo`` or ``nccl``: who carries the training step's tensor collectives
        self.backend = "mpi"
        self._dist: Any = None  # the torch.distributed process group of gloo / nccl
        self._dist_timeout_s = 0.0  # comm.timeout_s it was made with
        self._cuda_aware = False
        self._root: Communicator = root or self
        #: the parts (see the module docstring); the progress switch is the root's, shared by its splits (the
        #: gradient buckets' exchanges are posted on one)
        self.exchange = Exchange(self)
        self.world = World(self)
        self.progress: Progress = root.progress if root is not None else Progress(self)

    @contextlib.contextmanager
    def _dist_call(self, what: str, tag: str) -> Iterator[None]:
        """A torch.distributed call that gave up waiting for a peer (gloo's "Timed out waiting …", the store's
        "… timed out …") as one line naming the call, its tag and ``comm.timeout_s``; one whose connection a
        peer closed (that rank ended: the job is being torn down) as one line too; any other error as is."""
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
        """Whether this communicator spans every rank of its root (a duplicate for gradient buckets, not a
        node's split): its collectives are ones all ranks make in the same order (:attr:`CommStats.exchanges`)."""
        return self.size == self._root.size

    def _counted(self, tag: str, sent: int, got: int, t0: float, entered: float | None = None) -> None:
        """Count a collective of this communicator that began at ``t0``, entered MPI at ``entered`` (after
        the rank's own staging and copies; default ``t0``) and has completed."""
        self.stats.add(tag, sent, got, time.perf_counter() - t0, self._every_rank, entered)

    def close(self) -> None:
        """Tear down the torch.distributed group, if any (MPI itself finalises at exit)."""
        self.progress.stop()
        if self._dist is not None:
            import torch.distributed as dist

            dist.destroy_process_group()
            self._dist = None

    @staticmethod
    def _host(t: torch.Tensor) -> torch.Tensor:
        """A contiguous host copy for the datatype-based exchanges (Alltoallw packs strided boxes
        on the host): ``t`` itself on the CPU, a pinned copy of a CUDA tensor (DMA, no bounce).
        """
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
        """The ranks of the same ``color`` as a communicator of their own (collective over this one).

        Its traffic is counted in this communicator's :class:`CommStats` (one table per rank, whatever
        communicator a byte crossed), so the epoch record stays complete.
        """
        return self._child(self._comm.Split(color, self.rank if key is None else key))

    def free(self) -> None:
        """Free a communicator made by :meth:`split` (collective over its ranks, all at the same point; nothing
        may be pending on it): a run that rebuilds its strategy (``balance: measured``) or its model would
        otherwise keep one MPI communicator per rebuild, and MPI implementations cap how many exist."""
        self.world._free()  # its node's split, if made
        if self._comm is not None and self._comm not in (self._MPI.COMM_WORLD, self._MPI.COMM_SELF):
            self._comm.Free()
        self._comm = None

    def _child(self, raw: Any) -> Communicator:
        """A communicator over ``raw`` (a split of this one) that counts into this one's stats; its tensor
        collectives go over MPI (staged through the host as this one's are)."""
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
        """In-place all-reduce (``sum``, ``max`` or ``min``) of a contiguous tensor; returns it."""
        t0 = self.stats.enter(tag)
        entered = None  # when this rank entered MPI's all-reduce, after staging (the call's start otherwise)
        ops = {"sum": self._MPI.SUM, "max": self._MPI.MAX, "min": self._MPI.MIN}
        if self.size > 1 and self._dist is not None and not tag.startswith(("setup", "metrics")):
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
            self._comm.Allreduce(self._MPI.IN_PLACE, [_mpi_buffer(buf), self._mpi_type(tensor.dtype)], ops[op])
            if buf.data_ptr() != tensor.data_ptr():
                tensor.detach().copy_(buf)
        nbytes = tensor.numel() * tensor.element_size() if self.size > 1 else 0
        self._counted(tag, nbytes, nbytes, t0, entered)
        return tensor

    def iallreduce_(self, tensor: torch.Tensor, tag: str = "allreduce") -> Pending:
        """Post an in-place sum all-reduce of a contiguous host tensor (MPI_Iallreduce); returns at once.

        Complete it with :meth:`~hpcdgnn.comm.exchange.Exchange.wait` (its ``recv`` is ``tensor``); counted
        like :meth:`allreduce_`, timed like :meth:`~hpcdgnn.comm.exchange.Exchange.ialltoall_boxes`. Over
        ``gloo``/``nccl``, or on one rank, it is blocking and complete on return.
        """
        t0 = self.stats.enter(tag)
        if tensor.device.type != "cpu" or not tensor.is_contiguous():
            raise ValueError("iallreduce_: tensor must be a contiguous host tensor")
        nbytes = tensor.numel() * tensor.element_size() if self.size > 1 else 0
        if self.size == 1 or self._dist is not None:
            self.allreduce_(tensor, "sum", tag)
            return Pending(None, tag, tensor, ())
        req = self._comm.Iallreduce(self._MPI.IN_PLACE, [tensor.numpy(), self._mpi_type(tensor.dtype)], self._MPI.SUM)
        p = Pending(req, tag, tensor, (tensor,))
        p.entry = self.stats.posted(tag, nbytes, nbytes, t0, self._every_rank)
        return self.exchange._adopted(p)

    def bcast_(self, tensor: torch.Tensor, root: int = 0, tag: str = "setup") -> torch.Tensor:
        """In-place broadcast of a contiguous tensor from ``root``; returns it."""
        t0 = self.stats.enter(tag)
        if self.size > 1:
            buf = self._staged(tensor)
            self._comm.Bcast([_mpi_buffer(buf), self._mpi_type(tensor.dtype)], root=root)
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
        nbytes = send.nbytes if self.size > 1 else 0
        self._counted(tag, nbytes, nbytes * (self.size - 1), t0)
        return out

    # -- point to point (pipelines) --------------------------------------------------------------
    def isend_obj(self, obj: Any, dest: int, tag: int, name: str) -> Any:
        """Non-blocking send of a picklable object (tensors included) to ``dest``; returns the request.

        Counted under ``name``: its :func:`payload_bytes`. Complete the request with :meth:`wait_all`.
        """
        t0 = self.stats.enter(name)
        req = self._comm.isend(obj, dest=dest, tag=tag)
        self.stats.add(name, payload_bytes(obj), 0, time.perf_counter() - t0)
        return req

    def recv_obj(self, source: int, tag: int, name: str) -> Any:
        """Blocking receive of an object sent with :meth:`isend_obj` (time and :func:`payload_bytes` received
        counted under ``name``)."""
        t0 = self.stats.enter(name)
        obj = self._comm.recv(source=source, tag=tag)
        self.stats.add(name, 0, payload_bytes(obj), time.perf_counter() - t0)
        return obj

    def wait_all(self, requests: list[Any], name: str) -> None:
        """Complete non-blocking sends."""
        t0 = self.stats.enter(name)
        self._MPI.Request.waitall(requests)
        self.stats.add(name, 0, 0, time.perf_counter() - t0)

    # -- object collectives --------------------------------------------------------------------
    def bcast_obj(self, obj: Any, root: int = 0, tag: str = "setup") -> Any:
        """Broadcast a picklable object from ``root``."""
        t0 = self.stats.enter(tag)
        out = self._comm.bcast(obj, root=root)
        n = len(pickle.dumps(out)) if self.size > 1 and self.rank == root else 0
        self._counted(tag, n * (self.size - 1), 0, t0)
        return out

    def allgather_obj(self, obj: Any, tag: str = "setup") -> list[Any]:
        """All-gather a picklable object from every rank."""
        t0 = self.stats.enter(tag)
        out = self._comm.allgather(obj)
        n = len(pickle.dumps(obj)) if self.size > 1 else 0
        self._counted(tag, n, 0, t0)
        return out

    def barrier(self, tag: str = "barrier") -> None:
        """Synchronise all ranks (time recorded under its own tag, never inside 'comm')."""
        t0 = self.stats.enter(tag)
        self._comm.Barrier()
        self._counted(tag, 0, 0, t0)

    def abort(self, code: int = 1) -> None:
        """End the whole MPI job (every rank) with ``code``."""
        self._comm.Abort(code)
