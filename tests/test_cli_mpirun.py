"""The commands that are not SPMD (inspect, validate, plan, check, ...) launched on every rank, as a job script's
``srun`` launches each of its lines: the job prints once, and every rank exits with the same status."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcdgnn.__main__ import _STOP_GRACE_S
from hpcdgnn.embed import read_embeddings
from tests.conftest import REPO, make_dataset, mpi_env, run_launched, write_job

pytestmark = pytest.mark.mpi

#: run by each rank: ``python -m hpcdgnn ARGS`` (or ``python -c CODE ARGS``) as a process of its own (the MPI rank
#: it inherits from the launcher's environment), its stdout, stderr and exit status kept per rank; this wrapper exits
#: 0 whatever the command did, so that no launcher ends the other ranks early and a rank left waiting shows as a timeout
_PER_RANK = """
import os, signal, subprocess, sys
rank = next(os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK") if v in os.environ)
out = sys.argv[1]
with open(f"{out}/out.{rank}", "w") as o, open(f"{out}/err.{rank}", "w") as e:
    proc = subprocess.Popen([sys.executable, *sys.argv[2:]], stdout=o, stderr=e)
    # (after the start: the command must not inherit the ignore) the launcher's SIGTERM to every rank once one
    # exits before MPI_Finalize (embed's stop: each leaves with 130 once the line is out) must not end this
    # wrapper before it records its command's exit status
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(f"{out}/pid.{rank}", "w").write(str(proc.pid))
    code = proc.wait()
open(f"{out}/rc.{rank}", "w").write(str(code))
"""


def _each_rank(launcher, P: int, args: list[str], tmp_path: Path, meanwhile=None,
               program: tuple[str, ...] = ("-m", "hpcdgnn")) -> list[tuple[int, str, str]]:
    """``mpirun -np P python -m hpcdgnn ARGS``: each rank's (exit status, stdout, stderr). ``meanwhile(pids)``, if
    given, is called with the ranks' process ids once every rank started its command. ``program``: what runs the
    command instead of ``-m hpcdgnn`` (``-c CODE``, which calls ``hpcdgnn.__main__.main()``)."""
    out = tmp_path / f"ranks-{len(list(tmp_path.glob('ranks-*')))}"
    out.mkdir()
    cmd = launcher.command(P, ["-c", _PER_RANK, str(out), *program, *map(str, args)])
    if meanwhile is None:
        launch = run_launched(cmd, timeout=150, env=mpi_env(), cwd=REPO)
    else:
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env(),
                              cwd=REPO, start_new_session=True) as proc:
            try:
                deadline = time.monotonic() + 120
                while len(list(out.glob("pid.*"))) < P and time.monotonic() < deadline:
                    time.sleep(0.05)
                meanwhile([int((out / f"pid.{r}").read_text()) for r in range(P)])
                so, se = proc.communicate(timeout=150)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        launch = subprocess.CompletedProcess(cmd, proc.returncode, so, se)
    got = []
    for r in range(P):
        rc = out / f"rc.{r}"
        assert rc.exists(), f"rank {r} of {P} did not finish {args[0]}: {launch.stdout[-2000:]}{launch.stderr[-2000:]}"
        got.append((int(rc.read_text()), (out / f"out.{r}").read_text(), (out / f"err.{r}").read_text()))
    return got


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("data") / "d", 7, 23, 40)


@pytest.mark.parametrize("P", [2, 3])
def test_inspect_under_mpirun_prints_once(launcher, dataset, tmp_path, P):
    """``mpirun -np P python -m hpcdgnn inspect DIR`` printed the report P times; rank 0 prints it now."""
    ranks = _each_rank(launcher, P, ["inspect", dataset, "--json"], tmp_path)
    assert [r[0] for r in ranks] == [0] * P, ranks
    report = json.loads(ranks[0][1])
    assert report["valid"] and report["num_snapshots"] == 7, report
    assert all(out == "" and err == "" for _, out, err in ranks[1:]), ranks


@pytest.mark.parametrize("P", [2, 3])
def test_validate_refusal_under_mpirun_is_one_line_and_every_rank_s_exit_2(launcher, tmp_path, P):
    """A damaged dataset: every rank listed the problems and its own error line; now rank 0 lists them with one
    error line, and the other ranks (waiting for it, not hung) print nothing and exit 2 too."""
    root = make_dataset(tmp_path / "d", 7, 23, 40)
    shard = sorted((root / "shards").iterdir())[0]
    with open(shard, "ab") as f:
        f.write(b"\0" * 16)
    ranks = _each_rank(launcher, P, ["validate", root], tmp_path)
    assert [r[0] for r in ranks] == [2] * P, ranks
    errors = [ln for _, _, err in ranks for ln in err.splitlines()]
    assert len(errors) == 1 and errors[0].startswith("hpcdgnn: error: ") and shard.name in errors[0], ranks
    assert all(out == "" for _, out, _ in ranks[1:]), ranks


def test_plan_and_check_under_mpirun_print_once(launcher, dataset, tmp_path):
    """plan's table and check's dry run, once for a 3-rank launch; a bad --ranks is one line, every rank exit 2."""
    job = write_job(tmp_path / "job.yaml", dataset)
    for args, said in [(["plan", job, "--ranks", "2", "--strategies", "snapshot"], "plan of "),
                       (["check", job, "--ranks", "2"], "check of ")]:
        ranks = _each_rank(launcher, 3, args, tmp_path)
        assert [r[0] for r in ranks] == [0, 0, 0], ranks
        assert ranks[0][1].count(said) == 1 and all(out == "" for _, out, _ in ranks[1:]), ranks
    ranks = _each_rank(launcher, 3, ["plan", job, "--ranks", "0"], tmp_path)
    assert [r[0] for r in ranks] == [2, 2, 2], ranks
    errors = [ln for _, _, err in ranks for ln in err.splitlines()]
    assert len(errors) == 1 and "--ranks" in errors[0], ranks


def test_profile_under_mpirun_times_and_writes_on_rank_0_alone(launcher, tmp_path):
    """Every rank profiled (its timings taken while the others loaded the same cores), printed its fit and
    replaced the predictor file; now rank 0 alone does, the others print nothing and exit 0."""
    out = tmp_path / "pred.pt"
    ranks = _each_rank(launcher, 2, ["profile", "--samples", "10", "--fit-steps", "20", "--vertices", "64",
                                     "--snapshots", "4", "--max-size", "64", "--out", out], tmp_path)
    assert [r[0] for r in ranks] == [0, 0], ranks
    assert ranks[0][1].count(f"saved {out}") == 1 and ranks[1][1:] == ("", ""), ranks
    assert out.is_file()


@pytest.mark.parametrize("sig,who", [(signal.SIGUSR1, "rank 0 last"), (signal.SIGTERM, "rank 0 last"),
                                     (signal.SIGUSR1, "rank 0 alone"), (signal.SIGTERM, "rank 0 first")])
def test_a_stop_signal_to_every_rank_is_one_line(launcher, tmp_path, sig, who):
    """``generate`` under mpirun -np 3 while rank 0 writes, every rank signalled as mpirun, srun or hpcdgnn-mpirun
    (SIGUSR1: its relay of a Ctrl-C) signal them: each rank printed its own 'stopped by' line; now rank 0's is the
    job's one line, every rank exits with the same status and nothing is left. A rank that hears of rank 0's stop
    before its own signal comes (rank 0 signalled first, or alone: ``kill`` of its process) printed
    'error: generate: rank 0 stopped writing …: Stopped' and exited 2; now it stops as rank 0 did, silently."""
    data = tmp_path / "data"
    data.mkdir()

    def signal_when_writing(pids: list[int]) -> None:
        deadline = time.monotonic() + 120
        while not list(data.glob(".g.tmp-*")) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert list(data.glob(".g.tmp-*")), "generate finished, or never started writing"
        for pid in {"rank 0 last": pids[::-1], "rank 0 first": pids, "rank 0 alone": pids[:1]}[who]:
            os.kill(pid, sig)

    ranks = _each_rank(launcher, 3, ["generate", "--output", data / "g", "--vertices", "400000", "--snapshots",
                                     "128", "--density", "3", "--seed", "0"], tmp_path, signal_when_writing)
    code = 130 if sig == signal.SIGUSR1 else 128 + sig
    assert [r[0] for r in ranks] == [code] * 3, ranks
    lines = [ln for _, _, err in ranks for ln in err.splitlines()]
    assert lines == [f"hpcdgnn: generate: stopped by {signal.Signals(sig).name}; nothing it was writing is left"], \
        ranks
    assert list(data.iterdir()) == [], list(data.iterdir())


def test_the_parser_s_usage_help_and_errors_are_printed_once(launcher, dataset, tmp_path):
    """argparse's usage and error lines (exit 2) and ``--help`` (exit 0), printed by every rank of a launch: by
    rank 0 alone now, every rank exiting with the parser's status."""
    ranks = _each_rank(launcher, 3, ["inspect", dataset, "--no-such-option"], tmp_path)
    assert [r[0] for r in ranks] == [2, 2, 2], ranks
    assert "error: unrecognized arguments: --no-such-option" in ranks[0][2], ranks
    assert all(out == "" and err == "" for _, out, err in ranks[1:]), ranks
    ranks = _each_rank(launcher, 2, ["--help"], tmp_path)
    assert [r[0] for r in ranks] == [0, 0] and "usage: python -m hpcdgnn" in ranks[0][1], ranks
    assert ranks[1][1:] == ("", ""), ranks


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without a GPU")
def test_calibrate_on_a_gpu_that_is_not_there_is_one_line(launcher, tmp_path):
    """``calibrate --device cuda`` where no GPU is visible: each rank checked its own node before the
    communicator existed, printed the line and exited alone (one node without a GPU: the others went on into the
    collectives). Now the ranks agree: one line (a rank other than 0 named), every rank exit 2."""
    ranks = _each_rank(launcher, 3, ["calibrate", "--device", "cuda", "--out", tmp_path / "rates.json"], tmp_path)
    assert [r[0] for r in ranks] == [2, 2, 2], ranks
    lines = [ln for _, _, err in ranks for ln in err.splitlines()]
    assert lines == ["hpcdgnn: error: calibrate --device cuda: no GPU is visible here"], ranks
    assert not (tmp_path / "rates.json").exists()


def test_a_bad_calibrate_option_under_mpirun_is_one_line(launcher, tmp_path):
    """calibrate measures on every rank (the collectives need them all); its option checks ran on every rank too,
    each printing the same error line. Now rank 0 checks for the job: one line, every rank exit 2, nothing
    written."""
    ranks = _each_rank(launcher, 3, ["calibrate", "--widths", "8", "0", "--out", tmp_path / "rates.json"], tmp_path)
    assert [r[0] for r in ranks] == [2, 2, 2], ranks
    lines = [ln for _, _, err in ranks for ln in err.splitlines()]
    assert len(lines) == 1 and lines[0].startswith("hpcdgnn: error: calibrate --widths: 0 is no width"), ranks
    assert not (tmp_path / "rates.json").exists()


#: ``python -m hpcdgnn`` whose embed and predict gather each step after half a second, the first gather of each rank
#: marked by a file ``gathering.R`` in the directory MARK: a pass long enough to be signalled in the middle
_SLOW_GATHER = """
import os, sys, time
import hpcdgnn.train.inference as inference
gather = inference.gather_step
rank = next(os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK") if v in os.environ)
def slow(recorder, comm, t):
    open(os.path.join(MARK, "gathering." + rank), "a").close()
    time.sleep(0.5)
    return gather(recorder, comm, t)
inference.gather_step = slow
from hpcdgnn.__main__ import main
sys.exit(main())
"""


@pytest.fixture(scope="module")
def trained(dataset, tmp_path_factory) -> Path:
    """A one-epoch run of the module's dataset (one process)."""
    root = tmp_path_factory.mktemp("trained")
    job = write_job(root / "job.yaml", dataset, train={"epochs": 1, "lr": 0.01, "seed": 3, "dtype": "float64",
                                                       "threads": 1})
    proc = subprocess.run([sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(root / "run")],
                          capture_output=True, text=True, timeout=120, env=mpi_env(), cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root / "run"


@pytest.mark.parametrize("command,sig,who", [("embed", signal.SIGUSR1, "every rank"),
                                             ("embed", signal.SIGTERM, "rank 0 alone"),
                                             ("embed", signal.SIGTERM, "not rank 0"),
                                             ("predict", signal.SIGINT, "every rank")])
def test_a_stop_signal_to_embed_or_predict_under_way_is_one_line(launcher, trained, tmp_path, command, sig, who):
    """embed (predict) on 3 ranks signalled in the middle of its pass, as mpirun, srun or hpcdgnn-mpirun signal
    every rank, or one rank's process by ``kill``: each signalled rank printed '[rank R] hpcdgnn: error: embed:
    stopped by a signal ...' and called MPI_Abort (the others killed by the launcher). Now the job's one line
    (rank 0's, or the first signalled rank's), exit 130 on every rank, and nothing at --output."""
    mark = tmp_path / "mark"
    mark.mkdir()
    if command == "embed":
        out = tmp_path / "z.h5"
        args = [command, trained, "--split", "all", "--output", out]
    else:  # link prediction: pairs of each snapshot but the last, scored step by step
        out, pairs = tmp_path / "scores.csv", tmp_path / "pairs.csv"
        pairs.write_text("".join(f"{t},{t + 1},{t}\n" for t in range(6)))
        args = [command, trained, "--pairs", pairs, "--output", out]

    def signal_when_gathering(pids: list[int]) -> None:
        deadline = time.monotonic() + 120
        while len(list(mark.iterdir())) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(list(mark.iterdir())) == 3, "the ranks never gathered a step"
        if command == "embed":  # rank 0 wrote the first step: its file is half written
            while not out.with_name(out.name + ".tmp").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert out.with_name(out.name + ".tmp").exists(), "embed finished, or never wrote"
        for pid in {"every rank": pids, "rank 0 alone": pids[:1], "not rank 0": pids[:0:-1]}[who]:
            os.kill(pid, sig)

    program = ("-c", _SLOW_GATHER.replace("MARK", repr(str(mark))))
    ranks = _each_rank(launcher, 3, args, tmp_path, signal_when_gathering, program)
    assert [r[0] for r in ranks] == [130] * 3, ranks
    lines = [ln for _, _, err in ranks for ln in err.splitlines()]
    assert lines == [f"hpcdgnn: {command}: stopped by {signal.Signals(sig).name}; nothing it was writing is left"], \
        ranks
    speaker = 1 if who == "not rank 0" else 0
    assert ranks[speaker][2] and all(out == "" for _, out, _ in ranks), ranks
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(out.name)) == [], list(tmp_path.iterdir())


def test_a_bad_option_on_another_program_s_ranks_is_named_by_its_first_rank(launcher, dataset):
    """An MPMD launch (``mpirun -np 1 inspect DIR : -np 2 inspect --bad DIR``): the parse failed on ranks 1 and 2
    alone, which print nothing but rank 0, so no hpcdgnn line said why the job ended (the launcher named rank 1,
    exit 2). Now the first rank of that program prints the parser's lines with its rank; rank 2, whose command
    line is rank 1's, stays silent; an SPMD launch still prints them once (test above). Rank 0 waits for them in
    MPI's start-up until the launcher ends it with SIGTERM: whether it prints its own stop line depends on how far it
    had got (under load it had set its handlers; CI saw that line), so that line, and only it, may follow."""
    if not launcher.open_mpi:
        pytest.skip("Open MPI tells each rank its program's place in an MPMD launch; other launchers do not")
    inspect = [sys.executable, "-m", "hpcdgnn", "inspect"]
    cmd = [launcher.mpirun, *launcher.flags, "-np", "1", *inspect, str(dataset), ":", "-np", "2", *inspect, "--bad",
           str(dataset)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=mpi_env(), cwd=REPO)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "hpcdgnn" in ln and "prterun" not in ln]
    stopped = "hpcdgnn: inspect: stopped by SIGTERM while starting; nothing was written"
    assert [ln for ln in lines if ln != stopped] == [
        "[rank 1] python -m hpcdgnn: error: unrecognized arguments: --bad (python -m hpcdgnn --help lists the "
        "options)"], proc.stderr
    assert lines.count(stopped) <= 1, proc.stderr


#: ``python -m hpcdgnn`` that prints the threads left once main returned
_THREADS_LEFT = """
import sys, threading
from hpcdgnn.__main__ import main
code = main()
print("threads left", sorted(t.name for t in threading.enumerate()), file=sys.stderr)
sys.exit(code)
"""


def test_an_embed_refused_before_its_pass_leaves_no_stop_watch_running(launcher, trained, tmp_path):
    """An embed on two ranks whose command lines differ (an MPMD launch) is refused before its pass: the stop's
    watch thread (started with the communicator) was left running, probing MPI while mpi4py finalised it."""
    run = [sys.executable, "-c", _THREADS_LEFT, "embed", str(trained), "--output"]
    cmd = [launcher.mpirun, *launcher.flags, "-np", "1", *run, str(tmp_path / "a.h5"), ":", "-np", "1", *run,
           str(tmp_path / "b.h5")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=mpi_env(), cwd=REPO)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("threads left ['MainThread']") == 2, proc.stderr


#: ``python -m hpcdgnn`` under a runner that reports an uncaught exception from its ``except`` block, then exits
#: (coverage's ``coverage run`` does): rank 1's pass fails with an error of no kind the command handles
_RUNNER = """
import os, sys
import hpcdgnn.train.inference as inference
if next(os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK") if v in os.environ) == "1":
    def broken(recorder, comm, t):
        raise RuntimeError("rank 1 broke")
    inference.gather_step = broken
from hpcdgnn.__main__ import main
try:
    code = main()
except SystemExit:
    raise
except BaseException:
    sys.excepthook(*sys.exc_info())
    sys.exit(1)
sys.exit(code)
"""


def test_a_crash_a_runner_reports_from_its_except_block_ends_the_job(launcher, trained, tmp_path):
    """A rank's crash that a runner (coverage's) hands to sys.excepthook from its except block was taken for an
    exception C code reports and ignores: printed as 'exception ignored', the rank left through MPI_Finalize and the
    others waited in the pass's collective for ever. It ends the job, as an uncaught exception does."""
    cmd = launcher.command(2, ["-c", _RUNNER, "embed", str(trained), "--output", str(tmp_path / "z.h5")])
    proc = run_launched(cmd, timeout=60, env=mpi_env(), cwd=REPO)
    assert proc.returncode != 0 and "RuntimeError: rank 1 broke" in proc.stderr, proc.stdout + proc.stderr
    assert "exception ignored" not in proc.stderr and "rank 1/2: Traceback" in proc.stderr, proc.stderr
    assert not list(tmp_path.glob("z.h5*"))


#: ``python -m hpcdgnn`` whose rank 0 finds its disk full: creating the output's temporary file fails with ENOSPC
_DISK_FULL = """
import errno, os, sys
import hpcdgnn.embed as embed
created = embed._created
def full(tmp, create):
    def fail():
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
    return created(tmp, fail)
embed._created = full
from hpcdgnn.__main__ import main
sys.exit(main())
"""


@pytest.mark.parametrize("command", ["embed", "predict"])
def test_a_write_that_fails_on_rank_0_is_one_line_and_every_rank_s_exit_2(launcher, trained, tmp_path, command):
    """embed (predict) on 3 ranks whose output cannot be written (a full disk): rank 0 printed '[rank 0] hpcdgnn:
    error: --output ...: cannot write it (...)' — for an HDF5 file over two lines, h5py's text — and aborted the
    job while the other ranks had finished (exit 0, or killed). Now rank 0 goes on gathering, and every rank refuses
    with its line: one line, every rank exit 2, nothing left."""
    if command == "embed":
        out = tmp_path / "z.h5"
        args = [command, trained, "--split", "all", "--output", out]
    else:
        out, pairs = tmp_path / "scores.csv", tmp_path / "pairs.csv"
        pairs.write_text("".join(f"{t},{t + 1},{t}\n" for t in range(6)))
        args = [command, trained, "--pairs", pairs, "--output", out]
    ranks = _each_rank(launcher, 3, args, tmp_path, program=("-c", _DISK_FULL))
    assert [r[0] for r in ranks] == [2] * 3, ranks
    lines = [ln for _, _, err in ranks for ln in err.splitlines()]
    assert lines == [f"hpcdgnn: error: --output {out}: cannot write it (No space left on device); nothing was "
                     "written"], ranks
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(out.name)) == [], list(tmp_path.iterdir())


#: ``python -m hpcdgnn`` whose rank 0, before it writes its output, meets an exception that C code reports and goes
#: on from (``PyErr_Print`` while Python code runs: PyRun_SimpleString's, Cython's ``__dealloc__`` errors)
_IGNORED_ERROR = """
import ctypes, os, sys
import hpcdgnn.embed as embed
created = embed._created
def noisy(tmp, create):
    ctypes.pythonapi.PyRun_SimpleString(b"raise RuntimeError('reported by C code, which goes on')")
    return created(tmp, create)
embed._created = noisy
from hpcdgnn.__main__ import main
sys.exit(main())
"""


def test_an_exception_c_code_reports_and_ignores_does_not_end_the_job(launcher, trained, tmp_path):
    """The abort hook ended the MPI job (exit 1) on any call of sys.excepthook, also C code's report of an
    exception it ignores (h5py's objects dropped after a failed write print theirs so): a job that one process would
    complete was killed. Now such a report is printed with the rank, and the job goes on: embed writes its file."""
    out = tmp_path / "z.h5"
    ranks = _each_rank(launcher, 2, ["embed", trained, "--split", "all", "--output", out], tmp_path,
                       program=("-c", _IGNORED_ERROR))
    assert [r[0] for r in ranks] == [0, 0], ranks
    assert ranks[0][2].startswith("rank 0/2: exception ignored: Traceback"), ranks
    assert "RuntimeError: reported by C code, which goes on" in ranks[0][2] and ranks[1][2] == "", ranks
    assert out.is_file() and "embed: Z_t of " in ranks[0][1], ranks


#: ``python -m hpcdgnn`` whose ranks HELD stop for 3 s right after ``hpcdgnn.embed.WHERE`` returns, each marking it by
#: a file ``held.R`` in the directory MARK first: a stop signalled then comes in a moment the test chooses
_HOLD = """
import os, sys, time
import hpcdgnn.embed as embed
rank = next(os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK") if v in os.environ)
real = embed.WHERE
def held(*args):
    out = real(*args)
    if int(rank) in HELD:
        open(os.path.join(MARK, "held." + rank), "a").close()
        time.sleep(3)
    return out
embed.WHERE = held
from hpcdgnn.__main__ import main
sys.exit(main())
"""


@pytest.mark.parametrize("P,where,held,who", [(2, "run_embed", (1,), "every rank"),
                                              (3, "_into_place", (0,), "not rank 0")])
def test_a_stop_after_embed_s_file_is_in_place_keeps_it_and_says_so(launcher, trained, tmp_path, P, where, held,
                                                                     who):
    """A stop signal once rank 0 had renamed the complete z.h5 into place (and ended its watch, or not yet): the
    other ranks waited 10 s for a rank that had finished, called MPI_Abort (rank 0 killed: -15), and the line said
    'nothing it was writing is left' beside the complete file. Now the finished rank told the others it finished,
    the stop is called off (every main thread can complete), the line says the file is complete, every rank exits
    0 at once."""
    mark, out, signalled = tmp_path / "mark", tmp_path / "z.h5", []
    mark.mkdir()

    def signal_when_held(pids: list[int]) -> None:
        deadline = time.monotonic() + 120
        while len(list(mark.iterdir())) < len(held) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert out.is_file(), "embed never put its file in place"
        signalled.append(time.monotonic())
        for pid in {"every rank": pids, "not rank 0": pids[:0:-1]}[who]:
            os.kill(pid, signal.SIGTERM)

    program = ("-c", _HOLD.replace("WHERE", where).replace("HELD", repr(held)).replace("MARK", repr(str(mark))))
    ranks = _each_rank(launcher, P, ["embed", trained, "--split", "all", "--output", out], tmp_path,
                       signal_when_held, program)
    took = time.monotonic() - signalled[0]
    assert [r[0] for r in ranks] == [0] * P, ranks
    lines = [ln for _, _, err in ranks for ln in err.splitlines()]
    assert lines == [f"hpcdgnn: embed: SIGTERM came after {out} was written; the file is complete"], ranks
    assert read_embeddings(out).steps.tolist() == list(range(6)) and not out.with_name("z.h5.tmp").exists()
    assert took < _STOP_GRACE_S, took  # no rank waited out the grace for one that had finished


#: ``python -m hpcdgnn`` whose rank 0, once its file holds two steps, writes the third inside C code that keeps the
#: GIL for 14 s and that no signal interrupts (HDF5 compressing or writing a large file), marking it by a file
#: ``held`` in MARK; each rank's process id in ``pid.R`` there: its watch thread cannot run within the stop's grace,
#: nor before the abort's kill
_GIL_HELD = """
import ctypes, os, signal, sys
import hpcdgnn.embed as embed
rank = next(os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK") if v in os.environ)
open(os.path.join(MARK, "pid." + rank), "w").write(str(os.getpid()))
add = embed._Writer.add
def holding(self, z, computed):
    if self.k == 2:
        open(os.path.join(MARK, "held"), "a").close()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGUSR1})
        ctypes.PyDLL(None).sleep(14)
    add(self, z, computed)
embed._Writer.add = holding
from hpcdgnn.__main__ import main
sys.exit(main())
"""


def _rank_1_stopped_while_rank_0_holds(launcher, trained: Path, tmp_path: Path, program: str,
                                       ready: Path) -> tuple[int, str]:
    """``embed`` of ``trained`` on 2 ranks to ``tmp_path``/z.h5 under ``program`` (``-c``; it marks ``MARK/held``
    once rank 0 holds): rank 1 signalled (SIGTERM) once rank 0 holds and ``ready`` exists; the exit status and
    stderr."""
    mark = tmp_path / "mark"
    mark.mkdir()
    cmd = launcher.command(2, ["-c", program.replace("MARK", repr(str(mark))), "embed", str(trained), "--split",
                               "all", "--output", str(tmp_path / "z.h5")])
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env(), cwd=REPO,
                          start_new_session=True) as proc:
        try:
            deadline = time.monotonic() + 120
            while not (mark / "held").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert ready.exists(), f"rank 0 never held with {ready.name} there"
            os.kill(int((mark / "pid.1").read_text()), signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, err


def test_a_stop_while_rank_0_holds_the_gil_leaves_no_temporary(launcher, trained, tmp_path):
    """embed on 2 ranks, rank 1 signalled while rank 0's main thread holds the GIL (inside a write) past the
    grace: rank 1 aborted the job after 10 s and z.h5.tmp stayed, which the next embed to z.h5 refuses (while
    the line said nothing was left). Now rank 1, which sees rank 0's node's files, removes it; the line is true."""
    out = tmp_path / "z.h5"
    code, err = _rank_1_stopped_while_rank_0_holds(launcher, trained, tmp_path, _GIL_HELD, out.with_name("z.h5.tmp"))
    assert code == 130, err
    # stripped: the launcher's abort banner, written at once by another process, may leave a blank before it
    assert [ln.strip() for ln in err.splitlines() if ln.strip().startswith("hpcdgnn")] == [
        "hpcdgnn: embed: stopped by SIGTERM; nothing it was writing is left"], err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("z.h5")) == [], list(tmp_path.iterdir())


#: ``python -m hpcdgnn`` whose rank 0 holds the GIL (signals blocked, as inside HDF5's C code) for 14 s right after
#: it renamed the complete output into place
_GIL_HELD_PLACED = """
import ctypes, os, signal, sys
import hpcdgnn.embed as embed
rank = next(os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK") if v in os.environ)
open(os.path.join(MARK, "pid." + rank), "w").write(str(os.getpid()))
real = embed._into_place
def placed(*args):
    real(*args)
    open(os.path.join(MARK, "held"), "a").close()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGUSR1})
    ctypes.PyDLL(None).sleep(14)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGUSR1})
embed._into_place = placed
from hpcdgnn.__main__ import main
sys.exit(main())
"""


def test_a_stop_that_finds_the_output_placed_after_the_grace_is_called_off(launcher, trained, tmp_path):
    """embed on 2 ranks, rank 1 signalled while rank 0, its file renamed into place, holds the GIL past the grace:
    rank 1's line said 'SIGTERM came after z.h5 was written; the file is complete', then MPI_Abort (130). Now the
    line and the exit agree: the stop is called off, the file stays, every rank exits 0."""
    out = tmp_path / "z.h5"
    code, err = _rank_1_stopped_while_rank_0_holds(launcher, trained, tmp_path, _GIL_HELD_PLACED, out)
    assert code == 0, err
    assert [ln for ln in err.splitlines() if ln.startswith("hpcdgnn: ")] == [
        f"hpcdgnn: embed: SIGTERM came after {out} was written; the file is complete"], err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("z.h5")) == ["z.h5"]


#: ``python -m hpcdgnn`` whose first gathered step drops a SIGTERM's exception: the handler runs inside a
#: ``__del__`` (as inside a weakref callback of the interpreter's), where Python prints the exception and goes on
_DROPPED = """
import signal, sys
import hpcdgnn.train.inference as inference
gather = inference.gather_step
class Dropping:
    def __del__(self):
        signal.raise_signal(signal.SIGTERM)
def dropping(recorder, comm, t):
    if not getattr(dropping, "done", False):
        dropping.done = True
        Dropping()
    return gather(recorder, comm, t)
inference.gather_step = dropping
from hpcdgnn.__main__ import main
sys.exit(main())
"""


def test_a_stop_whose_exception_was_dropped_still_stops_one_rank_s_embed(launcher, trained, tmp_path):
    """embed on one rank: a SIGTERM whose exception Python dropped (the handler ran inside a callback) was lost,
    the pass went on and wrote z.h5, exit 0 after an 'Exception ignored' traceback. Now the signal is recorded
    and the next step's safe point stops the pass: the stop's line, exit 130, nothing at --output."""
    out = tmp_path / "z.h5"
    ranks = _each_rank(launcher, 1, ["embed", trained, "--split", "all", "--output", out], tmp_path,
                       program=("-c", _DROPPED))
    lines = [ln for ln in ranks[0][2].splitlines() if ln.startswith("hpcdgnn: ")]
    assert ranks[0][0] == 130 and lines == ["hpcdgnn: embed: stopped by SIGTERM; nothing it was writing is left"], ranks
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("z.h5")) == [], list(tmp_path.iterdir())


@pytest.mark.parametrize("moment", ["writing", "written"])
def test_a_stop_of_embed_on_one_rank_says_what_several_ranks_say(launcher, trained, tmp_path, moment):
    """embed on one rank stopped by SIGTERM said 'hpcdgnn: error: embed: stopped by a signal; no partial output is
    left' where several ranks say 'hpcdgnn: embed: stopped by SIGTERM; nothing it was writing is left' — and said
    it, exit 130, after z.h5 had been renamed into place complete. Now the same lines as several ranks: the signal
    named, nothing left (130), or the complete file kept and said so (0)."""
    mark, out = tmp_path / "mark", tmp_path / "z.h5"
    mark.mkdir()
    if moment == "writing":
        program = _SLOW_GATHER.replace("MARK", repr(str(mark)))
        ready = out.with_name("z.h5.tmp")
    else:
        program = _HOLD.replace("WHERE", "_into_place").replace("HELD", "(0,)").replace("MARK", repr(str(mark)))
        ready = mark / "held.0"

    def signal_when_ready(pids: list[int]) -> None:
        deadline = time.monotonic() + 120
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ready.exists(), "embed finished, or never wrote"
        os.kill(pids[0], signal.SIGTERM)

    ranks = _each_rank(launcher, 1, ["embed", trained, "--split", "all", "--output", out], tmp_path,
                       signal_when_ready, ("-c", program))
    code, said, kept = ((130, "stopped by SIGTERM; nothing it was writing is left", []) if moment == "writing" else
                        (0, f"SIGTERM came after {out} was written; the file is complete", ["z.h5"]))
    assert ranks[0][0] == code and ranks[0][2].splitlines() == [f"hpcdgnn: embed: {said}"], ranks
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("z.h5")) == kept, list(tmp_path.iterdir())
