"""The MPI world around the communicator, and whether it is the one the launcher started.

:class:`World` is a communicator's surroundings (``comm.world``): its node, the MPI library, the tensor backend;
:func:`init_mpi`, :func:`await_world`, :func:`world_rank_size` and :func:`abort_world` serve before a
communicator exists.

A launcher whose PMI the MPI library does not speak starts P 1-rank "singleton" worlds that race for one run
directory (``srun --mpi=pmi2`` with a PMIx-only Open MPI; one MPI's ``mpirun`` with mpi4py built against
another). :func:`check_world_size` compares the world's size with the launcher's, from the first present of
``OMPI_COMM_WORLD_SIZE`` (Open MPI, Spectrum's jsrun), ``MV2_COMM_WORLD_SIZE`` (MVAPICH2), ``PMI_SIZE`` (Hydra,
``srun --mpi=pmi2``), ``JSM_NAMESPACE_SIZE`` (LSF) and ``SLURM_STEP_NUM_TASKS`` (inside an srun step only). The
launcher's own variable comes first: ``mpirun`` in a Slurm allocation starts its daemons with ``srun``, whose
step variables its remote ranks inherit.
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
    """``(size, launcher)`` the launcher asked for (mpirun, mpiexec, srun or jsrun), or None."""
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
    """``OMPI_MCA_btl=self`` for a process no launcher started (a singleton), else ``{}``.

    A singleton has no peer; Open MPI's default shared-memory transport would leave a 16 MiB ``/dev/shm`` segment
    nothing removes. A launcher is recognised by its size or PMI/PMIx variables.
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
        # MPICH pads its first line ("MPICH Version:\t5.0.2"): one space between words, as in one-line messages
        return " ".join(str(mpi.Get_library_version()).replace("\0", "").strip().splitlines()[0].split())
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
    """A one-line error when this world has ``size`` ranks but the launcher started another number, else None.

    ``library`` (the MPI version string) only picks the advice.
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
    """A one-line error, the same on every rank, when ranks got different arguments (collective).

    Every decision is rank 0's, broadcast, so a rank with other arguments would silently train rank 0's job or
    hang the others in a collective.
    """
    text = "\0".join(command)
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    if len(set(comm.allgather_obj(digest))) == 1:
        return None
    lists = comm.allgather_obj(list(command))
    other = [r for r, c in enumerate(lists) if c != lists[0]]
    commands = [shlex.join(c) for c in lists]  # quoted: '--set "a=1 b=2"' is not '--set a=1 b=2'
    return (f"the ranks were started with different arguments — rank 0: {commands[0]} — rank {other[0]}: "
            f"{commands[other[0]]} — (differing: {name_ranks(other, 3)}); every rank must run "
            "the same command (an MPMD launch with ':', a job script expanding a value per rank, or an HPCDGNN_ "
            "variable that mpirun did not pass to every rank: -x? A node without numba reads HPCDGNN_KERNELS=torch)")


#: seconds rank 0 waits after ``MPI_Init`` for every rank to start hpcdgnn (``HPCDGNN_START_TIMEOUT``)
START_TIMEOUT_S = 600.0
#: seconds the handshake goes on after a pre-emption signal
STOP_GRACE_S = 10.0
_HELLO_TAG = 31_415  # below MPI_TAG_UB's guaranteed 32767
_HELLO = 0x6870_6364_676E_6E01  # "hpcdgnn" + protocol 1: a foreign program's message with the same tag is not it


def start_timeout(environ: Mapping[str, str] = os.environ) -> float:
    """``HPCDGNN_START_TIMEOUT`` in seconds (> 0), else :data:`START_TIMEOUT_S`.

    Raises:
        ConfigError: a value that is not a positive number.
    """
    from hpcdgnn.errors import env_seconds

    return env_seconds("HPCDGNN_START_TIMEOUT", START_TIMEOUT_S, environ=environ)


def shm_limit_mib(environ: Mapping[str, str] = os.environ) -> float:
    """``HPCDGNN_SHM_LIMIT_MB``: the MiB a node's shared-memory window may take (> 0), else 0 for what the node has.

    Raises:
        ConfigError: a value that is not a positive number.
    """
    from hpcdgnn.errors import env_seconds

    return env_seconds("HPCDGNN_SHM_LIMIT_MB", 0.0, environ=environ, unit="MiB",
                       default_text="the node's available memory")


def name_ranks(ranks: Sequence[int], shown: int = 5) -> str:
    """``rank 2`` or ``ranks 0, 1, 3 and 4 more``: the ranks a message blames, the first ``shown`` of them."""
    listed = ", ".join(map(str, ranks[:shown])) + (f" and {len(ranks) - shown} more" if len(ranks) > shown else "")
    return f"rank{'s' if len(ranks) > 1 else ''} {listed}"


def await_world(world, timeout_s: float, stop: Callable[[], bool] = lambda: False,
                poll_s: float = 0.01, call: str | None = None) -> str | None:
    """Wait until every rank of ``world`` runs hpcdgnn; a one-line error naming the missing ranks, else None.

    A point-to-point handshake with rank 0, polled against ``timeout_s``, so a foreign program in an MPMD
    launch is named instead of hanging the first collective. On an error the requests stay posted: the caller
    must ``MPI_Abort``. ``call``: a trained run's later call every rank makes (``TrainedRun.embed``), which a
    missing rank most likely left to rank 0 alone; None: the start of a run.
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
        if not stopping and stop():
            stopping, deadline = True, min(deadline, now + STOP_GRACE_S)
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
                "message instead of hpcdgnn's start: every rank must run python -m hpcdgnn run, or call hpcdgnn.train "
                "(an MPMD launch?)")
    if rank != 0:
        return (f"rank 0 did not answer within {2 * timeout_s:g} s (HPCDGNN_START_TIMEOUT x 2): it runs another MPI "
                "program than hpcdgnn (an MPMD launch?), or reached this point that much later than this rank")
    arrived = [r for r in range(1, size) if reqs[r - 1].Test()]  # Test completes (and frees) what arrived
    silent = sorted(set(range(1, size)) - set(arrived))
    strangers = [r for r in arrived if int(got[r]) != _HELLO]
    also = (f"; {name_ranks(strangers)} sent another program's message"
            if strangers else "")
    if call is not None:
        return (f"{name_ranks(silent)} of {size} did not call {call} within {timeout_s:g} s (HPCDGNN_START_TIMEOUT)"
                f"{also}: under mpirun every rank makes the same call, as with hpcdgnn.train (not rank 0 alone, "
                "under 'if rank == 0')")
    return (f"{name_ranks(silent)} of {size} did not start hpcdgnn within "
            f"{timeout_s:g} s (HPCDGNN_START_TIMEOUT){also}: every rank must run python -m hpcdgnn run, or call "
            "hpcdgnn.train (an MPMD launch with another MPI program?)")


def init_mpi() -> Any:
    """The ``mpi4py.MPI`` module, imported (so MPI initialised) on the first call, never at import (STYLE G3)."""
    if "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI

        return MPI
    # put back after MPI_Init: an mpirun this process starts later must not hand 'self only' to its ranks
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
    """End every rank of the MPI job with ``code`` before a communicator exists (nothing without MPI)."""
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is not None:
        MPI.COMM_WORLD.Abort(code)


def _mpi_cuda_aware(MPI) -> bool:
    """Whether the MPI library reports CUDA support (MPIX_Query_cuda_support, via mpi4py >= 4)."""
    query = getattr(MPI, "Query_cuda_support", None)
    try:
        return bool(query()) if query is not None else False
    except Exception:  # an MPI without the extension
        return False


def _available_memory() -> float:
    """Bytes of memory this node's ranks could still allocate (:func:`~hpcdgnn.comm.device.node_available`: the
    system's, within the job's cgroup; inf where the system does not say)."""
    from hpcdgnn.comm.device import node_available

    free = node_available()
    return float("inf") if free is None else float(free)


class World:
    """What surrounds a communicator's ranks (``comm.world``): node, MPI library, tensor backend (set-up only)."""

    def __init__(self, comm: Any) -> None:
        self._owner = comm
        self._node: Any = None  # this rank's node, split once (:meth:`node`)

    def init_tensor_backend(self, backend: str, device: Any, timeout_s: float = 600.0) -> None:
        """Choose the library of the step's tensor collectives (``comm.backend``); collective for gloo/nccl."""
        c = self._owner
        c.backend = backend
        c._cuda_aware = device.type == "cuda" and _mpi_cuda_aware(c._MPI)
        if backend == "mpi":
            return
        import torch
        import torch.distributed as dist

        if backend == "nccl" and device.type != "cuda":
            raise RuntimeError("comm.backend nccl needs CUDA devices")  # the trainer checks this first
        # port 0: the OS picks a free port, no race; rank 0 tells the others over MPI
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
        # torch's hook buffers stderr until the hook returns; ours ends in MPI_Abort, losing the traceback
        sys.excepthook = hook
        c._dist = dist.group.WORLD
        c._dist_device = device if backend == "nccl" else torch.device("cpu")
        c._store = store  # the master store must outlive the process group

    def library_version(self) -> str:
        """The MPI library's version string, first line (without the NUL that Open MPI's ends in)."""
        return self._owner._MPI.Get_library_version().replace("\0", "").strip().splitlines()[0]

    def node(self) -> Any:
        """The ranks of this communicator on this rank's node (a shared-memory split; collective on first call)."""
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
        """One array in an MPI-3 shared window owned by rank 0 (all ranks on one node); (array, window).

        Raises ``RuntimeError`` if the window cannot be had or exceeds available memory (or
        ``$HPCDGNN_SHM_LIMIT_MB``), checked first: an over-committed window would fault later, not fail.
        """
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
        limit = shm_limit_mib() * 2**20 or _available_memory()
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
        """Arrays held once per node: the node's first rank runs ``produce``, all map them (collective).

        A user error in ``produce`` is raised on every rank of the node; without a window each rank runs
        ``produce`` itself. Returns (read-only arrays, windows to keep as long as the arrays).
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
        node.barrier(tag="setup")
        return out, windows
