"""The SLURM scripts under a real single-node Slurm (Debian's slurm-wlm, started by tests/jobs/slurm_setup.sh).

``jobs/slurm-nodes.sh`` runs on CPU at 2 ranks with the default launcher, is pre-empted with
``scancel --signal=USR1 --batch`` (what ``--signal=B:USR1@T`` does before the time limit), requeues itself
and resumes; its losses must equal an uninterrupted ``mpirun -np 2`` run of the same job bit for bit. Then:
a job id that repeats after a controller state reset gets its own run directory; srun's default PMI with an
Open MPI that speaks only PMIx is refused with a clear line; mpirun inside the allocation works; the strong
sweep's submission warns about sizes this cluster cannot hold.

The cluster is private (own slurm.conf via SLURM_CONF, ports, munged socket, state in a temp dir) and holds
a requeued job for 5 s instead of Slurm's 120 s (cred_expire). The module is skipped, with the reason, only
where the packages cannot be installed (not root, no apt-get): ``.ci/run`` installs them as root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcdgnn.errors import EXIT_PREEMPTED, EXIT_USAGE
from tests.conftest import REPO, read_metrics, write_job

pytestmark = pytest.mark.mpi  # a private Slurm cluster whose jobs run hpcdgnn under srun / mpirun

SETUP = REPO / "tests" / "jobs" / "slurm_setup.sh"
HOLD_S = 5  # the test cluster's requeue hold (cred_expire)
EPOCHS = 150  # 40-80 ms each on 2 ranks here: the pre-emption (after epoch 1-5) lands well before the end


def _free_port_pair() -> int:
    """A port P with P and P + 1 free (slurmctld, slurmd)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        if port > 60000:
            continue
        try:
            with socket.socket() as s:
                s.bind(("", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no free pair of ports")


class Cluster:
    """The test cluster: its environment for clients and jobs, and helpers that wait with a timeout."""

    def __init__(self, state: Path, port: int, open_mpi: bool) -> None:
        self.state = state
        self.open_mpi = open_mpi
        self.conf = state / "slurm.conf"
        self.setup_env = {
            **os.environ,
            "SLURM_STATE": str(state),
            "SLURM_PORT": str(port),
            "SLURM_REQUEUE_HOLD": str(HOLD_S),
        }

    def setup(self, action: str, timeout: float = 900) -> subprocess.CompletedProcess:
        """Run ``slurm_setup.sh ACTION`` (install, start, stop) for this cluster."""
        return subprocess.run(
            ["bash", str(SETUP), action], env=self.setup_env, capture_output=True, text=True, timeout=timeout
        )

    def logs(self) -> str:
        """The tails of the daemons' logs, for failure messages."""
        out = []
        for name in ("slurmctld.log", "slurmd.log"):
            path = self.state / "log" / name
            if path.exists():
                out.append(f"--- {name} (tail)\n" + "\n".join(path.read_text(errors="replace").splitlines()[-25:]))
        return "\n".join(out)

    def env(self, **extra) -> dict[str, str]:
        """Environment for sbatch/srun/scontrol, which sbatch passes on to the job (--export=ALL)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "HPCDGNN_", "PMIX_", "OMPI_", "PRTE_"))
        }
        for k in ("JOB", "RANKS", "RANKS_LIST", "RUNDIR", "DATA", "SWEEP"):
            env.pop(k, None)
        env.update(
            SLURM_CONF=str(self.conf),
            HPCDGNN_PYTHON=sys.executable,
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # the venv's mpirun
            # the test harness runs as root; Open MPI wants to be told that is fine (the scripts never set it)
            OMPI_ALLOW_RUN_AS_ROOT="1",
            OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
            OMP_NUM_THREADS="1",
            PYTHONWARNINGS="ignore",
        )
        if not self.open_mpi:
            # MPICH-family libraries (PMI-1/PMI-2) do not speak this cluster's MpiDefault=none: pmi2 is what such a
            # site sets, as the refusal of a default-PMI launch advises
            env["HPCDGNN_SRUN_MPI"] = "pmi2"
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def cmd(self, *args: str, timeout: float = 30, check: bool = True) -> str:
        """Run a Slurm client command against this cluster; its stdout."""
        proc = subprocess.run(list(args), env=self.env(), capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} -> {proc.returncode}: {proc.stderr}\n{self.logs()}")
        return proc.stdout

    def submit(self, tmp: Path, script: str, *sbatch_args: str, **env) -> tuple[str, Path]:
        """Sbatch SCRIPT from the repository root; returns the job id and its log file."""
        log = tmp / "slurm-%j.out"
        proc = subprocess.run(
            ["sbatch", "--parsable", f"--output={log}", *sbatch_args, f"jobs/{script}"],
            env=self.env(**env),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, f"sbatch failed: {proc.stderr}\n{self.logs()}"
        job = proc.stdout.strip().split(";")[0]
        return job, tmp / f"slurm-{job}.out"

    def job(self, job: str) -> dict[str, str]:
        """The fields of ``scontrol show job -o JOB``."""
        line = self.cmd("scontrol", "show", "job", "-o", job)
        return dict(re.findall(r"(\w+)=(\S*)", line))

    def wait(self, job: str, log: Path, what: str, until, timeout: float) -> dict[str, str]:
        """Poll ``scontrol show job`` until ``until(fields)``; on timeout fail with the job's log."""
        t0 = time.time()
        while True:
            fields = self.job(job)
            if until(fields):
                return fields
            if time.time() - t0 > timeout:
                raise AssertionError(
                    f"job {job}: {what} not within {timeout:.0f} s (JobState={fields.get('JobState')}, "
                    f"Reason={fields.get('Reason')}, Restarts={fields.get('Restarts')})\n"
                    f"--- job log {log}\n{_read(log)}\n{self.logs()}"
                )
            time.sleep(0.5)

    def wait_done(self, job: str, log: Path, timeout: float = 180) -> dict[str, str]:
        """Wait until the job has ended (whatever its state)."""
        return self.wait(
            job,
            log,
            "the end",
            lambda f: (
                f.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
            ),
            timeout,
        )


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else "(no log)"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, launcher):
    """A private single-node Slurm for this module, stopped at the end."""
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("the private Slurm test cluster needs Linux and root (apt-get, slurmd); CI runs as root")
    c = Cluster(tmp_path_factory.mktemp("slurm"), _free_port_pair(), launcher.open_mpi)
    proc = c.setup("install")
    if proc.returncode != 0:
        pytest.skip(
            f"Slurm packages cannot be installed here (tests/jobs/slurm_setup.sh install): "
            f"{(proc.stderr or proc.stdout).strip()[-500:]}"
        )
    proc = c.setup("start", timeout=120)
    if proc.returncode != 0:
        c.setup("stop", timeout=120)
        pytest.fail(f"the Slurm test cluster did not start: {proc.stderr[-2000:]}\n{c.logs()}")
    try:
        yield c
    finally:
        stop = c.setup("stop", timeout=120)
        assert stop.returncode == 0, stop.stderr


@pytest.fixture(scope="module")
def job_yaml(tmp_path_factory, small_dataset) -> Path:
    """A tiny job: the shared 23-vertex, 7-snapshot test graph, CD-GCN, float64, one thread per rank."""
    return write_job(tmp_path_factory.mktemp("job") / "job.yaml", small_dataset, train={"epochs": EPOCHS})


def _losses(run: Path) -> list[tuple[int, float, float]]:
    return [(r["epoch"], r["loss"], r["val_loss"]) for r in read_metrics(run)]


def test_preempt_requeue_resume_bit_for_bit(cluster, launcher, job_yaml, tmp_path):
    """slurm-nodes.sh at 2 CPU ranks, pre-empted with USR1, requeued, resumed: the losses of one uninterrupted run."""
    t_start = time.time()
    ref = tmp_path / "reference"
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job_yaml), "--output", str(ref)], timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = _losses(ref)
    assert len(expected) == EPOCHS

    runs = tmp_path / "runs"
    job, log = cluster.submit(
        tmp_path,
        "slurm-nodes.sh",
        "--nodes=1",
        "--ntasks-per-node=2",
        "--cpus-per-task=1",
        "--time=15",
        JOB=job_yaml,
        HPCDGNN_RUNS=runs,
    )
    # the first start names its run directory (and records the name for a requeued start)
    record = runs / ".jobs" / f"hpcdgnn-test-{job}"
    cluster.wait(job, log, "the run directory record", lambda f: record.exists() and record.read_text().strip(), 120)
    rundir = Path(record.read_text().strip())  # absolute: HPCDGNN_RUNS is
    assert re.fullmatch(rf"hpcdgnn-nodes-{job}-\d{{8}}-\d{{6}}", rundir.name), rundir
    metrics = rundir / "metrics.jsonl"
    cluster.wait(job, log, "a first epoch", lambda f: metrics.exists() and metrics.read_text().strip(), 120)
    cluster.cmd("scancel", "--signal=USR1", "--batch", job)

    fields = cluster.wait_done(job, log, timeout=180)
    text = _read(log)
    assert fields["JobState"] == "COMPLETED" and fields.get("Restarts") == "1", f"{fields}\n{text}\n{cluster.logs()}"
    # one 2-rank world through srun --mpi=pmix (Open MPI 5 + Slurm's pmix plugin; pmi2 for MPICH), never two 1-rank
    # jobs
    pmi = "pmix" if cluster.open_mpi else "pmi2"
    assert re.search(rf"launcher: srun --ntasks=2 --mpi={pmi} ", text) or "launcher: mpirun" in text, text
    assert f"--output {rundir}" in text and f"--resume {rundir}" in text, text
    assert f"run exited with {EXIT_PREEMPTED}" in text and f"requeueing job {job}" in text, text
    assert "run exited with 0" in text, text
    assert json.loads((rundir / "summary.json").read_text())["status"] == "completed", text
    got = _losses(rundir)
    assert [e for e, *_ in got] == list(range(1, EPOCHS + 1)), text
    assert got == expected, "losses after pre-emption and resume differ from the uninterrupted run"
    assert not list(runs.glob("*.attempt-*")), "a run directory was moved aside"
    print(f"\npre-empt + requeue + resume test: {time.time() - t_start:.0f} s (requeue hold {HOLD_S} s)")


def test_an_epoch_longer_than_the_allocation_progresses(cluster, launcher, small_dataset, tmp_path):
    """``sequences`` at 2 ranks, epochs of several seconds (rank 0 sleeps 1 s a batch, so that the ranks agree on
    a stop before every batch, ``BatchStop.INTERVAL_S``, and the signal's way through scancel, the script and srun
    leaves most of epoch 1 to stop in), pre-empted with USR1 while epoch 1 trains: the ranks stop between two of
    its batches and checkpoint there, the script requeues, and the resume trains on from the next batch — the
    run completes with one uninterrupted run's losses."""
    job_yaml = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2},
                         strategy={"name": "sequences", "window": 3, "batch_vertices": 8, "fanouts": [3, 2],
                                   "batch_samples": 1},
                         debug={"delay_rank": 0, "delay_seconds": 1.0}, output={"progress_seconds": 0.5})
    ref = tmp_path / "reference"  # the delay changes no loss: the reference runs without it
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job_yaml), "--output", str(ref),
                            "--set", "debug.delay_rank=-1"], timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = tmp_path / "runs"
    job, log = cluster.submit(tmp_path, "slurm-nodes.sh", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1",
                              "--time=15", JOB=job_yaml, HPCDGNN_RUNS=runs)
    # rank 0's progress lines say epoch 1's batches are being trained
    cluster.wait(job, log, "epoch 1's batches", lambda f: "epoch 1: batches trained" in _read(log), 120)
    cluster.cmd("scancel", "--signal=USR1", "--batch", job)
    fields = cluster.wait_done(job, log, timeout=180)
    text = _read(log)
    assert fields["JobState"] == "COMPLETED" and fields.get("Restarts") == "1", f"{fields}\n{text}\n{cluster.logs()}"
    stopped = r"stopped during epoch 1, after \d+ of its batches \(a resume trains on from its batch"
    assert re.search(stopped, text), text
    resumed = r"resumed from \S+/epoch-000000\+batch-\d{9} after epoch 0 and \d+ batch(?:es)? of epoch 1"
    assert re.search(resumed, text), text
    rundir = Path((runs / ".jobs" / f"hpcdgnn-test-{job}").read_text().strip())
    assert json.loads((rundir / "summary.json").read_text())["status"] == "completed", text
    assert _losses(rundir) == _losses(ref), "losses after a stop within an epoch and its resume differ"


def test_repeated_job_id_gets_its_own_rundir(cluster, job_yaml, tmp_path):
    """After a controller state reset, job 1 again: it trains in a new directory instead of "completing" the old."""
    runs = tmp_path / "runs"
    args = ("--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=5")
    env = dict(JOB=job_yaml, HPCDGNN_RUNS=runs, HPCDGNN_ARGS="--set train.epochs=1")
    restart = cluster.setup("start", timeout=120)  # clean state: ids from 1
    assert restart.returncode == 0, restart.stderr + cluster.logs()
    first, log1 = cluster.submit(tmp_path, "slurm-nodes.sh", *args, **env)
    assert first == "1"
    assert cluster.wait_done(first, log1)["JobState"] == "COMPLETED", _read(log1)
    restart = cluster.setup("start", timeout=120)
    assert restart.returncode == 0, restart.stderr + cluster.logs()
    second, log2 = cluster.submit(tmp_path, "slurm-nodes.sh", *args, **env)
    assert second == "1", "the reset controller should hand out id 1 again"
    assert cluster.wait_done(second, log2)["JobState"] == "COMPLETED", _read(log2)
    dirs = sorted(p for p in runs.glob("hpcdgnn-nodes-1-*") if p.is_dir())
    assert len(dirs) == 2, (dirs, _read(log2))
    for d in dirs:
        assert [r["epoch"] for r in read_metrics(d)] == [1], d
    assert "nothing to do" not in _read(log2)


def test_default_pmi_with_open_mpi_is_refused(cluster, job_yaml, tmp_path):
    """The issue's failure: srun's default PMI (MpiDefault=none) and Open MPI 5 give 1-rank worlds; exit 2, one line."""
    job, log = cluster.submit(
        tmp_path,
        "slurm-nodes.sh",
        "--nodes=1",
        "--ntasks-per-node=2",
        "--cpus-per-task=1",
        "--time=5",
        JOB=job_yaml,
        HPCDGNN_RUNS=tmp_path / "runs",
        HPCDGNN_SRUN_MPI="default",
    )
    fields = cluster.wait_done(job, log)
    text = _read(log)
    assert fields.get("ExitCode", "").startswith(f"{EXIT_USAGE}:"), f"{fields}\n{text}"
    assert "srun started 2 tasks but each is a 1-rank MPI world" in text, text
    assert ("HPCDGNN_SRUN_MPI=pmix" if cluster.open_mpi else "HPCDGNN_SRUN_MPI=pmi2") in text, text
    assert not list((tmp_path / "runs").glob("*/metrics.jsonl")) or all(
        not (p.read_text().strip()) for p in (tmp_path / "runs").glob("*/metrics.jsonl")
    ), "a 1-rank world trained"


def test_mpirun_inside_the_allocation(cluster, job_yaml, tmp_path):
    """HPCDGNN_LAUNCHER=mpirun: the venv's mpirun (Open MPI's, or Hydra) reads the allocation and starts one
    2-rank world."""
    runs = tmp_path / "runs"
    job, log = cluster.submit(
        tmp_path,
        "slurm-nodes.sh",
        "--nodes=1",
        "--ntasks-per-node=2",
        "--cpus-per-task=1",
        "--time=5",
        JOB=job_yaml,
        HPCDGNN_RUNS=runs,
        HPCDGNN_LAUNCHER="mpirun",
        HPCDGNN_ARGS="--set train.epochs=2",
    )
    fields = cluster.wait_done(job, log)
    text = _read(log)
    assert fields["JobState"] == "COMPLETED", f"{fields}\n{text}"
    # Open MPI's mpirun binds each rank to a core unless told not to; Hydra (MPICH) binds nothing by default
    flags = "--bind-to none " if cluster.open_mpi else ""
    assert f"launcher: mpirun {flags}-np 2 " in text, text
    (run,) = [p for p in runs.glob("hpcdgnn-nodes-*") if p.is_dir()]
    records = read_metrics(run)
    assert [r["epoch"] for r in records] == [1, 2] and len(records[0]["per_rank"]["epoch"]) == 2, text


def test_strong_sweep_sizes_against_sinfo(cluster, tmp_path):
    """``bash jobs/slurm-strong.sh`` warns when its header sizes exceed this node; sized by the environment, it fits."""
    cpus = int(cluster.cmd("sinfo", "-h", "-o", "%c").split()[0])
    env = cluster.env(RANKS_LIST="1 2", SBATCH_FLAGS="--test-only", HPCDGNN_RUNS=tmp_path / "runs")
    proc = subprocess.run(
        ["bash", "jobs/slurm-strong.sh"], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    if cpus < 8:  # 8 = the header's 2 tasks x 4 CPUs for P = 2
        assert "warning: P=2 asks for 1 node(s) with 2 tasks x 4 CPUs" in proc.stderr, proc.stderr
        # a P no node set can take is not submitted (it would pend until scancel): a line, exit 1
        assert proc.returncode == 1 and "P=2 not submitted (it would pend forever)" in proc.stderr, proc.stderr
    env.update(RANKS_PER_NODE="2", CPUS_PER_TASK="1", EXCLUSIVE="0", TIME="00:05:00")
    proc = subprocess.run(
        ["bash", "jobs/slurm-strong.sh"], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    assert proc.stderr.count("to start at") == 2, proc.stderr  # sbatch --test-only: "Job N to start at ..."


def test_strong_sweep_on_shared_nodes_runs_its_tasks_one_at_a_time(cluster, job_yaml, tmp_path):
    """``EXCLUSIVE=0``: two one-rank tasks of the sweep fit this node side by side, and ran at once, each timing
    the other's load; --dependency=singleton starts the second when the first has ended."""
    jobs = []
    for sweep in ("a", "b"):
        env = cluster.env(RANKS_LIST="1", RANKS_PER_NODE="2", CPUS_PER_TASK="1", EXCLUSIVE="0", TIME="00:05:00",
                          JOB=job_yaml, SWEEP=sweep, HPCDGNN_RUNS=tmp_path / "runs", HPCDGNN_LAUNCHER="mpirun",
                          SBATCH_FLAGS=f"--output={tmp_path}/slurm-%A_%a.out")
        proc = subprocess.run(["bash", "jobs/slurm-strong.sh", "--set", "train.epochs=20"], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        jobs.append(re.search(r"Submitted batch job (\d+)", proc.stdout).group(1))
    done = [cluster.wait_done(job, tmp_path / f"slurm-{job}_0.out") for job in jobs]
    assert [f["JobState"] for f in done] == ["COMPLETED", "COMPLETED"], done
    assert done[1]["StartTime"] >= done[0]["EndTime"], (done[0]["StartTime"], done[0]["EndTime"], done[1]["StartTime"])
    assert [r["epoch"] for r in read_metrics(tmp_path / "runs" / "hpcdgnn-strong-b" / "p1")][-1] == 20


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="no sbatch")
def test_cluster_is_private(cluster):
    """The cluster is reached through its own SLURM_CONF; /etc/slurm is not written."""
    text = cluster.conf.read_text()
    assert "ClusterName=hpcdgnn-test" in text and f"cred_expire={HOLD_S}" in text
    assert "MpiDefault=none" in text
