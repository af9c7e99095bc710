"""The host memory allocator a run really uses, for its banner and ``summary.json``.

hpcdgnn chooses none: glibc's malloc, tuned by ``train.reuse_memory`` (``mallopt``), unless the job script
preloads another (``LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2``, see docs/jobs.md). What is
reported is what the process has mapped, not what the environment asks for.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["describe"]

#: malloc libraries a job script may preload, as their file names begin
_LIBRARIES = ("libjemalloc", "libtcmalloc", "libmimalloc")


def describe(maps: str | None = None) -> str:
    """The malloc library mapped into this process (``maps``: the text of ``/proc/self/maps``), else glibc's."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:  # not Linux
            return "system malloc"
    for line in maps.splitlines():
        name = Path(line.split()[-1]).name if len(line.split()) >= 6 else ""
        if name.startswith(_LIBRARIES):
            return f"{name} (preloaded)"
    return "glibc malloc"
