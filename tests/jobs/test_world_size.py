"""hpcdgnn.comm.world.check_world_size against the environments real launchers give their processes.

The environments below are what Slurm 22.05 (srun with no --mpi, --mpi=pmi2, --mpi=pmix) and Open MPI
5's mpirun gave the processes of a 2-task job on the single-node test cluster (tests/jobs/slurm_setup.sh),
cut to the variables that matter; Hydra's and mpirun-across-nodes' are from their documentation.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hpcdgnn.comm.world import check_world_size, expected_world_size, singleton_environment

OPEN_MPI = "Open MPI v5.0.11, package: Open MPI user@localhost Distribution, ident: 5.0.11"
MPICH = "MPICH Version:      4.1.2"

ALLOCATION = {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2", "SLURM_NPROCS": "2", "SLURM_JOB_NUM_NODES": "1"}
STEP = {
    **ALLOCATION,
    "SLURM_STEP_ID": "0",
    "SLURM_STEPID": "0",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_NUM_NODES": "1",
    "SLURM_PROCID": "1",
}
SRUN_DEFAULT = STEP  # MpiDefault=none: no SLURM_MPI_TYPE, no PMI variables
SRUN_PMI2 = {**STEP, "SLURM_MPI_TYPE": "pmi2", "PMI_SIZE": "2", "PMI_RANK": "1", "PMI_FD": "13"}
SRUN_PMIX = {**STEP, "SLURM_MPI_TYPE": "pmix", "PMIX_NAMESPACE": "slurm.pmix.1.2", "PMIX_RANK": "1"}
# Open MPI's mpirun inside the allocation: SLURM_NTASKS is the allocation's; on other nodes the ranks
# inherit the srun step of mpirun's daemons (one task per node)
MPIRUN = {**ALLOCATION, "OMPI_COMM_WORLD_SIZE": "2", "PRTE_LAUNCHED": "1", "PMIX_RANK": "0"}
MPIRUN_REMOTE = {**MPIRUN, "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "1"}
HYDRA = {"PMI_SIZE": "4", "PMI_RANK": "3", "MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "1"}
HYDRA_IN_SLURM = {**HYDRA, **ALLOCATION, "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2"}


@pytest.mark.parametrize(
    "env, size",
    [
        (SRUN_PMIX, 2),
        (MPIRUN, 2),
        (MPIRUN_REMOTE, 2),
        (HYDRA, 4),
        (HYDRA_IN_SLURM, 4),
        ({**SRUN_PMI2}, 2),  # an MPI that speaks PMI-2 (MPICH)
        ({}, 1),  # plain python: nothing to compare with
        ({}, 3),
    ],
    ids=["srun-pmix", "mpirun", "mpirun-remote-node", "hydra", "hydra-in-slurm", "srun-pmi2-mpich", "bare", "bare-3"],
)
def test_the_world_the_launcher_started_is_fine(env, size):
    """Sizes that agree, and environments that name no launcher size, are no error."""
    assert check_world_size(size, env, library=OPEN_MPI) is None


@pytest.mark.parametrize(
    "env",
    [
        ALLOCATION,  # the batch script or an salloc shell: SLURM_NTASKS is the allocation's
        {**ALLOCATION, "SLURM_STEP_ID": "batch"},
        {**ALLOCATION, "SLURM_STEP_ID": "4294967294"},  # the batch step by number
        {**ALLOCATION, "SLURM_STEP_ID": "extern"},
    ],
    ids=["allocation", "batch-step", "batch-step-number", "extern-step"],
)
def test_an_allocation_s_task_count_is_not_this_world_s(env):
    """One python run in a 2-task allocation (no srun) is a legitimate 1-rank run."""
    assert expected_world_size(env) is None
    assert check_world_size(1, env) is None


def test_srun_default_pmi_with_open_mpi():
    """The issue: srun without --mpi starts 2 singletons; the message names the fix."""
    msg = check_world_size(1, SRUN_DEFAULT, library=OPEN_MPI)
    assert msg is not None and "\n" not in msg
    assert msg.startswith("srun started 2 tasks but each is a 1-rank MPI world")
    assert "srun's default PMI" in msg and "Open MPI v5.0.11" in msg
    assert "HPCDGNN_SRUN_MPI=pmix" in msg and "HPCDGNN_LAUNCHER=mpirun" in msg


def test_srun_pmi2_with_open_mpi():
    """With srun --mpi=pmi2 and an MPI that does not speak PMI-2: PMI_SIZE comes from srun, named as such."""
    msg = check_world_size(1, SRUN_PMI2, library=OPEN_MPI)
    assert msg is not None
    assert msg.startswith("srun started 2 tasks but each is a 1-rank MPI world") and "srun --mpi=pmi2" in msg
    assert "HPCDGNN_SRUN_MPI=pmix" in msg


def test_srun_pmix_with_an_mpi_without_pmix():
    """With srun --mpi=pmix and MPICH built without PMIx: the advice is PMI-2."""
    msg = check_world_size(1, SRUN_PMIX, library=MPICH)
    assert msg is not None and "srun --mpi=pmix" in msg and "HPCDGNN_SRUN_MPI=pmi2" in msg


def test_unknown_library_gets_both_advices():
    """Without a library name the message lists both PMI choices and mpirun."""
    msg = check_world_size(1, SRUN_DEFAULT, library="")
    assert msg is not None and "pmix (Open MPI)" in msg and "pmi2 (MPICH" in msg and "HPCDGNN_LAUNCHER=mpirun" in msg


def test_srun_partial_world():
    """A world that is neither 1 nor the task count is still reported."""
    msg = check_world_size(2, {**SRUN_PMIX, "SLURM_STEP_NUM_TASKS": "4"}, library=OPEN_MPI)
    assert msg is not None and msg.startswith("srun started 4 tasks but this MPI world has 2 ranks")


def test_step_num_tasks_wins_over_ntasks():
    """In a step, SLURM_STEP_NUM_TASKS is the step's count; SLURM_NTASKS may be the allocation's (older Slurm)."""
    env = {**SRUN_PMIX, "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "2"}
    assert expected_world_size(env) == (2, "srun")
    assert check_world_size(2, env) is None
    old = {k: v for k, v in SRUN_PMIX.items() if k not in ("SLURM_STEP_NUM_TASKS", "SLURM_STEP_ID")}
    assert expected_world_size(old) == (2, "srun")  # SLURM_STEPID alone (old name) and SLURM_NTASKS


def test_mpirun_of_another_mpi():
    """Hydra's mpiexec running an Open MPI mpi4py: each process is a singleton; the message names the mismatch."""
    msg = check_world_size(1, HYDRA, library=OPEN_MPI)
    assert msg is not None and "\n" not in msg
    assert msg.startswith("mpiexec started 4 processes but each is a 1-rank MPI world")
    assert "different MPI installations" in msg and "HPCDGNN_MPIRUN" in msg
    msg = check_world_size(1, MPIRUN, library=MPICH)
    assert msg is not None and msg.startswith("mpirun started 2 processes")


def test_launcher_variables_win_over_the_slurm_step():
    """For mpirun across nodes: the daemons' srun step says 1 task, OMPI_COMM_WORLD_SIZE says 2."""
    assert expected_world_size(MPIRUN_REMOTE) == (2, "mpirun")
    assert expected_world_size(HYDRA_IN_SLURM) == (4, "mpiexec")
    assert expected_world_size(SRUN_PMI2) == (2, "srun")
    assert expected_world_size({"JSM_NAMESPACE_SIZE": "12"}) == (12, "jsrun")


def test_garbage_values_are_ignored():
    """Unparsable or non-positive sizes are not a launcher's word."""
    assert expected_world_size({"OMPI_COMM_WORLD_SIZE": "x", "PMI_SIZE": "0"}) is None
    assert check_world_size(1, {**STEP, "SLURM_STEP_NUM_TASKS": "", "SLURM_NTASKS": "", "SLURM_NPROCS": ""}) is None


def test_library_from_mpi4py(monkeypatch):
    """Without library=, the name comes from mpi4py when it is loaded."""
    import sys
    import types

    fake = types.SimpleNamespace(Get_library_version=lambda: OPEN_MPI + "\x00\nmore")  # C strings end in NUL
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", fake)
    msg = check_world_size(1, SRUN_DEFAULT)
    assert msg is not None and "(Open MPI v5.0.11" in msg and "HPCDGNN_SRUN_MPI=pmix or" not in msg.split(";")[0]
    # MPICH pads its version line with a tab (the mpich wheel: spaces): one space in the message
    fake = types.SimpleNamespace(Get_library_version=lambda: "MPICH Version:\t     5.0.2\nMPICH Release date: ...")
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", fake)
    msg = check_world_size(1, SRUN_DEFAULT)
    assert msg is not None and "(MPICH Version: 5.0.2)" in msg and "HPCDGNN_SRUN_MPI=pmi2" in msg, msg


@pytest.mark.parametrize("env", [SRUN_DEFAULT, SRUN_PMI2, SRUN_PMIX, MPIRUN, MPIRUN_REMOTE, HYDRA, HYDRA_IN_SLURM,
                                 {"PMIX_NAMESPACE": "prterun-vm-1@1", "PMIX_RANK": "0"}, {"PMI_FD": "5"},
                                 {"OMPI_COMM_WORLD_RANK": "0"}, {**MPIRUN, "OMPI_MCA_btl": "^ofi"}])
def test_a_launched_process_keeps_open_mpi_s_transports(env):
    assert singleton_environment(env) == {}


def test_a_process_no_launcher_started_uses_only_the_self_transport():
    assert singleton_environment({}) == {"OMPI_MCA_btl": "self"}
    assert singleton_environment({"OMPI_MCA_btl": "^ofi"}) == {"OMPI_MCA_btl": "self"}  # it has no peer to reach
    assert singleton_environment(ALLOCATION) == {"OMPI_MCA_btl": "self"}  # python -m hpcdgnn run in a batch script
    one = {**STEP, "SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "1"}  # srun -n 1 with no PMI: a singleton too
    assert singleton_environment(one) == {"OMPI_MCA_btl": "self"}


SINGLETON = r"""
import os, sys
from hpcdgnn.comm import Communicator
c = Communicator()
c.barrier()
MPI = sys.modules["mpi4py.MPI"]
maps = [line.split()[-1] for line in open("/proc/self/maps") if "/dev/shm/" in line]
print(repr((c.size, MPI.Get_library_version().split(",")[0], os.environ.get("OMPI_MCA_btl"), maps)))
"""


@pytest.mark.mpi  # a singleton MPI job (mpi4py)
@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc (Linux)")
def test_a_singleton_leaves_no_shared_memory_segment_and_hands_nothing_on():
    """A P = 1 run without mpirun made a /dev/shm segment that was left behind (4,100 on the test VM)."""
    launcher = ("OMPI_COMM_WORLD_", "PMIX_", "PMI_", "PRTE_", "SLURM_", "MV2_", "JSM_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(launcher)}
    env["OMPI_MCA_btl"] = "^ofi"  # as the tests' and job scripts' environment has it: kept sm, which left it
    out = subprocess.run([sys.executable, "-c", SINGLETON], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    size, library, btl, maps = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - our own repr
    assert size == 1
    if "Open MPI" not in library:
        pytest.skip(f"not Open MPI: {library}")
    assert maps == [], maps  # the shared-memory transport's segment is mapped from MPI_Init on
    assert btl == "^ofi"  # put back after MPI_Init: an mpirun started from here gets what the user set


RANK_ZERO_CALLS = r"""
import sys
import numpy as np
import hpcdgnn
from hpcdgnn.data.adapters import from_arrays
from hpcdgnn.errors import HpcdgnnError

out, run = sys.argv[1], hpcdgnn.load_run(sys.argv[2])
rng = np.random.default_rng(0)
for name, call in (("from_arrays", lambda: from_arrays(rng.integers(0, 9, 50), rng.integers(0, 9, 50),
                                                       rng.random(50), out + "/data", snapshots=2)),
                   ("export", lambda: run.export(csv=out + "/epochs.csv"))):
    try:
        call()
        print("WROTE", name)
    except HpcdgnnError as e:
        print("REFUSED", type(e).__name__, e)
"""


@pytest.mark.mpi  # singleton MPI jobs (mpi4py), as srun without PMIx starts them
def test_the_calls_rank_0_does_alone_refuse_a_world_the_launcher_did_not_start(tmp_path, small_dataset):
    """srun without a PMI Open MPI speaks starts P 1-rank worlds, each its own rank 0: ``run`` refused them, but
    the adapters' ``from_*`` and ``TrainedRun.export`` each wrote the same output, P writers racing. They refuse
    in the same line now, naming the call, and write nothing."""
    import hpcdgnn
    from tests.conftest import write_job

    run = hpcdgnn.train(write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1}), output=tmp_path / "r")
    launcher = ("OMPI_COMM_WORLD_", "PMIX_", "PMI_", "PRTE_", "SLURM_", "MV2_", "JSM_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(launcher)} | SRUN_DEFAULT
    script = tmp_path / "calls.py"
    script.write_text(RANK_ZERO_CALLS)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([sys.executable, str(script), str(out), str(run.dir)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["REFUSED ConfigError from_arrays", "REFUSED ConfigError export"]
    for line in lines:
        assert "srun started 2 tasks but each is a 1-rank MPI world" in line and "HPCDGNN_SRUN_MPI=" in line
    assert list(out.iterdir()) == []
