"""Training checkpoints: written atomically at epoch boundaries, read by ``run --resume RUNDIR``.

Layout (``checkpoint.dir``, default ``RUNDIR/checkpoints``)::

    epoch-000006/
      state.pt           rank 0: epoch, model, task head, optimizer, plan, resolved config
      rank-00000.pt ...  every rank: its torch / numpy / python RNG states and its strategy's state
      COMPLETE           written last: {"epoch", "num_ranks", "run_id", "files"} (JSON); ``files``: each file's
                         [bytes, CRC-32], checked when it is read (a flipped byte loads as wrong parameters)
    epoch-000006+batch-000000012/
                         within epoch 7, after its first 12 batches (a pre-emption's stop between batches,
                         ``Strategy.resumes_between_batches``, or in the evaluation pass after all of them,
                         ``Strategy.resumes_evaluation``): ``state.pt`` adds ``batch``, ``partial_sum`` (the ranks'
                         metric sums so far, summed) and after all batches ``grad_norm``; each rank file adds
                         ``partial`` (its own sums and the scores its task kept); ``COMPLETE`` adds ``batch``.
                         For ``--resume`` only, and removed once a newer checkpoint is written
                         (``checkpoint.keep`` counts the epochs' ends)

Names sort in training order.

Ranks write into ``epoch-XXXXXX.tmp/``; after a barrier rank 0 writes ``COMPLETE`` and renames the directory
(atomic on POSIX), so a killed job never leaves a half-written checkpoint; every file, ``COMPLETE`` and the rename
are synced before an older checkpoint goes, so a node's crash never leaves fewer checkpoints than before. The run
id in ``COMPLETE`` keeps a resume or the rotation from touching another run's checkpoints. Parameters and Adam
moments are identical on every rank, so rank 0 saves them once; a resume is bit for bit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import io
import json
import os
import pickle
import random
import resource
import shutil
import time
import types
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hpcdgnn import preemption
from hpcdgnn.atomic import atomic_write, sync_directory
from hpcdgnn.errors import ConfigError, DataError, StoppedError
from hpcdgnn.metrics.results import writing
from hpcdgnn.run_lock import _HELD, _NO_LOCKS, LOCK_FILE, _lock, release_runs, run_lock_wait

__all__ = ["CheckpointManager", "HeldCheckpoint", "array_bytes", "check_owner", "claim_run_dir", "ensure_run_id",
           "complete_record", "hold_run", "load_partial", "release_runs",
           "latest_checkpoint", "load_shared", "load_state", "read_run_id", "restore_rng", "strategy_state",
           "within_epoch"]

_COMPLETE = "COMPLETE"
RUN_ID_FILE = "run_id"


def read_run_id(run_dir: Path) -> str | None:
    """The run's id (``RUNDIR/run_id``), or None."""
    try:
        return (Path(run_dir) / RUN_ID_FILE).read_text().strip() or None
    except OSError:
        return None


def claim_run_dir(run_dir: Path) -> bool:
    """Rank 0: write a new run's id into ``run_dir`` unless another run has (``O_EXCL``); False if one has.

    Raises:
        DataError: the file cannot be written (a read-only directory, a full disk), in one line.
    """
    path = Path(run_dir) / RUN_ID_FILE
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    except OSError:
        with writing(path):
            raise
    with writing(path), os.fdopen(fd, "w") as f:
        f.write(uuid.uuid4().hex + "\n")
    return True


def ensure_run_id(run_dir: Path) -> str:
    """Rank 0: the run's id, made (a random 128-bit hex string) when the run directory has none."""
    if read_run_id(run_dir) is None:
        claim_run_dir(run_dir)
    return read_run_id(run_dir)


def hold_run(run_dir: Path, where: str) -> None:
    """Rank 0: hold ``run_dir`` for this process while it trains (an advisory ``flock`` on ``RUNDIR/run.lock``, a
    file nothing else reads, let go by :func:`release_runs` or at exit, a killed process's included). Two jobs on
    one run directory (a resume started while the run, or a launcher's orphaned ranks, still train; two resumes
    at once) interleaved their epochs and checkpoints into it. Held by another, it waits up to
    ``HPCDGNN_RUN_LOCK_WAIT`` seconds (default 120: a requeued job may start while the attempt before it lets go,
    or while a network file system still keeps a crashed node's lock), then refuses. Where the file system takes
    no lock the run goes on unguarded, with a warning.

    Raises:
        ConfigError: another process holds it (one line, ``where`` first).
        StoppedError: a stop signal came while waiting (the scheduler's SIGTERM of a cancelled or timed-out job,
            whose SIGKILL follows within seconds: the wait would end without a word).
    """
    key = Path(run_dir).resolve()
    if key in _HELD:  # this process's own (a library caller resuming in the process that ran it)
        return
    from hpcdgnn.metrics.log import get_logger

    path = Path(run_dir) / LOCK_FILE
    wait, said = run_lock_wait(), False
    deadline = time.monotonic() + wait
    stopped = (f"{where}: stopped by a signal while waiting for another job to let go of {path}; nothing was "
               "changed: resume once that job has ended")
    with contextlib.ExitStack() as waiting:
        while True:
            try:
                fd = _lock(path)
            except OSError as e:
                if e.errno not in _NO_LOCKS:  # cannot make the file (read-only, full): one line
                    with writing(path):
                        raise
                get_logger().warning(f"{where}: {path}: this file system takes no lock ({e.strerror or e}): "
                                     "nothing keeps a second job from training this run at the same time")
                return
            if fd is not None:
                # a signal up to the wait's end was told "stopping now": so it does, though the lock came free
                waiting.close()
                if preemption.requested_while_waiting():
                    os.close(fd)
                    raise StoppedError(stopped)
                _HELD[key] = fd
                return
            if preemption.requested():  # a signal before or during the wait: not the deadline's refusal, as its
                raise StoppedError(stopped)  # acknowledgement said
            if time.monotonic() >= deadline:
                raise ConfigError(f"{where}: another job is training this run now (it holds {path}; waited "
                                  f"{wait:g} s, HPCDGNN_RUN_LOCK_WAIT); one job trains a run at a time: let it end "
                                  "(or stop it), then resume — or, after a node's crash, wait for the file server to "
                                  "release its lock")
            if not said:  # the wait begins: an interrupt from now on is acknowledged as ending it
                waiting.enter_context(preemption.waiting(f"another job to let go of {path}"))
                get_logger().warning(f"{where}: another job holds {path}: waiting up to {wait:g} s for it to let go "
                                     "(HPCDGNN_RUN_LOCK_WAIT)")
                said = True
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def complete_record(ckpt: Path) -> dict[str, Any]:
    """``COMPLETE``'s JSON object ({} when unreadable)."""
    try:
        meta = json.loads((ckpt / _COMPLETE).read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def check_owner(meta: dict[str, Any] | None, ckpt: Path, run_dir: Path, where: str) -> None:
    """Refuse (one line) to resume (or read) the run in ``run_dir`` from ``ckpt`` (``COMPLETE``: ``meta``, None: read
    it) of another run.

    Raises:
        DataError: both carry an id and the ids differ.
    """
    mine, theirs = read_run_id(run_dir), (complete_record(ckpt) if meta is None else meta).get("run_id")
    if mine is not None and theirs is not None and theirs != mine:
        raise DataError(f"{where}: {ckpt} was written by another run (run id {theirs}, not {run_dir}'s {mine}); "
                        "that run is used from its own directory; set checkpoint.dir to this run's own checkpoints")


def _epoch_dir(root: Path, epoch: int, batch: int = 0) -> Path:
    """The checkpoint after epoch ``epoch`` and ``batch`` batches of the next."""
    return root / (f"epoch-{epoch:06d}" + (f"+batch-{batch:09d}" if batch else ""))


def within_epoch(ckpt: Path) -> bool:
    """Whether checkpoint directory ``ckpt`` was written between two batches of an epoch (:func:`_epoch_dir`)."""
    return "+batch-" in Path(ckpt).name


#: bytes read at a time to check a file's CRC-32
_CHUNK = 1 << 24


def _digest(path: Path) -> list[int]:
    """[bytes, CRC-32] of the file ``path``."""
    crc, size = 0, 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
    return [size, crc]


@contextlib.contextmanager
def _writing_checkpoint(path: Path) -> Iterator[None]:
    """Report a failed write of a checkpoint's directory or ``COMPLETE`` record (a full disk, a quota, a read-only
    file system) in one line, as :func:`_atomic_save` does its files.

    Raises:
        DataError: names ``path`` and the system's reason.
    """
    try:
        yield
    except OSError as e:
        hint = "" if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM) else " (a full disk or quota?)"
        raise DataError(f"cannot write checkpoint file {path}: {e.strerror or e}{hint}") from None


def _atomic_save(obj: Any, path: Path) -> list[int]:
    """Write ``obj`` (or the buffer :func:`_serialised` made of one) to ``path`` through :func:`atomic_write`
    (synced before its rename: a node's crash leaves no empty file that ``COMPLETE`` vouches for); a failed write
    (a full disk, a quota) is one line. Returns the file's [bytes, CRC-32] (:func:`_digest`).

    Raises:
        DataError: names the file and the system's reason.
        KeyboardInterrupt: an interrupt during the write, as itself (torch's writer reports it as a failed write).
    """
    reached = -1  # bytes on disk where a write failed
    try:
        with atomic_write(path, "wb") as f:
            try:
                if isinstance(obj, io.BytesIO):
                    view = obj.getbuffer()
                    f.write(view)
                    digest = [view.nbytes, zlib.crc32(view)]
                    view.release()
                else:
                    _save(obj, f)
                    digest = None
            except BaseException:
                with contextlib.suppress(OSError, ValueError):
                    f.flush()  # what the close would write before the temporary goes
                with contextlib.suppress(OSError, ValueError):
                    reached = os.fstat(f.fileno()).st_size
                raise
        if digest is None:  # of the bytes on disk, read back (torch.save wrote them in pieces)
            digest = _digest(path)
        return digest
    except (OSError, RuntimeError) as e:
        stop = _interrupt_behind(e)
        if stop is not None:
            raise stop from None
        hint = "a full disk or quota?"
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        # torch's short write says no errno: the limit's, where the file stopped at it (a full disk's stops anywhere)
        over = e.errno == errno.EFBIG if isinstance(e, OSError) else reached >= limit
        if limit != resource.RLIM_INFINITY and over:
            hint = f"over this process's file size limit, ulimit -f: {limit} bytes?"
        if isinstance(e, OSError) and e.strerror:
            why = e.strerror
            if e.errno == errno.ENOENT:
                hint = "removed meanwhile, or not on a file system this rank's node shares?"
        else:  # torch reports a short write by its internals: say what is left
            try:
                why = f"the write fell short, {shutil.disk_usage(path.parent).free / 2**20:.1f} MiB free there"
            except OSError:
                why = "the write fell short"
        raise DataError(f"cannot write checkpoint file {path}: {why} ({hint})") from None


def _interrupt_behind(e: BaseException) -> BaseException | None:
    """The interrupt (``KeyboardInterrupt``: a second Ctrl-C, which stops a run at once) that torch's file writer
    met inside the file's ``write`` and turned into the ``RuntimeError`` ``e`` (its context), or None: a failed
    write to report as one."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if not isinstance(e, Exception):
            return e
        seen.add(id(e))
        e = e.__context__
    return None


#: numpy arrays at least this large are written as tensor storages (:class:`_ArrayPickler`); smaller ones pickle
#: as usual (a storage record each would cost more than it saves)
_STORAGE_BYTES = 1 << 16
#: the numpy types a tensor storage holds as they are (``torch.from_numpy``)
_STORABLE = frozenset(np.dtype(t) for t in (np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16,
                                              np.float32, np.float64, np.complex64, np.complex128))


def _array(t: torch.Tensor) -> np.ndarray:
    """A numpy array :class:`_ArrayPickler` wrote as tensor ``t`` (unpickling: a view of the loaded storage)."""
    return t.numpy()


class _ArrayPickler(pickle.Pickler):
    """The pickler under ``torch.save``, writing each large numpy array (the node memory, a plan's vertex arrays) as
    a tensor storage: streamed into the file as it is. Pickled as usual, an array is first copied several times
    whole (``tobytes``, then pickle's own buffers at protocol 2; perf/results/preemption/); loaded,
    it is a numpy array again (:func:`_array`), so readers see no difference."""

    def reducer_override(self, obj):
        if (type(obj) is np.ndarray and obj.nbytes >= _STORAGE_BYTES and obj.dtype in _STORABLE
                and obj.dtype.isnative and obj.flags.c_contiguous and obj.flags.writeable):
            return _array, (torch.from_numpy(obj),)
        return NotImplemented


#: what ``torch.save`` takes as its ``pickle_module`` (it reads ``Pickler`` and ``__name__``)
_PICKLE = types.ModuleType("hpcdgnn_checkpoint_pickle")
_PICKLE.Pickler = _ArrayPickler


def _save(obj: Any, f) -> None:
    """``torch.save`` of ``obj`` to ``f``, large numpy arrays as storages (:class:`_ArrayPickler`); as plain
    ``torch.save`` where two of them (or one and a tensor) view the same memory as different types, which
    storages cannot hold."""
    start = f.tell()
    try:
        torch.save(obj, f, pickle_module=_PICKLE)
    except RuntimeError as e:
        if "view the same data as different types" not in str(e):
            raise
        f.seek(start)
        f.truncate()
        torch.save(obj, f)


def _rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def _serialised(obj: Any) -> io.BytesIO:
    """``obj`` as the bytes ``torch.save`` writes, in memory: a copy no later change of the live tensors reaches."""
    buf = io.BytesIO()
    _save(obj, buf)
    return buf


@dataclass(frozen=True)
class HeldCheckpoint:
    """A checkpoint's files of this rank, serialised in memory at an epoch boundary and written only if the next
    epoch is abandoned (a pre-emption between its batches): the run then stops within a batch, yet resumes from
    the boundary as if that checkpoint had been written there (:meth:`CheckpointManager.hold`). It costs the
    files' size in host memory (the model, Adam's moments and each rank's strategy state)."""

    epoch: int
    #: ``state.pt`` (rank 0; None on the other ranks)
    shared: io.BytesIO | None
    #: this rank's ``rank-XXXXX.pt``: its RNG states at the boundary and its strategy's state
    rank: io.BytesIO


def array_bytes(obj: Any) -> int:
    """Bytes of the tensors and numpy arrays in ``obj`` (through dicts, lists, tuples and dataclasses such as
    plans): about what serialising it takes."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, dict):
        return sum(array_bytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(array_bytes(v) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(array_bytes(getattr(obj, f.name, None)) for f in dataclasses.fields(obj))
    return 0


def restore_rng(state: dict[str, Any]) -> None:
    """Set the process's torch, numpy and python RNG states."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def _rank_file(rank: int) -> str:
    return f"rank-{rank:05d}.pt"


def _complete(root: Path) -> list[Path]:
    """The complete checkpoint directories under ``root`` (a ``COMPLETE`` record; no ``.tmp`` still being written or
    left by a killed write), in no particular order."""
    return [d for d in root.glob("epoch-*") if d.is_dir() and not d.name.endswith(".tmp") and (d / _COMPLETE).is_file()]


def latest_checkpoint(root: str | Path, epoch_end: bool = False) -> Path | None:
    """The newest complete checkpoint directory under ``root``, or None; ``epoch_end``: of an epoch's end only
    (a model's users: one written within an epoch holds weights no epoch record scored)."""
    root = Path(root)
    if not root.is_dir():
        return None
    done = [d for d in _complete(root) if not (epoch_end and within_epoch(d))]
    return max(done, key=lambda d: d.name, default=None)


#: what reading a damaged checkpoint file raises (torch's zip reader, the unpickler, a wrong object inside)
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, AttributeError, ImportError, IndexError, EOFError,
               pickle.UnpicklingError, RuntimeError)


class _Altered(ValueError):
    """A checkpoint file whose bytes differ from those written (``COMPLETE``'s size and CRC-32)."""


def _check_digest(ckpt: Path, file: Path) -> None:
    """Raise :class:`_Altered` if ``file`` differs from ``COMPLETE``'s record of it (older checkpoints: none)."""
    want = complete_record(ckpt).get("files", {}).get(file.name)
    if want is None:
        return
    (size, crc), (wrote, wrote_crc) = _digest(file), want
    if size < wrote:
        raise _Altered(f"truncated ({size} of its {wrote} bytes)")
    if size > wrote:
        raise _Altered(f"altered ({size} bytes; {wrote} written)")
    if crc != wrote_crc:
        raise _Altered("corrupt (its CRC-32 is not the one written)")


def load_shared(ckpt: Path) -> dict[str, Any]:
    """The shared state (``state.pt``) of checkpoint ``ckpt``, without the (possibly large) rank states.

    Raises:
        DataError: an unreadable checkpoint (names the file).
    """
    try:
        _check_digest(ckpt, ckpt / "state.pt")
        state = torch.load(ckpt / "state.pt", map_location="cpu", weights_only=False)
        if not isinstance(state, dict):
            raise TypeError(f"holds a {type(state).__name__}, not a checkpoint's state")
    except _UNREADABLE as e:
        raise unreadable(ckpt, ckpt / "state.pt", e) from None
    return state


def unreadable(ckpt: Path, file: Path, e: BaseException) -> DataError:
    """A checkpoint file that cannot be read (truncated, corrupt, missing): which one, and what to do instead of
    the codec's words — resume from the next older complete checkpoint, which ``checkpoint.keep`` kept.

    Args:
        ckpt: the checkpoint directory (``epoch-NNNNNN``).
        file: its file that failed.
        e: what reading it raised.
    """
    if isinstance(e, FileNotFoundError):
        why = "missing"
    elif isinstance(e, _Altered):
        why = str(e)
    elif isinstance(e, PermissionError | IsADirectoryError):
        why = f"unreadable ({e.strerror or e})"
    else:  # torch's reader says a truncated zip in many ways (an OSError's "Invalid argument" among them)
        why = "corrupt or truncated"
    older = [d for d in _complete(Path(ckpt).parent) if d.name < Path(ckpt).name]
    if older:
        fix = (f"move {ckpt} aside and run the command again (a resume, embed, predict, export): the next older "
               f"complete checkpoint, {max(older).name}, is used (checkpoint.keep sets how many are kept)")
    else:
        fix = ("no older complete checkpoint is left (checkpoint.keep sets how many are kept): train the job again "
               "in a new run (another --output)")
    return DataError(f"{file}: checkpoint file {why}; {fix}")


def load_state(ckpt: Path, rank: int, num_ranks: int,
               shared: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(shared state, this rank's ``rng`` and ``strategy`` state) of ``ckpt``; ``shared``: if already read.

    On another rank count rank r gets rank ``r mod P_old``'s RNG and strategy state, and ``mine["num_ranks"]``
    says it (:func:`strategy_state` keeps the latter only for a strategy whose state every rank shares).

    Raises:
        DataError: an unreadable checkpoint (names the file).
    """
    state = load_shared(ckpt) if shared is None else shared
    try:
        meta = json.loads((ckpt / _COMPLETE).read_text())
        old_p = int(meta["num_ranks"])
        if old_p < 1:
            raise ValueError(f"num_ranks {old_p}")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"{ckpt / _COMPLETE}: not a checkpoint's COMPLETE record ({e}); move {ckpt} aside and "
                        "resume again: the next older complete checkpoint is used") from None
    mine_file = ckpt / _rank_file(rank % old_p)
    try:
        _check_digest(ckpt, mine_file)
        mine = torch.load(mine_file, map_location="cpu", weights_only=False)
        if not isinstance(mine, dict):
            raise TypeError(f"holds a {type(mine).__name__}, not a rank's state")
    except _UNREADABLE as e:
        raise unreadable(ckpt, mine_file, e) from None
    mine["num_ranks"] = old_p
    return state, mine


def load_partial(ckpt: Path, rank: int) -> dict[str, Any]:
    """Rank ``rank``'s ``partial`` (its sums and kept scores) of ``ckpt``, a checkpoint within an epoch, for a resume
    on another rank count (:func:`hpcdgnn.train.setup._resumed_within`).

    Raises:
        DataError: an unreadable rank file (names it).
    """
    file = ckpt / _rank_file(rank)
    try:
        _check_digest(ckpt, file)
        # mapped, not read: of the rank's whole state (its reuse cache, its reservoir) only the part is wanted
        part = torch.load(file, map_location="cpu", weights_only=False, mmap=True)["partial"]
        if not isinstance(part, dict):
            raise TypeError(f"holds a {type(part).__name__}, not a rank's part of an epoch")
    except _UNREADABLE as e:
        raise unreadable(ckpt, file, e) from None
    return part


def strategy_state(mine: dict[str, Any], strategy, num_ranks: int) -> dict[str, Any]:
    """The strategy state of :func:`load_state`'s ``mine`` this run restores: all of it on the checkpoint's rank
    count, or for a strategy whose state is the same on every rank (``replicated_state``); else none."""
    same = mine.get("num_ranks") == num_ranks  # unknown: another count, as the safe reading
    return (mine.get("strategy") or {}) if same or type(strategy).replicated_state else {}


class CheckpointManager:
    """Writes checkpoints of a run (every rank calls :meth:`save` at the same epoch boundary)."""

    def __init__(self, root: str | Path, keep: int, comm, run_id: str | None = None) -> None:
        self.root = Path(root)
        self.keep = keep
        self.comm = comm
        self.run_id = run_id  # only checkpoints with it are rotated away

    def _ours(self, ckpt: Path) -> bool:
        owner = complete_record(ckpt).get("run_id")
        return owner is None or owner == self.run_id

    def hold(self, epoch: int, shared: dict[str, Any], strategy_state: dict[str, Any] | None = None
             ) -> HeldCheckpoint:
        """What :meth:`save` would write for ``epoch`` now, kept in memory (no collective, no file)."""
        return HeldCheckpoint(epoch, _serialised(shared) if self.comm.rank == 0 else None,
                              _serialised(self._rank_state(strategy_state)))

    @staticmethod
    def _rank_state(strategy_state: dict[str, Any] | None, partial: Any = None) -> dict[str, Any]:
        return {"rng": _rng_state(), "strategy": strategy_state or {},
                **({"partial": partial} if partial is not None else {})}

    def save(self, epoch: int | None = None, shared: dict[str, Any] | None = None,
             strategy_state: dict[str, Any] | None = None, held: HeldCheckpoint | None = None,
             batch: int = 0, partial: Any = None) -> Path:
        """Write the checkpoint of ``epoch``: ``shared`` by rank 0, ``strategy_state`` by every rank; or the files
        ``held`` (:meth:`hold`) kept of its epoch; ``batch`` > 0: within the next epoch, after that many of its
        batches, ``partial`` this rank's part of that epoch so far (collective)."""
        if held is not None:
            epoch = held.epoch
        final = _epoch_dir(self.root, epoch, batch)
        tmp = final.with_name(final.name + ".tmp")
        if self.comm.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)  # left by a job killed while writing
            made = not self.root.is_dir()
            with _writing_checkpoint(tmp):
                tmp.mkdir(parents=True)
            if made:  # the first checkpoint made the root: its name on disk, or every checkpoint can go with it
                sync_directory(self.root.parent)
        self.comm.barrier(tag="checkpoint")
        name = _rank_file(self.comm.rank)
        files = {name: _atomic_save(held.rank if held is not None else self._rank_state(strategy_state, partial),
                                    tmp / name)}
        if self.comm.rank == 0:
            files["state.pt"] = _atomic_save(held.shared if held is not None else shared, tmp / "state.pt")
        # every rank's files are written once this returns (in place of a barrier)
        written = {k: v for part in self.comm.allgather_obj(files, tag="checkpoint") for k, v in part.items()}
        if self.comm.rank == 0:
            meta = {"epoch": epoch, **({"batch": batch} if batch else {}), "num_ranks": self.comm.size,
                    **({"run_id": self.run_id} if self.run_id else {}), "files": dict(sorted(written.items()))}
            with _writing_checkpoint(tmp / _COMPLETE), open(tmp / _COMPLETE, "w") as f:
                f.write(json.dumps(meta) + "\n")
                f.flush()
                os.fsync(f.fileno())  # as the files it vouches for: a node's crash leaves no empty record
            sync_directory(tmp)  # COMPLETE's name, before the directory's rename makes it a checkpoint
            old = final.with_name(final.name + ".old.tmp")  # ignored as a .tmp
            with _writing_checkpoint(final):
                if final.exists():  # a resumed run re-ran this epoch: the old one goes once the new one is in place
                    shutil.rmtree(old, ignore_errors=True)
                    os.replace(final, old)
                try:
                    os.replace(tmp, final)
                except OSError:
                    if old.exists() and not final.exists():  # the one it replaced stays the newest
                        os.replace(old, final)
                    raise
            # the new name on disk before anything older goes, and before training goes past it: else a node's
            # crash could keep an older checkpoint's removal (or, under a re-written name, the old one's files
            # removed beneath its COMPLETE) and lose the rename, leaving no checkpoint, or one that reads complete
            sync_directory(self.root)
            shutil.rmtree(old, ignore_errors=True)
            done = sorted(d for d in _complete(self.root) if self._ours(d))
            # a checkpoint within an epoch serves only the resume from it: the newer one replaces it
            within = [d for d in done if within_epoch(d) and d.name < final.name]
            ends = [d for d in done if not within_epoch(d)]
            gone = []
            for old in within + ends[: max(0, len(ends) - self.keep)]:
                # renamed first (atomic): a job killed while removing a large one leaves a .tmp, which the next
                # checkpoint removes, never a checkpoint that still reads as complete with files missing
                away = old.with_name(old.name + ".old.tmp")
                try:
                    shutil.rmtree(away, ignore_errors=True)
                    os.replace(old, away)
                except OSError:
                    away = old
                gone.append(away)
            if gone:  # the renames on disk before the files go: a node's crash may keep removals and lose renames
                sync_directory(self.root)
            for away in gone:
                shutil.rmtree(away, ignore_errors=True)
            # what writes killed mid-way left (a name within an epoch may never come again)
            for stale in self.root.glob("epoch-*.tmp"):
                if stale.is_dir() and self._ours(stale):
                    shutil.rmtree(stale, ignore_errors=True)
        self.comm.barrier(tag="checkpoint")
        return final
