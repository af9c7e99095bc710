"""Use what a run trained: ``embed`` writes Z_t, ``predict`` scores pairs or node targets (issue 60).

Both run the checkpoint's forward on this job's ranks (:mod:`hpcdgnn.train.inference`; under ``mpirun`` the
strategy's own distributed pass; each rank keeps its rows of the asked steps), then gather the steps one at a
time on rank 0, which streams them into an HDF5 file (``.npz`` is written at the end: rank 0 holds it whole).

The embeddings file (HDF5 ``.h5`` / ``.hdf5``, or NumPy ``.npz``):

* ``embeddings`` (S, N, F): Z_t of each step, in the run's dtype; rows no rank computed are NaN;
* ``steps`` (S,): the snapshot t of each Z_t (Z_t scores snapshot t+1's edges in link prediction); in the event
  regime 0, 1, 2 = every vertex's z after the training, validation, test events;
* ``computed`` (S, N) bool: the rows computed (all, except under ``sequences``, whose samples read some);
* ``meta``: JSON — run directory, checkpoint, its epoch E, the epoch whose negatives the pass drew, the split,
  P, and the metrics of that pass (``hpcdgnn.train.inference`` says which recorded figures they equal).

``predict`` writes ``u,v,t,score`` rows (CSV; score = the decoder's probability that edge (u, v) appears in
snapshot t+1 given Z_t), or for node tasks a file of the same layout as ``embed``'s whose ``embeddings`` are the
head's outputs (regression: the H predicted targets; classification: class probabilities).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from hpcdgnn import preemption
from hpcdgnn.errors import ConfigError, DataError
from hpcdgnn.metrics.results import json_safe

__all__ = ["PASS_SPLITS", "EmbeddingFile", "add_embed_arguments", "add_predict_arguments", "embedded", "pairs_of",
           "predicted", "read_embeddings", "run_embed", "run_predict", "score_embeddings"]

T = TypeVar("T")

_SUFFIXES = {".h5": "hdf5", ".hdf5": "hdf5", ".npz": "npz"}

#: the steps an embed or predict pass covers (``--split``)
PASS_SPLITS = ("train", "val", "test", "all")


def add_embed_arguments(p: argparse.ArgumentParser) -> None:
    """``embed``'s options."""
    p.add_argument("rundir", help="a run directory with a checkpoint")
    p.add_argument("--output", required=True, metavar="FILE", help="a new .h5 / .hdf5 or .npz file")
    p.add_argument("--split", choices=PASS_SPLITS, default="test",
                   help="the steps whose Z_t to write (default test)")
    p.add_argument("--set", action="extend", nargs="+", metavar="KEY=VALUE",
                   help="e.g. data.path=NEW for a moved dataset, train.device=cpu")


def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    """``predict``'s options."""
    p.add_argument("rundir", help="a run directory with a checkpoint")
    p.add_argument("--output", required=True, metavar="FILE",
                   help="a new file: .csv for --pairs; .h5 / .hdf5 / .npz for node targets")
    p.add_argument("--pairs", metavar="FILE",
                   help="link prediction: (u, v, t) rows to score, a .npy (K, 3) integer array or a text file of "
                   "three integer columns (comma or blank separated, '#' comments); a first line of column names "
                   "is a header: u, v, t are read by name, other columns skipped, so predict's own u,v,t,score "
                   "output or a pandas to_csv (index column first) can be given back")
    p.add_argument("--split", choices=PASS_SPLITS, default="test", action=_SplitGiven,
                   help="node tasks: the steps to predict (default test); --pairs names each pair's t instead")
    p.add_argument("--set", action="extend", nargs="+", metavar="KEY=VALUE",
                   help="e.g. data.path=NEW for a moved dataset, train.device=cpu")


class _SplitGiven(argparse.Action):
    """``--split S`` that also records it was given: with ``--pairs`` it is refused, not silently ignored (the
    default stays a string, which the command's every-rank argument check joins)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)
        namespace.split_given = True


def _new_file(path: str, suffixes: dict[str, str], option: str = "--output") -> str:
    """The format of a file the command will create; refuse an existing file or a missing directory."""
    p = Path(path)
    fmt = suffixes.get(p.suffix.lower())
    if fmt is None:
        raise ConfigError(f"{option} {path}: give a file ending in {' / '.join(sorted(suffixes))}")
    if p.exists():
        raise ConfigError(f"{option} {path}: exists; nothing is overwritten (give a new name)")
    parent = p.absolute().parent
    if not parent.is_dir():
        raise ConfigError(f"{option} {path}: no directory {parent}")
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"{option} {path}: the directory {parent} is not writable")
    if _temporary(p).exists():
        raise ConfigError(f"{option} {path}: {_temporary(p)} exists: an embed or predict is writing it, or one that "
                          "was stopped left it; remove it (once none writes it) or give a new name")
    return fmt


@dataclass
class EmbeddingFile:
    """An ``embed`` (or node ``predict``) file read back: see the module docstring."""

    embeddings: np.ndarray
    steps: np.ndarray
    computed: np.ndarray
    meta: dict


def read_embeddings(path: str | os.PathLike) -> EmbeddingFile:
    """Read an ``embed`` file (HDF5 or npz) whole."""
    path = Path(path)
    try:
        if path.suffix.lower() == ".npz":
            with np.load(path) as f:
                return EmbeddingFile(f["embeddings"], f["steps"], f["computed"], json.loads(str(f["meta"])))
        import h5py

        with h5py.File(path, "r") as f:
            return EmbeddingFile(f["embeddings"][()], f["steps"][()], f["computed"][()], json.loads(f.attrs["meta"]))
    except (OSError, KeyError, ValueError) as e:
        raise DataError(f"{path}: not an hpcdgnn embeddings file ({e})") from None


def _temporary(path: str | os.PathLike) -> Path:
    """The name rank 0 writes ``path`` under until it is complete."""
    path = Path(path)
    return path.with_name(path.name + ".tmp")


#: the temporary files rank 0 is writing, and whether a stop of the job took them over (:func:`stop_writing`); the
#: lock orders a temporary's creation and its rename into place against that stop, which comes from another thread
_TEMPORARIES: set[Path] = set()
_STOP_LOCK = threading.Lock()
_STOPPED: list[bool] = []
#: the output renamed into place, complete: a stop that comes after it leaves it there, and its line says so
_PLACED: list[Path] = []
#: this pass's output (``--output``), which every rank was given and rank 0 writes
_OUTPUT: list[Path] = []
#: called with a temporary's inode once rank 0 made it: the stop's watch tells the other ranks, so that a stop's
#: speaker removes that file and no other (:func:`left_by_rank_0`)
MAKING: list[Callable[[int], None]] = []


def stop_writing() -> Path | None:
    """Remove the temporary files being written, and refuse to create or rename any from now on: the command line's
    stop of an embed or predict job on several ranks (``hpcdgnn.__main__._JobStop``), from its own thread while
    the main thread may be in the middle of a write; the process then ends without unwinding, unless the output
    was in place already.

    Returns:
        The output already renamed into place (:func:`written`): complete, it stays, and the job's command goes
        on to its end; else None.
    """
    with _STOP_LOCK:
        _STOPPED.append(True)
        for tmp in _TEMPORARIES:
            tmp.unlink(missing_ok=True)
        _TEMPORARIES.clear()
        return written()


def _new_pass(output: str | None) -> None:
    """Record this pass's ``output`` (None: the Python API's, no file), and forget an earlier pass's file in place
    (a caller of the Python API, or of ``main`` in-process, runs several in one process): :func:`written` is this
    pass's. A stop stays: it may have come before the pass began."""
    with _STOP_LOCK:
        _PLACED.clear()
        _OUTPUT[:] = [] if output is None else [Path(output)]


def forget_written() -> None:
    """Forget the output an earlier embed or predict of this process wrote (an in-process caller of ``main`` runs
    several): a stop before this command's pass begins (:func:`_new_pass`), in its start-up, must neither name that
    file as this command's, complete, nor look for its temporary (:func:`left_by_rank_0`). A stop stays."""
    _new_pass(None)


def left_by_rank_0(elsewhere: str | None, inode: int | None = None) -> tuple[Path | None, str | None]:
    """What a stop leaves of rank 0's output where rank 0 never answered it (its main thread held the GIL past the
    grace, inside a write or close of a large HDF5 file, say: its own thread could not remove the temporary), as
    this rank sees it; this rank removes the temporary where it sees it (on rank 0's node, or a file system the
    nodes share) and rank 0 told it made that file (``inode``), which would make the next embed to the same
    ``--output`` refuse. A temporary rank 0 did not tell of may be another embed's (one rank 0 had not yet
    refused): it stays, and the line says it may remain.

    Args:
        elsewhere: rank 0's node where it is not this rank's (its files may be out of sight here), else None.
        inode: the inode of the temporary rank 0 said it was writing (:data:`MAKING`), or None.

    Returns:
        The output where rank 0 had renamed it into place, complete (seen on its node), else None; and where the
        temporary may remain, as the stop's line says it (None: nothing is left).
    """
    with _STOP_LOCK:
        if not _OUTPUT:  # no pass under way here: rank 0 has not begun writing
            return None, None
        out = _OUTPUT[0]
    tmp = _temporary(out)
    try:
        if os.stat(tmp).st_ino == inode:  # else not known to be this job's (inode None): named, not removed
            tmp.unlink()
            return None, None
    except FileNotFoundError:
        if elsewhere is None:  # rank 0's node: none there, or renamed complete
            return (out if out.exists() else None), None
    except OSError:
        pass
    where = f" on {elsewhere}, rank 0's node" if elsewhere else ""
    return None, f"{tmp} may remain{where}: remove it before writing {out} again"


def written() -> Path | None:
    """The output this process renamed into place, complete (rank 0's), or None: what a stop's line names as
    kept."""
    return _PLACED[-1] if _PLACED else None


def _created(tmp: Path, create: Callable[[], T]) -> T:
    """``create()`` of the temporary file ``tmp``, unless a stop took the writing over (:func:`stop_writing`)
    before: then :class:`~hpcdgnn.preemption.Stopped`, which the stop's thread answers (the process ends)."""
    with _STOP_LOCK:
        if _STOPPED:
            from hpcdgnn.preemption import Stopped

            raise Stopped(0)
        _TEMPORARIES.add(tmp)
        made = create()
        for tell in MAKING:
            tell(os.stat(tmp).st_ino)
        return made


def _into_place(tmp: Path, path: Path) -> None:
    """``os.replace(tmp, path)``, unless a stop removed ``tmp`` meanwhile (:func:`_created`) or one process's stop
    was dropped by a callback (:func:`preemption.check_stop`: the file is not put in place, and goes)."""
    preemption.check_stop()
    with _STOP_LOCK:
        if _STOPPED:
            from hpcdgnn.preemption import Stopped

            raise Stopped(0)
        os.replace(tmp, path)
        _PLACED.append(path)
        _TEMPORARIES.discard(tmp)


@contextlib.contextmanager
def _or_removed(path, remove):
    """On any failure (a full disk, a signal) ``remove()`` the temporary file: nothing half written of ``path``
    stays; an OSError becomes one line naming ``path``."""
    try:
        yield
    except BaseException as e:
        remove()
        if isinstance(e, OSError):
            # h5py's text spans lines and names the temporary file: the errno's words, where it has one
            why = os.strerror(e.errno) if e.errno else " ".join(str(e.strerror or e).split())
            raise DataError(f"--output {path}: cannot write it ({why}); nothing was written") from None
        raise


class _Writer:
    """Rank 0's file, written step by step under a temporary name and renamed when complete; without a path (the
    Python API's ``output=None``) the steps kept in memory as the file would hold them, :attr:`result`, which
    :func:`_handed_out` gives to every rank."""

    def __init__(self, path: str | None, fmt: str | None, num_steps: int) -> None:
        self.path, self.fmt, self.num_steps = None if path is None else Path(path), fmt or "memory", num_steps
        self.tmp = None if path is None else _temporary(self.path)
        self.f, self.parts, self.k = None, [], 0
        self.result: EmbeddingFile | None = None

    def add(self, z: np.ndarray, computed: np.ndarray) -> None:
        """Append step ``k``'s rows."""
        with _or_removed(self.path, self.discard):
            self._add(z, computed)

    def _add(self, z: np.ndarray, computed: np.ndarray) -> None:
        if self.fmt in ("npz", "memory"):
            self.parts.append((z, computed))
        else:
            if self.f is None:
                import h5py

                # each step's rows and their computed flags, and HDF5's header and metadata
                self._room(self.num_steps * (z.nbytes + z.shape[0]) + 2**16)
                self.f = _created(self.tmp, lambda: h5py.File(self.tmp, "w"))
                self.f.create_dataset("embeddings", (self.num_steps, *z.shape), dtype=z.dtype)
                self.f.create_dataset("computed", (self.num_steps, z.shape[0]), dtype=bool)
            self.f["embeddings"][self.k] = z
            self.f["computed"][self.k] = computed
        self.k += 1

    def close(self, steps: list[int], meta: dict) -> None:
        """Write the steps and metadata, then rename the file into place."""
        with _or_removed(self.path, self.discard):
            self._close(steps, meta)

    def _close(self, steps: list[int], meta: dict) -> None:
        # JSON has no NaN: an empty split's metric is null, in memory as in the file
        steps, meta = np.asarray(steps, dtype=np.int64), json.dumps(json_safe(meta))
        if self.fmt in ("npz", "memory"):
            z, computed = np.stack([z for z, _ in self.parts]), np.stack([c for _, c in self.parts])
            self.parts = []
            if self.fmt == "memory":
                self.result = EmbeddingFile(z, steps, computed, json.loads(meta))
                return
            self._room(z.nbytes + computed.nbytes + steps.nbytes + len(meta) + 2**12)
            with _created(self.tmp, lambda: open(self.tmp, "wb")) as f:
                np.savez(f, embeddings=z, computed=computed, steps=steps, meta=np.asarray(meta))
        else:
            self.f.create_dataset("steps", data=steps)
            self.f.attrs["meta"] = meta
            self.f.close()
        _into_place(self.tmp, self.path)

    def _room(self, nbytes: int) -> None:
        """Refuse a file of about ``nbytes`` larger than its file system's free space, before writing it."""
        from hpcdgnn.data.writer import check_room

        check_room(self.path, nbytes, f"--output {self.path}", "the file",
                   "nothing was written (free some space or write it elsewhere)")

    def discard(self) -> None:
        if self.f is not None:
            with contextlib.suppress(Exception):  # already failing: the file goes, whatever state it is in
                self.f.close()
            self.f = None
        self.parts = []
        if self.tmp is not None:
            self.tmp.unlink(missing_ok=True)
            _TEMPORARIES.discard(self.tmp)


def _meta(tr, split: str, epoch: int, metrics: dict) -> dict:
    return {"run_dir": str(tr.run_dir.absolute()), "checkpoint": tr.checkpoint.name, "checkpoint_epoch": tr.epoch,
            "draw_epoch": epoch, "split": split, "ranks": tr.comm.size, "model": tr.job.model.name,
            "strategy": tr.job.strategy.name, "dtype": tr.job.train.dtype,
            "metrics": {k: v for k, v in metrics.items() if not k.startswith("train_") or split in ("train", "all")}}


def _write_steps(tr, recorder, steps: list[int], writer: _Writer | None, transform=None) -> str | None:
    """Gather each step on rank 0 and write it there (``transform``: rows → what to write, e.g. a head).

    Returns:
        Rank 0's line where its write failed (a full disk; the file removed), else None. The steps are still
        gathered after a failure: the other ranks send them whatever rank 0 does with them, and then learn of it
        in :func:`_refused_together` (had rank 0 left, they would finish and exit 0 while it aborted the job).
    """
    from hpcdgnn.train.inference import gather_step

    failed = None
    try:
        for t in steps:
            preemption.check_stop()  # one process: a stop whose exception a callback dropped stops here
            got = gather_step(recorder, tr.comm, t)
            if writer is not None and failed is None:
                z, computed = got
                try:
                    writer.add(z if transform is None else transform(t, z), computed)
                except DataError as e:
                    failed = str(e)
    except BaseException:
        if writer is not None:
            writer.discard()
        raise
    return failed


def _closed(writer: _Writer | None, failed: str | None, steps: list[int], meta: dict) -> str | None:
    """Rank 0's ``writer.close`` after :func:`_write_steps` returned ``failed``: the line of the first failure."""
    if writer is None or failed is not None:
        return failed
    try:
        writer.close(steps, meta)
    except DataError as e:
        return str(e)
    return None


def _refused_together(comm, failed: str | None) -> None:
    """Rank 0's write failure (collective: every rank calls it) raised on every rank as one error, which rank 0
    prints once and every rank exits 2 with."""
    from hpcdgnn.train.collective import collective_error

    failed = comm.bcast_obj(failed, tag="embed")
    if failed:
        raise collective_error(DataError(failed))


def _metric_line(metrics: dict, split: str) -> str:
    """The split's losses and metrics as ``run``'s epoch line writes them ('-' where the split has no examples)."""
    from hpcdgnn.metrics.epoch import fmt_metric

    names = ("val", "test") if split == "all" else (split,)
    return ", ".join(f"{k} {fmt_metric(v)}" for k, v in metrics.items() if k.split("_")[0] in names)


def _pass_then_close(tr, steps: list[int]):
    """The trained run's recorded pass (:func:`~hpcdgnn.train.inference.recorded_pass`), then its strategy closed:
    a library caller's process goes on (hybrid's batch generators must not)."""
    from hpcdgnn.train.inference import recorded_pass

    try:
        out = recorded_pass(tr, steps)
    except BaseException:
        tr.strategy.close(collective=False)
        raise
    tr.strategy.close()  # every rank is here
    return out


def _handed_out(comm, kept: _Writer | None) -> EmbeddingFile:
    """Rank 0's in-memory :class:`_Writer` result on every rank (collective): the arrays as buffers, not
    pickled."""
    import torch

    mine = kept.result if kept is not None else None
    head = comm.bcast_obj(None if mine is None else (mine.embeddings.shape, mine.embeddings.dtype.str, mine.steps,
                                                      mine.meta), tag="embed")
    shape, dtype, steps, meta = head
    if mine is not None:
        z, computed = torch.from_numpy(np.ascontiguousarray(mine.embeddings)), torch.from_numpy(
            mine.computed.astype(np.uint8))
    else:
        z = torch.from_numpy(np.empty(shape, dtype=np.dtype(dtype)))
        computed = torch.empty(shape[:2], dtype=torch.uint8)
    comm.bcast_(z, tag="embed")
    comm.bcast_(computed, tag="embed")
    return EmbeddingFile(z.numpy(), steps, computed.numpy().astype(bool), meta)


def _destination(args: argparse.Namespace) -> str:
    return "returned, no file" if args.output is None else args.output


def run_embed(args: argparse.Namespace, comm) -> int:
    """``python -m hpcdgnn embed RUNDIR --output FILE [--split S]`` on every rank (collective)."""
    embedded(args, comm)
    return 0


def _say(comm, line: str) -> None:
    """A command's line (rank 0's), through the ``hpcdgnn`` logger as a run's are: on stdout, unless a library
    caller set that logger's level or handlers (:func:`~hpcdgnn.metrics.log.configure_logging`)."""
    from hpcdgnn.metrics.log import configure_logging

    configure_logging(comm.rank, comm.size).info(line)


def embedded(args: argparse.Namespace, comm) -> EmbeddingFile | None:
    """:func:`run_embed`'s pass: with ``args.output`` None (the Python API) nothing is written and every rank
    returns the steps (collective); else rank 0 writes the file and None is returned.

    Args:
        args: ``rundir``, ``output`` (a new ``.h5`` / ``.npz``, or None), ``split``, ``set`` (``--set`` items).
        comm: the world's communicator.
    """
    from hpcdgnn.train.collective import agree
    from hpcdgnn.train.inference import open_trained, pass_steps

    _new_pass(args.output)
    kept: dict = {}

    def before(job) -> None:  # rank 0, before any set-up
        kept["fmt"] = None if args.output is None else _new_file(args.output, _SUFFIXES)

    tr = open_trained(args.rundir, comm, "embed", args.set or [], before)
    steps = agree(comm, lambda: pass_steps(tr, args.split))
    metrics, epoch, recorder = _pass_then_close(tr, steps)
    writer = _Writer(args.output, kept.get("fmt"), len(steps)) if comm.rank == 0 else None
    failed = _write_steps(tr, recorder, steps, writer)
    _refused_together(comm, _closed(writer, failed, steps, _meta(tr, args.split, epoch, metrics)))
    if writer is not None:
        _say(comm, f"embed: Z_t of {len(steps)} step(s) ({args.split}) × N = {tr.manifest.num_vertices} × "
                   f"F = {recorder.width} from {tr.checkpoint.name} on {comm.size} rank(s) -> {_destination(args)}; "
                   f"{_metric_line(metrics, args.split)}")
    return _handed_out(comm, writer) if args.output is None else None


def pairs_of(pairs: Any, where: str = "pairs") -> np.ndarray:
    """``pairs`` given as data (the Python API's (K, 3) array, tensor or list of ``(u, v, t)``; a ``.npy`` file's
    array) as rows of numbers — integers as they are (a float64 copy would round ids past 2**53), other numbers as
    float64 — checked further by :func:`_checked_pairs`; values that are not numbers are one line."""
    try:
        rows = np.asarray(pairs.detach().cpu() if hasattr(pairs, "detach") else pairs)  # a torch tensor too
        if rows.dtype == bool or not (np.issubdtype(rows.dtype, np.integer) or np.issubdtype(rows.dtype, np.floating)):
            raise ValueError(f"its values are {rows.dtype}")
        return rows if np.issubdtype(rows.dtype, np.integer) else rows.astype(np.float64)
    except (TypeError, ValueError) as e:  # ragged lists, strings
        raise DataError(f"{where}: want (K, 3) integer rows u, v, t ({str(e).strip().splitlines()[0]})") from None


def _checked_pairs(pairs: np.ndarray, where: str, num_vertices: int, num_steps: int,
                   lines: np.ndarray | None = None) -> np.ndarray:
    """(K, 3) int64 rows (u, v, t) of ``pairs`` (read from ``where``: ``--pairs FILE``, or ``pairs`` given as
    data); a bad row is one line naming ``where`` and the row: by its line in a text file, counted from 1 as editors
    do (a header, comments and blank lines make it differ from the row's index), else by its index from 0.

    Args:
        pairs: the rows, as :func:`pairs_of` or :func:`_read_pairs` gives them.
        where: what they are called in a message.
        num_vertices: the dataset's vertex count (u, v below it).
        num_steps: its step count (t below it).
        lines: each row's line in its text file (from 1), or None (in-memory rows, a ``.npy`` file).

    Shapes:
        pairs: (K, 3); lines: (K,).
    """
    def row(i: int) -> str:
        if lines is not None:
            return f"line {int(lines[i])}"
        return f"row {i}" + ("" if where == "pairs" else " (from 0)")  # "pairs": the Python API's own array

    if pairs.size == 0:
        raise DataError(f"{where}: no (u, v, t) rows in it")
    if pairs.ndim != 2 or pairs.shape[1] != 3:
        raise DataError(f"{where}: want rows of three columns u, v, t; found shape {tuple(pairs.shape)}")
    if not np.issubdtype(pairs.dtype, np.integer):
        whole = np.isfinite(pairs) & (pairs == np.round(pairs))  # NaN and ±inf are not
        if not whole.all():
            raise DataError(f"{where}: {row(int(np.flatnonzero(~whole.all(1))[0]))}: u, v, t must be integers")
    for col, name, bound in ((0, "u", num_vertices), (1, "v", num_vertices), (2, "t", num_steps)):
        # checked before the cast to int64: a value past it (2**63, 1e30) would wrap to a negative one
        bad = np.flatnonzero((pairs[:, col] < 0) | (pairs[:, col] >= bound))
        if bad.size:
            raise DataError(f"{where}: {row(int(bad[0]))}: {name} = {int(pairs[bad[0], col])} is outside "
                            f"0 .. {bound - 1}")
    return pairs.astype(np.int64)


#: why a CSV's first column is unnamed or empty, most often: pandas' ``to_csv`` writes the frame's index there
_PANDAS_INDEX = ("; it looks like pandas' index column (to_csv writes it unless told not to): write the file with "
                 "to_csv(path, index=False), or name the columns u, v, t in the header")


def _read_pairs(path: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The rows of a ``--pairs`` file (``.npy``, or text of three columns) as they are written, and each row's line.

    A text line with a comma is CSV (:func:`~hpcdgnn.data.prepare._common.split_fields`: an empty field is a
    column, so columns are named by where they are, as pandas and spreadsheets count them), one without is
    blank-separated; ``#`` starts a comment. The first line may name the columns (every field a name, as many as the
    next line's fields, as pandas writes ``u,v,t``): it is skipped, and where it names ``u``, ``v`` and ``t`` those
    columns are read and the others left, so ``predict``'s own ``u,v,t,score`` output is read back as its pairs and
    pandas' default ``to_csv`` (an unnamed index column first: ``,u,v,t``) as its ``u,v,t``. A header that does not
    name them, with its first name empty, is refused with pandas' hint: its columns would be read in order, the index
    as u. A line that is not numbers is one line naming it and its column, both counted from 1;
    :func:`_checked_pairs` names a bad row by the same line numbers.

    Args:
        path: the ``--pairs`` file.

    Returns:
        The rows, and for a text file the line (from 1) each came from, else None.

    Raises:
        DataError: ``--pairs PATH: ...``, one line: unreadable, a field that is not a number (its line and column),
            a line of another column count, a header whose first column has no name.

    Shapes:
        rows: (K, C) (C = 3 unless the file has another column count); lines: (K,).
    """
    from hpcdgnn.data.prepare._common import _is_number as numeric
    from hpcdgnn.data.prepare._common import comma_separated, split_fields

    where = f"--pairs {path}"

    def fields(line: str, number: int) -> list[str]:
        code = line.partition("#")[0].strip()
        return split_fields(code, comma_separated(code), where, number) if code else []

    def by_line(lines: list[str], usecols: tuple[int, ...] | None) -> np.ndarray:
        """The rows read field by field, where numpy's one-separator reader refused the file: it quotes, mixes commas
        and blanks, or has a field that is no number (then the first such is named here, by line and column)."""
        rows: list[list[float]] = []
        width = None
        for number, line in enumerate(lines, 1):
            row = fields(line, number)
            if not row:
                continue
            cols = usecols or range(len(row))
            bad = next((c for c in cols if c < len(row) and not numeric(row[c])), None)
            if bad is not None:
                names = not header and not rows and all(not numeric(x) for x in row)
                said = " is empty" if not row[bad] else f": '{row[bad][:40]}' is not a number"
                raise DataError(f"{where}: line {number}, column {bad + 1}{said}"
                                + ("; a header line names every column, one name each" if names
                                   else _PANDAS_INDEX if not rows and bad == 0 and not row[0] else ""))
            if width is not None and len(row) != width:
                raise DataError(f"{where}: line {number} has {len(row)} columns, the lines before it {width}")
            width = len(row)
            rows.append([float(row[c]) for c in cols])
        return np.array(rows, dtype=np.float64).reshape(len(rows), -1 if rows else 0)

    npy = path.lower().endswith(".npy")
    try:
        if npy:
            pairs = np.load(path, allow_pickle=False)
        else:
            with open(path, encoding="utf-8-sig") as f:  # -sig: a byte-order mark (Excel's CSV) is no field
                text = f.read()
    except (OSError, ValueError) as e:
        raise DataError(f"{where}: unreadable ({str(e).strip().splitlines()[0]})") from None
    if npy:
        return pairs_of(pairs, where), None
    header = False  # a first line of names was skipped: a later line of names is not one
    lines = text.splitlines()
    data: list[tuple[int, list[str]]] = []  # the first two lines with fields (a header's and a row's), numbered
    for number, line in enumerate(lines, 1):
        if len(data) == 2:
            break
        if row := fields(line, number):
            data.append((number, row))
    head = data[0][1] if data else []
    usecols = None
    if head and not any(numeric(x) for x in head) and (len(data) == 1 or len(data[1][1]) == len(head)):
        names = [x.strip("\"'").lower() for x in head]
        if {"u", "v", "t"} <= set(names):
            usecols = tuple(names.index(c) for c in "uvt")
        elif not names[0]:
            raise DataError(f"{where}: line {data[0][0]}, column 1 of the header line has no name{_PANDAS_INDEX}")
        lines[data[0][0] - 1] = ""  # the same line numbers for the rows after it
        header = True
    # numpy's reader at C speed where one separator splits every line as CSV would, every column numbers and as
    # many on each line (a row of another width under a header read by name would take a neighbour's column);
    # else, and for the message naming the first bad field, line by line
    try:
        if '"' in text:
            raise ValueError("quoted fields")
        with warnings.catch_warnings():  # an empty file: numpy warns, the shape check says it in one line
            warnings.simplefilter("ignore", UserWarning)
            pairs = np.loadtxt(lines, dtype=np.float64, comments="#", ndmin=2, delimiter="," if "," in text else None)
        if usecols and len(pairs):
            pairs = pairs[:, list(usecols)]
    except ValueError:
        pairs = by_line(lines, usecols)
    numbers = np.array([n for n, line in enumerate(lines, 1) if line.partition("#")[0].strip()], dtype=np.int64)
    return pairs_of(pairs, where), numbers


def run_predict(args: argparse.Namespace, comm) -> int:
    """``python -m hpcdgnn predict RUNDIR --output FILE (--pairs FILE | --split S)`` on every rank."""
    predicted(args, comm, hand_out=False)
    return 0


def predicted(args: argparse.Namespace, comm, hand_out: bool = True) -> np.ndarray | EmbeddingFile | None:
    """:func:`run_predict`'s pass (collective).

    Args:
        args: ``rundir``; ``output``: a new file (``.csv`` for pairs, ``.h5`` / ``.npz`` for node tasks), or None
            (the Python API: nothing written); ``pairs``: a file's path, or rows as data (the Python API's:
            rank 0's are read, by :func:`pairs_of`, and checked; the other ranks' are not used), or None for
            node tasks; ``split``, ``split_given``, ``set``.
        comm: the world's communicator.
        hand_out: return the pairs' scores on every rank (the Python API's); False (the command): None, and rank 0
            alone, which wrote them, holds them.

    Returns:
        Pairs: their scores (K,) float64, on every rank (None where not ``hand_out``). Node tasks: with ``output``
        None the head's outputs as an :class:`EmbeddingFile` on every rank, else None (rank 0 wrote the file).
    """
    import torch

    from hpcdgnn.train.collective import agree, collective_error
    from hpcdgnn.train.inference import open_trained, pass_steps

    _new_pass(args.output)
    kept: dict = {}
    given = args.pairs is not None and not (isinstance(args.pairs, str) and not args.pairs)
    where = f"--pairs {args.pairs}" if isinstance(args.pairs, str) else "pairs"

    def before(job) -> None:  # rank 0, with the job loaded and before any set-up
        from hpcdgnn.regimes import regime_of
        from hpcdgnn.tasks import task_class

        predicts = task_class(job.task.name).predicts
        if not predicts:
            raise ConfigError(f"predict {args.rundir}: task.name: {job.task.name}: predict does not serve it (a "
                              "pair's score needs the node memory at the pair's time); embed writes every vertex's z "
                              "at the end of each split")
        pairs_task = predicts == "pairs"
        if pairs_task != given:
            raise ConfigError(f"predict {args.rundir}: task.name: {job.task.name} "
                              + ("scores pairs (rows u, v, t): give --pairs FILE"
                                 + ("; only node tasks take --split" if getattr(args, "split_given", False) else "")
                                 if pairs_task else "predicts node targets: give --split, not --pairs"))
        if pairs_task and getattr(args, "split_given", False):
            raise ConfigError(f"predict {args.rundir}: --split {args.split}: only node tasks take it; the rows of "
                              f"{where} name their own step t (drop --split)")
        kept["fmt"] = None if args.output is None else _new_file(args.output, {".csv": "csv"} if pairs_task
                                                                    else _SUFFIXES)
        if pairs_task:
            manifest = regime_of("model", job.model.name).load_manifest(job.data.path)
            rows, lines = _read_pairs(args.pairs) if isinstance(args.pairs, str) else (pairs_of(args.pairs), None)
            kept["pairs"] = _checked_pairs(rows, where, manifest.num_vertices, manifest.num_snapshots, lines)

    tr = open_trained(args.rundir, comm, "predict", args.set or [], before)
    # rank 0's rows, and what they are called: a later refusal every rank raises names them as rank 0 was given
    pairs, where = comm.bcast_obj((kept.get("pairs"), where), tag="setup")
    if pairs is not None:
        steps = sorted(int(t) for t in np.unique(pairs[:, 2]))
        usable = set(agree(comm, lambda: pass_steps(tr, None)))
        missing = [t for t in steps if t not in usable]
        if missing:  # every rank knows the same: all refuse
            why = "" if tr.strategy.full_batch else " (its evaluation pass)"
            raise collective_error(ConfigError(f"{where}: t = {missing[0]}: strategy {tr.job.strategy.name} "
                                               f"computes Z_t of steps {min(usable)} .. {max(usable)} only{why}"))
    else:
        steps = agree(comm, lambda: pass_steps(tr, args.split))
    metrics, epoch, recorder = _pass_then_close(tr, steps)
    task = tr.task

    def head(t: int, z: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return task.predict(torch.from_numpy(z).to(task_device)).cpu().numpy()

    task_device = next((p.device for p in task.parameters()), torch.device("cpu"))
    if pairs is None:
        writer = _Writer(args.output, kept.get("fmt"), len(steps)) if comm.rank == 0 else None
        failed = _write_steps(tr, recorder, steps, writer, head)
        _refused_together(comm, _closed(writer, failed, steps, _meta(tr, args.split, epoch, metrics)))
        if writer is not None:
            _say(comm, f"predict: {len(steps)} step(s) ({args.split}) × N = {tr.manifest.num_vertices} -> "
                       f"{_destination(args)}")
        return _handed_out(comm, writer) if args.output is None else None
    scores = np.full(pairs.shape[0], np.nan)
    from hpcdgnn.train.inference import gather_step

    problem = None
    for t in steps:
        got = gather_step(recorder, tr.comm, t)
        if got is None or problem:
            continue
        z, computed = got
        rows = np.flatnonzero(pairs[:, 2] == t)
        u, v = pairs[rows, 0], pairs[rows, 1]
        lost = np.flatnonzero(~(computed[u] & computed[v]))
        if lost.size:
            k = lost[0]
            vertex = int(u[k]) if not computed[u[k]] else int(v[k])
            problem = (f"{where}: row {int(rows[k])}: strategy {tr.job.strategy.name} did not compute "
                       f"Z_{t} of vertex {vertex} (its samples read other vertices); predict with a full-batch "
                       "strategy of the same model (--set strategy.name=snapshot)")
            continue
        with torch.no_grad():
            scores[rows] = task.predict(torch.from_numpy(z).to(task_device), torch.from_numpy(u),
                                        torch.from_numpy(v)).cpu().numpy()
    problem = comm.bcast_obj(problem, tag="embed")  # rank 0 found it: every rank refuses together
    if problem:
        raise collective_error(DataError(problem))
    failed = None
    if comm.rank == 0 and args.output is not None:
        try:
            _write_scores(args.output, pairs, scores)
        except DataError as e:  # a full disk: every rank refuses with rank 0's line
            failed = str(e)
    _refused_together(comm, failed)
    if comm.rank == 0:
        _say(comm, f"predict: {pairs.shape[0]} pair(s) of {len(steps)} step(s) scored from {tr.checkpoint.name} on "
                   f"{comm.size} rank(s) -> {_destination(args)}")
    if not hand_out:  # every rank of the command skips it alike: no collective is left unmatched
        return None
    return comm.bcast_(torch.from_numpy(scores), tag="embed").numpy()


def _write_scores(path: str, pairs: np.ndarray, scores: np.ndarray) -> None:
    """``u,v,t,score`` rows, written under a temporary name and renamed when complete."""
    tmp = _temporary(path)
    with _or_removed(path, lambda: tmp.unlink(missing_ok=True)):
        with _created(tmp, lambda: open(tmp, "w")) as f:
            f.write("u,v,t,score\n")
            for (u, v, t), s in zip(pairs.tolist(), scores.tolist(), strict=True):
                f.write(f"{u},{v},{t},{s!r}\n")
        _into_place(tmp, Path(path))


def score_embeddings(run_dir: str | os.PathLike, path: str | os.PathLike, comm=None) -> dict[str, float]:
    """The metrics of an ``embed`` file's Z_t recomputed by the run's trained head on one process.

    Draws the negatives of the file's ``draw_epoch`` over whole snapshots, as full-batch strategies score;
    a sampled strategy's per-sample negatives are not in the file, so its metrics differ.

    Args:
        run_dir: the run that trained the head.
        path: the ``embed`` file.
        comm: a one-rank :class:`~hpcdgnn.comm.Communicator` (the task's set-up sums its counts over it); None:
            this process alone (``MPI_COMM_SELF``), also under ``mpirun``.
    """
    import torch

    from hpcdgnn.api import load_run
    from hpcdgnn.data.shard_reader import ShardReader
    from hpcdgnn.tasks.base import Embeddings, Scored
    from hpcdgnn.train.setup import load_dataset_manifest

    if comm is None:  # this process alone, freed at the end (MPI caps how many communicators exist)
        from hpcdgnn.comm.communicator import alone

        own = alone()
        try:
            return score_embeddings(run_dir, path, own)
        finally:
            own.free()
    f = read_embeddings(path)
    run = load_run(run_dir)
    job = run.job
    manifest = load_dataset_manifest(job, str(run_dir))
    task = run.task
    steps = [int(t) for t in f.steps]
    with ShardReader(job.data.path, manifest) as reader:
        task.setup(reader, Scored(snapshots=tuple(steps)), comm)
    emb = Embeddings({t: torch.from_numpy(f.embeddings[k]) for k, t in enumerate(steps)})
    task.hold_scores(True)  # the AUC's bins as the run's (Task.rebin)
    with torch.no_grad():
        stats = task(emb, int(f.meta["draw_epoch"])).stats
    return task.metrics(task.rebin(comm, stats)[0])
