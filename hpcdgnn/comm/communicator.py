"""The one communicator every byte crosses (STYLE G3; heat's ``MPICommunication``).

:class:`Communicator` wraps a duplicate of ``MPI_COMM_WORLD`` and exposes a
small, typed set of collectives. There is deliberately no ``__getattr__``
pass-through, so :class:`CommStats` — calls, bytes sent and received and
seconds per tag — is complete by construction.

Byte accounting (what ``bytes_sent`` means in metrics.jsonl):

* ``alltoallv`` / ``alltoall_boxes``: the bytes this rank hands MPI for *other* ranks
  (``sum_{q != rank} send_rows[q] * row_bytes``); the block a rank "sends" to
  itself is a local copy and is not counted. Summed over ranks, one
  redistribution of T snapshots x N vertices x F features moves
  ``(T*N - sum_p T_p*N_p) * F * itemsize`` bytes, which is
  ``T*N*F*(P-1)/P*itemsize`` when P divides T and N (IBM §4.2).
* ``allreduce``: the buffer each rank contributes when P > 1 (the payload,
  not the algorithm's wire traffic, which depends on the MPI library).
* object collectives (``bcast_obj`` and friends) are counted under their tag
  by pickled size; the trainer uses them only outside the training step.

Backends (``comm.backend``, :meth:`Communicator.init_tensor_backend`): the
training step's tensor collectives (``alltoallv``, ``alltoall_boxes``,
``allreduce_``) run over MPI by default, or over ``torch.distributed`` with
``gloo`` or ``nccl``, initialised from MPI (rank 0 opens a TCP store on a free
port and broadcasts its address; a finite timeout). Setup, metrics and object
collectives always use MPI. The byte counters count the same payload whatever
the backend, so runs on different backends report the same ``bytes_sent``.
With MPI and CUDA tensors, buffers go to MPI directly when the library is
CUDA-aware and are staged through pinned host memory otherwise.

Non-blocking exchanges (``ialltoall_boxes``, ``iallreduce_``) progress inside this rank's
own MPI calls, or in a progress thread (``comm.progress``, :mod:`hpcdgnn.comm.progress`).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import pickle
import socket
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from hpcdgnn.comm.exchange_log import ExchangeLog
from hpcdgnn.comm.progress import ProgressThread, spare_core
from hpcdgnn.errors import PeerLostError, StalledError

__all__ = ["Box", "Communicator", "CommStats", "Pending", "TagStats", "payload_bytes"]

#: A box ``(rows, (b0, b1))`` of a tensor: along dimension 0 either the range ``(a0, a1)`` or an
#: explicit ``list`` of row indices (then dimension 1 must be taken whole), along dimension 1 the
#: range b0..b1-1; trailing dimensions whole.
Box = tuple[tuple[int, int] | list[int], tuple[int, int]]


def _box_rows(spec: tuple[int, int] | list[int]) -> list[int] | range:
    return spec if isinstance(spec, list) else range(spec[0], spec[1])


def _row_index(spec: tuple[int, int] | list[int]) -> slice | list[int]:
    """Torch index of a box's rows: a (strided) slice when the rows are evenly spaced, so the
    self-copy is a plain strided copy rather than an index_put/gather.
    """
    if not isinstance(spec, list):
        return slice(spec[0], spec[1])
    if len(spec) == 1:
        return slice(spec[0], spec[0] + 1)
    step = spec[1] - spec[0]
    if step > 0 and all(b - a == step for a, b in zip(spec, spec[1:], strict=False)):
        return slice(spec[0], spec[-1] + 1, step)
    return spec

@dataclass
class TagStats:
    """Counters of one tag (e.g. ``redistribute.fwd``).

    ``seconds``: the time this tag's communication was under way — a blocking call's duration, a
    non-blocking exchange's time from its post to the moment its completion was seen (in
    :meth:`Communicator.test` or :meth:`Communicator.wait`); concurrent exchanges of one tag count
    once (the union of their intervals). ``exposed``: the part of it this rank spent blocked inside
    MPI calls (a blocking call whole; posting, testing and waiting for a non-blocking one), i.e. not
    hidden behind computation. Blocking calls only: ``exposed == seconds``.
    """

    calls: int = 0
    bytes_sent: int = 0
    bytes_recv: int = 0
    seconds: float = 0.0
    exposed: float = 0.0


@dataclass
class CommStats:
    """Per-tag communication counters of this rank; ``snapshot``/``since`` give per-epoch deltas."""

    tags: dict[str, TagStats] = field(default_factory=lambda: defaultdict(TagStats))
    #: what the stall watchdog (:mod:`hpcdgnn.comm.watchdog`) reads from its thread: calls
    #: completed, the tag of the call under way (``""``: none) and when each last changed
    completed: int = 0
    current: str = ""
    entered: float = field(default_factory=time.monotonic)
    progressed: float = field(default_factory=time.monotonic)
    #: per tag, non-blocking exchanges in flight and since when (``perf_counter``) at least one was
    _open: dict[str, int] = field(default_factory=dict)
    _opened: dict[str, float] = field(default_factory=dict)
    _last: dict[str, float] = field(default_factory=dict)  # per open tag, its latest completion so far
    #: the collectives of every rank (which all ranks make in the same order) since :meth:`take_exchanges`:
    #: when this rank entered each call or posted each exchange, and the intervals it then spent blocked in
    #: it where a peer may hold it up (the blocking call whole; a non-blocking one's wait, not its post).
    #: :func:`hpcdgnn.metrics.waits.late_waits` compares them. Kept only while ``keep_exchanges`` is set
    #: (:class:`~hpcdgnn.metrics.epoch.EpochRecorder` sets it): nobody else reads it.
    exchanges: ExchangeLog = field(default_factory=ExchangeLog)
    keep_exchanges: bool = False
    #: tags of the other calls since :meth:`take_exchanges` (point to point, a group's collective): whom their
    #: blocked time waited for is not known, so such a tag gets no late figure
    unmatched: set[str] = field(default_factory=set)
    #: while ``keep_exchanges`` is set, every interval a tag's ``seconds`` counted, as (tag, start, end) in
    #: ``perf_counter`` time: an epoch's ``comm`` is their union over the training tags, so that two tags under way
    #: at once (gradient buckets during the backward redistribution's chunks) count once, as within a tag
    spans: list[tuple[str, float, float]] = field(default_factory=list)

    def enter(self, tag: str) -> float:
        """Mark the start of a call under ``tag``; returns ``perf_counter()`` for its timer."""
        self.entered = time.monotonic()
        self.current = tag
        return time.perf_counter()

    def _done(self) -> None:
        self.current = ""
        self.completed += 1
        self.progressed = time.monotonic()

    def add(self, tag: str, sent: int, recv: int, seconds: float, every_rank: bool = False,
            entered: float | None = None) -> None:
        """Record one blocking call (it has completed): communication and exposed time alike; with
        ``every_rank`` (a collective of all ranks) also as an exchange of :attr:`exchanges`, arrived at
        ``entered`` (``perf_counter``: when the rank entered MPI, after its own copies; default: the call's
        start)."""
        self._done()
        if self.keep_exchanges and every_rank:
            now = time.perf_counter()
            a = now - seconds if entered is None else entered
            self.exchanges.block(self.exchanges.add(tag, a), a, now)
        elif self.keep_exchanges:
            self.unmatched.add(tag)
        s = self.tags[tag]
        s.calls += 1
        s.bytes_sent += sent
        s.bytes_recv += recv
        if not self._open.get(tag):  # else the call lies inside an interval already being timed: it lasts
            s.seconds += seconds  # at least until now (its non-blocking exchanges may have completed earlier)
            if self.keep_exchanges:
                now = time.perf_counter()
                self.spans.append((tag, now - seconds, now))
        else:
            now = time.perf_counter()
            self._last[tag] = max(self._last.get(tag, now), now)
        s.exposed += seconds

    def posted(self, tag: str, sent: int, recv: int, t0: float, every_rank: bool = False,
               entered: float | None = None) -> tuple | None:
        """Record the post of a non-blocking exchange that began at ``t0`` (``perf_counter``); with
        ``every_rank`` (and ``keep_exchanges``), returns its entry ``(log, index)`` in :attr:`exchanges` (for
        :meth:`blocked`; arrived at ``entered``, the moment of the MPI post, default ``t0``), else None."""
        self._done()
        s = self.tags[tag]
        s.calls += 1
        s.bytes_sent += sent
        s.bytes_recv += recv
        now = time.perf_counter()
        s.exposed += now - t0
        if not self._open.get(tag):
            self._opened[tag] = t0
        self._open[tag] = self._open.get(tag, 0) + 1
        if not self.keep_exchanges:
            return None
        if not every_rank:
            self.unmatched.add(tag)
            return None
        # posting blocks on no peer: only the waits can be spent waiting for one
        return self.exchanges, self.exchanges.add(tag, t0 if entered is None else entered)

    def blocked(self, tag: str, seconds: float, entry: tuple | None = None) -> None:
        """Seconds spent inside a test or wait of non-blocking exchanges of ``tag`` (exposed time); a wait
        for one exchange adds the interval to its ``entry`` (:meth:`posted`)."""
        self._done()
        self.tags[tag].exposed += seconds
        if entry is not None and seconds > 0:
            now = time.perf_counter()
            log, i = entry  # the log it was posted in (a later epoch's is another)
            log.block(i, now - seconds, now)

    def take_exchanges(self) -> tuple[ExchangeLog, set[str]]:
        """The exchanges and the unmatched tags recorded since the last call (:attr:`exchanges`,
        :attr:`unmatched`), which start anew (and so do :attr:`spans`: :meth:`take_spans`)."""
        out, self.exchanges, self.unmatched, self.spans = (self.exchanges, self.unmatched), ExchangeLog(), set(), []
        return out

    def take_spans(self) -> list[tuple[str, float, float]]:
        """The intervals recorded since the last call (:attr:`spans`), which start anew."""
        out, self.spans = self.spans, []
        return out

    def finished(self, tag: str, t: float) -> None:
        """A non-blocking exchange of ``tag`` was seen complete at ``t`` (``perf_counter``). Completions may be
        reported out of order (a progress thread's times, read in the order the exchanges are waited for):
        the interval ends at the latest of them."""
        self._last[tag] = max(self._last.get(tag, t), t)
        self._open[tag] -= 1
        if not self._open[tag]:
            end = self._last.pop(tag)
            self.tags[tag].seconds += end - self._opened[tag]
            if self.keep_exchanges:
                self.spans.append((tag, self._opened[tag], end))

    def snapshot(self) -> dict[str, TagStats]:
        """A copy of the counters, to subtract later with :meth:`since`."""
        return {k: TagStats(**vars(v)) for k, v in self.tags.items()}

    def delta(self, before: dict[str, TagStats]) -> dict[str, TagStats]:
        """Per-tag counters accumulated after ``before`` was taken (tags with no new calls omitted)."""
        out = {}
        for k, v in self.tags.items():
            b = before.get(k, TagStats())
            if v.calls != b.calls or v.seconds != b.seconds:
                out[k] = TagStats(v.calls - b.calls, v.bytes_sent - b.bytes_sent, v.bytes_recv - b.bytes_recv,
                                  v.seconds - b.seconds, v.exposed - b.exposed)
        return out

    def since(self, before: dict[str, TagStats], prefix: str = "") -> TagStats:
        """Totals over tags starting with ``prefix`` accumulated after ``before`` was taken."""
        out = TagStats()
        for k, v in self.delta(before).items():
            if k.startswith(prefix):
                out.calls += v.calls
                out.bytes_sent += v.bytes_sent
                out.bytes_recv += v.bytes_recv
                out.seconds += v.seconds
                out.exposed += v.exposed
        return out


class Pending:
    """A non-blocking exchange in flight (:meth:`Communicator.ialltoall_boxes`); complete it with
    :meth:`Communicator.wait`. Holds its buffers until then (MPI reads and writes them meanwhile).
    """

    __slots__ = ("request", "tag", "recv", "keep", "done", "completed", "completed_at", "holder", "entry", "released")

    def __init__(self, request: Any, tag: str, recv: torch.Tensor, keep: tuple) -> None:
        self.request, self.tag, self.recv, self.keep = request, tag, recv, keep
        self.done = request is None  # completed at post (one rank, or a blocking backend), and counted
        #: set by the progress thread (:mod:`hpcdgnn.comm.progress`) when it holds this exchange (``holder``)
        self.completed: Any = None
        self.completed_at = 0.0
        self.holder: ProgressThread | None = None
        #: set by a polling progress thread when it has handed this exchange back to the waiting training
        #: thread (:meth:`ProgressThread.await_exchange`)
        self.released: Any = None
        #: its record in :attr:`CommStats.exchanges`, where its wait adds the time blocked (None: not kept)
        self.entry: tuple | None = None


def payload_bytes(obj: Any) -> int:
    """The array bytes of a point-to-point payload (tensors and numpy arrays inside lists, tuples and dicts):
    what :meth:`Communicator.isend_obj` counts as sent and :meth:`Communicator.recv_obj` as received, both
    sides from the same object, so a tag's bytes received over all ranks equal its bytes sent. Pickling's
    header and the payload's other objects are not counted (the object collectives count their pickled length:
    there the objects are the payload)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, (list, tuple)):
        return sum(payload_bytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(payload_bytes(x) for x in obj.values())
    return 0


def _run(copy: Callable[[], None] | None) -> None:
    if copy is not None:
        copy()


def _mpi_buffer(t: torch.Tensor) -> Any:
    """What mpi4py accepts for a contiguous tensor: a numpy view on the CPU, the tensor itself on
    CUDA (mpi4py reads ``__cuda_array_interface__``; only reached with CUDA-aware MPI).
    """
    return t.numpy() if t.device.type == "cpu" else t


def _mpi_cuda_aware(MPI) -> bool:
    """Whether the MPI library reports CUDA support (MPIX_Query_cuda_support, via mpi4py >= 4)."""
    query = getattr(MPI, "Query_cuda_support", None)
    try:
        return bool(query()) if query is not None else False
    except Exception:  # an MPI without the extension
        return False


def _available_memory() -> float:
    """Bytes of physical memory free on this node (inf where the system does not say)."""
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return float("inf")


def _mpi():
    # Imported here, not at module import: importing mpi4py.MPI initialises MPI,
    # and nothing in hpcdgnn may touch MPI before __main__ decides to (STYLE G3).
    if "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI

        return MPI
    from hpcdgnn.comm.world import singleton_environment

    # read by MPI_Init (importing mpi4py.MPI), then put back: an mpirun this process starts later (a test, a
    # benchmark) must not hand 'self only' to its ranks
    extra = singleton_environment()
    before = {key: os.environ.get(key) for key in extra}
    os.environ.update(extra)
    try:
        from mpi4py import MPI
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    return MPI


class Communicator:
    """Typed collectives over a duplicated ``MPI_COMM_WORLD``, with per-tag byte and time counters.

    Args:
        comm: an mpi4py communicator to duplicate; ``None`` = ``MPI.COMM_WORLD``.
    """

    def __init__(self, comm: Any = None) -> None:
        MPI = _mpi()
        self._attach(MPI, (comm or MPI.COMM_WORLD).Dup(), CommStats())

    @classmethod
    def start(cls, timeout_s: float, stop: Callable[[], bool] = lambda: False) -> Communicator:
        """The world's communicator, made once every rank runs hpcdgnn (:func:`~hpcdgnn.comm.world.await_world`).

        Raises:
            StalledError: a rank did not start hpcdgnn within ``timeout_s``, or ``stop()`` became true while
                waiting (the message names it); nothing is collective yet and requests are still posted, so the
                caller reports it with this rank (:meth:`world_rank_size`) and ends the job (:meth:`abort_world`).
        """
        from hpcdgnn.comm.world import await_world
        from hpcdgnn.errors import StalledError

        error = await_world(_mpi().COMM_WORLD, timeout_s, stop)
        if error:
            raise StalledError(f"stalled at the start: {error}")
        return cls()

    @staticmethod
    def world_rank_size() -> tuple[int, int]:
        """This process's rank and the world's size, before a communicator exists ((0, 1) where MPI did not start)."""
        MPI = sys.modules.get("mpi4py.MPI")
        return (MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()) if MPI is not None else (0, 1)

    @staticmethod
    def abort_world(code: int) -> None:
        """End every rank of the MPI job with ``code`` before a communicator exists (nothing where MPI did not
        start: its own error is the one to see)."""
        MPI = sys.modules.get("mpi4py.MPI")
        if MPI is not None:
            MPI.COMM_WORLD.Abort(code)

    def _attach(self, MPI: Any, raw: Any, stats: CommStats) -> None:
        """Wrap the mpi4py communicator ``raw`` (kept as it is), counting into ``stats``; tensor collectives
        over MPI until :meth:`init_tensor_backend`."""
        self._MPI = MPI
        self._comm = raw
        self.rank: int = self._comm.Get_rank()
        self.size: int = self._comm.Get_size()
        self.stats = stats
        self._row_types: dict[tuple[Any, int], Any] = {}
        self._node: Communicator | None = None  # this rank's node, split once (:meth:`node`)
        self._buffers: dict[str, torch.Tensor] = {}
        self._box_types: dict[tuple, Any] = {}
        #: ``mpi``, ``gloo`` or ``nccl``: who carries the training step's tensor collectives
        self.backend = "mpi"
        self._dist: Any = None  # the torch.distributed process group of gloo / nccl
        self._dist_timeout_s = 0.0  # comm.timeout_s it was made with
        self._cuda_aware = False
        #: posted exchanges this rank only sends in, completed at :meth:`complete_deferred`
        self._deferred: list[Pending] = []
        #: the thread that moves posted exchanges (:meth:`start_progress`); None: the calls here do. Kept by
        #: the root communicator, shared by its splits (the gradient buckets' exchanges are posted on one)
        self._root: Communicator = self
        self._progress: ProgressThread | None = None
        self._progress_ranks = self._progress_dedicated = 0  # the root's: see progress_ranks

    # -- backends -----------------------------------------------------------------------------
    def init_tensor_backend(self, backend: str, device: torch.device, timeout_s: float = 600.0) -> None:
        """Choose the library of the training step's tensor collectives (see the module docstring).

        For ``gloo`` and ``nccl``, every rank must call this (it is collective).
        """
        self.backend = backend
        self._cuda_aware = device.type == "cuda" and _mpi_cuda_aware(self._MPI)
        if backend == "mpi":
            return
        import torch.distributed as dist

        if backend == "nccl" and device.type != "cuda":
            raise RuntimeError("comm.backend nccl needs CUDA devices")  # the trainer checks this first
        # rank 0 opens the rendezvous store on a free port (port 0: the OS picks, no race) and
        # tells the others where it is over MPI
        addr = os.environ.get("HPCDGNN_MASTER_ADDR") or socket.gethostname()
        timeout = datetime.timedelta(seconds=timeout_s)
        self._dist_timeout_s = timeout_s
        store = None
        if self.rank == 0:
            store = dist.TCPStore("0.0.0.0", 0, self.size, is_master=True, timeout=timeout, wait_for_workers=False)
        addr, port = self.bcast_obj((addr, store.port if store is not None else 0), tag="setup")
        kw = {"device_id": device} if backend == "nccl" else {}
        hook = sys.excepthook
        with self._dist_call("set-up", "setup"):
            if store is None:
                store = dist.TCPStore(addr, port, self.size, is_master=False, timeout=timeout)
            dist.init_process_group(backend, store=store, rank=self.rank, world_size=self.size, timeout=timeout, **kw)
        # torch wraps the exception hook with one that buffers stderr until the hook returns; ours ends in
        # MPI_Abort and never returns, so every crash of a gloo/nccl run lost its traceback
        sys.excepthook = hook
        self._dist = dist.group.WORLD
        self._dist_device = device if backend == "nccl" else torch.device("cpu")
        self._store = store  # the master store must outlive the process group

    def start_progress(self, mode: str, threads: int) -> int:
        """``comm.progress``: hand this rank's non-blocking exchanges to a progress thread
        (:mod:`hpcdgnn.comm.progress`) — ``thread`` always, ``auto`` where the node has a spare core per
        rank beside ``threads`` (where it does, the thread is ``dedicated``), ``calls`` never; none on one
        rank or without ``MPI_THREAD_MULTIPLE``.
        Collective; returns (and keeps as ``progress_ranks``) how many ranks run one."""
        root = self._root
        if self.size == 1 or mode == "calls":  # the same on every rank (the job's): nothing to agree on
            root._progress_ranks = root._progress_dedicated = 0
            return 0
        spare = spare_core(self, threads)  # a collective on every rank (the mode is the job's)
        if mode == "thread" or spare:
            # with a core of its own the thread waits inside MPI, at the library's full rate; else it polls
            root._progress = root._progress or ProgressThread.start(self._MPI, dedicated=spare)
        mine = [float(root._progress is not None), float(root._progress is not None and root._progress.dedicated)]
        root._progress_ranks, root._progress_dedicated = map(int, self.allreduce_array(mine, tag="setup"))
        return root._progress_ranks

    @property
    def progress_ranks(self) -> int:
        """How many ranks run a progress thread (agreed in :meth:`start_progress`; kept by the root, which
        its splits share)."""
        return self._root._progress_ranks

    @property
    def progress_dedicated(self) -> int:
        """How many of :attr:`progress_ranks`' threads have a core of their own (wait inside MPI)."""
        return self._root._progress_dedicated

    @property
    def progress_everywhere(self) -> bool:
        """Whether every rank's exchanges are moved by a progress thread, from :meth:`start_progress` until
        :meth:`stop_progress` (which every rank calls): the same answer on every rank, so code may post
        differently on it (each rank must post the same collectives in the same order)."""
        root = self._root
        return root._progress is not None and root._progress_ranks == root.size

    def stop_progress(self) -> None:
        """End the progress thread, if any (its exchanges completed first); later exchanges progress in calls.
        Every rank calls it (the end of a run, :meth:`close`)."""
        root = self._root
        if root._progress is not None:
            root._progress.stop()
            root._progress = None

    @property
    def _every_rank(self) -> bool:
        """Whether this communicator spans every rank of its root (a duplicate for gradient buckets, not a
        node's split): its collectives are ones all ranks make in the same order (:attr:`CommStats.exchanges`)."""
        return self.size == self._root.size

    def _counted(self, tag: str, sent: int, got: int, t0: float, entered: float | None = None) -> None:
        """Count a collective of this communicator that began at ``t0``, entered MPI at ``entered`` (after
        the rank's own staging and copies; default ``t0``) and has completed."""
        self.stats.add(tag, sent, got, time.perf_counter() - t0, self._every_rank, entered)

    @property
    def progress_thread(self) -> ProgressThread | None:
        """The progress thread moving this communicator's non-blocking exchanges (its root's), or None."""
        return self._root._progress

    def close(self) -> None:
        """Tear down the torch.distributed group, if any (MPI itself finalises at exit)."""
        self.stop_progress()
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

    # -- environment -------------------------------------------------------------------------
    def local_rank_size(self) -> tuple[int, int]:
        """(rank on this node, ranks on this node), from an MPI shared-memory split."""
        node = self.node()
        return node.rank, node.size

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
        if self._node is not None:
            self._node.free()
            self._node = None
        if self._comm is not None and self._comm not in (self._MPI.COMM_WORLD, self._MPI.COMM_SELF):
            self._comm.Free()
        self._comm = None

    def node(self) -> Communicator:
        """The ranks of this communicator on this rank's node (an MPI shared-memory split, collective on the
        first call only, then kept), counted in this communicator's :class:`CommStats` like :meth:`split`."""
        if self._node is None:
            self._node = self._child(self._comm.Split_type(self._MPI.COMM_TYPE_SHARED, key=self.rank))
        return self._node

    def _child(self, raw: Any) -> Communicator:
        """A communicator over ``raw`` (a split of this one) that counts into this one's stats; its tensor
        collectives go over MPI (staged through the host as this one's are)."""
        sub = object.__new__(Communicator)
        sub._attach(self._MPI, raw, self.stats)
        sub._cuda_aware = self._cuda_aware
        sub._root = self._root
        return sub

    def shared_array(self, shape: Sequence[int], dtype: np.dtype, what: str) -> tuple[np.ndarray, Any]:
        """One array shared by every rank of this communicator: an MPI-3 shared-memory window
        (``MPI.Win.Allocate_shared``) owned by rank 0, which all ranks map. Needs all ranks on one node;
        raises ``RuntimeError`` (one line naming ``what``) otherwise or when the window cannot be had —
        including when it is larger than the node's available memory (or ``$HPCDGNN_SHM_LIMIT_MB``, a cap
        an administrator may set), checked first: an over-committed window would fault later, not fail.
        Returns the array and the window (free it with ``win.Free()`` when done)."""
        MPI = self._MPI
        node = self._comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        together = node.Get_size() == self.size
        node.Free()
        if not all(self._comm.allgather(together)):
            raise RuntimeError(f"{what}: its {self.size} ranks are not all on one node; a shared node memory needs "
                               "them together (place each memory group's ranks on one node, e.g. block mapping)")
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        limit = float(os.environ.get("HPCDGNN_SHM_LIMIT_MB", "0")) * 2**20 or _available_memory()
        if not self._comm.bcast(nbytes <= limit, root=0):
            raise RuntimeError(f"{what}: a {nbytes / 2**20:.1f} MiB shared-memory window does not fit the "
                               f"{limit / 2**20:.1f} MiB available on the node"
                               + (" ($HPCDGNN_SHM_LIMIT_MB)" if os.environ.get("HPCDGNN_SHM_LIMIT_MB") else ""))
        try:
            win = MPI.Win.Allocate_shared(nbytes if self.rank == 0 else 0, dtype.itemsize, comm=self._comm)
        except MPI.Exception as e:
            raise RuntimeError(f"{what}: cannot allocate a {nbytes / 2**20:.1f} MiB shared-memory window "
                               f"({e.Get_error_string().strip()})") from None
        buf, _ = win.Shared_query(0)
        arr = np.ndarray(tuple(shape), dtype=dtype, buffer=buf)
        return arr, win

    def share_per_node(self, produce: Callable[[], dict[str, np.ndarray]], what: str
                       ) -> tuple[dict[str, np.ndarray], list]:
        """Arrays every rank of a node needs alike, held once per node: the node's first rank runs ``produce``
        (name -> array), the node's ranks map them from MPI-3 shared windows (:meth:`shared_array`).

        Collective over this communicator. A user error (:class:`~hpcdgnn.errors.HpcdgnnError`) raised by
        ``produce`` is raised on every rank of the node, so none waits for arrays that will not come. Where
        no window can be had (an administrator's cap; every rank of the node learns it alike) each rank runs
        ``produce`` itself. Returns the arrays (views of the node's copy: read them, never write) and the
        windows, to keep as long as the arrays.
        """
        from hpcdgnn.errors import HpcdgnnError

        node = self.node()
        if node.size == 1:
            return produce(), []
        arrays, status = None, None
        if node.rank == 0:
            try:
                arrays = produce()
                status = ("ok", [(k, a.shape, a.dtype.str) for k, a in arrays.items()])
            except HpcdgnnError as e:
                status = ("err", type(e), str(e))
        status = node.bcast_obj(status, tag="setup")
        if status[0] == "err":
            raise status[1](status[2])
        out: dict[str, np.ndarray] = {}
        windows: list = []
        for name, shape, dt in status[1]:
            if int(np.prod(shape)) == 0:  # a window of 0 bytes is not portable: nothing to share anyway
                out[name] = np.empty(shape, dtype=np.dtype(dt))
                continue
            try:
                arr, win = node.shared_array(shape, np.dtype(dt), f"{what} ({name})")
            except RuntimeError:
                arr = win = None
            # the ranks agree before anyone frees or falls back (a failure may be one rank's alone)
            if node.allreduce_array([float(win is None)], "max", tag="setup")[0] > 0:
                for w in windows + ([win] if win is not None else []):
                    w.Free()
                return (arrays if arrays is not None else produce()), []
            if node.rank == 0:
                arr[...] = arrays[name]
            windows.append(win)
            out[name] = arr
        node.barrier(tag="setup")  # the first rank's copies are in place before anyone reads them
        return out, windows

    def library_version(self) -> str:
        """The MPI library's version string, first line (without the NUL that Open MPI's ends in)."""
        return self._MPI.Get_library_version().replace("\0", "").strip().splitlines()[0]

    # -- tensor collectives --------------------------------------------------------------------
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

    def _row_type(self, dtype: torch.dtype, unit: int) -> Any:
        """A committed contiguous MPI datatype of ``unit`` elements: counts are then rows, not
        elements, which keeps them below MPI's int32 count limit for T*N*F beyond 2^31.
        """
        key = (dtype, unit)
        if key not in self._row_types:
            self._row_types[key] = self._mpi_type(dtype).Create_contiguous(unit).Commit()
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

        Args:
            send: (sum(send_rows), unit) tensor, blocks for ranks 0..P-1 one after another.
            send_rows: rows destined to each rank.
            recv_rows: rows arriving from each rank; exchanged with an integer Alltoall if None.
            tag: counter name.
            reuse: key of a receive buffer kept from the previous call with the same key.
                Fresh buffers of hundreds of MB cost more in page faults than the
                transfer itself, so per-epoch exchanges reuse theirs. The result of a keyed
                call is valid until the next call with that key.

        Returns:
            (sum(recv_rows), unit) tensor, blocks from ranks 0..P-1 in order.
        """
        t0 = self.stats.enter(tag)
        if send.dim() != 2:
            raise ValueError("alltoallv: send must be 2-D (rows, unit)")
        unit = int(send.shape[1])
        scounts = np.asarray(send_rows, dtype=np.int64)
        if recv_rows is None:
            rcounts = np.empty(self.size, dtype=np.int64)
            self._comm.Alltoall(scounts, rcounts)
        else:
            rcounts = np.asarray(recv_rows, dtype=np.int64)
        if scounts.sum() != send.shape[0]:
            raise ValueError(f"alltoallv: send has {send.shape[0]} rows, counts sum to {scounts.sum()}")
        if self.size == 1:  # one rank: the exchange is the identity; no copy, nothing counted
            self._counted(tag, 0, 0, t0)
            return send.detach()
        if self._dist is not None:
            recv = self._dist_alltoall(send, [int(c) * unit for c in scounts], [int(c) * unit for c in rcounts])
            recv = recv.view(int(rcounts.sum()), unit)
            row_bytes = unit * send.element_size()
            sent = int(scounts.sum() - scounts[self.rank]) * row_bytes
            got = int(rcounts.sum() - rcounts[self.rank]) * row_bytes
            self._counted(tag, sent, got, t0)
            return recv.to(send.device)
        host = self._host(send)
        recv = self._recv_buffer(int(rcounts.sum()), unit, send.dtype, reuse)
        entered = time.perf_counter()
        if unit > 0:
            rowt = self._row_type(send.dtype, unit)
            sdispl = np.concatenate([[0], np.cumsum(scounts)[:-1]])
            rdispl = np.concatenate([[0], np.cumsum(rcounts)[:-1]])
            self._comm.Alltoallv(
                [host.numpy(), (scounts.astype(np.int32), sdispl.astype(np.int32)), rowt],
                [recv.numpy(), (rcounts.astype(np.int32), rdispl.astype(np.int32)), rowt],
            )
        row_bytes = unit * send.element_size()
        me = self.rank
        sent = int(scounts.sum() - scounts[me]) * row_bytes
        got = int(rcounts.sum() - rcounts[me]) * row_bytes
        self._counted(tag, sent, got, t0, entered)
        return recv.to(send.device)

    def _dist_alltoall(self, send: torch.Tensor, scounts: list[int], rcounts: list[int]) -> torch.Tensor:
        """all_to_all_single of a flat buffer over torch.distributed (counts in elements)."""
        import torch.distributed as dist

        dev = self._dist_device
        flat = send.detach().reshape(-1).to(dev)
        out = torch.empty(sum(rcounts), dtype=send.dtype, device=dev)
        with self._dist_call("all_to_all_single", self.stats.current):
            dist.all_to_all_single(out, flat, rcounts, scounts, group=self._dist)
        return out

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

    def _recv_buffer(self, rows: int, unit: int, dtype: torch.dtype, key: str | None) -> torch.Tensor:
        if key is None:
            return torch.empty((rows, unit), dtype=dtype)
        buf = self._buffers.get(key)
        if buf is None or buf.dtype != dtype or buf.numel() < rows * unit:
            buf = torch.empty(rows * unit, dtype=dtype)
            self._buffers[key] = buf
        return buf[: rows * unit].view(rows, unit)  # a new view object each call, same memory

    def buffer(self, key: str, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A host tensor of ``shape`` kept under ``key`` from call to call (see ``reuse`` in :meth:`alltoallv`)."""
        shape = tuple(int(d) for d in shape)
        return self._recv_buffer(int(np.prod(shape)), 1, dtype, key).view(shape)

    def _box_type(self, shape: tuple[int, ...], box: Box, dtype: torch.dtype) -> tuple[int, Any]:
        """(count, datatype) selecting ``box`` of a C-ordered tensor of ``shape``; (0, BYTE) if empty."""
        rows, (b0, b1) = box
        nrows = len(_box_rows(rows))
        if nrows == 0 or b1 <= b0 or min(shape[2:], default=1) <= 0:
            return 0, self._MPI.BYTE
        key = (shape, tuple(rows) if isinstance(rows, list) else rows, isinstance(rows, list), (b0, b1), dtype)
        if key not in self._box_types:
            base = self._mpi_type(dtype)
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

        Rank q receives ``send[a0:a1, b0:b1]`` for ``((a0, a1), (b0, b1)) = send_boxes[q]``
        and stores what rank p sends into ``recv[recv_boxes[p]]``; boxes span the
        trailing dimensions whole. MPI subarray datatypes describe the strided
        blocks, so neither side concatenates or splits tensors (each such copy of
        a (T, N, F) tensor costs as much as the transfer on a node). Boxes should tile
        the receive tensor: elements no box covers keep whatever the (reused) buffer
        held, and a caller that leaves some out clears them itself (as the backward of
        :class:`~hpcdgnn.comm.autograd.Redistribute` does for the snapshots it does not send).

        Args:
            send: contiguous tensor of at least 2 dimensions.
            send_boxes: per destination rank, the box of ``send`` to send.
            recv_shape: shape of the result.
            recv_boxes: per source rank, where its box lands in the result.
            tag: counter name (bytes of boxes for other ranks are counted).
            reuse: receive-buffer key (see :meth:`alltoallv`).
        """
        t0 = self.stats.enter(tag)
        recv_shape = tuple(int(d) for d in recv_shape)
        shape = tuple(send.shape)
        if self.size == 1:
            if list(send_boxes[0]) == [(0, shape[0]), (0, shape[1])] and recv_shape == shape:
                self._counted(tag, 0, 0, t0)
                return send.detach()  # identity exchange: no copy
        sent, got = self._box_volumes(send, send_boxes, recv_shape, recv_boxes)
        if self._dist is not None:
            recv = self._boxes_over_dist(send, send_boxes, recv_shape, recv_boxes)
            self._counted(tag, sent, got, t0)
            return recv.to(send.device)
        host = self._host(send)
        recv = self._recv_buffer(int(np.prod(recv_shape)), 1, send.dtype, reuse).view(recv_shape)
        _run(self._own_box_copy(host, send_boxes, recv, recv_boxes))
        args = self._boxes_args(host, send_boxes, recv, recv_boxes)
        entered = time.perf_counter()
        self._comm.Alltoallw(*args)
        self._counted(tag, sent, got, t0, entered)
        return recv.to(send.device)

    def _box_volumes(self, send: torch.Tensor, send_boxes: Sequence[Box], recv_shape: tuple[int, ...],
                     recv_boxes: Sequence[Box]) -> tuple[int, int]:
        """Bytes of the boxes for other ranks and of those from other ranks (the counters' figures)."""
        inner = int(np.prod(send.shape[2:])) if send.dim() > 2 else 1
        item, me = send.element_size(), self.rank

        def volume(box: Box) -> int:
            rows, (b0, b1) = box
            return len(_box_rows(rows)) * max(0, b1 - b0) * inner * item

        return (sum(volume(b) for q, b in enumerate(send_boxes) if q != me),
                sum(volume(b) for p, b in enumerate(recv_boxes) if p != me))

    def _own_box_copy(self, host: torch.Tensor, send_boxes: Sequence[Box], recv: torch.Tensor,
                      recv_boxes: Sequence[Box]) -> Callable[[], None] | None:
        """This rank's own box, as a strided torch copy to run (None if empty): MPI's datatype engine
        would pack and unpack a self-send through a temporary (slower on a node). At P = 2
        it is as many bytes as the transfer, so a progress thread runs it for a non-blocking exchange."""
        (srows, (b0, b1)), (rrows, (d0, d1)) = send_boxes[self.rank], recv_boxes[self.rank]
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
        me = self.rank
        st = [self._box_type(tuple(host.shape), b, host.dtype) for b in send_boxes]
        rt = [self._box_type(tuple(recv.shape), b, host.dtype) for b in recv_boxes]
        st[me] = rt[me] = (0, self._MPI.BYTE)
        zeros = [0] * self.size
        return ([host.numpy(), ([c for c, _ in st], zeros), [t for _, t in st]],
                [recv.numpy(), ([c for c, _ in rt], zeros), [t for _, t in rt]])

    # -- non-blocking exchanges (communication hidden behind compute) ---------------------------
    def ialltoall_boxes(
        self,
        send: torch.Tensor,
        send_boxes: Sequence[Box],
        recv: torch.Tensor,
        recv_boxes: Sequence[Box],
        tag: str = "alltoall",
    ) -> Pending:
        """Post :meth:`alltoall_boxes` as MPI_Ialltoallw into the given host tensor ``recv``; returns at once.

        ``send`` must stay unchanged and ``recv``'s boxes untouched until :meth:`wait` (several
        exchanges may fill disjoint boxes of one ``recv``). Every rank must post the same exchanges
        in the same order. Bytes are counted at the post; the time from post to the completion
        seen by :meth:`test` / :meth:`wait` is the tag's ``seconds``, the time spent inside the
        post, tests and wait its ``exposed`` seconds (:class:`TagStats`). Over ``gloo``/``nccl``
        the exchange is blocking and complete on return.
        """
        t0 = self.stats.enter(tag)
        if recv.device.type != "cpu" or not recv.is_contiguous():
            raise ValueError("ialltoall_boxes: recv must be a contiguous host tensor")
        sent, got = self._box_volumes(send, send_boxes, tuple(recv.shape), recv_boxes)
        if self._dist is not None or self.size == 1:
            if self._dist is not None:
                recv.copy_(self._boxes_over_dist(send, send_boxes, tuple(recv.shape), recv_boxes).cpu())
            else:
                _run(self._own_box_copy(self._host(send), send_boxes, recv, recv_boxes))  # the self copy is all
            self._counted(tag, sent, got, t0)
            return Pending(None, tag, recv, ())
        host = self._host(send)
        sbuf, rbuf = self._boxes_args(host, send_boxes, recv, recv_boxes)
        own = self._own_box_copy(host, send_boxes, recv, recv_boxes)
        entered = time.perf_counter()
        req = self._comm.Ialltoallw(sbuf, rbuf)
        if self.progress_thread is None:
            _run(own)  # after the post, so that peers' data is already on its way meanwhile
        p = Pending(req, tag, recv, (host, sbuf, rbuf))
        p.entry = self.stats.posted(tag, sent, got, t0, self._every_rank, entered)
        return self._adopted(p, own)

    def _adopted(self, p: Pending, own: Callable[[], None] | None = None) -> Pending:
        """``p``, handed to the progress thread when one runs, with its own-box copy for the thread to run."""
        if self.progress_thread is not None:
            self.progress_thread.adopt(p, own)
        return p

    def _finish(self, p: Pending, t: float) -> None:
        """Count ``p`` complete at ``t`` and let go of its buffers."""
        p.done = True
        self.stats.finished(p.tag, t)
        p.request, p.keep = None, ()

    def test(self, pending: Sequence[Pending]) -> None:
        """Let MPI progress the exchanges in flight (Open MPI moves non-blocking collectives only inside
        MPI calls) and note those that completed; never blocks."""
        live = [p for p in pending if not p.done]
        # the progress thread's: only read their flags, then its error (set before it raises flags on failing)
        done = [p for p in live if p.completed is not None and p.completed.is_set()]
        for p in done:
            p.holder.check()  # a flag raised by a failure must not pass for a completion
            self._finish(p, p.completed_at)
        # a polling thread's, still under way (a dedicated thread's moves at a wait's rate: only its flag is read)
        moving = [p for p in live if p.completed is not None and not p.done and not p.holder.dedicated]
        live = [p for p in live if p.completed is None]
        if not live and not moving:
            return
        t0 = self.stats.enter((live or moving)[0].tag)
        if moving:  # a polling thread's: a round of progress from here too (ProgressThread.drive)
            moving[0].holder.drive()
        for p in live:
            if p.request.Test():
                self._finish(p, time.perf_counter())
        self.stats.blocked((live or moving)[0].tag, time.perf_counter() - t0)

    def wait(self, p: Pending) -> torch.Tensor:
        """Complete a posted exchange (the time blocked here is exposed); returns its receive tensor."""
        if not p.done:
            t0 = self.stats.enter(p.tag)
            if p.completed is None:
                p.request.Wait()
                t1 = done_at = time.perf_counter()
            else:  # the progress thread's
                ready = p.completed.is_set()
                if not ready:
                    p.holder.await_exchange(p)
                p.holder.check()
                # done before this wait: nothing blocked; else under way until the wait ended (the wake-up is
                # blocked time too, and exposed time must lie within the time under way)
                t1 = done_at = time.perf_counter()
                if ready:
                    t1, done_at = t0, p.completed_at
            self._finish(p, done_at)
            self.stats.blocked(p.tag, t1 - t0, p.entry)
        return p.recv

    def defer(self, p: Pending) -> None:
        """Complete ``p`` later, at :meth:`complete_deferred`: for an exchange in which this rank only sends
        (it receives nothing, so nothing it computes next waits for it). The rank goes on computing instead
        of waiting for slower peers to reach the exchange; the buffers stay held until then."""
        if not p.done:
            self._deferred.append(p)

    @property
    def deferred(self) -> list[Pending]:
        """The deferred exchanges not yet completed (:meth:`defer`)."""
        self._deferred = [p for p in self._deferred if not p.done]
        return self._deferred

    def complete_deferred(self) -> None:
        """Wait for every deferred exchange (the time blocked is exposed under its tag). The gradient
        synchronisation and the end of each epoch call it, so none outlives a step."""
        pending, self._deferred = self._deferred, []
        for p in pending:
            self.wait(p)

    def _boxes_over_dist(
        self, send: torch.Tensor, send_boxes: Sequence[Box], recv_shape: tuple[int, ...], recv_boxes: Sequence[Box]
    ) -> torch.Tensor:
        """alltoall_boxes over torch.distributed: pack the boxes, all_to_all_single, unpack.

        NCCL and gloo have no derived datatypes, so the boxes are copied into one
        contiguous buffer per side (the copies MPI's Alltoallw avoids).
        """
        dev = self._dist_device
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

        Complete it with :meth:`wait` (its ``recv`` is ``tensor``); counted like :meth:`allreduce_`,
        timed like :meth:`ialltoall_boxes`. Over ``gloo``/``nccl``, or on one rank, it is blocking and
        complete on return.
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
        return self._adopted(p)

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
