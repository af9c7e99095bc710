"""The host memory allocator of ``python -m hpcdgnn run``: jemalloc where the machine has it.

Why: glibc's malloc gives blocks larger than its mmap threshold (32 MiB by default) back to the kernel on
``free``, so a tensor of that size allocated every epoch is faulted in, page by page, every epoch (torch's
oneDNN LSTM keeps a workspace of GiBs per layer from forward to backward); at P > 1 the ranks fault in
different epochs and wait for each other. ``train.reuse_memory``'s ``mallopt`` cannot cure it from inside
the process: ``mallopt`` takes a C int, so its mmap threshold (1 GiB) leaves larger blocks to ``mmap`` and
its trim threshold (2 GiB - 1) lets a heap top that swings by more go back to the kernel. glibc's tunables,
which take sizes, do cure it (``GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736``
with ``train.reuse_memory: false``, whose ``mallopt`` would override them) — but they too must be set before
the process starts. Where nothing is freed and allocated again each epoch the choice changes nothing.

The allocator must be chosen before the process starts (``LD_PRELOAD``), so :func:`reexec` — the first
thing ``run`` does, before MPI is initialised — restarts the interpreter with the same arguments and the
library preloaded. The launcher sees the same process (``exec`` keeps its pid and environment), which is
why this works under mpirun, srun and jsrun alike, and on every node without the launcher forwarding
variables. ``HPCDGNN_MALLOC`` chooses: ``auto`` (default: jemalloc when found in the usual library
directories, else the system's), ``system`` (no restart), or the path of a malloc library to preload.
``MALLOC_CONF`` is set only when unset: no decay (freed memory stays with the process for its next
use) and no background thread (one thread per rank).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["ENV", "describe", "find_jemalloc", "reexec"]

#: the variable that chooses the allocator
ENV = "HPCDGNN_MALLOC"
#: set in the restarted process (the library it preloaded): never restart twice
_ACTIVE = "HPCDGNN_MALLOC_ACTIVE"
#: jemalloc's configuration when the user set none: keep freed pages, no extra thread
_CONF = "background_thread:false,dirty_decay_ms:-1,muzzy_decay_ms:-1"
_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib/powerpc64le-linux-gnu", "/usr/lib64",
         "/usr/lib", "/usr/local/lib", "/usr/local/lib64")


def find_jemalloc() -> str | None:
    """The path of libjemalloc.so.2 in the usual library directories (or where ``$CONDA_PREFIX``'s is), or None."""
    dirs = list(_DIRS)
    if os.environ.get("CONDA_PREFIX"):
        dirs.insert(0, str(Path(os.environ["CONDA_PREFIX"]) / "lib"))
    for d in dirs:
        p = Path(d) / "libjemalloc.so.2"
        if p.is_file():
            return str(p)
    return None


def _choice() -> str | None:
    """The library to preload for this process, or None for the system's allocator."""
    from hpcdgnn.errors import ConfigError

    choice = os.environ.get(ENV, "auto")
    if choice == "system":
        return None
    if choice == "auto":
        return find_jemalloc()
    if not Path(choice).is_file():
        raise ConfigError(f"environment {ENV}={choice!r}: no such file; use auto, system or a malloc library's path")
    return choice


def reexec() -> None:
    """Restart this interpreter with the chosen allocator preloaded (see the module docstring); returns when
    there is nothing to do: ``system``, no jemalloc found, already preloaded, or already restarted."""
    if os.environ.get(_ACTIVE):
        return
    lib = _choice()
    if lib is None:
        return
    preload = [p for p in os.environ.get("LD_PRELOAD", "").replace(" ", ":").split(":") if p]
    if lib in preload:  # the user (or a job script) preloaded it already
        os.environ[_ACTIVE] = lib
        return
    env = dict(os.environ, LD_PRELOAD=":".join([lib, *preload]))
    env[_ACTIVE] = lib
    env.setdefault("MALLOC_CONF", _CONF)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def describe() -> str:
    """The allocator this process runs with, for the run's banner."""
    lib = os.environ.get(_ACTIVE)
    if lib:
        return f"{Path(lib).name} ({ENV}={os.environ.get(ENV, 'auto')})"
    how = os.environ.get(ENV, "auto")
    if how == "system":
        return f"system malloc ({ENV}=system)"
    # an embedding script (not ``python -m hpcdgnn``) never restarted: say so, not that there is none
    found = find_jemalloc() if how == "auto" else how
    return f"system malloc ({ENV}={how}, {'no jemalloc found' if found is None else f'{found} not preloaded'})"
