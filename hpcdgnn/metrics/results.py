"""The run directory: ``config.resolved.yaml``, ``plan.json``, ``metrics.jsonl`` (one JSON object per epoch)
and ``summary.json``, as data for scripts; keys specified in docs/results.md."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from hpcdgnn.atomic import atomic_write
from hpcdgnn.errors import ConfigError, DataError

__all__ = ["RunDirectory", "choose_run_dir", "iter_epoch_records", "json_safe", "read_epoch_records", "writing"]


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Report a failed write of a run file in one line (a :class:`DataError` naming the file and the system's reason,
    exit 2), not as a crash: a full disk, a quota, a read-only file system are the environment's, not a bug."""
    try:
        yield
    except OSError as e:
        hint = {errno.ENOSPC: "a full disk?", errno.EDQUOT: "over quota?",  # the others say what is
                errno.EFBIG: "over this process's file size limit, ulimit -f?"}.get(e.errno)
        raise DataError(f"cannot write {path}: {e.strerror or e}" + (f" ({hint})" if hint else "")) from None


def json_safe(v: Any) -> Any:
    """JSON has no NaN: write null instead, so every JSON reader accepts the files."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return v


#: run directories this process made (rank 0): a refused new run removes only those, never one the user made
MADE_RUN_DIRS: set[Path] = set()

#: for a run directory of :data:`MADE_RUN_DIRS`, the missing parents its creation made too, innermost first: a
#: refused new run removes those it left empty, as the run directory
MADE_PARENT_DIRS: dict[Path, list[Path]] = {}


def _make_run_dir(p: Path) -> None:
    """``p.mkdir(parents=True)`` (``FileExistsError`` where ``p`` exists), recorded in :data:`MADE_RUN_DIRS` with
    the parents it made (:data:`MADE_PARENT_DIRS`)."""
    missing = [q for q in p.resolve().parents if not q.exists()]  # innermost first
    p.mkdir(parents=True)
    MADE_RUN_DIRS.add(p.resolve())
    MADE_PARENT_DIRS[p.resolve()] = missing


def _way_on(taken: Path) -> str:
    """What to do about an ``--output`` that is taken, in the words of whoever started the run: resume the run
    there (where it is one: its saved job), or give another directory.

    Args:
        taken: the non-empty directory.
    """
    from hpcdgnn.train.trainer import RESTART_WORDS  # not at the top: the trainer imports this module

    resume, output, _ = RESTART_WORDS.get()
    other = f"give another {output}"
    if (taken / "config.resolved.yaml").is_file():
        return f"resume it with {resume.format(str(taken))}, or {other}"
    return other


#: the files that make a directory a run's: ``config.resolved.yaml`` with one its set-up writes beside it — the
#: resolved job alone is no run (a user may keep a copy as a job file where runs go; ``summary.json`` is a
#: common name too)
RUN_MARKERS = ("config.resolved.yaml", ("plan.json", "run.lock", "metrics.jsonl", "summary.json"))


def _run_holding(p: Path) -> tuple[Path, str] | None:
    """The nearest directory above ``p`` that is a run's (:data:`RUN_MARKERS`), with the files found, or None."""
    first, others = RUN_MARKERS
    for q in Path(os.path.abspath(p)).parents:
        if (q / first).is_file():
            for other in others:
                if (q / other).exists():
                    return q, f"{first} and {other}"
    return None


def _not_in_a_run(p: Path, key: str, given: str) -> None:
    """Refuse a new run directory ``p`` inside another run's: ``output="runs"`` made ``runs`` a run directory, and
    the default ``output.dir: runs`` then put every later run inside it, where its files mix with that run's and
    ``load_run``/``report`` of the outer one find directories that are no part of it.

    Args:
        p: the new run directory.
        key: what gave it, as messages name it (``--output``, ``output.dir``).
        given: that value, as given.

    Raises:
        ConfigError: one line naming the run directory above ``p`` and its marker file.
    """
    from hpcdgnn.train.trainer import RESTART_WORDS  # not at the top: the trainer imports this module

    held = _run_holding(p)
    if held is not None:
        run, marker = held
        which = "it" if run == Path(os.path.abspath(given)) else str(run)  # output.dir naming the run itself
        raise ConfigError(f"{key} {given}: {which} is a run directory (it holds {marker}), and a new run's directory "
                          f"inside it would mix with that run's files; give {RESTART_WORDS.get()[1]} or output.dir a "
                          "directory outside it")


def choose_run_dir(output: str | None, parent: str, job_name: str) -> Path:
    """The run directory: ``output`` if given (absent or empty), else a new timestamped one; never an old run, nor
    one inside another run's directory (:func:`_not_in_a_run`). One it creates is recorded in
    :data:`MADE_RUN_DIRS`."""
    if output is not None:
        if not output.strip():
            raise ConfigError("--output: an empty path; give the run directory, or leave --output out")
        p = Path(output)
        _not_in_a_run(p, "--output", output)
        if p.exists() and not p.is_dir():
            raise ConfigError(f"--output {output}: is a file; a run writes into a new or empty directory")
        if p.exists() and any(p.iterdir()):
            raise ConfigError(f"--output {output}: directory exists and is not empty; a run never overwrites another: "
                              f"{_way_on(p)}")
        try:
            if not p.exists():
                _make_run_dir(p)
        except FileExistsError:  # another run made it since exists(): claim_run_dir says which of them has it
            if not p.is_dir():
                raise ConfigError(f"--output {output}: is a file; a run writes into a new or empty directory") from None
        except OSError as e:
            raise ConfigError(f"--output {output}: cannot create the run directory: {e.strerror or e}") from None
        return p
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(parent) / f"{job_name}-{stamp}"
    _not_in_a_run(base, "output.dir:", parent)
    p, i = base, 1
    while True:
        try:
            _make_run_dir(p)
            return p
        except FileExistsError:
            if not p.exists():  # a parent is a file (pathlib says FileExistsError for it too)
                raise ConfigError(f"output.dir: {parent}: cannot create the run directory {p}: not a directory") \
                    from None
            i += 1
            p = base.with_name(f"{base.name}-{i}")
        except OSError as e:
            raise ConfigError(f"output.dir: {parent}: cannot create the run directory {p}: {e.strerror or e}") \
                from None


def iter_epoch_records(path: Path) -> Iterator[dict]:
    """The epoch records of a ``metrics.jsonl``, one at a time (none when there is no file). A last line cut short
    (no newline: a job killed while writing it) is left out, as a resume drops it.

    Raises:
        DataError: a line that is not an epoch record (names the file and the line).
    """
    if not Path(path).is_file():
        return
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError(f"a JSON {type(record).__name__}, not an object")
            except ValueError as e:
                if not line.endswith("\n") and isinstance(e, json.JSONDecodeError):
                    return
                raise DataError(f"{path}: line {number}: not an epoch record ({e})") from None
            yield record


def read_epoch_records(path: Path) -> list[dict]:
    """The epoch records of a ``metrics.jsonl`` as a list."""
    return list(iter_epoch_records(path))


class RunDirectory:
    """Writer of the run directory files (rank 0 only)."""

    def __init__(self, path: Path, tensorboard: str = "", start_epoch: int = 0) -> None:
        self.path = Path(path)
        self._tensorboard = None
        if tensorboard:  # output.tensorboard: imported only when asked for; first, so a refusal leaves no file
            from hpcdgnn.metrics.export import TensorBoardLog

            self._tensorboard = TensorBoardLog(tensorboard, purge_step=start_epoch + 1 if start_epoch else None)
        with writing(self.path / "metrics.jsonl"):
            self._metrics = open(self.path / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115 (closed by close)

    def save_config(self, resolved: dict) -> None:
        """Write ``config.resolved.yaml``."""
        with writing(self.path / "config.resolved.yaml"):
            (self.path / "config.resolved.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))

    def append_epoch(self, record: dict) -> None:
        """Append one line to ``metrics.jsonl`` (flushed at once, so a killed job keeps its epochs; a line a full
        disk cut short is dropped by readers and by a resume)."""
        clean = json_safe(record)
        with writing(self.path / "metrics.jsonl"):
            self._metrics.write(json.dumps(clean) + "\n")
        if self._tensorboard is not None:
            self._tensorboard.write(clean)  # the values metrics.jsonl holds

    def save_summary(self, summary: dict) -> None:
        """Write ``summary.json`` atomically and durably (:func:`atomic_write`)."""
        with writing(self.path / "summary.json"), atomic_write(self.path / "summary.json") as f:
            f.write(json.dumps(json_safe(summary), indent=1) + "\n")

    def close(self) -> None:
        """Close the metrics file (and the TensorBoard writer)."""
        self._metrics.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
