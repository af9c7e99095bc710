"""The MPI world around the communicator, and whether it is the one the launcher started.

:class:`World` is a communicator's surroundings (``comm.world``): its node (split, shared-memory windows),
the MPI library, the tensor backend. :func:`init_mpi`, :func:`await_world`, :func:`world_rank_size` and
:func:`abort_world` serve before a communicator exists.

A launcher whose process-management interface the MPI library does not speak starts P processes that
each initialise a 1-rank MPI world (a "singleton"): ``srun`` with its default PMI, or ``--mpi=pmi2``,
running an Open MPI 5 that only speaks PMIx; or the ``mpirun`` of one MPI running a Python whose mpi4py
was built against another. Each process then trains alone and they race for one run directory.
:func:`check_world_size` compares ``MPI_COMM_WORLD``'s size with what the launcher asked for and says
which launch to use instead.

What the launcher asked for comes from the variables it sets for each process it starts, most specific
first (the first one present decides):

``OMPI_COMM_WORLD_SIZE``
    Open MPI's ``mpirun``/``prterun`` (and IBM's ``jsrun`` for Spectrum MPI). Present before
    ``MPI_Init``; a singleton does not set it.
``MV2_COMM_WORLD_SIZE``
    MVAPICH2's ``mpirun_rsh``.
``PMI_SIZE``
    A PMI-1/PMI-2 server: MPICH's or Intel MPI's ``mpiexec`` (Hydra), or ``srun --mpi=pmi2``.
``JSM_NAMESPACE_SIZE``
    LSF's ``jsrun``.
``SLURM_STEP_NUM_TASKS`` (else ``SLURM_NTASKS``/``SLURM_NPROCS``)
    only inside an ``srun`` job step (``SLURM_STEP_ID``/``SLURM_STEPID`` set, not the batch or extern
    step). In the batch script or an ``salloc`` shell, ``SLURM_NTASKS`` is the allocation's task count, not
    this world's.

The order matters. ``mpirun`` inside a Slurm allocation starts its daemons with ``srun`` (one task per
node), so ranks it starts on other nodes inherit that step's ``SLURM_STEP_NUM_TASKS``, the node count;
the launcher's own ``OMPI_COMM_WORLD_SIZE``/``PMI_SIZE`` comes first. ``PMIX_*`` variables name the
PMIx namespace and rank but not its size, and Hydra's ``MPI_LOCALNRANKS`` counts one node's ranks
only, so neither is used. ``os.environ`` is Python's copy of the environment at start-up: what the
MPI library itself may set while initialising is not in it.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import shlex
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["START_TIMEOUT_S", "World", "abort_world", "await_world", "check_same_command", "check_world_size",
           "expected_world_size", "init_mpi", "name_ranks", "singleton_environment", "start_timeout",
           "world_rank_size"]

# Slurm's step ids that are not srun steps: the batch script, the extern step, an interactive allocation
_NOT_SRUN_STEPS = {"batch", "extern", "interactive", "4294967294", "4294967295", "4294967293", "4294967292"}


def _int(value: str | None) -> int | None:
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def _in_srun_step(environ: Mapping[str, str]) -> bool:
    step = environ.get("SLURM_STEP_ID", environ.get("SLURM_STEPID"))
    return step is not None and step.strip() != "" and step.strip() not in _NOT_SRUN_STEPS


def expected_world_size(environ: Mapping[str, str] = os.environ) -> tuple[int, str] | None:
    """``(size, launcher)`` the launcher of this process asked for, or None when it does not say.

    ``launcher`` is ``"mpirun"`` (Open MPI, MVAPICH2), ``"mpiexec"`` (a PMI server such as Hydra),
    ``"srun"`` or ``"jsrun"``.
    """
    srun = _in_srun_step(environ)
    for var, launcher in (("OMPI_COMM_WORLD_SIZE", "mpirun"), ("MV2_COMM_WORLD_SIZE", "mpirun")):
        n = _int(environ.get(var))
        if n is not None:
            return n, launcher
    n = _int(environ.get("PMI_SIZE"))
    if n is not None:
        # srun --mpi=pmi2 sets PMI_SIZE itself; Hydra's proxies started by srun do not set SLURM_MPI_TYPE=pmi*
        from_srun = srun and environ.get("SLURM_MPI_TYPE", "").startswith("pmi")
        return n, "srun" if from_srun else "mpiexec"
    n = _int(environ.get("JSM_NAMESPACE_SIZE"))
    if n is not None:
        return n, "jsrun"
    if srun:
        for var in ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"):
            n = _int(environ.get(var))
            if n is not None:
                return n, "srun"
    return None


def singleton_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Open MPI settings for a process no launcher started (``python -m hpcdgnn run`` at P = 1), else ``{}``.

    Such a process initialises a 1-rank world (a "singleton"), which has no peer to reach: only the ``self`` transport
    is needed (``OMPI_MCA_btl=self``). With Open MPI's defaults its shared-memory transport makes a 16 MiB segment in
    ``/dev/shm`` that nothing removes (no ``prterun`` cleans up after a singleton), and the wheel's libfabric
    transport probes providers at start-up. A transport the user chose (``OMPI_MCA_btl=^ofi``, as the tests' and the
    job scripts' environment has it) is replaced too: it can only reach other processes, and a singleton has none. A
    launcher leaves its mark before ``MPI_Init`` (:func:`expected_world_size`'s variables, or PMI/PMIx ones: Open MPI
    speaks PMIx to every process its ``prterun`` or ``srun --mpi=pmix`` starts, and a process without them cannot join
    a world of more than one), and then nothing is set — but for a launcher
    that started one process and gave it no PMI (``srun -n 1`` with no ``--mpi``): a singleton too. Other MPI
    libraries ignore the variable.
    """
    expected = expected_world_size(environ)
    if expected is not None and expected[0] > 1:
        return {}
    if any(k.startswith(("PMIX_", "PMI_", "OMPI_COMM_WORLD_")) for k in environ):
        return {}
    return {"OMPI_MCA_btl": "self"}


def _mpi_library() -> str:
    """The MPI library mpi4py uses (first line of MPI_Get_library_version), '' when mpi4py is not loaded."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        return ""
    try:
        return str(mpi.Get_library_version()).replace("\0", "").strip().splitlines()[0].strip()
    except Exception:  # noqa: BLE001 - only a hint for the message
        return ""


def _srun_advice(library: str) -> str:
    lib = library.lower()
    if "open mpi" in lib or "spectrum mpi" in lib:
        return "use HPCDGNN_SRUN_MPI=pmix (srun --mpi=pmix) or HPCDGNN_LAUNCHER=mpirun"
    if any(s in lib for s in ("mpich", "intel", "mvapich")):
        return "use HPCDGNN_SRUN_MPI=pmi2 (or pmix where this MPI was built with PMIx) or HPCDGNN_LAUNCHER=mpirun"
    return "use HPCDGNN_SRUN_MPI=pmix (Open MPI) or pmi2 (MPICH, Intel MPI), or HPCDGNN_LAUNCHER=mpirun"


def check_world_size(size: int, environ: Mapping[str, str] = os.environ, *, library: str | None = None) -> str | None:
    """A one-line error when this MPI world has ``size`` ranks but the launcher started another number.

    ``library`` is the MPI library's version string (default: what mpi4py reports, when it is loaded); it
    only picks the advice. Returns None when the sizes agree or the environment names no launcher size
    (a plain ``python -m hpcdgnn run``, or a launcher this module does not know).
    """
    expected = expected_world_size(environ)
    if expected is None or expected[0] == size:
        return None
    n, launcher = expected
    if library is None:
        library = _mpi_library()
    lib = f" ({library})" if library else ""
    if launcher == "srun":
        mpi_type = environ.get("SLURM_MPI_TYPE", "")
        pmi = f"srun --mpi={mpi_type}" if mpi_type else "srun's default PMI"
        if size == 1:
            return (
                f"srun started {n} tasks but each is a 1-rank MPI world: the MPI library{lib} does not speak "
                f"{pmi}; {_srun_advice(library)}"
            )
        return (
            f"srun started {n} tasks but this MPI world has {size} ranks: the MPI library{lib} does not match "
            f"{pmi}; {_srun_advice(library)}"
        )
    what = {"mpirun": "processes", "mpiexec": "processes", "jsrun": "tasks"}[launcher]
    each = "each is a 1-rank MPI world" if size == 1 else f"this MPI world has {size} ranks"
    return (
        f"{launcher} started {n} {what} but {each}: the launcher and the MPI library of mpi4py{lib} come from "
        f"different MPI installations; launch with the {launcher} of the MPI mpi4py was built with "
        f"(HPCDGNN_MPIRUN=/path/to/mpirun), or rebuild mpi4py against this launcher's MPI"
    )


def check_same_command(comm, command: Sequence[str]) -> str | None:
    """A one-line error, the same on every rank, when the ranks were started with different arguments (collective).

    Every decision of a run is rank 0's, broadcast, so a rank started with other arguments (an MPMD launch,
    ``mpirun ... : ...``; a job script expanding a variable per rank, ``--output runs/$(date +%s)``) either
    trained rank 0's job silently, or — one rank alone refusing ``--resume`` with ``--output`` — left the others
    waiting in a collective for ever. One all-gather of a digest; the commands themselves only when they differ.
    """
    text = "\0".join(command)
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    if len(set(comm.allgather_obj(digest))) == 1:
        return None
    lists = comm.allgather_obj(list(command))
    other = [r for r, c in enumerate(lists) if c != lists[0]]  # not empty: the digests of the lists differed
    commands = [shlex.join(c) for c in lists]  # quoted: '--set "a=1 b=2"' is not '--set a=1 b=2'
    return (f"the ranks were started with different arguments — rank 0: {commands[0]} — rank {other[0]}: "
            f"{commands[other[0]]} — (differing: {name_ranks(other, 3)}); every rank must run "
            "the same command (an MPMD launch with ':', a job script expanding a value per rank, or an HPCDGNN_ "
            "variable that mpirun did not pass to every rank: -x? A node without numba reads HPCDGNN_KERNELS=torch)")


#: seconds rank 0 waits, after ``MPI_Init``, for every rank to start hpcdgnn (``HPCDGNN_START_TIMEOUT``); as
#: ``comm.stall_timeout_s``. Open MPI's ``MPI_Init`` waits for every process, so it is not the imports' spread
START_TIMEOUT_S = 600.0
#: seconds the handshake goes on after a pre-emption signal (the others may be a moment behind), then ends
STOP_GRACE_S = 10.0
_HELLO_TAG = 31_415  # below MPI_TAG_UB's guaranteed 32767
_HELLO = 0x6870_6364_676E_6E01  # "hpcdgnn" + protocol 1: a foreign program's message with the same tag is not it


def start_timeout(environ: Mapping[str, str] = os.environ) -> float:
    """``HPCDGNN_START_TIMEOUT`` in seconds (> 0), else :data:`START_TIMEOUT_S`.

    Raises:
        ConfigError: a value that is not a positive number (names the variable).
    """
    value = environ.get("HPCDGNN_START_TIMEOUT")
    if value is None:
        return START_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        from hpcdgnn.errors import ConfigError

        raise ConfigError(f"environment HPCDGNN_START_TIMEOUT={value!r}: seconds > 0 (default {START_TIMEOUT_S:g})")
    return seconds


def name_ranks(ranks: Sequence[int], shown: int = 5) -> str:
    """``rank 2`` or ``ranks 0, 1, 3 and 4 more``: the ranks a message blames, the first ``shown`` of them."""
    listed = ", ".join(map(str, ranks[:shown])) + (f" and {len(ranks) - shown} more" if len(ranks) > shown else "")
    return f"rank{'s' if len(ranks) > 1 else ''} {listed}"


def await_world(world, timeout_s: float, stop: Callable[[], bool] = lambda: False,
                poll_s: float = 0.01) -> str | None:
    """Wait until every rank of ``world`` (mpi4py's ``COMM_WORLD``) runs hpcdgnn; a one-line error naming the
    ranks that did not within ``timeout_s``, else None. Every rank calls it, after ``MPI_Init`` and before any
    collective.

    Another MPI program in the world (an MPMD launch, ``mpirun -np 4 python -m hpcdgnn run job.yaml : -np 1
    python monitor.py``) never enters hpcdgnn's first collective — duplicating the world's communicator — and
    left every hpcdgnn rank waiting in it for ever. Here each rank tells rank 0 it started (a point-to-point
    message, which such a program does not match) and waits for rank 0's answer, both polled against the clock:
    rank 0 names the ranks it did not hear from; a rank that gets no answer names rank 0 (after twice the time,
    so that rank 0's report comes first when rank 0 is hpcdgnn's). A program that never initialises MPI is
    not reached here: Open MPI's ``MPI_Init`` already waits for every process of the world.

    ``stop()`` (a pre-emption signal) ends the wait with an error :data:`STOP_GRACE_S` later. On an error the
    requests stay posted (their buffers are this call's): the caller must end the job (``MPI_Abort``), as
    ``python -m hpcdgnn`` does.
    """
    MPI = sys.modules["mpi4py.MPI"]
    rank, size = world.Get_rank(), world.Get_size()
    if size == 1:
        return None
    deadline = time.monotonic() + (timeout_s if rank == 0 else 2 * timeout_s)
    if rank == 0:
        got = np.zeros(size, dtype=np.uint64)
        reqs = [world.Irecv(got[r:r + 1], source=r, tag=_HELLO_TAG) for r in range(1, size)]
    else:
        hello = np.array([_HELLO], dtype=np.uint64)
        answer = np.zeros(1, dtype=np.uint64)
        reqs = [world.Isend(hello, dest=0, tag=_HELLO_TAG), world.Irecv(answer, source=0, tag=_HELLO_TAG)]
    stopping = False
    while not MPI.Request.Testall(reqs):  # all or none: on False no request is completed
        now = time.monotonic()
        if not stopping and stop():  # a pre-emption signal: the handshake is milliseconds where all ranks run
            stopping, deadline = True, min(deadline, now + STOP_GRACE_S)  # hpcdgnn; this one waits for no rank
        if now > deadline:
            if stopping:
                return "pre-empted while the ranks were starting, before any set-up: run the job again"
            break
        time.sleep(poll_s)
    else:
        if rank != 0:
            return None if int(answer[0]) == _HELLO else "rank 0 is not running hpcdgnn (another MPI program?)"
        strangers = [r for r in range(1, size) if int(got[r]) != _HELLO]
        if not strangers:
            ok = np.array([_HELLO], dtype=np.uint64)
            MPI.Request.Waitall([world.Isend(ok, dest=r, tag=_HELLO_TAG) for r in range(1, size)])
            return None
        return (f"{name_ranks(strangers)} of {size} sent rank 0 another program's "
                "message instead of hpcdgnn's start: every rank must run python -m hpcdgnn run (an MPMD launch?)")
    if rank != 0:
        return (f"rank 0 did not answer within {2 * timeout_s:g} s (HPCDGNN_START_TIMEOUT x 2): it runs another MPI "
                "program than hpcdgnn (an MPMD launch?), or reached this point that much later than this rank")
    arrived = [r for r in range(1, size) if reqs[r - 1].Test()]  # Test completes (and frees) what arrived
    silent = sorted(set(range(1, size)) - set(arrived))
    strangers = [r for r in arrived if int(got[r]) != _HELLO]
    also = (f"; {name_ranks(strangers)} sent another program's message"
            if strangers else "")
    return (f"{name_ranks(silent)} of {size} did not start hpcdgnn within "
            f"{timeout_s:g} s (HPCDGNN_START_TIMEOUT){also}: every rank must run python -m hpcdgnn run (an MPMD "
            "launch with another MPI program?)")


# -- the world before a communicator exists -----------------------------------------------------------------
def init_mpi() -> Any:
    """The ``mpi4py.MPI`` module, imported — and so MPI initialised — on the first call, not at import time
    (nothing in hpcdgnn may touch MPI before ``__main__`` decides to, STYLE G3); a process no launcher started
    gets :func:`singleton_environment` for its ``MPI_Init``."""
    if "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI

        return MPI
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


def world_rank_size() -> tuple[int, int]:
    """This process's rank and the world's size, before a communicator exists ((0, 1) where MPI did not start)."""
    MPI = sys.modules.get("mpi4py.MPI")
    return (MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()) if MPI is not None else (0, 1)


def abort_world(code: int) -> None:
    """End every rank of the MPI job with ``code`` before a communicator exists (nothing where MPI did not
    start: its own error is the one to see)."""
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is not None:
        MPI.COMM_WORLD.Abort(code)


# -- what surrounds a communicator: its node, the MPI library, the tensor backend ---------------------------
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


class World:
    """What surrounds a communicator's ranks (``comm.world``): the node each runs on (its split, shared-memory
    windows), the MPI library, and the library that carries the training step's tensor collectives.

    Set-up and metrics ask these questions once; the training step never does, so they stand apart from the
    collectives. Every collective here still crosses the communicator and is counted in its
    :class:`~hpcdgnn.comm.stats.CommStats`.

    Args:
        comm: the :class:`~hpcdgnn.comm.communicator.Communicator` whose surroundings these are.
    """

    def __init__(self, comm: Any) -> None:
        self._owner = comm
        self._node: Any = None  # this rank's node, split once (:meth:`node`)

    def init_tensor_backend(self, backend: str, device: Any, timeout_s: float = 600.0) -> None:
        """Choose the library of the training step's tensor collectives (``comm.backend``; see
        :mod:`hpcdgnn.comm.communicator`).

        For ``gloo`` and ``nccl``, every rank must call this (it is collective).
        """
        c = self._owner
        c.backend = backend
        c._cuda_aware = device.type == "cuda" and _mpi_cuda_aware(c._MPI)
        if backend == "mpi":
            return
        import torch
        import torch.distributed as dist

        if backend == "nccl" and device.type != "cuda":
            raise RuntimeError("comm.backend nccl needs CUDA devices")  # the trainer checks this first
        # rank 0 opens the rendezvous store on a free port (port 0: the OS picks, no race) and
        # tells the others where it is over MPI
        addr = os.environ.get("HPCDGNN_MASTER_ADDR") or socket.gethostname()
        timeout = datetime.timedelta(seconds=timeout_s)
        c._dist_timeout_s = timeout_s
        store = None
        if c.rank == 0:
            store = dist.TCPStore("0.0.0.0", 0, c.size, is_master=True, timeout=timeout, wait_for_workers=False)
        addr, port = c.bcast_obj((addr, store.port if store is not None else 0), tag="setup")
        kw = {"device_id": device} if backend == "nccl" else {}
        hook = sys.excepthook
        with c._dist_call("set-up", "setup"):
            if store is None:
                store = dist.TCPStore(addr, port, c.size, is_master=False, timeout=timeout)
            dist.init_process_group(backend, store=store, rank=c.rank, world_size=c.size, timeout=timeout, **kw)
        # torch wraps the exception hook with one that buffers stderr until the hook returns; ours ends in
        # MPI_Abort and never returns, so every crash of a gloo/nccl run lost its traceback
        sys.excepthook = hook
        c._dist = dist.group.WORLD
        c._dist_device = device if backend == "nccl" else torch.device("cpu")
        c._store = store  # the master store must outlive the process group

    def library_version(self) -> str:
        """The MPI library's version string, first line (without the NUL that Open MPI's ends in)."""
        return self._owner._MPI.Get_library_version().replace("\0", "").strip().splitlines()[0]

    def node(self) -> Any:
        """The ranks of this communicator on this rank's node (an MPI shared-memory split, collective on the
        first call only, then kept), counted in this communicator's stats like its ``split``."""
        c = self._owner
        if self._node is None:
            self._node = c._child(c._comm.Split_type(c._MPI.COMM_TYPE_SHARED, key=c.rank))
        return self._node

    def _free(self) -> None:
        """Free the node's split, if made (part of the communicator's ``free``)."""
        if self._node is not None:
            self._node.free()
            self._node = None

    def local_rank_size(self) -> tuple[int, int]:
        """(rank on this node, ranks on this node), from an MPI shared-memory split."""
        node = self.node()
        return node.rank, node.size

    def shared_array(self, shape: Sequence[int], dtype: np.dtype, what: str) -> tuple[np.ndarray, Any]:
        """One array shared by every rank of this communicator: an MPI-3 shared-memory window
        (``MPI.Win.Allocate_shared``) owned by rank 0, which all ranks map. Needs all ranks on one node;
        raises ``RuntimeError`` (one line naming ``what``) otherwise or when the window cannot be had —
        including when it is larger than the node's available memory (or ``$HPCDGNN_SHM_LIMIT_MB``, a cap
        an administrator may set), checked first: an over-committed window would fault later, not fail.
        Returns the array and the window (free it with ``win.Free()`` when done)."""
        c = self._owner
        MPI = c._MPI
        node = c._comm.Split_type(MPI.COMM_TYPE_SHARED, key=c.rank)
        together = node.Get_size() == c.size
        node.Free()
        if not all(c._comm.allgather(together)):
            raise RuntimeError(f"{what}: its {c.size} ranks are not all on one node; a shared node memory needs "
                               "them together (place each memory group's ranks on one node, e.g. block mapping)")
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        limit = float(os.environ.get("HPCDGNN_SHM_LIMIT_MB", "0")) * 2**20 or _available_memory()
        if not c._comm.bcast(nbytes <= limit, root=0):
            raise RuntimeError(f"{what}: a {nbytes / 2**20:.1f} MiB shared-memory window does not fit the "
                               f"{limit / 2**20:.1f} MiB available on the node"
                               + (" ($HPCDGNN_SHM_LIMIT_MB)" if os.environ.get("HPCDGNN_SHM_LIMIT_MB") else ""))
        try:
            win = MPI.Win.Allocate_shared(nbytes if c.rank == 0 else 0, dtype.itemsize, comm=c._comm)
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
                arr, win = node.world.shared_array(shape, np.dtype(dt), f"{what} ({name})")
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
