"""perf/scaling.py: sweeps under mpirun write a CSV whose numbers come from the runs, plots, and the node's ceiling;
and, on hand-written run records (tests/perf/test_scaling_plot.py's), what the table is built from."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO, mpi_env, perf_script
from tests.perf.test_scaling_plot import _dataset, _epochs, _run_dir

#: scaling.py's sweeps run `mpirun -np P python -m hpcdgnn run`
sweeps = pytest.mark.mpi


@sweeps
def test_weak_sweep_csv_and_plots(tmp_path):
    out = tmp_path / "weak"
    cmd = [sys.executable, str(REPO / "perf" / "scaling.py"), "run", "--mode", "weak", "--ranks", "1", "2",
           "--out", str(out), "--vertices-per-rank", "300", "--snapshots", "5", "--epochs", "2", "--hidden", "4"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = list(csv.DictReader(open(out / "scaling.csv")))
    assert [int(r["P"]) for r in rows] == [1, 2]
    assert [int(r["N"]) for r in rows] == [300, 600]  # N = vertices-per-rank * P (IBM §6.3)
    for r in rows:
        recs = [json.loads(line) for line in open(r["run_dir"].strip() + "/metrics.jsonl")]
        steady = [x for x in recs if not x["warmup"]]
        assert float(r["epoch_s"]) == steady[len(steady) // 2]["slowest"]["epoch"]  # one steady epoch: itself
        assert float(r["bytes_per_epoch"]) == steady[0]["bytes_sent"]
    t1, t2 = float(rows[0]["epoch_s"]), float(rows[1]["epoch_s"])
    assert abs(float(rows[1]["efficiency"]) - t1 / t2) < 1e-9
    assert float(rows[0]["bytes_per_epoch"]) == 0 < float(rows[1]["bytes_per_epoch"])
    for name in ("time_split.png", "speedup.png", "volume.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # plotting existing run directories (as from a cluster job array) gives the same table
    again = tmp_path / "again"
    proc = subprocess.run([sys.executable, str(REPO / "perf" / "scaling.py"), "plot", "--mode", "weak", "--out",
                           str(again), str(out / "run-p2"), str(out / "run-p1")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (again / "scaling.csv").read_text() == (out / "scaling.csv").read_text()
    # a second sweep into the same --out: refused before it writes (it rewrote job-p1.yaml, then refused run-p1)
    job = (out / "job-p1.yaml").read_text()
    proc = subprocess.run([*cmd[:-2], "--hidden", "5", "--epochs", "3"], capture_output=True, text=True,
                          env=mpi_env(), timeout=300, cwd=REPO)
    assert proc.returncode != 0 and "a sweep never overwrites an earlier one's runs or jobs" in proc.stderr
    assert (out / "job-p1.yaml").read_text() == job


@sweeps
def test_strong_sweep_with_the_node_ceiling(tmp_path):
    """--ceiling: per P > 1, P copies of the P = 1 job run at once; ceiling.csv holds P · t(1) / t(slowest copy)
    from those runs' own summaries, and the table gives each run's share of it. Refused off strong-from-1.
    ``--set`` applies to every run."""
    out = tmp_path / "strong"
    cmd = [sys.executable, str(REPO / "perf" / "scaling.py"), "run", "--mode", "strong", "--ranks", "1", "2",
           "--out", str(out), "--vertices", "300", "--snapshots", "5", "--epochs", "3", "--hidden", "4", "--ceiling",
           "--set", "train.warmup_epochs=2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # --set reaches every run, the ceiling's copies too
    for run in ("run-p1", "run-p2", "ceiling-p2-copy0", "ceiling-p2-copy1"):
        assert [json.loads(line)["warmup"] for line in open(out / run / "metrics.jsonl")] == [True, True, False]
    (row,) = list(csv.DictReader(open(out / "ceiling.csv")))
    assert int(row["P"]) == 2 and row["job"].endswith("job-p1.yaml")
    copies = [json.loads((out / f"ceiling-p2-copy{i}" / "summary.json").read_text()) for i in range(2)]
    slowest = max(c["steady_epoch_seconds"]["median"] for c in copies)
    alone = json.loads((out / "run-p1" / "summary.json").read_text())["steady_epoch_seconds"]["median"]
    assert abs(float(row["ceiling_speedup"]) - 2 * alone / slowest) < 1e-9
    assert "of the node's ceiling" in proc.stdout
    bad = subprocess.run(cmd[:6] + ["2", "3"] + cmd[8:], capture_output=True, text=True, env=mpi_env(), cwd=REPO)
    assert bad.returncode == 2 and "--ceiling: strong scaling from --ranks 1" in bad.stderr


def test_a_run_killed_without_a_word_is_not_blamed_on_its_epoch_line():
    """A launcher killed outright (no error line, nothing on stderr) was reported as "failed (exit -9): epoch 3
    loss ..." — its last progress line as the reason; now it says it was killed and shows that line as such."""
    import signal
    import subprocess

    error_line = perf_script("bench_epoch").error_line
    killed = subprocess.CompletedProcess([], -signal.SIGKILL, "epoch    3  loss 0.6780  val_auc 0.8583\n", "")
    assert error_line(killed) == ("killed by SIGKILL without an error line; its last output: epoch    3  loss 0.6780  "
                                  "val_auc 0.8583")
    assert error_line(subprocess.CompletedProcess([], 1, "", "")) == "stopped without an error line, and no output"
    said = subprocess.CompletedProcess([], 2, "epoch 1\n", "hpcdgnn: error: job.yaml: model.hidden: -1\n")
    assert error_line(said) == "hpcdgnn: error: job.yaml: model.hidden: -1"
    crashed = subprocess.CompletedProcess([], 1, "epoch 1\n", "Traceback ...\nValueError: boom\n")
    assert error_line(crashed) == "ValueError: boom"


def _edit(run, name, **sections):
    """Update sections of a hand-written run's ``name`` (``config.resolved.yaml`` or ``summary.json``)."""
    path = run / name
    load, dump = (yaml.safe_load, yaml.safe_dump) if name.endswith(".yaml") else (json.loads, json.dumps)
    data = load(path.read_text())
    for key, values in sections.items():
        data.setdefault(key, {}).update(values)
    path.write_text(dump(data))


@pytest.mark.parametrize(("name", "section", "change", "what"), [
    ("config.resolved.yaml", "train", {"dtype": "float64"}, "train.dtype"),
    ("summary.json", "environment", {"device": "NVIDIA H100 80GB HBM3"}, "device"),
    ("summary.json", "environment", {"threads_per_rank": 2}, "threads per rank"),
    ("config.resolved.yaml", "strategy", {"blocks": 4}, "strategy options of snapshot"),
])
def test_runs_timed_under_other_conditions_are_refused(tmp_path, name, section, change, what):
    """A float64 P = 1 baseline was taken for float32 P = 2, 3 runs (efficiency 1.10, "super-linear"): runs that
    differ in dtype, device, threads per rank or their strategy's options are refused, naming both runs."""
    scaling = perf_script("scaling")
    data = _dataset(tmp_path, "ds", "{}")
    runs = [_run_dir(tmp_path, f"run-p{P}", P, 50, 8, _epochs(P, [2.0, 1.0 / P]), data) for P in (1, 2, 3)]
    for r in runs:
        _edit(r, "config.resolved.yaml", train={"dtype": "float32"})
    _edit(runs[0], name, **{section: change})
    with pytest.raises(SystemExit, match=rf"cannot compare .*run-p1 \(P=1\) with .*run-p2 \(P=2\): {what} differs"):
        scaling.main(["plot", "--out", str(tmp_path / "o"), *map(str, runs)])


def test_the_backend_is_compared_between_runs_that_communicate_and_layouts_may_differ(tmp_path):
    """P = 1 exchanges nothing, so its comm.backend does not matter; P = 2 over mpi and P = 3 over nccl do not
    compare. A memory run's i×j×k layout scales with P: not an option that changes the work."""
    scaling = perf_script("scaling")
    data = _dataset(tmp_path, "ds", "{}")
    runs = [_run_dir(tmp_path, f"run-p{P}", P, 50, 8, _epochs(P, [2.0, 1.0 / P]), data) for P in (1, 2, 3)]
    for r, backend in zip(runs, ("gloo", "mpi", "mpi"), strict=True):
        _edit(r, "config.resolved.yaml", comm={"backend": backend})
    scaling.main(["plot", "--out", str(tmp_path / "o"), *map(str, runs)])
    _edit(runs[2], "config.resolved.yaml", comm={"backend": "nccl"})
    with pytest.raises(SystemExit, match=r"run-p2 \(P=2\) with .*run-p3 \(P=3\): comm.backend differs"):
        scaling.main(["plot", "--out", str(tmp_path / "o2"), *map(str, runs)])
    tgn = [_run_dir(tmp_path, f"tgn-p{P}", P, 50, 8, _epochs(P, [2.0, 1.0 / P]), data, strategy="memory")
           for P in (1, 2)]
    _edit(tgn[1], "config.resolved.yaml", strategy={"minibatch": 2})
    scaling.main(["plot", "--out", str(tmp_path / "o3"), *map(str, tgn)])


def _with_records(run, **fields):
    """Add ``fields`` (name: one value per epoch) to each record of a hand-written run's metrics.jsonl."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for i, r in enumerate(records):
        r.update({k: v[i] for k, v in fields.items()})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_speedup_is_of_the_training_time_with_the_evaluation_beside_it(tmp_path, capsys):
    """Under `memory` one group evaluates while the others wait: at P = 3 an epoch of 1.5 s held 1.0 s of it, so
    epoch times gave 2.0 / 1.5 = 1.33x, the evaluating rank's. Training times (2.0 - 0.5 and 1.5 - 1.0) give 3x;
    the evaluation stays in the CSV, and the table's header says which time the speed-up is of."""
    scaling = perf_script("scaling")
    data = _dataset(tmp_path, "ds", "{}")
    runs = []
    for P, epoch, ev in ((1, 2.0, 0.5), (3, 1.5, 1.0)):
        d = _run_dir(tmp_path, f"tgn-p{P}", P, 50, 8, _epochs(P, [4.0, epoch]), data, strategy="memory")
        _edit(d, "config.resolved.yaml", strategy={"minibatch": P})
        _with_records(d, memory=[{"eval_seconds": 3.0}, {"eval_seconds": ev}])
        runs.append(d)
    out = tmp_path / "o"
    scaling.main(["plot", "--out", str(out), *map(str, runs)])
    rows = {int(r["P"]): r for r in csv.DictReader(open(out / "scaling.csv"))}
    assert [(float(rows[P]["eval_s"]), float(rows[P]["train_s"])) for P in (1, 3)] == [(0.5, 1.5), (1.0, 0.5)]
    assert float(rows[3]["epoch_s"]) == 1.5 and float(rows[3]["baseline_s"]) == 1.5
    assert float(rows[3]["speedup"]) == pytest.approx(3.0) and float(rows[3]["efficiency"]) == pytest.approx(1.0)
    assert "speed-up and efficiency of the training time" in capsys.readouterr().out
    # a strategy that times no evaluation apart: its training time is its epoch time
    snap = [_run_dir(tmp_path, f"snap-p{P}", P, 50, 8, _epochs(P, [4.0, 2.0 / P]), data) for P in (1, 2)]
    scaling.main(["plot", "--out", str(tmp_path / "o2"), *map(str, snap)])
    rows = list(csv.DictReader(open(tmp_path / "o2" / "scaling.csv")))
    assert [(r["eval_s"], r["train_s"] == r["epoch_s"]) for r in rows] == [("", True), ("", True)]


def test_summary_s_gpu_peak_is_the_whole_run_s(monkeypatch):
    """Each epoch's begin resets the CUDA peak (each record's gpu_peak_bytes is its epoch's), and summary.json read
    the peak after the last epoch: 200 bytes where epoch 1 reached 500. The summary now has the run's maximum, and
    a new run in the same process starts its own when its device is chosen (the allocator's peak counter held the
    earlier run's last epoch, folded into the new run's first)."""
    from types import SimpleNamespace

    import numpy as np
    import torch

    from hpcdgnn.metrics import summary
    from hpcdgnn.metrics.epoch import EpochRecorder

    allocator = {"peak": 0.0}
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: allocator["peak"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: allocator.update(peak=0.0))
    usage = SimpleNamespace(engine_bytes=0, host_bytes=0, transfer_bytes=0, load_seconds=0.0)
    stats = SimpleNamespace(snapshot=lambda: None, take_exchanges=lambda: None, keep_exchanges=False, tags={})
    comm = SimpleNamespace(stats=stats, gather_array=lambda values, tag="metrics": np.array([values]))
    strategy = SimpleNamespace(usage=lambda: usage)
    task = SimpleNamespace(hold_scores=lambda *a: None)
    device = torch.device("cuda", 0)
    run = SimpleNamespace(device=device, strategy=strategy, setup_transfer=0, pretrain_bytes_sent=0)

    from hpcdgnn.train import setup

    monkeypatch.setattr(setup, "select_device", lambda name, comm: device)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    job = SimpleNamespace(comm=SimpleNamespace(backend="mpi"), train=SimpleNamespace(device="cuda"))

    def peaks(per_epoch):
        assert setup._device(job, "job.yaml", comm) == device
        recorder = EpochRecorder(comm, strategy, task, device, warmup_epochs=1, resumed_at=None)
        for peak in per_epoch:
            recorder.begin()
            allocator["peak"] = peak
        return summary._memory(comm, run, 0.0)[0, 4]

    assert peaks([500.0, 200.0]) == 500.0
    assert peaks([100.0, 300.0]) == 300.0
    assert peaks([100.0, 500.0]) == 500.0
    assert peaks([100.0, 100.0]) == 100.0  # not the earlier run's 500


def test_one_run_s_spread_is_reported_and_a_slow_steady_epoch_warned_of(tmp_path, capsys):
    """Each point is one run and epoch_s the median of its steady epochs, with no spread: a second warm-up epoch
    1.7x the next (snapshot P = 2) went into a 'median' of two, their mean, unsaid. The CSV now gives the fastest
    and slowest epoch timed, a spread over 1.3x is warned of with train.warmup_epochs to raise, and the table says
    which times are the mean of two middle epochs."""
    scaling = perf_script("scaling")
    data = _dataset(tmp_path, "ds", "{}")
    r1 = _run_dir(tmp_path, "run-p1", 1, 50, 8, _epochs(1, [4.0, 1.0, 1.1, 1.05]), data)
    r2 = _run_dir(tmp_path, "run-p2", 2, 50, 8, _epochs(2, [4.0, 1.02, 0.6]), data)
    scaling.main(["plot", "--out", str(tmp_path / "o"), str(r1), str(r2)])
    rows = {int(r["P"]): r for r in csv.DictReader(open(tmp_path / "o" / "scaling.csv"))}
    assert [(rows[P]["epochs_timed"], float(rows[P]["epoch_min_s"]), float(rows[P]["epoch_max_s"])) for P in (1, 2)] \
        == [("3", 1.0, 1.1), ("2", 0.6, 1.02)]
    out, err = capsys.readouterr()
    assert "run-p2: its 2 steady epochs took 0.600 to 1.020 s (1.70x" in err and "train.warmup_epochs=2" in err
    assert "run-p1" not in err
    assert "the mean of the two middle epochs timed where a run timed an even number: run-p2 (2)" in out


def test_measured_memory_stands_beside_the_engine_estimate(tmp_path):
    """engine_peak_bytes is an estimate (resident inputs + saved tensors: 0.1 MiB where the RSS grew 124 MiB); the
    CSV now also has the measured peak RSS and, on GPU, the most allocated, each the largest rank's."""
    scaling = perf_script("scaling")
    data = _dataset(tmp_path, "ds", "{}")
    runs = [_run_dir(tmp_path, f"run-p{P}", P, 50, 8, _epochs(P, [2.0, 1.0 / P]), data) for P in (1, 2)]
    _edit(runs[1], "summary.json", memory={"peak_rss_bytes": [100, 300], "gpu_max_allocated_bytes": [9, 5]})
    scaling.main(["plot", "--out", str(tmp_path / "o"), *map(str, runs)])
    rows = {int(r["P"]): r for r in csv.DictReader(open(tmp_path / "o" / "scaling.csv"))}
    assert [(rows[P]["engine_peak_bytes"], rows[P]["peak_rss_bytes"], rows[P]["gpu_peak_bytes"]) for P in (1, 2)] \
        == [("2", "1", ""), ("2", "300", "9")]


def test_the_wait_for_the_last_rank_is_also_the_slowest_rank_s(tmp_path):
    """comm_late_s is the mean over ranks while the other time columns are the slowest rank's, which waits least:
    the CSV now also has comm_late_slowest_s, that rank's."""
    scaling = perf_script("scaling")
    data = _dataset(tmp_path, "ds", "{}")
    runs = [_run_dir(tmp_path, f"run-p{P}", P, 50, 8, _epochs(P, [2.0, 1.0 / P]), data) for P in (1, 2)]
    records = [json.loads(line) for line in (runs[1] / "metrics.jsonl").read_text().splitlines()]
    for r in records:  # rank 0, the slowest, waited 0.01 s; rank 1 0.19 s
        r["time"]["comm_late"] = {"min": 0.01, "mean": 0.1, "max": 0.19}
        r["slowest"]["comm_late"] = 0.01
    (runs[1] / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    scaling.main(["plot", "--out", str(tmp_path / "o"), *map(str, runs)])
    row = next(r for r in csv.DictReader(open(tmp_path / "o" / "scaling.csv")) if r["P"] == "2")
    assert (float(row["comm_late_s"]), float(row["comm_late_slowest_s"])) == (0.1, 0.01)


def test_the_set_up_time_has_its_column(tmp_path):
    """summary.json has the set-up's seconds (in no epoch's time); the CSV had no column for them."""
    scaling = perf_script("scaling")
    data = _dataset(tmp_path, "ds", "{}")
    runs = [_run_dir(tmp_path, f"run-p{P}", P, 50, 8, _epochs(P, [2.0, 1.0 / P]), data) for P in (1, 2)]
    for r, setup in zip(runs, (3.5, 2.25), strict=True):
        _edit(r, "summary.json", totals={"setup_seconds": setup, "pretrain_seconds": 0.0})
    scaling.main(["plot", "--out", str(tmp_path / "o"), *map(str, runs)])
    rows = list(csv.DictReader(open(tmp_path / "o" / "scaling.csv")))
    assert [(float(r["setup_s"]), float(r["pretrain_s"])) for r in rows] == [(3.5, 0.0), (2.25, 0.0)]


def test_the_bytes_say_an_all_reduce_counts_its_buffer_not_its_wire_traffic(tmp_path, monkeypatch, capsys):
    """bytes_per_epoch mixes an all-reduce's buffer (once per rank) with an all-to-all's bytes sent, and the records
    give no kind per tag for a wire estimate: the volume figure's line and the table say what is counted."""
    import matplotlib.axes

    scaling = perf_script("scaling")
    data = _dataset(tmp_path, "ds", "{}")
    runs = [_run_dir(tmp_path, f"run-p{P}", P, 50, 8, _epochs(P, [2.0, 1.0 / P]), data) for P in (1, 2)]
    labels = []
    real_plot = matplotlib.axes.Axes.plot

    def spy(self, *args, label=None, **kw):
        labels.append(label)
        return real_plot(self, *args, label=label, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    scaling.main(["plot", "--out", str(tmp_path / "o"), *map(str, runs)])
    said = "handed to MPI by all ranks (an all-reduce: its buffer per rank, not wire bytes)"
    assert said in labels and f"MiB/ep: {said}" in capsys.readouterr().out
