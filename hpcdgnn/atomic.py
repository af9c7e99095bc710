"""Writing a file so that a reader sees the old file or the new one, never half of one, and a crash loses neither.

Every file a run, a resume or a command writes whole (``config.resolved.yaml``, ``plan.json``, ``summary.json``,
checkpoints, rates, workload predictors, exports) goes through :func:`atomic_write`: written into a temporary
beside it, synced, then renamed into place. A process killed meanwhile (SIGKILL, a node's crash) leaves the
temporary; :func:`remove_temporaries` clears those of a directory's own files once nothing else can be writing them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from hpcdgnn.errors import umask_mode

__all__ = ["RANDOM_TAIL", "atomic_write", "is_temporary", "keep_as", "remove_temporaries", "sync_directory",
           "sync_path"]

#: what ``link`` says on a file system without hard links (vfat, some FUSE and object-store mounts)
_UNSUPPORTED = frozenset({errno.EPERM, errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK})
#: what ``mkstemp`` and ``mkdtemp`` put after the prefix: 8 of their characters (``tempfile._RandomNameSequence``)
RANDOM_TAIL = re.compile(r"[a-z0-9_]{8}")


def _prefix(name: str) -> str:
    """The start of every temporary :func:`atomic_write` makes for the file ``name``."""
    return f".{name}.tmp-"


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", replace: bool = True) -> Iterator[IO]:
    """Open a temporary beside ``path`` for writing; when the block ends, sync it and rename it into place.

    The temporary is ``.NAME.tmp-XXXXXXXX`` in ``path``'s directory (the same file system, so the rename is
    atomic), made by ``mkstemp``: no other rank or process, on this node or another sharing the file system, can
    pick the same name (a pid can repeat across nodes). Any failure in the block or after it (an exception, a
    KeyboardInterrupt, a full disk that only ``fsync`` reports, as NFS does) removes the temporary and leaves
    ``path`` as it was. The file is synced before the rename and the directory after it: a rename that reaches
    the disk before the data would leave an empty file after a node crash, where a resume then finds an empty
    checkpoint or ``config.resolved.yaml``.

    Args:
        path: the file to write; its directory must exist.
        mode: ``"w"`` (text, UTF-8) or ``"wb"``.
        replace: False refuses to replace a file at ``path``, including one created while the block ran (a check
            beforehand cannot see it): the temporary is hard-linked to ``path``, which fails if ``path`` exists.
            On a file system without hard links, ``path`` is claimed by an exclusive create, then replaced.

    Yields:
        the temporary file, open in ``mode``; not to be closed by the block.

    Raises:
        FileExistsError: ``replace`` is False and something is at ``path``; its message names ``path``.
        OSError: from creating, writing, syncing or renaming the file (the temporary removed).
    """
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=_prefix(path.name), dir=path.parent)
    os.close(fd)  # opened again by name: ``f.name`` is the temporary's path
    tmp = Path(name)
    try:
        with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as f:
            umask_mode(tmp)  # not mkstemp's 0600: what a user writes is their group's to read, as open() makes it
            yield f
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            _link_new(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    sync_directory(path.parent)


def _link_new(tmp: Path, path: Path) -> None:
    """Give the file ``tmp`` the name ``path``, never replacing a file there (a user's); ``tmp`` goes.

    Raises:
        FileExistsError: something is at ``path`` (the message names it).
    """
    try:
        os.link(tmp, path)
    except FileExistsError:
        # NFS may repeat a link whose reply was lost, and answer the repeat with EEXIST: then ``path`` is ``tmp``
        if not path.is_file() or not os.path.samefile(tmp, path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path)) from None
    except OSError as e:
        if e.errno not in _UNSUPPORTED:
            raise
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # FileExistsError: taken
        try:
            os.replace(tmp, path)
        except BaseException:
            path.unlink(missing_ok=True)  # the empty file claimed above: ours
            raise
        return
    tmp.unlink()


def keep_as(path: str | Path, copy: str | Path) -> None:
    """Give the file ``path`` the second name ``copy`` (what is there goes), before :func:`atomic_write` replaces
    ``path``: renaming ``path`` aside instead would leave no file at ``path`` until the new one is renamed in, and a
    crash then none at all. A hard link where the file system has them, else a copy written by :func:`atomic_write`.

    Args:
        path: the file to keep, which stays where it is.
        copy: its second name, in the same directory.
    """
    copy = Path(copy)
    copy.unlink(missing_ok=True)  # a record left by an earlier try: link refuses an existing name
    try:
        os.link(path, copy)
    except OSError as e:
        if e.errno not in _UNSUPPORTED:
            raise
        with atomic_write(copy, "wb") as f:
            f.write(Path(path).read_bytes())


def sync_path(path: str | Path, strict: bool) -> None:
    """``fsync`` the file or directory ``path`` by name: one written and closed (h5py's file has no descriptor to
    sync), or a directory whose entries are to reach the disk.

    Args:
        path: the file or directory.
        strict: raise what opening or syncing it raised (a file's data: a full disk or quota that NFS reports only
            here); False ignores it (:func:`sync_directory`'s best effort).

    Raises:
        OSError: only with ``strict``.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        if strict:
            raise


def sync_directory(directory: str | Path) -> None:
    """``fsync`` ``directory``, so that the renames, creations and removals of names in it so far outlive a node
    crash: a rename is on disk only once its directory is synced, and a later step that counts on it (a file
    removed, a record vouching for it) can reach the disk first. Best effort: what was renamed is in place by now,
    so a directory some network or FUSE file system cannot open or sync is no failed write.

    Args:
        directory: the directory whose entries are to reach the disk.
    """
    sync_path(directory, strict=False)


def remove_temporaries(directory: str | Path, names: Iterable[str]) -> None:
    """Remove from ``directory`` the temporaries :func:`atomic_write` made for its files ``names`` and a killed
    process (SIGKILL, a node's crash) left: ``.NAME.tmp-`` and mkstemp's 8 characters, a plain file. mkstemp's
    names are new each time, so no later write replaces one and each would stay for ever. Nothing else goes: not
    a user's file of another name or shape, not a temporary of another file. The caller holds what keeps every
    other writer of these files out (a run's ``run.lock``), or it could remove a write under way. Best effort: one
    that cannot be removed is left.

    Args:
        directory: where the files are written.
        names: the files' names (``summary.json``), the only ones whose temporaries go.
    """
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        with contextlib.suppress(OSError):
            if is_temporary(entry.name, names) and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)


def is_temporary(name: str, names: Iterable[str]) -> bool:
    """Whether ``name`` is that of a temporary :func:`atomic_write` makes for one of the files ``names``:
    ``.NAME.tmp-`` and mkstemp's 8 characters, nothing looser (a user's file of a like name is not one).

    Args:
        name: a directory entry's name.
        names: the files' names (``manifest.json``).
    """
    return any(name.startswith(_prefix(n)) and RANDOM_TAIL.fullmatch(name[len(_prefix(n)):]) for n in names)
