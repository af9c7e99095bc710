"""Device choice by local rank (train.device), with the launcher variables as fallback."""

from __future__ import annotations

import os

import pytest
import torch

from hpcdgnn.comm import Communicator
from hpcdgnn.comm.device import (
    LOCAL_RANK_VARIABLES,
    _cgroup_limit,
    local_rank_from_env,
    memory_share,
    node_available,
    select_device,
)
from hpcdgnn.errors import ConfigError


class _Node:
    """Stands in for the communicator's node split only (the selection logic is what is tested)."""

    def __init__(self, rank: int, local: int | None) -> None:
        self.rank, self._local = rank, local
        self.world = self  # the communicator's part that answers local_rank_size

    def local_rank_size(self):
        if self._local is None:
            raise RuntimeError("no COMM_TYPE_SHARED")
        return self._local, 4


def test_local_rank_variables_in_order():
    assert local_rank_from_env({}) is None
    assert local_rank_from_env({"SLURM_LOCALID": "3"}) == 3
    # Open MPI's own variable wins over the scheduler's; junk values are skipped
    assert local_rank_from_env({"SLURM_LOCALID": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}) == 1
    assert local_rank_from_env({"OMPI_COMM_WORLD_LOCAL_RANK": "x", "JSM_NAMESPACE_LOCAL_RANK": "2"}) == 2
    assert len(LOCAL_RANK_VARIABLES) == 7


def test_select_device(monkeypatch):
    assert select_device("cpu", _Node(5, 1), True, 4) == torch.device("cpu")
    assert select_device("auto", _Node(5, 1), False, 0) == torch.device("cpu")
    # four GPUs visible: the local rank picks one; one visible (scheduler-bound): cuda:0
    assert select_device("auto", _Node(5, 1), True, 4) == torch.device("cuda", 1)
    assert select_device("cuda", _Node(6, 6), True, 4) == torch.device("cuda", 2)
    assert select_device("cuda", _Node(6, 3), True, 1) == torch.device("cuda", 0)
    # no node split: the launcher's variable decides
    monkeypatch.setenv("PMI_LOCAL_RANK", "3")
    for name in LOCAL_RANK_VARIABLES[:3]:
        monkeypatch.delenv(name, raising=False)
    assert select_device("cuda", _Node(9, None), True, 2) == torch.device("cuda", 1)
    with pytest.raises(ConfigError, match="rank 5 sees no CUDA device"):
        select_device("cuda", _Node(5, 1), False, 0)


def test_cgroup_limit_is_the_tightest_of_the_group_and_its_parents(tmp_path):
    root, proc = tmp_path / "cgroup", tmp_path / "self-cgroup"
    # v2 (one unified hierarchy): the job's group caps at 8 GiB, its step's group sets none
    (root / "job_7" / "step_0").mkdir(parents=True)
    (root / "job_7" / "memory.max").write_text(f"{8 << 30}\n")
    (root / "job_7" / "step_0" / "memory.max").write_text("max\n")
    proc.write_text("0::/job_7/step_0\n")
    assert _cgroup_limit(str(root), str(proc)) == 8 << 30
    # v1: the memory controller's own tree; the tighter of the group and its parent wins
    (root / "memory" / "slurm" / "uid_0").mkdir(parents=True)
    (root / "memory" / "slurm" / "memory.limit_in_bytes").write_text(f"{2 << 30}\n")
    (root / "memory" / "slurm" / "uid_0" / "memory.limit_in_bytes").write_text(f"{3 << 30}\n")
    proc.write_text("7:cpu,cpuacct:/slurm/uid_0\n4:memory:/slurm/uid_0\n")
    assert _cgroup_limit(str(root), str(proc)) == 2 << 30
    proc.write_text("4:memory:/elsewhere\n")  # nothing readable: no limit
    assert _cgroup_limit(str(root), str(proc)) is None
    assert _cgroup_limit(str(root), str(tmp_path / "missing")) is None


def test_memory_share_on_the_cpu_is_the_node_memory_over_its_ranks():
    comm = Communicator()
    share = memory_share(comm, torch.device("cpu"))
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert 0 < share <= ram // comm.world.local_rank_size()[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is of a machine without a GPU")
def test_a_cuda_job_without_a_gpu_is_one_line(launcher, small_dataset, tmp_path):
    """``train.device: cuda`` where torch sees no GPU: one line naming the key, exit 2, no run directory left."""
    from tests.conftest import write_job

    job = write_job(tmp_path / "job.yaml", small_dataset, train={"device": "cuda", "epochs": 1})
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run")])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "train.device: cuda, and this machine has no CUDA device" in lines[0]
    assert not (tmp_path / "run").exists()


def test_node_available_is_the_least_of_memavailable_and_each_limit_less_its_usage(tmp_path):
    """What a node's ranks could still allocate (whether holding an epoch's start fits): the system's
    ``MemAvailable``, or a cgroup's limit less its usage where that is less (v2 ``memory.current``, v1
    ``memory.usage_in_bytes``); None where the system says neither."""
    root, proc, meminfo = tmp_path / "cgroup", tmp_path / "self-cgroup", tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemAvailable:    4000000 kB\n")
    (root / "job_7").mkdir(parents=True)
    (root / "job_7" / "memory.max").write_text(f"{6 << 30}\n")
    (root / "job_7" / "memory.current").write_text(f"{5 << 30}\n")
    proc.write_text("0::/job_7\n")
    assert node_available(str(root), str(proc), str(meminfo)) == 1 << 30
    # the page cache of a dataset read counts in the usage; its inactive part is reclaimable, so free
    (root / "job_7" / "memory.stat").write_text(f"anon 1234\ninactive_file {1 << 29}\nactive_file 77\n")
    assert node_available(str(root), str(proc), str(meminfo)) == (1 << 30) + (1 << 29)
    (root / "job_7" / "memory.current").write_text("0\n")
    assert node_available(str(root), str(proc), str(meminfo)) == 4000000 * 1024
    (root / "memory" / "slurm").mkdir(parents=True)  # v1
    (root / "memory" / "slurm" / "memory.limit_in_bytes").write_text(f"{2 << 30}\n")
    (root / "memory" / "slurm" / "memory.usage_in_bytes").write_text(f"{(2 << 30) - 4096}\n")
    proc.write_text("4:memory:/slurm\n")
    assert node_available(str(root), str(proc), str(meminfo)) == 4096
    assert node_available(str(root), str(tmp_path / "none"), str(tmp_path / "none")) is None
