"""Which device a rank computes on (``train.device``: cpu, cuda, auto): one GPU per rank.

The GPU is ``cuda:(local_rank mod visible GPUs)`` (``cuda:0`` when the scheduler bound one per rank). The local
rank comes from an MPI shared-memory split, else the launcher's environment (:data:`LOCAL_RANK_VARIABLES`).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from hpcdgnn.errors import ConfigError

__all__ = ["LOCAL_RANK_VARIABLES", "cpu_affinity", "cuda_seen", "local_rank_from_env", "memory_share", "node_cpu_sets",
           "select_device"]

#: Local-rank variables of common launchers, in the order tried.
LOCAL_RANK_VARIABLES = (
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "PMI_LOCAL_RANK",
    "PALS_LOCAL_RANKID",
    "SLURM_LOCALID",
    "JSM_NAMESPACE_LOCAL_RANK",
)


def local_rank_from_env(environ: dict[str, str] | None = None) -> int | None:
    """The first launcher local-rank variable that is set to an integer, or None."""
    env = os.environ if environ is None else environ
    for name in LOCAL_RANK_VARIABLES:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def _local_rank(comm) -> int:
    try:
        return comm.world.local_rank_size()[0]
    except Exception:  # an MPI without COMM_TYPE_SHARED: fall back to the launcher's variables
        found = local_rank_from_env()
        return comm.rank if found is None else found


def cuda_seen() -> str:
    """What a line saying this process sees no GPU adds: the torch build and ``CUDA_VISIBLE_DEVICES``."""
    return f"torch {torch.__version__}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}"


def select_device(requested: str, comm, cuda_available: bool | None = None,
                  gpu_count: int | None = None) -> torch.device:
    """The device for this rank (``cuda_available``, ``gpu_count``: None asks torch).

    Raises:
        ConfigError: ``cuda`` requested on a rank that sees no GPU.
    """
    if requested == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available() if cuda_available is None else cuda_available
    if not available:
        if requested == "cuda":
            raise ConfigError(f"train.device: cuda requested but rank {comm.rank} sees no CUDA device ({cuda_seen()})")
        return torch.device("cpu")
    count = torch.cuda.device_count() if gpu_count is None else gpu_count
    if count <= 1:
        return torch.device("cuda", 0)
    return torch.device("cuda", _local_rank(comm) % count)


def _cgroups(root: str, proc: str) -> list[tuple[int, Path, str]]:
    """(limit, directory, usage file's name) of every cgroup (v1 or v2) above this process that limits its
    memory (SLURM and LSF confine jobs so); its ``memory.stat`` names the page cache in the usage (v2
    ``inactive_file``, v1 ``total_inactive_file``)."""
    found = []
    try:
        lines = Path(proc).read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: one unified hierarchy
            base, name, usage = root, "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            base, name, usage = os.path.join(root, "memory"), "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):
            where = Path(base, *parts[:depth])
            try:
                value = (where / name).read_text().strip()
            except OSError:
                continue
            if value.isdigit():
                found.append((int(value), where, usage))
    return found


def _cgroup_limit(root: str = "/sys/fs/cgroup", proc: str = "/proc/self/cgroup") -> int | None:
    """The tightest cgroup memory limit of this process, or None."""
    return min((limit for limit, _, _ in _cgroups(root, proc)), default=None)


def node_available(root: str = "/sys/fs/cgroup", proc: str = "/proc/self/cgroup",
                   meminfo: str = "/proc/meminfo") -> int | None:
    """Bytes of host memory this node's ranks could still allocate now: the system's ``MemAvailable``, or less
    where a cgroup's limit minus its usage is; None where the system says neither."""
    free = []
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit, where, usage in _cgroups(root, proc):
        try:
            used = int((where / usage).read_text().strip())
        except (OSError, ValueError):
            continue
        # the usage counts the page cache of files read (a dataset streamed), which the kernel reclaims before
        # it refuses an allocation: its inactive part is left out, as a working set (kubelet's) does
        free.append(max(0, limit - used + _inactive_file(where)))
    return min(free, default=None)


def _inactive_file(where: Path) -> int:
    """A cgroup's reclaimable page cache (``memory.stat``: v2 ``inactive_file``, v1 ``total_inactive_file``), or 0."""
    try:
        stat = dict(line.split()[:2] for line in (where / "memory.stat").read_text().splitlines() if line.strip())
        return int(stat.get("total_inactive_file", stat.get("inactive_file", 0)))  # v1: the hierarchy's, as its usage
    except (OSError, ValueError):
        return 0


def cpu_affinity() -> list[int]:
    """The CPUs this process may run on (all of the machine's where the system does not say)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def node_cpu_sets(comm) -> list[list[int]]:
    """The CPU sets of every rank of this node (collective over the node's ranks)."""
    return comm.world.node().allgather_obj(cpu_affinity(), tag="setup")


def memory_share(comm, device: torch.device) -> int:
    """Bytes of ``device`` memory this rank may use: its share of the GPU or of the node's RAM (collective)."""
    node = comm.world.node()
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        mine = str(getattr(props, "uuid", device.index))
        sharing = sum(u == mine for u in node.allgather_obj(mine, tag="setup"))
        return props.total_memory // max(1, sharing)
    return node_memory() // max(1, node.size)


def node_memory() -> int:
    """Bytes of host memory the ranks of this node share: its RAM, or the job's cgroup limit when lower."""
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = _cgroup_limit()
    return min(ram, limit if limit is not None else ram)
