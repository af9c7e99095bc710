"""Command-line inputs a helper's bad-input audit found answered by a traceback, a crash or silence: one line now."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, make_dataset, mpi_env, write_job


def _hpcdgnn(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpcdgnn", *args], capture_output=True, text=True,
                          timeout=timeout, env=mpi_env(), cwd=REPO)


def _one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return errors[0]


def test_generate_beyond_memory_is_one_line(tmp_path):
    """numpy's MemoryError from ``generate --vertices 10**12`` was a traceback (exit 1)."""
    line = _one_line(_hpcdgnn("generate", "--output", str(tmp_path / "g"), "--vertices", "1000000000000",
                              "--snapshots", "2", "--density", "1", "--seed", "0"))
    assert "hpcdgnn: error: generate: out of memory (" in line, line
    assert not (tmp_path / "g").exists()


def _generate_signalled_while_writing(tmp_path, sig: int, vertices: int, sigint) -> subprocess.Popen:
    """``generate`` into ``tmp_path/g`` with SIGINT's disposition ``sigint`` (a shell's default, or ignored), sent
    ``sig`` once its hidden ``.g.tmp-*`` directory exists (or it finished)."""
    import signal

    proc = subprocess.Popen([sys.executable, "-m", "hpcdgnn", "generate", "--output", str(tmp_path / "g"),
                             "--vertices", str(vertices), "--snapshots", "128", "--density", "3", "--seed", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env(), cwd=REPO,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".g.tmp-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert list(tmp_path.glob(".g.tmp-*")), "generate finished before it could be signalled"
    proc.send_signal(sig)
    return proc


def test_a_signal_before_the_writer_s_cleanup_is_in_place_leaves_nothing_either(tmp_path):
    """The stop lands just after the hidden directory is made, before the writer's own cleanup covers it (here:
    the shard sink's construction raises as the signal handler would): the command still removes it."""
    code = ("import sys, hpcdgnn.data.writer as w\n"
            "def stop(*a, **k):\n    raise KeyboardInterrupt\n"
            "w._ShardSink.__init__ = stop\n"
            "from hpcdgnn.__main__ import main\n"
            f"sys.exit(main(['generate', '--output', {str(tmp_path / 'g')!r}, '--vertices', '50', '--snapshots', "
            "'2', '--density', '1', '--seed', '0']))\n")
    script = tmp_path.parent / f"{tmp_path.name}-stop.py"  # the one-process command, patched (no MPI)
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "hpcdgnn: generate: stopped by SIGINT; nothing it was writing is left"
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


@pytest.mark.parametrize(("sig", "name", "code"), [(15, "SIGTERM", 143), (2, "SIGINT", 130), (10, "SIGUSR1", 130)])
def test_a_signal_while_writing_a_dataset_removes_what_it_wrote(tmp_path, sig, name, code):
    """``scancel`` (SIGTERM) during ``generate`` or ``prepare`` ended the process where it stood, leaving its hidden
    ``.NAME.tmp-*`` directory beside the output; Ctrl-C printed a traceback; a SIGUSR1 (hpcdgnn-mpirun's relay of a
    Ctrl-C to the ranks) ended it without a word, the directory left, exit 138. Now: one line, exit 128 + n (130
    for SIGUSR1), nothing left — also when the signal lands in C code that drops the exception (the writer's loop
    raises it again)."""
    import signal

    # SIGINT as a shell gives it (a pytest-xdist worker may have it ignored, which a child would keep)
    proc = _generate_signalled_while_writing(tmp_path, sig, 400_000, signal.SIG_DFL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert err.strip().splitlines() == [f"hpcdgnn: generate: stopped by {name}; nothing it was writing is left"], err
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


def test_a_signal_the_command_was_started_ignoring_stays_ignored(tmp_path):
    """``hpcdgnn prepare … &`` in a script starts with SIGINT ignored, as Python leaves it: the stop handler of
    the one-process commands must not take it over (a Ctrl-C meant for the script would end the background job)."""
    import signal

    proc = _generate_signalled_while_writing(tmp_path, signal.SIGINT, 50_000, signal.SIG_IGN)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "stopped by" not in err, err
    assert (tmp_path / "g" / "manifest.json").is_file()


def _signalled_while_importing(tmp_path, args: list[str], sig: int) -> subprocess.CompletedProcess:
    """``python -m hpcdgnn ARGS`` sent ``sig`` while its parser imports torch, before the command's own handlers are
    in. The import is held where it stands by a ``torch`` on PYTHONPATH that says it is being imported and waits."""
    stub = tmp_path / "stub"
    stub.mkdir()
    marker = tmp_path / "importing"
    # short sleeps: a signal that the kernel hands to another thread (numpy's) runs its Python handler only when the
    # main thread next runs Python, and one long sleep would hold it off to its end
    (stub / "torch.py").write_text(f"import pathlib, time\npathlib.Path({str(marker)!r}).touch()\n"
                                   "for _ in range(6000):\n    time.sleep(0.01)\n")
    env = {**mpi_env(), "PYTHONPATH": str(stub)}
    # SIGINT as a shell gives it (a pytest-xdist worker may have it ignored, which a child would keep)
    proc = subprocess.Popen([sys.executable, "-m", "hpcdgnn", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=REPO,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert marker.exists(), f"{args[0]} never imported torch"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


@pytest.mark.parametrize(("sig", "name", "code"), [(15, "SIGTERM", 143), (2, "SIGINT", 130), (10, "SIGUSR1", 130)])
def test_a_signal_while_prepare_is_still_importing_is_one_line(tmp_path, sig, name, code):
    """A signal in prepare's first seconds, while its parser imports torch, before the command's own handlers are
    in: SIGTERM (and SIGUSR1, hpcdgnn-mpirun's relay of a Ctrl-C) ended it without a word, Ctrl-C with a
    traceback. Now one line and 128 + n (130 for SIGUSR1, as embed's), nothing written."""
    raw = tmp_path / "in.txt"
    raw.write_text("1 2 10\n2 3 20\n")
    proc = _signalled_while_importing(tmp_path, ["prepare", str(raw), "--format", "snap", "--output",
                                                 str(tmp_path / "out")], sig)
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"hpcdgnn: prepare: stopped by {name} while starting; nothing was written"], proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["importing", "in.txt", "stub"]


@pytest.mark.parametrize(("command", "sig", "name"), [("embed", 15, "SIGTERM"), ("predict", 2, "SIGINT"),
                                                      ("embed", 10, "SIGUSR1")])
def test_a_signal_while_embed_or_predict_is_still_importing_is_one_line(tmp_path, command, sig, name):
    """embed and predict, as prepare: a SIGTERM in their first seconds ended them without a word, a Ctrl-C with a
    traceback, a SIGUSR1 (hpcdgnn-mpirun's form of a first SIGTERM or SIGINT) without a word, exit 138. Now one line,
    and their exit status for a stop once started, 130, whichever the signal."""
    args = [command, str(tmp_path / "run"), "--output", str(tmp_path / "out.h5")]
    proc = _signalled_while_importing(tmp_path, args, sig)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"hpcdgnn: {command}: stopped by {name} while starting; nothing was written"], proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["importing", "stub"]


def test_profile_threads_are_bounded_like_train_threads(tmp_path):
    """``profile --threads 100000`` crashed torch (a segfault)."""
    line = _one_line(_hpcdgnn("profile", "--threads", "100000", "--out", str(tmp_path / "p.pt")))
    assert "--threads must be in [1, 1024] (got 100000)" in line, line


@pytest.mark.mpi  # python -m hpcdgnn run (P = 1)
def test_a_file_given_as_the_dataset_is_called_a_file(tmp_path, small_dataset):
    job = write_job(tmp_path / "job.yaml", small_dataset)
    line = _one_line(_hpcdgnn("run", str(job), "--output", str(tmp_path / "r"), "--set", "data.path=README.md"))
    assert "data.path: dataset directory 'README.md' is a file, not a dataset directory" in line, line
    line = _one_line(_hpcdgnn("validate", "README.md"))
    assert "README.md: dataset directory is a file" in line, line


@pytest.mark.mpi  # python -m hpcdgnn run (P = 1)
def test_a_fault_injected_on_a_rank_the_job_lacks_is_refused(tmp_path, small_dataset):
    """``debug.fail_rank: 5`` on one rank injected nothing, silently: a test of the abort path then passed."""
    job = write_job(tmp_path / "job.yaml", small_dataset, debug={"fail_rank": 5})
    line = _one_line(_hpcdgnn("run", str(job), "--output", str(tmp_path / "r")))
    assert "debug.fail_rank: 5 but the job has 1 rank (0 .. 0)" in line, line
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("args", [[], ["--print"]])
def test_the_launcher_without_a_program(args):
    """prterun answered a bare ``hpcdgnn-mpirun`` with "no executable" and exit 0, which a script takes for success."""
    proc = subprocess.run([sys.executable, "-m", "hpcdgnn.launch", *args], capture_output=True, text=True,
                          timeout=60, env=mpi_env(), cwd=REPO)
    if args:
        assert proc.returncode == 0 and "mpirun" in proc.stdout, proc.stdout + proc.stderr
    else:
        assert proc.returncode == 2 and "hpcdgnn-mpirun: no program given; usage:" in proc.stderr, proc.stderr


@pytest.mark.mpi  # python -m hpcdgnn run (P = 1)
def test_a_dataset_too_short_to_train_on_is_named(tmp_path):
    """A one-snapshot dataset's "no training examples" named only the job file."""
    data = make_dataset(tmp_path / "one", 1, 11, 20)
    job = write_job(tmp_path / "job.yaml", data)
    line = _one_line(_hpcdgnn("run", str(job), "--output", str(tmp_path / "r")))
    assert f"leaves no training examples in data.path {data} (T = 1: too few snapshots" in line, line
    assert not (tmp_path / "r").exists()  # the run made the directory --output named: it goes (issue 61 §4.5)
    # a run directory of its own (output.dir) is not left behind for a run that never trained; nor is output.dir
    # when the run made it, while one the user made stays
    (tmp_path / "kept").mkdir()
    for runs in (tmp_path / "runs", tmp_path / "kept"):
        job = write_job(tmp_path / "job.yaml", data, output={"dir": str(runs)})
        _one_line(_hpcdgnn("run", str(job)))
    assert not (tmp_path / "runs").exists()
    assert list((tmp_path / "kept").iterdir()) == []


def test_ranks_started_with_different_arguments_are_refused_not_hung(launcher, tmp_path, small_dataset):
    """An MPMD launch (``mpirun -np 2 A : -np 1 B``) whose ranks got other arguments: with ``--resume`` and
    ``--output`` on ranks 0 and 1 only, those two refused alone and rank 2 waited for them for ever; with another
    ``--set`` it trained rank 0's job silently. Now every rank refuses, in one line naming the ranks."""
    job = write_job(tmp_path / "job.yaml", small_dataset)
    run = [sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "r")]
    cmd = [launcher.mpirun, *launcher.flags, "-np", "2", *run, "--resume", str(tmp_path / "r"), ":",
           "-np", "1", *run]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=mpi_env(), cwd=REPO)
    line = _one_line(proc)
    assert line.startswith("hpcdgnn: error: the ranks were started with different arguments — rank 0: run "), line
    assert "--resume" in line.split("— rank 2:")[0] and "(differing: rank 2)" in line, line
    assert not (tmp_path / "r").exists()


FOREIGN = [sys.executable, "-c", "from mpi4py import MPI; import time; time.sleep(60)"]


def _python_m(args: list[str]) -> int | None:
    """The process ``python -m ARGS`` (not the launcher whose command line holds it), or None."""
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and (d / "cmdline").read_bytes().split(b"\0")[1:-1] == [b"-m", *map(str.encode, args)]:
                return int(d.name)
        except OSError:  # ended meanwhile
            continue
    return None


@pytest.mark.mpi
def test_a_signal_while_embed_waits_for_the_other_ranks_is_one_line(launcher, tmp_path):
    """embed (and predict) in MPI's start, waiting for a rank that runs another program: a SIGTERM raised an
    interrupt there, which printed a traceback and aborted the job with exit 1. Until a communicator exists
    nothing is written, so the starting line and exit 130 hold there too."""
    out = tmp_path / "z.h5"
    embed = [sys.executable, "-m", "hpcdgnn", "embed", str(tmp_path / "run"), "--output", str(out)]
    cmd = [launcher.mpirun, *launcher.flags, "-np", "1", *embed, ":", "-np", "1", *FOREIGN]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**mpi_env(), "HPCDGNN_START_TIMEOUT": "60"}, cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the embed rank with the MPI library loaded: in (or past) MPI_Init
            pid = _python_m(embed[2:])
            if pid is not None and "libmpi" in Path(f"/proc/{pid}/maps").read_text():
                break
            time.sleep(0.2)
        else:
            pytest.fail("the embed rank did not start MPI within 60 s")
        time.sleep(2)  # into the start's wait for rank 1
        os.kill(pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "hpcdgnn: embed: stopped by SIGTERM while starting; nothing was written" in err, err
    assert "Traceback" not in err, err
    assert proc.returncode != 0 and not out.exists()


@pytest.mark.parametrize("foreign_first", [False, True])
def test_another_program_in_the_world_ends_the_job_not_hangs_it(launcher, tmp_path, small_dataset, foreign_first):
    """An MPMD launch with a program that is not hpcdgnn (``mpirun -np 2 hpcdgnn : -np 1 monitor``) left the
    hpcdgnn ranks waiting for ever in their first collective, which the program never enters. Now rank 0 names
    the rank it did not hear from within ``HPCDGNN_START_TIMEOUT``, or — the program being rank 0 — the others
    name rank 0 after twice that, and the job ends with exit 3."""
    job = write_job(tmp_path / "job.yaml", small_dataset)
    run = [sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "r")]
    parts = [["-np", "1", *FOREIGN], ["-np", "2", *run]]
    cmd = [launcher.mpirun, *launcher.flags, *parts[not foreign_first], ":", *parts[foreign_first]]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=50,
                          env={**mpi_env(), "HPCDGNN_START_TIMEOUT": "2"}, cwd=REPO)
    # Hydra (MPICH) reports the status it collects first after MPI_Abort: the code, or the killed program's SIGKILL
    hydra = () if launcher.open_mpi else (signal.SIGKILL,)
    assert proc.returncode in (3, *hydra), proc.stdout + proc.stderr
    assert time.monotonic() - t0 < 40  # the foreign program sleeps 60 s: MPI_Abort ended it too
    # Open MPI's output forwarding once put a NUL byte before rank 0's line (CI, 2026-12-02): not ours to test
    errors = [ln.replace("\0", "") for ln in proc.stderr.splitlines() if "hpcdgnn: error:" in ln]
    assert errors and "Traceback" not in proc.stderr, proc.stderr
    if foreign_first:  # ranks 1 and 2 run hpcdgnn; either may report before the abort ends the other
        assert all("rank 0 did not answer within 4 s" in ln for ln in errors), errors
    else:
        assert errors == ["[rank 0] hpcdgnn: error: stalled at the start: rank 2 of 3 did not start hpcdgnn within "
                          "2 s (HPCDGNN_START_TIMEOUT): every rank must run python -m hpcdgnn run, or call "
                          "hpcdgnn.train (an MPMD launch with another MPI program?)"], errors
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("mode, said", [
    ("stop", "pre-empted while the ranks were starting, before any set-up: run the job again"),
    ("stranger", "rank 1 of 2 sent rank 0 another program's message instead of hpcdgnn's start: every rank must "
                 "run python -m hpcdgnn run, or call hpcdgnn.train (an MPMD launch?)")])
def test_the_start_wait_ends_on_a_signal_or_another_program_s_message(launcher, mode, said):
    """The handshake's other two ends (tests/mpi/await_world_check.py): a pre-emption signal while a rank is
    missing stops the wait 10 s later (not after the 60 s timeout), and a message of another program is not
    taken for a start."""
    proc = launcher.run(2, ["tests/mpi/await_world_check.py", mode], timeout=50)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("ERROR "))
    assert line.startswith(f"ERROR {said} AFTER "), line
    after = float(line.rsplit(" ", 1)[1])
    assert (11 <= after < 25) if mode == "stop" else after < 10, line  # stop: 1 s, then STOP_GRACE_S


@pytest.mark.mpi  # python -m hpcdgnn run (P = 1)
@pytest.mark.parametrize(("variable", "value", "rule"), [
    *[("HPCDGNN_START_TIMEOUT", v, "> 0 (default 600)") for v in ("abc", "0", "-5", "inf", "nan")],
    # read once the run directory is claimed (as the run takes its lock): the directory goes again
    *[("HPCDGNN_RUN_LOCK_WAIT", v, ">= 0 (default 120)") for v in ("abc", "-1", "inf")]])
def test_a_bad_seconds_variable_is_one_line_and_leaves_no_run_directory(variable, value, rule, tmp_path,
                                                                         small_dataset):
    job = write_job(tmp_path / "job.yaml", small_dataset)
    proc = subprocess.run([sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=120, cwd=REPO, env={**mpi_env(), variable: value})
    assert _one_line(proc) == f"hpcdgnn: error: environment {variable}={value!r}: seconds {rule}"
    assert not (tmp_path / "r").exists()


def test_commands_that_differ_only_in_quoting_are_told_apart():
    """``--set "a=1 b=2"`` and ``--set a=1 b=2`` join to the same words: the check compares the argument lists
    (it took the joined strings for equal and failed on an empty list of differing ranks)."""
    from hpcdgnn.comm.world import check_same_command

    class TwoRanks:  # the all-gather of two ranks: this process plays both
        def __init__(self, commands):
            self.commands, self.calls = commands, 0

        def allgather_obj(self, obj, tag="setup"):
            self.calls += 1
            if self.calls == 1:
                import hashlib
                return [hashlib.sha256("\0".join(c).encode()).hexdigest()[:16] for c in self.commands]
            return [list(c) for c in self.commands]

    same = TwoRanks([["run", "j.yaml"], ["run", "j.yaml"]])
    assert check_same_command(same, ["run", "j.yaml"]) is None
    quoted = TwoRanks([["run", "j.yaml", "--set", "a=1 b=2"], ["run", "j.yaml", "--set", "a=1", "b=2"]])
    line = check_same_command(quoted, ["run"])
    assert "rank 0: run j.yaml --set 'a=1 b=2' — rank 1: run j.yaml --set a=1 b=2 —" in line, line


def test_ranks_on_different_kinds_of_device_are_refused_not_hung(launcher, tmp_path, small_dataset):
    """train.device: auto where some ranks see a GPU and others none (tests/mpi/mixed_devices.py says rank 2 has
    one): the GPU ranks' set-up had collectives of its own (their node's GPU memory share) and the job hung."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"device": "auto"})
    proc = launcher.run(3, ["tests/mpi/mixed_devices.py", "2", "--", "run", str(job), "--output",
                            str(tmp_path / "r")], timeout=60)
    line = _one_line(proc)
    assert line == (f"hpcdgnn: error: {job}: train.device: auto put ranks 0, 1 of 3 on the CPU (no GPU visible "
                    "there) and the others on GPUs: every rank must train on the same kind of device; give every "
                    "rank a GPU (nodes without one in the allocation?) or set train.device: cpu"), line


def test_a_run_directory_another_rank_does_not_see_is_refused_at_the_start(launcher, tmp_path, small_dataset):
    """Ranks whose working directories differ (a node-local cwd; here mpirun's --wdir per rank) and a relative
    --output: rank 1 did not see the run directory rank 0 made, and the job failed at its first checkpoint, after
    training. Now every rank refuses it in one line before the first epoch."""
    job = write_job(tmp_path / "job.yaml", small_dataset)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    run = [sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", "runs/x"]
    cmd = [launcher.mpirun, *launcher.flags, "-np", "1", *launcher.part_wdir(tmp_path / "a"), *run, ":",
           "-np", "1", *launcher.part_wdir(tmp_path / "b"), *run]
    env = {**mpi_env(), "PYTHONPATH": str(REPO)}  # -m hpcdgnn from another directory than the checkout
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    line = _one_line(proc)
    assert line == ("hpcdgnn: error: rank 1: runs/x: made by rank 0 but not there on rank 1 (host "
                    f"{socket.gethostname()}): the run directory (--output, output.dir) and checkpoint.dir must be "
                    "on a file system every node shares, at the same path (a relative path is taken from each "
                    "rank's working directory)"), line
    assert "epoch" not in proc.stdout, proc.stdout
    assert not (tmp_path / "a" / "runs" / "x").exists()  # rank 0 made it and removed it: the same command runs
    # with checkpoint.dir on a path every rank sees, only rank 0 writes the run directory: the run is fine
    cmd = [*cmd[:cmd.index(":")], "--set", f"checkpoint.dir={tmp_path / 'ckpt'}", ":",
           *cmd[cmd.index(":") + 1:], "--set", f"checkpoint.dir={tmp_path / 'ckpt'}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "ckpt" / "epoch-000003").is_dir() and (tmp_path / "a" / "runs" / "x" / "summary.json").is_file()
    # ... unless a debug option makes every rank write there: the line names it
    shutil.rmtree(tmp_path / "a" / "runs")
    shutil.rmtree(tmp_path / "ckpt")
    cmd = [*cmd[:cmd.index(":")], "debug.trace_exchanges=true", ":", *cmd[cmd.index(":") + 1:],
           "debug.trace_exchanges=true"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    line = _one_line(proc)
    assert line.startswith("hpcdgnn: error: rank 1: runs/x: made by rank 0 but not there on rank 1"), line
    assert line.endswith("working directory); every rank writes into the run directory for "
                         "debug.trace_exchanges"), line


def test_ranks_with_different_kernel_switches_are_refused(launcher, tmp_path, small_dataset):
    """HPCDGNN_KERNELS changes the arithmetic (rounding); mpirun over ssh passes it to remote ranks only with -x,
    so rank 0 ran one path and the others another. It is compared as the arguments are, by meaning (here -x on
    rank 1's part of an MPMD launch only). HPCDGNN_BUCKET_BYTES: test_bucket_bytes_are_compared_by_meaning."""
    job = write_job(tmp_path / "job.yaml", small_dataset)
    run = [sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "r")]
    env = {k: v for k, v in mpi_env().items() if k not in ("HPCDGNN_KERNELS", "HPCDGNN_BUCKET_BYTES")}
    cmd = [launcher.mpirun, *launcher.flags, "-np", "1", *run, ":", "-np", "1",
           *launcher.part_env("HPCDGNN_KERNELS", "torch"), *run]
    line = _one_line(subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=REPO))
    assert f"— rank 0: run {job} " in line and f"— rank 1: HPCDGNN_KERNELS=torch run {job} " in line, line
    # a node without numba takes the torch path whatever the variable says (rank 1 here cannot import it): compared
    # as such, and the same as HPCDGNN_KERNELS=torch where numba is installed
    no_numba = [sys.executable, "-c", "import sys; sys.modules['numba'] = None; from hpcdgnn.__main__ import main; "
                "sys.exit(main(sys.argv[1:]))", *run[3:]]
    cmd = [launcher.mpirun, *launcher.flags, "-np", "1", *run, ":", "-np", "1", *no_numba]
    line = _one_line(subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=REPO))
    assert f"— rank 1: HPCDGNN_KERNELS=torch run {job} " in line and "without numba reads HPCDGNN_KERNELS" in line, line
    cmd = [launcher.mpirun, *launcher.flags, "-np", "1", *launcher.part_env("HPCDGNN_KERNELS", "torch"), *run, ":",
           "-np", "1", *no_numba]
    same = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert same.returncode == 0, same.stdout + same.stderr


@pytest.mark.parametrize(("variable", "value", "said"), [
    ("HPCDGNN_KERNELS", "maybe", "environment HPCDGNN_KERNELS='maybe': use numba, torch or always"),
    ("HPCDGNN_START_TIMEOUT", "soon", "environment HPCDGNN_START_TIMEOUT='soon': seconds > 0 (default 600)"),
    ("HPCDGNN_SHM_LIMIT_MB", "2GB",
     "environment HPCDGNN_SHM_LIMIT_MB='2GB': MiB > 0 (default the node's available memory)")])
def test_a_bad_variable_is_one_line_at_any_rank_count(launcher, tmp_path, small_dataset, variable, value, said):
    """Every rank refused a bad HPCDGNN_* value before MPI started, each with its own line (P lines at P = 128):
    the ranks now agree first, and rank 0 says it once — naming the rank where only another rank's environment
    is wrong (here -x on rank 1's part of an MPMD launch), which ended the job without a word from rank 0."""
    job = write_job(tmp_path / "job.yaml", small_dataset)
    env = {k: v for k, v in mpi_env().items() if k != variable}
    proc = subprocess.run(launcher.command(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "all")]),
                          capture_output=True, text=True, timeout=120, env={**env, variable: value}, cwd=REPO)
    assert _one_line(proc) == f"hpcdgnn: error: {said}"
    assert not (tmp_path / "all").exists()
    run = [sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "one")]
    cmd = [launcher.mpirun, *launcher.flags, "-np", "1", *run, ":", "-np", "1", *launcher.part_env(variable, value),
           *run]
    line = _one_line(subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=REPO))
    assert line == f"hpcdgnn: error: rank 1: {said}"
    assert not (tmp_path / "one").exists()


def test_bucket_bytes_are_compared_by_meaning(launcher, tmp_path, small_dataset):
    """HPCDGNN_BUCKET_BYTES orders the decoder's pairs (the gradient sums' rounding). Its default depends on the
    device, so the ranks compare it resolved, once they have a device: on the CPU the default spelled out on one
    rank and unset on the other is the same run (it was refused); another size is refused in one line."""
    from hpcdgnn.tasks.link_prediction import BUCKET_BYTES

    job = write_job(tmp_path / "job.yaml", small_dataset, train={"device": "cpu"})
    env = {k: v for k, v in mpi_env().items() if k not in ("HPCDGNN_KERNELS", "HPCDGNN_BUCKET_BYTES")}

    def launch(value: int, out: str) -> subprocess.CompletedProcess:
        run = [sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / out)]
        cmd = [launcher.mpirun, *launcher.flags, "-np", "1", *run, ":", "-np", "1",
               *launcher.part_env("HPCDGNN_BUCKET_BYTES", str(value)), *run]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=REPO)

    same = launch(BUCKET_BYTES, "same")
    assert same.returncode == 0, same.stdout + same.stderr
    line = _one_line(launch(1024, "other"))
    assert line == (f"hpcdgnn: error: environment HPCDGNN_BUCKET_BYTES: rank 0 orders the decoder's pairs in buckets "
                    f"of {BUCKET_BYTES} bytes, rank 1 of 2 in 1024 (0: none): every rank must order them alike (set "
                    "it for every rank, e.g. mpirun -x HPCDGNN_BUCKET_BYTES, or for none)"), line
    assert not (tmp_path / "other").exists()  # a refused new run leaves no directory it made


def test_the_memory_check_takes_the_smallest_node(launcher, tmp_path, small_dataset):
    """Rank 0 checked the job's footprint against its own node's share only: a node with less memory (or more
    ranks) than rank 0's was not checked, and was killed by the kernel instead (tests/mpi/small_node.py gives
    rank 2 no memory at all)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"device": "cpu"})
    proc = launcher.run(3, ["tests/mpi/small_node.py", "2", "0", "--", "run", str(job), "--output",
                            str(tmp_path / "r")], timeout=60)
    line = _one_line(proc)
    assert "B per rank" in line and "and this rank has 0 B (its share of the node's memory)" in line, line


def test_every_command_that_writes_takes_output():
    """``run``, ``prepare``, ``embed``, ``predict`` and ``export`` take ``--output``; ``report``, ``calibrate``
    and ``profile`` took only ``--out`` and refused ``--output`` ("unrecognized arguments"). Both spellings now."""
    from hpcdgnn.__main__ import _parser

    parser = _parser()
    for argv in (["report", "RUN", "--output", "D"], ["calibrate", "--output", "D"], ["profile", "--output", "D"]):
        assert parser.parse_args(argv).out == "D", argv
        assert parser.parse_args([*argv[:-2], "--out", "D"]).out == "D", argv


def test_the_launcher_counts_every_program_of_an_mpmd_launch():
    """``hpcdgnn-mpirun -np 1 A : -np 2 B`` on 2 cores: only the first program's -np was read (1 rank), so no
    --oversubscribe was added and Open MPI refused the 3 ranks ('not enough slots'); a -np 0 of a later program
    ("every slot" to prterun) passed unrefused. Now the programs' counts are summed and each is checked."""
    from hpcdgnn import launch

    mpmd = ["-np", "1", "a", "x", ":", "-np", "2", "b"]
    assert launch.requested_ranks(mpmd) == (3, False)
    assert "--oversubscribe" in launch.plan(mpmd, "mpirun", "openmpi", euid=1000, cores=2, environ={}).argv
    assert "--oversubscribe" not in launch.plan(mpmd, "mpirun", "openmpi", euid=1000, cores=3, environ={}).argv
    # a program whose count is not given fills the slots: nothing is added for it
    assert launch.requested_ranks(["-np", "1", "a", ":", "b"])[0] is None
    assert launch.requested_ranks(["-np", "1", "a", ":", "--host", "h", "-np", "1", "b"]) == (2, True)
    with pytest.raises(launch.LaunchError, match="positive whole number"):
        launch.plan(["-np", "1", "a", ":", "-np", "0", "b"], "mpirun", "openmpi", euid=1000, cores=2, environ={})
