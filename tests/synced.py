"""Whether a file was written durably: its data synced before it got its name, its directory synced after.

A file renamed into place before its data reached the disk can be empty after a node crash (a checkpoint, a run's
``config.resolved.yaml``, which a resume then cannot read); what the tests of each writer check with
:class:`SyncLog`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class SyncLog:
    """Record, by inode, the ``os.fsync``, ``os.replace``, ``os.rename`` (``Path.rename``'s) and ``os.link`` calls
    made while it is installed.

    Args:
        monkeypatch: pytest's fixture; the ``os`` functions are wrapped until the test ends.
    """

    def __init__(self, monkeypatch) -> None:
        self.events: list[tuple[str, tuple[int, int], Path | None]] = []
        fsync = os.fsync

        def synced(fd: int) -> None:
            st = os.fstat(fd)
            fsync(fd)
            self.events.append(("dir-sync" if stat.S_ISDIR(st.st_mode) else "sync", (st.st_dev, st.st_ino), None))

        def naming(call):
            """``call(src, dst)`` recorded as giving ``src``'s inode the name ``dst``."""
            def named(src, dst, *args, **kwargs) -> None:
                st = os.stat(src)
                call(src, dst, *args, **kwargs)
                self.events.append(("name", (st.st_dev, st.st_ino), Path(dst)))
            return named

        monkeypatch.setattr(os, "fsync", synced)
        for name in ("replace", "rename", "link"):
            monkeypatch.setattr(os, name, naming(getattr(os, name)))

    def durable(self, path: str | Path) -> str:
        """What was missing in the last write of ``path`` ("" when nothing was): its file's sync before the
        rename that gave ``path`` its name (a directory's: its own sync, which makes its entries durable), its
        parent directory's sync after it."""
        path = Path(path)
        named = [i for i, (what, _, dst) in enumerate(self.events) if what == "name" and dst == path]
        if not named:
            return f"{path} was never renamed into place"
        i = named[-1]
        inode = self.events[i][1]
        if not any(what in ("sync", "dir-sync") and ino == inode for what, ino, _ in self.events[:i]):
            return f"{path}'s data was not synced before its rename"
        st = os.stat(path.parent)
        if not any(what == "dir-sync" and ino == (st.st_dev, st.st_ino) for what, ino, _ in self.events[i + 1:]):
            return f"{path.parent} was not synced after the rename of {path.name}"
        return ""


def full_disk(monkeypatch) -> None:
    """Send the writes to every temporary :func:`~hpcdgnn.atomic.atomic_write` makes to ``/dev/full``, which
    answers each with ENOSPC: a full disk, the temporary itself made (and to be removed)."""
    from hpcdgnn import atomic

    real_open = open
    monkeypatch.setattr(atomic, "open", lambda path, mode, **kw: real_open("/dev/full", mode, **kw), raising=False)
