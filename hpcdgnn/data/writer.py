"""Stream raw snapshots into a dataset directory: dedupe, smooth (S5), features, shards.

Snapshots arrive one at a time in time order (at most ``max(l, w)`` held). Per
snapshot t (order specified in docs/data.md):

1. raw edges -> sorted unique keys ``src * N + dst``; weight 1, event count, or summed given weights;
2. X_t: given features, else [in_degree, out_degree] of the raw snapshot (IBM §6.1);
3. smoothing (IBM §5.4), at most one of:
   edge-life l:     A_t = sum_{i=t-l+1}^{t} A_i                         (X_t unchanged)
   M-transform w:   A_t = sum_k M_tk A_k, X_t = sum_k M_tk X_k, M_tk = 1/min(w, t+1), t-w < k <= t;
4. write A_t, X_t, activity, labels, targets (never smoothed) and, when smoothing
   changed A_t, the raw edges as link-prediction targets.

The directory is written under a temporary name, synced and renamed at the end, so neither an
interrupted run nor a node's crash leaves a dataset that looks valid with files missing, empty or short.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import tempfile
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import h5py
import numpy as np

from hpcdgnn.atomic import RANDOM_TAIL, is_temporary, sync_directory, sync_path
from hpcdgnn.data.manifest import EVENTS_FORMAT_NAME, FORMAT_NAME, Manifest, ShardInfo, save_manifest
from hpcdgnn.data.shard_reader import snapshot_group_name
from hpcdgnn.errors import DataError, cannot_create, nearest_existing, umask_mode
from hpcdgnn.indices import index_dtype as index_dtype_for
from hpcdgnn.preemption import STOP_SIGNALS, Stopped
from hpcdgnn.progress import Progress

__all__ = [
    "RawSnapshot",
    "write_dataset",
    "edge_keys",
    "check_output",
    "prepare_output_dir",
    "write_vertex_ids",
    "named_on_failure",
    "replace_dir",
    "file_sha256",
    "shard_file_problem",
    "human_bytes",
    "as_float32",
    "first_not_finite",
    "EVAL_NEGATIVES_FILE",
    "removed_on_error",
    "stops_after_written",
    "stops_end_as_done",
    "stops_held",
]

DEGREE_FEATURES = ["in_degree", "out_degree"]


@dataclass
class RawSnapshot:
    """Edges of one time window with vertex ids already remapped to 0..N-1.

    Shapes:
        ``src``, ``dst``, ``weight``: (E,) (``weight`` used only with ``weights="given"``);
        ``x``: (N, F) replaces the degree features; ``labels``: (N,) int64, -1 = unlabelled;
        ``targets``: (N,) float, NaN = no target.
    """

    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray | None = None
    x: np.ndarray | None = None
    labels: np.ndarray | None = None
    time: tuple[float, float] | None = None
    targets: np.ndarray | None = None


def as_float32(a: np.ndarray) -> np.ndarray:
    """``a`` as float32, what a dataset stores; a value past float32 becomes inf without numpy's overflow warning:
    the writer refuses it in one line that names it."""
    with np.errstate(over="ignore"):
        return np.asarray(a).astype(np.float32)


def first_not_finite(stored: np.ndarray) -> tuple[int, ...] | None:
    """The index of ``stored``'s first NaN or inf (e.g. a value past float32 once cast by :func:`as_float32`),
    or None: every reader, the Python API and the writer refuse such a value in one line of their own."""
    bad = ~np.isfinite(stored)
    return tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else None


def human_bytes(n: float) -> str:
    """``9.61 GiB``: bytes in the largest binary unit that keeps the number >= 1."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(n) < 1024 or unit == "EiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def edge_keys(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """Edge keys ``src * n + dst`` as int64 (ascending keys = CSR order)."""
    return src.astype(np.int64) * np.int64(n) + dst.astype(np.int64)


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    """Hex SHA-256 of a file, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def shard_file_problem(path: Path, info: Any, checksums: bool) -> str | None:
    """``PATH: problem`` when a shard file's size (then sha256, if ``checksums``) disagrees with ``info``."""
    size = path.stat().st_size
    if size != info.bytes:
        return f"{path}: {size} bytes but manifest says {info.bytes} (truncated or replaced)"
    if checksums and file_sha256(path) != info.sha256:
        return f"{path}: sha256 differs from the manifest (file modified or corrupt)"
    return None


#: The names of the shard files a dataset's ``shards/`` holds (snapshots', events')
_SHARD_FILE = re.compile(r"(shard|events)-\d{5,}\.h5")

#: An event dataset's fixed evaluation negatives (TGB's), beside its shards.
EVAL_NEGATIVES_FILE = "eval_negatives.h5"

#: What a dataset directory written here holds; ``--force`` replaces a directory of these names only.
DATASET_ENTRIES = frozenset({"manifest.json", "shards", "vertices.h5", EVAL_NEGATIVES_FILE})


def _not_a_dataset(root: Path, manifest: bool = True, writing: bool = False) -> list[str]:
    """What in the directory ``root`` is no dataset's own: names beside :data:`DATASET_ENTRIES`, anything in
    ``shards/`` but shard files, and (``manifest``) a missing ``manifest.json``; empty for a dataset.

    Args:
        root: an existing directory.
        manifest: count a missing ``manifest.json``; False for a dataset being removed, which may have lost it.
        writing: ``root`` is a dataset being written (:func:`prepare_output_dir`'s), which holds its writer's
            record (:data:`_WRITER`) too, and the manifest's temporary while that is written.
    """
    names = {p.name for p in root.iterdir()}
    if writing:
        names = {name for name in names if name != _WRITER and not is_temporary(name, ["manifest.json"])}
    other = sorted(names - DATASET_ENTRIES) or (["no manifest.json"] if manifest and "manifest.json" not in names
                                                else [])
    shards = root / "shards"
    if not other and shards.exists():  # a run directory or notes put under shards/ would go with it
        other = [f"shards/{p.name}" for p in sorted(shards.iterdir()) if not p.is_file() or p.is_symlink()
                 or not _SHARD_FILE.fullmatch(p.name)] if shards.is_dir() else ["shards (a file)"]
    return other


def _force_refusal(root: Path) -> str | None:
    """Why ``--force`` must not replace ``root`` (anything but an earlier dataset), or None."""
    if not root.is_dir():
        return "is a file, not a dataset directory; --force replaces only a dataset directory"
    other = _not_a_dataset(root)
    if other:
        return (f"is not a dataset directory ({', '.join(other[:3])}{' …' if len(other) > 3 else ''}); "
                "--force replaces only an earlier dataset: remove it yourself or choose another --output")
    return None


def _is_dataset(path: Path) -> bool:
    """Whether ``path`` holds a dataset written here (its manifest's ``format``): another tool's folder may hold a
    ``manifest.json`` and ``shards/`` of its own."""
    if not (path / "shards").is_dir():
        return False
    try:
        raw = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(raw, dict) and raw.get("format") in (FORMAT_NAME, EVENTS_FORMAT_NAME)


def check_output(root: str | Path, force: bool, inputs: tuple[str | Path, ...] = ()) -> None:
    """Refuse (:class:`DataError`) a non-empty ``root`` unless ``force``, and even then anything but an
    earlier dataset or what holds one of ``inputs``; never a link, a mount point or the working directory (or
    above), which the final rename cannot replace, nor a directory inside a dataset."""
    root = Path(root)
    where = root.resolve()
    if root.is_symlink():
        raise DataError(f"{root}: output is a symbolic link; give its target ({where}) as --output")
    if os.path.ismount(root):  # a volume's root: --force emptied it and then failed to replace it
        raise DataError(f"{root}: output is a mount point, which the dataset (written beside it, then renamed into "
                        f"place) cannot replace; give a directory inside it, e.g. {root / 'dataset'}")
    if where == Path.cwd().resolve() or where in Path.cwd().resolve().parents:
        raise DataError(f"{root}: output is the working directory or holds it; name a directory for the dataset")
    for parent in where.parents:
        # a dataset holds only its own files: one nested in it would make a later --force on it refuse, and be
        # removed with it
        if _is_dataset(parent):
            raise DataError(f"{root}: output is inside the dataset {parent}; choose a directory outside it")
    for path in inputs:
        src = Path(path).resolve()
        if src == where or where in src.parents:
            raise DataError(f"{root}: output would replace the input {path}; choose another --output")
    if root.exists():
        if not force and not root.is_dir():  # even an empty one: "not empty" would send its user looking
            raise DataError(f"{root}: output is a file, not a directory; choose another --output")
        if not force and any(root.iterdir()):
            raise DataError(f"{root}: output exists and is not empty; choose another --output or pass --force")
        if force and (not root.is_dir() or any(root.iterdir())):
            why = _force_refusal(root)
            if why is not None:
                raise DataError(f"{root}: output {why}")


#: this process's hidden dataset directories not yet moved into place (:func:`prepare_output_dir`)
_TEMPORARIES: set[Path] = set()

#: how often a process dates its hidden dataset directories afresh (:func:`_keep_fresh`): well within
#: :data:`_UNCHANGED_S`, so that a running prepare's never looks unchanged that long to another prepare, even
#: one on another client of a file server that caches attributes for a minute
_FRESH_S = 30.0
#: guards the start and the end of the thread that dates them (:func:`_freshen`)
_FRESH_LOCK = threading.Lock()
#: set to have that thread date them at once (a directory added; a test's shorter :data:`_FRESH_S`)
_FRESH_WAKE = threading.Event()
#: that thread, while it runs
_FRESHENER: list[threading.Thread] = []


def _keep_fresh(tmp: Path) -> None:
    """List ``tmp`` among this process's hidden dataset directories (:data:`_TEMPORARIES`) and date it afresh every
    :data:`_FRESH_S` until it leaves the list: another prepare to the same output takes one unchanged for
    :data:`_UNCHANGED_S` for a killed prepare's (:func:`_writer_gone`), and a running prepare may write nothing for
    longer (one large snapshot, the sync before the rename). A thread, not the writing loop: it dates the directory
    whatever the process is doing, and dies with it."""
    with _FRESH_LOCK:
        _TEMPORARIES.add(tmp)
        _FRESH_WAKE.set()
        if not (_FRESHENER and _FRESHENER[0].is_alive()):
            _FRESHENER[:] = [threading.Thread(target=_freshen, name="hpcdgnn-fresh", daemon=True)]
            _FRESHENER[0].start()


def _freshen() -> None:
    """:func:`_keep_fresh`'s thread: set the modification time of each listed directory to now (the file system's
    clock, as :func:`_writer_gone` reads it) every :data:`_FRESH_S`; ends once the list is empty."""
    while True:
        _FRESH_WAKE.wait(_FRESH_S)
        _FRESH_WAKE.clear()
        with _FRESH_LOCK:
            held = list(_TEMPORARIES)
            if not held:
                _FRESHENER.clear()
                return
        for tmp in held:
            with suppress(OSError):  # moved into place or removed meanwhile
                os.utime(tmp)


def remove_temporary(tmp: Path) -> None:
    """Remove a hidden dataset directory of :func:`prepare_output_dir` that will not be moved into place."""
    shutil.rmtree(tmp, ignore_errors=True)
    _TEMPORARIES.discard(tmp)


def remove_unfinished_datasets() -> None:
    """Remove this process's hidden dataset directories not moved into place: a command stopped by a signal
    leaves none, wherever the signal landed (the writers remove their own on the way out; this catches one that
    arrived before the writer's cleanup was in place)."""
    for tmp in list(_TEMPORARIES):
        remove_temporary(tmp)


@contextmanager
def removed_on_error() -> Iterator[None]:
    """Remove the hidden directories :func:`prepare_output_dir` makes within the block when the block raises
    anything: a KeyboardInterrupt of the Python API (no command clears the list there) may land between the
    directory's creation and the writer's own cleanup."""
    before = set(_TEMPORARIES)
    try:
        yield
    except BaseException as e:
        for tmp in _TEMPORARIES - before:
            vanished = isinstance(e, Exception) and not os.path.isdir(tmp)
            remove_temporary(tmp)
            if vanished:
                raise _vanished(tmp) from None
        raise


def _vanished(tmp: Path) -> DataError:
    """The one line for a hidden dataset directory removed by someone else while this process wrote it (any step
    then fails, as h5py's ``FileNotFoundError`` or a failed sync or rename): another prepare to the same output
    that took it for a killed prepare's, or a user.

    Args:
        tmp: the hidden directory (:func:`prepare_output_dir`'s).
    """
    return DataError(f"{tmp}: removed while this prepare wrote it (by another prepare to the same output, or by "
                     "hand?); nothing was kept, and an earlier dataset there is untouched")


#: where :func:`replace_dir` puts a stop signal that came once the dataset was whole at its output, with that
#: dataset, for the caller to answer: a list, within :func:`stops_after_written` (the command line, which ends as done
#: and says the signal came); None elsewhere (the Python API), where the signal is delivered once the dataset is in
#: place, as its handler answers any other stop
_LATE_TO: ContextVar[list[tuple[int, Path]] | None] = ContextVar("hpcdgnn_late_stops", default=None)


@contextmanager
def stops_after_written() -> Iterator[list[tuple[int, Path]]]:
    """Within the block, a stop signal that comes after a dataset is whole at its output (:func:`replace_dir`) is
    not delivered but recorded in the list yielded, as (signal, dataset): the dataset is complete and nothing is
    left to stop, so ``prepare`` and ``generate`` end as done and say the signal came. The list is this block's
    alone: nothing of an earlier call (an API call's, another ``main``'s) is read in it.

    Elsewhere, a Python caller's signal is delivered to its handler once the dataset is in place; held back for
    good, it was lost (the script went on as if never signalled)."""
    late: list[tuple[int, Path]] = []
    token = _LATE_TO.set(late)
    try:
        yield late
    finally:
        _LATE_TO.reset(token)


def stops_end_as_done() -> bool:
    """Whether the caller runs within :func:`stops_after_written` (the command line, whose outcome is its work's and
    which says a late signal came) rather than from the Python API, whose handler gets every signal."""
    return _LATE_TO.get() is not None


@contextmanager
def stops_held(deliver: bool = True) -> Iterator[list[int]]:
    """Hold a stop signal back until the block ends, then deliver it (its own handler runs): steps that must not be
    parted by the stop's unwinding. With ``deliver`` False the caller answers the signals it yields where the block
    completes; where it raises, the signal is delivered all the same (a stop is never dropped with the error). The
    handlers are swapped, not the signal mask: a signal sent to the process goes to any thread that does not block
    it (numpy's BLAS threads), and Python then runs the handler in the main thread all the same. Elsewhere than in
    the main thread (which alone runs handlers, and may swap them) nothing is held.

    Args:
        deliver: deliver a signal that came once the block completes, else leave it to the caller.
    """
    came: list[int] = []
    saved: dict[int, Any] = {}
    try:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                if signal.getsignal(sig) is not None:  # None: set outside Python, which could not be put back
                    saved[sig] = signal.signal(sig, lambda signum, frame: came.append(signum))
        yield came
    except BaseException:
        deliver = True
        raise
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if came and deliver:
            signal.raise_signal(came[0])


def prepare_output_dir(root: str | Path, force: bool, nbytes: int | None = None) -> Path:
    """:func:`check_output`, :func:`check_room` (``nbytes`` when known), then a fresh temporary dir beside it, which
    names its writer (:func:`_remove_killed`: a later prepare to ``root`` removes it once that process is gone)."""
    check_output(root, force)
    root = Path(root)
    # before check_room and the directory: a killed prepare's shards may be what fills the disk
    _remove_killed(root, None)
    if nbytes is not None:
        check_room(root, nbytes)
    try:
        made = [d for d in (root.parent, *root.parent.parents) if not d.exists()]
        root.parent.mkdir(parents=True, exist_ok=True)
        for d in made:  # a directory made here is on disk only once its parent is: else a crash takes the dataset
            sync_directory(d.parent)
        # a stop signal waits until the directory is on the list :func:`remove_unfinished_datasets` clears: arriving
        # between its creation and the caller's cleanup it would leave it behind
        with stops_held():
            # mkdtemp, not the pid: two nodes on a shared file system may share a pid
            tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.tmp-", dir=root.parent))
            _keep_fresh(tmp)
            umask_mode(tmp)  # not mkdtemp's 0700: the dataset is the user's group's to read
        _record_writer(tmp)
        (tmp / "shards").mkdir()
        # the file system's clock, not this node's, dates the hidden directories beside it
        now = tmp.stat().st_mtime
    except OSError as e:
        raise DataError(f"{root}: cannot create the output here: {cannot_create(root.parent) or e.strerror or e}") \
            from None
    _remove_killed(root, now)  # those only time tells, by the file system's clock
    return tmp


#: the file in a dataset being written (:func:`prepare_output_dir`) that names its writer, gone before the rename
_WRITER = ".writer.json"
#: how long a hidden directory must have sat unchanged before a prepare takes its writer for gone where the record
#: alone cannot tell (:func:`_writer_gone`): a running prepare dates its directory afresh every :data:`_FRESH_S`
#: whatever it is doing, so one unchanged for minutes is a killed prepare's, even where a stalled file server held
#: the writer's calls up
_UNCHANGED_S = 300.0


def _record_writer(tmp: Path) -> None:
    """Write :data:`_WRITER` into ``tmp`` (where ``/proc`` can name this process) in one ``write``: a kill leaves no
    record or an empty one (:func:`_writer_gone` reads both as none), never half of one."""
    writer = _this_writer()
    if writer is None:
        return
    fd = os.open(tmp / _WRITER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        os.write(fd, writer.encode())
    finally:
        os.close(fd)


def _started(pid: int) -> str | None:
    """When the process ``pid`` of this pid namespace started (``/proc/PID/stat``'s field 22, in clock ticks since
    boot: a pid used again later has another), or None where there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after the command's name, which may hold spaces and parentheses
    return fields[19] if len(fields) > 19 else None


#: host names that many machines answer to (``(none)``: the kernel's, where none was set): a record naming one tells
#: no host from another
_SHARED_HOST_NAMES = frozenset({"", "localhost", "localhost.localdomain", "(none)"})


def _this_writer() -> str | None:
    """This process as :data:`_WRITER` records it: the host's name, the kernel's boot (``boot_id``: this host, since
    its boot), the pid namespace (a container's pids are another's), pid and start time; None where ``/proc``
    cannot say."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    started = _started(os.getpid())
    if started is None:
        return None
    return json.dumps({"host": socket.gethostname(), "boot": boot, "pid_ns": namespace, "pid": os.getpid(),
                       "started": started})


def _writer_gone(tmp: Path, now: float | None) -> bool:
    """Whether the prepare that wrote the hidden directory ``tmp`` is known to have ended.

    With its :data:`_WRITER` record: the record names this host's boot and pid namespace and no process of that pid
    and start time runs; or it names this host and another boot (a node's crash and reboot ended every process of
    the earlier one) and ``tmp`` has sat unchanged :data:`_UNCHANGED_S` (:func:`_last_change`): a host name is no
    proof, as a running prepare on another machine of the same name (replicas of one image, cloned VMs on one file
    system) reads the same, but it dates its directory afresh (:func:`_keep_fresh`). False wherever that cannot be
    told: a record this process cannot read or parse, one naming no host or a name many share, another host's or
    container's writer (a shared file system: its pids are not ours to look up).

    Without one (none, or empty): only in the two states a prepare passes through without it, and once ``tmp`` has
    sat unchanged :data:`_UNCHANGED_S`: holding nothing (made, its record not yet written) or a manifest (its
    record removed for the rename, or never written where ``/proc`` could not name the writer: its whole sync).
    Anything else without a record (a directory an older version made, a user's) stays.

    Args:
        tmp: a hidden directory beside the output.
        now: the time on ``tmp``'s file system (a directory just made there), to date ``tmp`` by; None judges by
            the record alone (an earlier boot's record then stays too).
    """
    try:
        text = (tmp / _WRITER).read_text()
    except FileNotFoundError:
        text = ""
    except (OSError, ValueError):
        return False
    if not text:
        if now is None:
            return False
        names = {p.name for p in tmp.iterdir()}
        passing = names <= {_WRITER} or ("manifest.json" in names and _WRITER not in names)
        # nothing is written in either state: the directory's date, which a running prepare refreshes, tells
        return passing and tmp.stat().st_mtime < now - _UNCHANGED_S
    try:
        record = json.loads(text)
        mine = json.loads(_this_writer() or "null")
    except ValueError:
        return False
    if not isinstance(record, dict) or mine is None:
        return False
    this_host = record.get("host") == mine["host"] and mine["host"] not in _SHARED_HOST_NAMES
    if this_host and isinstance(record.get("boot"), str) and record["boot"] != mine["boot"]:
        return now is not None and _last_change(tmp) < now - _UNCHANGED_S
    same_host = (record.get("boot"), record.get("pid_ns")) == (mine["boot"], mine["pid_ns"])
    return same_host and isinstance(record.get("pid"), int) and _started(record["pid"]) != record.get("started")


def _last_change(tmp: Path) -> float:
    """The latest modification time of the hidden directory ``tmp``, its ``shards/`` and the files in either: what
    a running prepare changes (a shard as it writes it, the directory as :func:`_keep_fresh` dates it).

    Raises:
        OSError: ``tmp`` cannot be read.
    """
    times = [tmp.stat().st_mtime]
    for directory in (tmp, tmp / "shards"):
        with suppress(FileNotFoundError, NotADirectoryError):
            times.extend(entry.stat(follow_symlinks=False).st_mtime for entry in os.scandir(directory))
    return max(times)


def _named_beside(root: Path, prefix: str, tail: re.Pattern) -> list[os.DirEntry]:
    """The entries beside ``root`` named ``prefix`` then exactly ``tail`` (none where the parent cannot be listed):
    hidden directories of a prepare to ``root``, never a user's of a looser name.

    Args:
        root: the output.
        prefix: the name's start (``.NAME.tmp-``).
        tail: what must follow it, whole.
    """
    try:
        entries = list(os.scandir(root.parent))
    except OSError:
        return []
    return [e for e in entries if e.name.startswith(prefix) and tail.fullmatch(e.name[len(prefix):])]


def _remove_killed(root: Path, now: float | None) -> None:
    """Remove the hidden directories ``.NAME.tmp-XXXXXXXX`` beside ``root`` that a prepare to ``root`` killed by
    SIGKILL (a job's time limit, the OOM killer) left, wherever it was killed: nothing removes them otherwise, and
    each may hold a dataset's worth of shards. Only one this user owns, of mkdtemp's exact name, holding nothing but
    a dataset's files (and the manifest's temporary), whose writer is known to be gone (:func:`_writer_gone`: a
    record naming this host, or none, whichever host wrote it): a prepare writing one now, on this host or another,
    one whose record names another host, and a user's directory so named stay. Best effort: one that cannot be
    removed is left.

    Args:
        root: the output about to be written.
        now: the time on ``root``'s file system, or None (:func:`_writer_gone`).
    """
    for entry in _named_beside(root, f".{root.name}.tmp-", RANDOM_TAIL):
        path = Path(entry.path)
        with suppress(OSError):
            if (entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.getuid()
                    and not _not_a_dataset(path, manifest=False, writing=True) and _writer_gone(path, now)):
                shutil.rmtree(path)


def check_room(output: str | Path, nbytes: int, name: str | None = None, what: str = "the dataset",
               then: str = "free some space or write it elsewhere (--output)") -> None:
    """Refuse an output larger than its file system's free space, before h5py meets a full disk (HDF5 reports a
    write that fails part way as ignored exceptions, not one error, and can crash at the process's exit).

    Args:
        output: the file or directory to be written (its nearest existing ancestor's file system counts).
        nbytes: about how many bytes it will take.
        name: what the line names first (default ``output``): ``{name}: {what} needs about ... free; {then}``.
        what: what needs the room (``the dataset``, ``the file``).
        then: what the line says to do, after the figures.
    """
    try:
        free = shutil.disk_usage(nearest_existing(output)).free
    except OSError:  # no figure to go by: the write itself says
        return
    if nbytes > free:
        raise DataError(f"{name or output}: {what} needs about {human_bytes(nbytes)} and its file system has "
                        f"{human_bytes(free)} free; {then}")


def disk_full(root: str | Path, e: BaseException) -> DataError | None:
    """A write that failed for want of room (ENOSPC, EDQUOT) as one line for ``root``, else None."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return _not_written(root, os.strerror(e.errno))
    return None


def _not_written(root: str | Path, why: str) -> DataError:
    """The one line for a dataset at ``root`` that could not be written, for the reason ``why``."""
    return DataError(f"{root}: cannot write the dataset: {why} (nothing was kept; an earlier dataset there is "
                     "untouched)")


@contextmanager
def named_on_failure(root: str | Path) -> Iterator[None]:
    """Turn an ``OSError`` of the block (the manifest's write, the files' syncs: a full disk, an I/O error that NFS
    reports only at a sync) into the one line naming the output ``root``.

    Args:
        root: the output the dataset becomes.
    """
    try:
        yield
    except OSError as e:
        raise _not_written(root, e.strerror or str(e)) from None


def write_vertex_ids(tmp: Path, original_ids: np.ndarray | None, n: int) -> None:
    """Write ``tmp/vertices.h5``: ``/original_id``, the input's id of each vertex 0..N-1 (None: 0..N-1)."""
    with h5py.File(tmp / "vertices.h5", "w") as f:
        ids = np.arange(n) if original_ids is None else np.asarray(original_ids)
        if ids.dtype.kind in "US":
            ids = ids.astype(h5py.string_dtype())
        f.create_dataset("original_id", data=ids)


#: files synced at once: a journal commits concurrent ``fsync`` calls together (ext4, XFS) and a network file
#: system overlaps their round trips, where one at a time each would wait for a commit of its own
_SYNC_THREADS = 16


def _sync_tree(tmp: Path) -> None:
    """``fsync`` every file under ``tmp``, then each directory (``shards/`` before ``tmp``).

    The rename of ``tmp`` can reach the disk before the files' data and before their names: after a node's crash
    the dataset would be in place with shards empty, short or gone, and its manifest vouching for them. Once, after
    every file is written and closed, not as each shard closes: the kernel writes the shards back meanwhile, and
    the writer never waits on the disk between two snapshots.

    Args:
        tmp: the finished dataset directory, not yet renamed.

    Raises:
        OSError: a file could not be synced (a full disk or quota that NFS reports only here, an I/O error).
    """
    tree = list(os.walk(tmp, topdown=False))
    files = [os.path.join(directory, name) for directory, _, names in tree for name in names]
    with ThreadPoolExecutor(max(1, min(_SYNC_THREADS, len(files)))) as pool:
        list(pool.map(partial(sync_path, strict=True), files))  # the first failure raised once every sync ended
    for directory, _, _ in tree:
        sync_directory(directory)


#: the hidden name an earlier dataset has beside its output while ``--force`` replaces it (:func:`replace_dir`):
#: ``.NAME.old-`` and 8 hexadecimal digits
_ASIDE = ".{}.old-"
_ASIDE_TAIL = re.compile(r"[0-9a-f]{8}")


def _set_aside(root: Path) -> Path | None:
    """Rename the earlier dataset ``root`` to a hidden name beside it (:data:`_ASIDE`); return that name, or None
    where nothing is at ``root``.

    Raises:
        DataError: the rename failed (the earlier dataset untouched).
    """
    aside = root.parent / f"{_ASIDE.format(root.name)}{secrets.token_hex(4)}"  # random: one per prepare
    try:
        os.rename(root, aside)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise DataError(f"{root}: cannot move the earlier dataset aside to replace it: {e.strerror or e} (it is "
                        "untouched; this one is discarded)") from None
    return aside


def _remove_asides(root: Path) -> None:
    """Remove the earlier datasets of ``root`` set aside by :func:`replace_dir`: this one's, and one a crash or a
    SIGKILL left (between the renames, or during the removal). Only a directory of that name holding nothing but
    a dataset's files goes (a user's folder so named stays); best effort: one that cannot be removed waits for the
    next prepare to ``root``."""
    for entry in _named_beside(root, _ASIDE.format(root.name), _ASIDE_TAIL):
        _remove_aside(Path(entry.path))


def _remove_aside(path: Path) -> None:
    """Remove the earlier dataset :func:`_set_aside` moved to ``path``: a directory holding nothing but a dataset's
    files (a user's folder so named stays); best effort, gone already or not."""
    with suppress(OSError):
        if path.is_dir() and not path.is_symlink() and not _not_a_dataset(path, manifest=False):
            shutil.rmtree(path)


def replace_dir(tmp: Path, root: Path, force: bool) -> None:
    """Sync the finished ``tmp`` (:func:`_sync_tree`) and move it into place as ``root``, removing an empty dir (or,
    with ``force``, an earlier dataset); then sync ``root``'s parent, where the rename is on disk only once it is.

    The earlier dataset is renamed aside (a hidden name beside it), ``tmp`` renamed in, the parent synced, and only
    then the earlier one removed: removed first, a crash or a SIGKILL before the rename would leave no dataset at
    all, and a failed rename neither. So a dataset is at ``root`` but for the instant between the two renames, when
    the earlier one is whole at its hidden name; the next prepare to ``root`` removes that once its own is in place
    (:func:`_remove_asides`). A failed rename puts the earlier one back. A stop signal waits for the renames and the
    removal, then is delivered: where the rename failed, it decides the exit (the job was stopped; the rename's
    line, which may say where the earlier dataset is, is its :attr:`~hpcdgnn.preemption.Stopped.failure`); where
    the dataset is in
    place, a Python caller's handler answers it, and within :func:`stops_after_written` it is recorded instead
    (nothing is left to stop: the command ends as done, saying so).
    Without ``force`` a non-empty ``root`` is another prepare's finished output, not ours to delete.

    Args:
        tmp: the finished dataset directory (:func:`prepare_output_dir`'s).
        root: the output it becomes.
        force: replace an earlier dataset at ``root``.

    Raises:
        DataError: a file could not be synced (a full disk or quota that NFS reports only then, an I/O error;
            nothing moved), or a rename failed (another dataset put there meanwhile; the earlier one kept).
    """
    with named_on_failure(root):
        _sync_tree(tmp)
        # a dataset holds its own files only; the record goes last, so that a prepare killed during the sync is
        # known by it
        (tmp / _WRITER).unlink(missing_ok=True)
        sync_directory(tmp)
    late = _LATE_TO.get()
    failed: list[DataError] = []  # the renames' line, which a stop delivered after them completes
    try:
        with stops_held(deliver=late is None) as came:
            aside = None
            try:
                aside = _set_aside(root) if force and root.is_dir() else None
                if aside is None and root.is_dir():
                    root.rmdir()
                tmp.rename(root)
            except OSError as e:
                failed.append(_not_moved(root, e, aside))
                raise failed[0] from None
            except DataError as e:  # _set_aside's
                failed.append(e)
                raise
            _TEMPORARIES.discard(tmp)
            # the dataset is whole at root: unwinding here would leave an earlier dataset set aside, so a stop waits
            # for its removal too
            sync_directory(root.parent)
            _remove_asides(root)
    except Stopped as stop:
        if failed:
            stop.failure = failed[0]
        raise
    if came and late is not None:
        late.append((came[0], root))


def _not_moved(root: Path, e: OSError, aside: Path | None) -> DataError:
    """The one line for a finished dataset that could not be renamed to ``root``, once the earlier dataset is put
    back where it can be.

    Where another prepare's dataset took ``root`` meanwhile (two ``--force`` to one output: each set aside what it
    found, and the first to rename its own in removes every earlier one, this one's included), that one has
    replaced the earlier dataset as this one would have: this one's aside goes too, never named as kept.

    Args:
        root: the output.
        e: the rename's error.
        aside: where :func:`_set_aside` moved the earlier dataset, or None.
    """
    if e.errno in (errno.ENOTEMPTY, errno.EEXIST) and _is_dataset(root):
        if aside is not None:
            _remove_aside(aside)
        return DataError(f"{root}: another prepare replaced the output meanwhile (two prepares into one --output?); "
                         "its dataset is kept, and this one discarded")
    kept = ""
    if aside is not None:
        try:
            os.rename(aside, root)
            sync_directory(root.parent)
            kept = "; the earlier dataset is back in place"
        except OSError:
            kept = f"; the earlier dataset is at {aside}"
    if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
        return DataError(f"{root}: cannot move the finished dataset into place: {e.strerror or e} (this one is "
                         f"discarded{kept})")
    return DataError(f"{root}: another dataset was written there while this one was (two prepares into one "
                     f"--output?); it is kept, and this one discarded{kept}")


def _first_of_run(sorted_keys: np.ndarray) -> np.ndarray:
    """Boolean mask marking the first element of each run of equal values in a sorted array."""
    first = np.empty(sorted_keys.shape[0], dtype=bool)
    if first.size:
        first[0] = True
        np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=first[1:])
    return first


def _sorted_sum(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys and the sum of ``values`` per key.

    Stable argsort + sequential ``np.bincount`` add in input order, so sums are bit-identical
    to ``np.add.at`` while avoiding it and ``np.unique(return_inverse=True)`` (both slow).
    """
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    first = _first_of_run(sorted_keys)
    group = np.cumsum(first) - 1
    uniq = sorted_keys[first]
    out = np.bincount(group, weights=values[order], minlength=uniq.shape[0])
    return uniq, out.astype(np.float64, copy=False)


def _dedupe(keys: np.ndarray, values: np.ndarray | None, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys with their weight: ones, event count, or summed given weights."""
    if mode == "given":
        return _sorted_sum(keys, values.astype(np.float64))
    # ones/count need only the sorted keys: np.sort is faster than argsort
    sorted_keys = np.sort(keys)
    first = _first_of_run(sorted_keys)
    uniq = sorted_keys[first]
    if mode == "ones":
        return uniq, np.ones(uniq.shape[0], dtype=np.float64)
    starts = np.flatnonzero(first)
    counts = np.diff(np.append(starts, sorted_keys.shape[0]))
    return uniq, counts.astype(np.float64)


def _sum_sparse(parts: Iterable[tuple[np.ndarray, np.ndarray, float]]) -> tuple[np.ndarray, np.ndarray]:
    """Sum of scaled sparse vectors given as (sorted keys, values, scale)."""
    parts = list(parts)
    keys = np.concatenate([k for k, _, _ in parts])
    vals = np.concatenate([v * s for _, v, s in parts])
    # sorted runs: the stable sort (timsort) merges them in ~O(n log parts)
    return _sorted_sum(keys, vals)


def _split_keys(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows (sources) and columns (destinations) of edge keys, computed once per snapshot."""
    rows = keys // n
    return rows, keys - rows * n


def _csr(rows: np.ndarray, cols: np.ndarray, n: int, index_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``(indptr, indices)`` of edges already sorted by key."""
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr, cols.astype(index_dtype)


def _degrees(rows: np.ndarray, cols: np.ndarray, n: int) -> np.ndarray:
    """[in_degree, out_degree] per vertex: distinct neighbours, float32 (N, 2)."""
    x = np.empty((n, 2), dtype=np.float32)
    x[:, 0] = np.bincount(cols, minlength=n)
    x[:, 1] = np.bincount(rows, minlength=n)
    return x


def _checked_targets(root: Path, t: int, y: np.ndarray | None, n: int, name: str) -> np.ndarray:
    """Snapshot t's float targets as float64 (N,); a DataError when absent, misshapen or infinite."""
    if y is None:
        raise DataError(f"{root}: snapshot {t}: targets {name!r} requested but the snapshot has none")
    try:
        y = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"{root}: snapshot {t}: targets are not numeric") from None
    if y.shape != (n,):
        raise DataError(f"{root}: snapshot {t}: targets of shape {y.shape}, expected ({n},)")
    if np.isinf(y).any():
        raise DataError(f"{root}: snapshot {t}: targets contain Inf (NaN marks 'no target'; Inf is not allowed)")
    return y


class _ShardSink:
    """Writes snapshot groups into shard files of ``shard_snapshots`` snapshots each."""

    def __init__(self, tmp: Path, n: int, shard_snapshots: int) -> None:
        self.tmp, self.n, self.per = tmp, n, shard_snapshots
        self.shards: list[ShardInfo] = []
        self._f: h5py.File | None = None
        self._start = 0
        self._name = ""

    def group(self, t: int) -> h5py.Group:
        if self._f is None:
            self._name = f"shard-{len(self.shards):05d}.h5"
            self._f = h5py.File(self.tmp / "shards" / self._name, "w")
            self._f.attrs["t_start"] = t
            self._f.attrs["num_vertices"] = self.n
            self._start = t
        return self._f.create_group(snapshot_group_name(t))

    def done(self, t: int) -> None:
        """Snapshot ``t`` is fully written: close the shard if full (not earlier: its datasets must exist first)."""
        if self._f is not None and t + 1 - self._start == self.per:
            self.close(t + 1)

    def abandon(self) -> None:
        """Close the open shard unfinished after a failed write (writing its attributes would fail again)."""
        f, self._f = self._f, None
        if f is not None:
            try:
                f.close()
            except Exception:  # noqa: S110 (the directory is removed next; the first error is the one to report)
                pass

    def close(self, t_stop: int) -> None:
        if self._f is None:
            return
        self._f.attrs["t_stop"] = t_stop
        self._f.close()
        self._f = None
        path = self.tmp / "shards" / self._name
        self.shards.append(ShardInfo(self._name, self._start, t_stop, path.stat().st_size, file_sha256(path)))


def _raw_edges(root: Path, t: int, raw: RawSnapshot, n: int, weights: str, directed: bool
               ) -> tuple[np.ndarray, np.ndarray]:
    """Step 1: snapshot t's raw events, checked, as sorted unique edge keys and their weights."""
    src, dst = np.asarray(raw.src, dtype=np.int64), np.asarray(raw.dst, dtype=np.int64)
    if src.shape != dst.shape or src.ndim != 1:
        raise DataError(f"{root}: snapshot {t}: src and dst must be 1-D of equal length")
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        raise DataError(f"{root}: snapshot {t}: vertex id outside [0, {n})")
    w_in = None if raw.weight is None else np.asarray(raw.weight, dtype=np.float64)
    if weights == "given" and w_in is None:
        raise DataError(f"{root}: snapshot {t}: weights='given' but the input has no weights")
    if w_in is not None and w_in.shape != src.shape:
        raise DataError(f"{root}: snapshot {t}: {w_in.shape[0]} weights for {src.shape[0]} edges")
    if not directed:
        # an undirected self-loop is one event, not two ('count'/'given' would double the diagonal)
        rev = src != dst
        src, dst = np.concatenate([src, dst[rev]]), np.concatenate([dst, src[rev]])
        w_in = None if w_in is None else np.concatenate([w_in, w_in[rev]])
    return _dedupe(edge_keys(src, dst, n), w_in, weights)


class _SnapshotWriter:
    """Steps 1-4 of the module docstring into a :class:`_ShardSink`, keeping the smoothing history and counts."""

    def __init__(self, root: Path, sink: _ShardSink, n: int, *, directed: bool, weights: str, edge_life: int,
                 mtransform_window: int, log_features: bool, feature_names: list[str] | None, num_classes: int,
                 targets: str | None) -> None:
        self.root, self.sink, self.n = root, sink, n
        self.directed, self.weights, self.log_features = directed, weights, log_features
        self.edge_life, self.mtransform_window = edge_life, mtransform_window
        self.num_classes, self.targets, self.names = num_classes, targets, feature_names
        self.index_dtype = index_dtype_for(n)  # n itself fits (n < 2^31), as before
        window = max(edge_life, mtransform_window)
        self.smoothed = window > 1
        self.hist_adj: deque[tuple[np.ndarray, np.ndarray]] = deque(maxlen=window)
        self.hist_x: deque[np.ndarray] = deque(maxlen=window)
        self.nnz: list[int] = []
        self.edges: list[int] = []
        self.active_counts: list[int] = []
        self.times: list[list[float] | None] = []

    def write(self, t: int, raw: RawSnapshot) -> None:
        """Dedupe, featurize, smooth and write snapshot t, then record its counts."""
        root, n, index_dtype = self.root, self.n, self.index_dtype
        keys, w = _raw_edges(root, t, raw, n, self.weights, self.directed)
        rows, cols = _split_keys(keys, n)
        if raw.x is not None:
            x = as_float32(raw.x)
            if x.shape[0] != n or self.names is None or x.shape[1] != len(self.names):
                expected = f"({n}, {len(self.names or [])})"
                raise DataError(f"{root}: snapshot {t}: features of shape {x.shape}, expected {expected}")
            bad = first_not_finite(x)  # a model would train on NaN; validate refuses such a shard
            if bad is not None:
                v, j = bad
                raise DataError(f"{root}: snapshot {t}: feature {j} of vertex {v} is {np.asarray(raw.x)[v, j]!r}, not "
                                "a finite float32; features must be finite numbers within float32's range")
        else:
            x = _degrees(rows, cols, n)
            self.names = self.names or DEGREE_FEATURES
            if self.log_features:
                x = np.log1p(x)
        active = np.zeros(n, dtype=np.uint8)
        active[rows] = 1
        active[cols] = 1
        self.hist_adj.append((keys, w))
        self.hist_x.append(x)
        if self.edge_life > 1:
            a_keys, a_w = _sum_sparse((k, v, 1.0) for k, v in self.hist_adj)
        elif self.mtransform_window > 1:
            scale = 1.0 / len(self.hist_adj)  # 1/min(w, t+1): the deque holds min(w, t+1) entries
            a_keys, a_w = _sum_sparse((k, v, scale) for k, v in self.hist_adj)
            x = (np.sum(np.stack(list(self.hist_x)), axis=0, dtype=np.float64) * scale).astype(np.float32)
        else:
            a_keys, a_w = keys, w
        g = self.sink.group(t)
        if a_keys is keys:
            indptr, indices = _csr(rows, cols, n, index_dtype)
        else:
            indptr, indices = _csr(*_split_keys(a_keys, n), n, index_dtype)
        g.create_dataset("indptr", data=indptr)
        g.create_dataset("indices", data=indices)
        w32 = as_float32(a_w)
        if not np.isfinite(w32).all():  # a weight past float32 (or summed past it by --edge-life): inf in the shard
            k = int(np.flatnonzero(~np.isfinite(w32))[0])
            raise DataError(f"{root}: snapshot {t}: edge weight {float(a_w[k]):.4g} does not fit in float32 (up to "
                            f"{float(np.finfo(np.float32).max):.3g}); rescale the input's weights, or use --weights "
                            "count")
        g.create_dataset("weights", data=w32)
        g.create_dataset("x", data=x)
        g.create_dataset("active", data=active)
        if self.num_classes > 0:
            labels = None if raw.labels is None else np.asarray(raw.labels)
            if labels is None or labels.shape != (n,):
                raise DataError(f"{root}: snapshot {t}: num_classes = {self.num_classes} but no labels of shape ({n},)")
            g.create_dataset("labels", data=labels.astype(np.int64))
        if self.targets is not None:
            g.create_dataset("targets", data=_checked_targets(root, t, raw.targets, n, self.targets))
        if self.smoothed:
            t_indptr, t_indices = _csr(rows, cols, n, index_dtype)
            g.create_dataset("target_indptr", data=t_indptr)
            g.create_dataset("target_indices", data=t_indices)
        self.sink.done(t)
        self.nnz.append(int(a_keys.shape[0]))
        self.edges.append(int(keys.shape[0]))
        self.active_counts.append(int(active.sum()))
        self.times.append(None if raw.time is None else [float(raw.time[0]), float(raw.time[1])])

    def manifest(self, source: dict[str, Any] | None) -> Manifest:
        """The manifest of the snapshots written (the sink closed), with ``source`` as provenance."""
        return Manifest(
            num_vertices=self.n,
            num_snapshots=len(self.nnz),
            num_features=len(self.names),
            feature_names=list(self.names),
            directed=self.directed,
            num_classes=self.num_classes,
            targets=self.targets,
            index_dtype=str(self.index_dtype),
            smoothing={"edge_life": self.edge_life, "mtransform_window": self.mtransform_window},
            snapshot_nnz=self.nnz,
            snapshot_edges=self.edges,
            snapshot_active=self.active_counts,
            snapshot_time=None if any(x is None for x in self.times) else self.times,
            shards=self.sink.shards,
            source=dict(source or {}, weights=self.weights, log_features=self.log_features),
        )


def _check_options(root: str | Path, n: int, weights: str, edge_life: int, mtransform_window: int,
                   shard_snapshots: int) -> None:
    """Refuse (:class:`DataError`) the options :func:`write_dataset` cannot honour, before anything is written."""
    if n < 1:
        raise DataError(f"{root}: no vertices")
    if edge_life < 1 or mtransform_window < 1:
        raise DataError(f"{root}: edge-life and M-transform window must be >= 1")
    if edge_life > 1 and mtransform_window > 1:
        raise DataError(f"{root}: choose one smoothing, edge-life (EvolveGCN) or M-transform (TM-GCN), not both")
    if shard_snapshots < 1:
        raise DataError(f"{root}: shard size must be >= 1 snapshot")
    if weights not in ("ones", "count", "given"):
        raise DataError(f"{root}: weights must be 'ones', 'count' or 'given' (got {weights!r})")


def _known_length(items) -> int | None:
    """``len(items)`` for a sized collection (a generator's length is unknown)."""
    try:
        return len(items)
    except TypeError:
        return None


def write_dataset(
    root: str | Path,
    snapshots: Iterable[RawSnapshot],
    *,
    num_vertices: int,
    directed: bool = True,
    weights: Literal["ones", "count", "given"] = "ones",
    edge_life: int = 1,
    mtransform_window: int = 1,
    log_features: bool = False,
    feature_names: list[str] | None = None,
    num_classes: int = 0,
    targets: str | None = None,
    shard_snapshots: int = 8,
    vertex_ids: np.ndarray | None = None,
    source: dict[str, Any] | None = None,
    force: bool = False,
    expected_snapshots: int | None = None,
    reverse: bool = False,
) -> Manifest:
    """Write a dataset directory from raw snapshots streamed in time order; return its manifest.

    Args:
        root: dataset directory to create (must not exist or be empty, unless ``force``).
        snapshots: raw windows in time order; ids in ``[0, num_vertices)``.
        num_vertices: N.
        directed: if False, every edge is stored in both directions.
        weights: edge weight of A_t before smoothing (module docstring, step 1).
        edge_life: IBM §5.4 edge-life ``l`` (1 = off).
        mtransform_window: IBM §5.3/§5.4 M-transform window ``w`` (1 = off).
        log_features: apply ``log1p`` to the degree features.
        feature_names: names of given features (required when snapshots carry ``x``).
        num_classes: C when snapshots carry labels, else 0.
        targets: name of the (N,) float targets every snapshot carries, or None.
        shard_snapshots: snapshots per shard file.
        vertex_ids: the user's id of each vertex, stored in ``vertices.h5``.
        source: provenance recorded in the manifest.
        force: replace a non-empty ``root``.
        expected_snapshots: T when the caller knows it (``snapshots`` may be a generator), for the progress bar.
        reverse: store each edge (u, v) as (v, u), so that Ã·X sums at each edge's destination (PyG's direction).
    """
    n = int(num_vertices)
    expected_snapshots = expected_snapshots or _known_length(snapshots)
    if reverse:
        snapshots = (dataclasses.replace(raw, src=raw.dst, dst=raw.src) for raw in snapshots)
    _check_options(root, n, weights, edge_life, mtransform_window, shard_snapshots)
    root = Path(root)
    with removed_on_error():
        tmp = prepare_output_dir(root, force)
        sink = _ShardSink(tmp, n, shard_snapshots)
        writer = _SnapshotWriter(root, sink, n, directed=directed, weights=weights, edge_life=edge_life,
                                 mtransform_window=mtransform_window, log_features=log_features,
                                 feature_names=feature_names, num_classes=num_classes, targets=targets)
        t = -1
        try:
            with Progress(f"{root}: snapshots written", expected_snapshots) as progress:
                for t, raw in enumerate(snapshots):
                    writer.write(t, raw)
                    progress.update()
            sink.close(t + 1)
            if t < 0:
                raise DataError(f"{root}: the input produced no snapshots")
            write_vertex_ids(tmp, vertex_ids, n)
            manifest = writer.manifest(source)
            with named_on_failure(root):
                save_manifest(tmp, manifest)
            replace_dir(tmp, root, force)
            return manifest
        except BaseException as e:
            sink.abandon()  # its files closed before removed_on_error removes the directory
            full = disk_full(root, e)
            if full is not None:
                raise full from None
            raise
