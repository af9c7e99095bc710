"""perf/scaling.py ``plot`` on hand-written run directories: bar height = printed ``epoch s``, mixed work refused;
and ``run``'s decisions (failures, re-runs, an earlier sweep's --out) with a stand-in launcher copying such runs.

The run directories are written with the same files and keys a real run writes
(``config.resolved.yaml``, ``plan.json``, ``metrics.jsonl`` records built with
:func:`hpcdgnn.metrics.timers.summarize_over_ranks` as the epoch recorder does,
``summary.json`` with ``metrics/summary.py``'s keys), but with chosen epoch
times, so no MPI launch is needed and nothing depends on timing.
"""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from hpcdgnn.metrics.timers import TIME_SPLIT, summarize_over_ranks
from tests.conftest import perf_script


def _scaling():
    return perf_script("scaling")


MODEL = {"name": "tmgcn", "layers": 2, "hidden": 4, "window": 3}
TASK = {"name": "link_prediction", "split": [0.7, 0.15, 0.15], "negatives": 1, "decoder_hidden": 16}


def _run_dir(root, name, P, N, T, epochs, data, model=MODEL, task=TASK, strategy="snapshot"):
    """A finished run: ``epochs`` is one (P, 4) list of per-rank [epoch, load, compute, comm] per epoch."""
    d = root / name
    d.mkdir()
    cfg = {"data": {"path": str(data), "validate": "structure"}, "model": model, "task": task,
           "strategy": {"name": strategy}, "train": {"epochs": len(epochs), "warmup_epochs": 1, "threads": 1}}
    (d / "config.resolved.yaml").write_text(yaml.safe_dump(cfg))
    (d / "plan.json").write_text(json.dumps({"kind": "snapshot", "num_ranks": P, "num_snapshots": T,
                                             "num_vertices": N}))
    records = []
    for e, per_rank in enumerate(epochs, 1):
        times = summarize_over_ranks(np.asarray(per_rank, dtype=float))
        records.append({"epoch": e, "warmup": e <= 1, "loss": 0.5, "time": {k: times[k] for k in TIME_SPLIT},
                        "slowest_rank": times["slowest_rank"], "slowest": times["slowest"],
                        "per_rank": {k: [row[i] for row in per_rank] for i, k in enumerate(TIME_SPLIT)},
                        "bytes_sent": 1000 * (P - 1), "bytes_by_tag": {}, "transfer_bytes": 0})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    steady = [r for r in records if not r["warmup"]]
    summary = {
        "status": "completed", "epochs": len(records), "final": records[-1],
        "steady_epoch_seconds": {"median": float(np.median([r["time"]["epoch"]["max"] for r in steady])),
                                 "mean": float(np.mean([r["time"]["epoch"]["max"] for r in steady]))},
        "memory": {"peak_rss_bytes": [1] * P, "engine_bytes": [1] * P, "activation_peak_bytes": [1] * P,
                   "engine_peak_bytes": [2] * P, "host_payload_bytes": [0] * P},
        "environment": {"num_ranks": P, "threads_per_rank": 1, "device": "cpu", "host": "elsewhere"},
    }
    (d / "summary.json").write_text(json.dumps(summary))
    return d


def _epochs(P, slowest):
    """Per-epoch per-rank splits; rank 0 is the slowest with [epoch, load, compute, comm] parts summing to it."""
    out = []
    for t in slowest:
        load, comm = 0.1 * t, 0.2 * t
        fast = [0.5 * t, 0.05 * t, 0.35 * t, 0.1 * t]
        out.append([[t, load, t - load - comm, comm]] + [fast] * (P - 1))
    return out


def _dataset(tmp_path, name, content):
    d = tmp_path / name
    d.mkdir()
    (d / "manifest.json").write_text(content)
    return d


def test_bar_height_is_the_printed_epoch_time(tmp_path, monkeypatch, capsys):
    """Steady epochs 1.0, 3.0, 1.2, 1.1 (mean 1.575, median 1.15): the bar and the table both say 1.150."""
    import matplotlib.axes

    scaling = _scaling()
    data = _dataset(tmp_path, "ds", "{}")
    r1 = _run_dir(tmp_path, "run-p1", 1, 50, 8, _epochs(1, [9.0, 1.0, 3.0, 1.2, 1.1]), data)
    r2 = _run_dir(tmp_path, "run-p2", 2, 50, 8, _epochs(2, [5.0, 0.7, 0.6, 0.9]), data)
    bars = []
    real_bar = matplotlib.axes.Axes.bar

    def spy(self, x, height, *args, bottom=None, **kw):
        bars.append((list(x), list(height), list(bottom)))
        return real_bar(self, x, height, *args, bottom=bottom, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", spy)
    out = tmp_path / "plot"
    scaling.main(["plot", "--out", str(out), str(r2), str(r1)])
    printed = capsys.readouterr().out.splitlines()
    rows = {int(line.split()[0]): float(line.split()[2]) for line in printed if line.split()[:1] in (["1"], ["2"])}
    assert rows == {1: 1.15, 2: 0.7}  # medians: (1.1 + 1.2) / 2 and the middle of 0.6, 0.7, 0.9
    tops = [bottom + height for bottom, height in zip(bars[-1][2], bars[-1][1], strict=True)]
    for top, run, P in zip(tops, (r1, r2), (1, 2), strict=True):
        median = json.loads((run / "summary.json").read_text())["steady_epoch_seconds"]["median"]
        assert top == pytest.approx(median, rel=1e-12) == pytest.approx(rows[P], abs=5e-4)
    assert (out / "time_split.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(("warmup", "profiled", "over"), [
    ((True, True, True), (False, False, False), "last warm-up"),  # train.warmup_epochs >= train.epochs
    ((True, False, False), (False, True, False), "steady"),  # a profiled epoch (slowed by its profiler) left out
    ((True, True), (False, True), "last warm-up"),
    ((True, False), (False, True), "last warm-up"),
    ((False,), (True,), "profiled"),
])
def test_the_steady_time_is_the_summary_s_when_no_epoch_is_steady(tmp_path, capsys, warmup, profiled, over):
    """perf/scaling.py's epoch time and summary.json's steady_epoch_seconds (computed here by the run's own
    RunTotals) pick the same epochs: with no steady one, the last warm-up epoch's, not the median of them all
    (the first, slowest, epoch included) in one and the last epoch in the other."""
    from hpcdgnn.metrics.summary import RunTotals

    scaling = _scaling()
    run = _run_dir(tmp_path, "run-p2", 2, 50, 8, _epochs(2, [9.0, 1.0, 3.0][: len(warmup)]), _dataset(tmp_path, "ds",
                                                                                                       "{}"))
    records = [{**json.loads(line), "warmup": w, "profiled": p} for line, w, p in
               zip((run / "metrics.jsonl").read_text().splitlines(), warmup, profiled, strict=True)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    totals = RunTotals(2)
    for r in records:
        totals.add(r)
    steady = totals.steady_seconds()
    assert steady["over"] == over
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "steady_epoch_seconds": steady}))
    row = scaling.read_run(run)
    assert row["epoch_s"] == pytest.approx(steady["median"], rel=1e-12)
    assert ("no steady epoch" in capsys.readouterr().err) == (over != "steady")
    # and the CSV says what the time is of (a warm-up epoch's is slower than the steady ones')
    counted = {"steady": sum(not w and not p for w, p in zip(warmup, profiled, strict=True)), "last warm-up": 1,
               "profiled": len(warmup)}[over]
    assert (row["timed_epochs"], row["epochs_timed"]) == (over, counted)


def test_runs_it_cannot_read_are_one_line_and_what_it_can_is_said(tmp_path, capsys):
    """A run without summary.json (killed, still running), a pattern that matched nothing, an --out that is a file:
    one line each, not a traceback. A pre-empted run is noted; an event stream's N whose manifest is not here is
    printed as '-' (it was a format error after the CSV and PNGs were written)."""
    scaling = _scaling()
    data = _dataset(tmp_path, "ds", "{}")
    r1 = _run_dir(tmp_path, "run-p1", 1, 50, 8, _epochs(1, [9.0, 1.0, 1.1]), data)
    r2 = _run_dir(tmp_path, "run-p2", 2, 50, 8, _epochs(2, [5.0, 0.7, 0.6]), data)
    (r2 / "summary.json").rename(tmp_path / "kept.json")
    (tmp_path / "afile").write_text("x")
    for args, says in ((["--out", str(tmp_path / "o"), str(r1), str(r2)], f"{r2}: no summary.json: not a finished "),
                       (["--out", str(tmp_path / "o"), str(tmp_path / "runs" / "strong-*" / "p*")],
                        "no such run directory (a shell pattern that matched nothing"),
                       (["--out", str(tmp_path / "afile"), str(r1)], "is a file; give a directory")):
        with pytest.raises(SystemExit) as e:
            scaling.main(["plot", *args])
        assert says in str(e.value) and "\n" not in str(e.value), e.value
    (tmp_path / "kept.json").rename(r2 / "summary.json")
    summary = json.loads((r2 / "summary.json").read_text())
    (r2 / "summary.json").write_text(json.dumps({**summary, "status": "preempted"}))
    for run in (r1, r2):  # an event stream's plan has no N; its manifest lies on the cluster
        (run / "plan.json").write_text(json.dumps({"kind": "memory", "num_ranks": 1}))
        cfg = yaml.safe_load((run / "config.resolved.yaml").read_text())
        (run / "config.resolved.yaml").write_text(yaml.safe_dump({**cfg, "data": {"path": "/cluster/elsewhere"}}))
    scaling.main(["plot", "--out", str(tmp_path / "o"), str(r1), str(r2)])
    out, err = capsys.readouterr()
    assert f"note: {r2}: status preempted after 3 epochs" in err, err
    assert [line.split()[1] for line in out.splitlines() if line.split()[:1] in (["1"], ["2"])] == ["-", "-"], out


def test_the_split_stacks_exposed_communication_and_the_csv_keeps_the_wait(tmp_path, monkeypatch):
    """With overlap, communication under way (comm) exceeds its exposed part, and compute is the epoch less
    load and exposed: the bar stacks transfer, compute and the exposed communication to the epoch, not comm;
    the CSV keeps comm, exposed and the wait for other ranks as the mean over ranks (``time.comm_late``)."""
    import csv

    import matplotlib.axes

    scaling = _scaling()
    data = _dataset(tmp_path, "ds", "{}")
    runs = []
    for P, comm, exposed, late in ((1, 0.0, 0.0, 0.0), (2, 0.5, 0.2, 0.15)):
        d = _run_dir(tmp_path, f"run-p{P}", P, 50, 8, [[[2.0, 0.1, 2.0 - 0.1 - exposed, comm]] * P] * 3, data)
        recs = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
        for r in recs:
            r["slowest"].update(comm_exposed=exposed, comm_late=0.0)  # the slowest rank waits least
            r["time"]["comm_late"] = {"min": 0.0, "mean": late, "max": 2 * late}
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        runs.append(d)
    bars = []
    real_bar = matplotlib.axes.Axes.bar

    def spy(self, x, height, *args, bottom=None, label=None, **kw):
        bars.append((label, list(height), list(bottom)))
        return real_bar(self, x, height, *args, bottom=bottom, label=label, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", spy)
    out = tmp_path / "plot"
    scaling.main(["plot", "--out", str(out), *map(str, runs)])
    label, height, bottom = bars[-1]
    assert label == "communication (exposed)" and height == pytest.approx([0.0, 0.2])
    assert [b + h for b, h in zip(bottom, height, strict=True)] == pytest.approx([2.0, 2.0])
    rows = {int(r["P"]): r for r in csv.DictReader(open(out / "scaling.csv"))}
    assert (float(rows[2]["comm_s"]), float(rows[2]["comm_exposed_s"]), float(rows[2]["comm_late_s"])) == (
        0.5, 0.2, 0.15)


def test_strong_scaling_refuses_different_datasets(tmp_path):
    """Different manifests (or N) are refused, naming both runs; an identical copy elsewhere is accepted."""
    scaling = _scaling()
    a = _dataset(tmp_path, "a", '{"N": 50}')
    b = _dataset(tmp_path, "b", '{"N": 60}')
    r1 = _run_dir(tmp_path, "run-p1", 1, 50, 8, _epochs(1, [2.0, 1.0]), a)
    r2 = _run_dir(tmp_path, "run-p2", 2, 50, 8, _epochs(2, [2.0, 0.6]), b)
    with pytest.raises(SystemExit) as e:
        scaling.main(["plot", "--out", str(tmp_path / "o"), str(r1), str(r2)])
    msg = str(e.value)
    assert str(r1) in msg and str(r2) in msg and "dataset (manifest.json sha256) differs" in msg
    assert not (tmp_path / "o" / "scaling.csv").exists()
    # the same manifest copied elsewhere (as on a cluster scratch dir) is the same dataset
    shutil.copy(a / "manifest.json", b / "manifest.json")
    scaling.main(["plot", "--out", str(tmp_path / "o"), str(r1), str(r2)])
    # different N with the dataset not readable here: refused on N
    r3 = _run_dir(tmp_path, "run-p4", 4, 64, 8, _epochs(4, [2.0, 0.4]), tmp_path / "gone")
    with pytest.raises(SystemExit, match=r"run-p4 \(P=4\): N \(vertices\) differs \(50 vs 64\)"):
        scaling.main(["plot", "--out", str(tmp_path / "o2"), str(r1), str(r3)])
    # the plot in o stays: a new plot there is refused before it reads a run
    table = (tmp_path / "o" / "scaling.csv").read_text()
    with pytest.raises(SystemExit):
        scaling.main(["plot", "--out", str(tmp_path / "o"), str(r1), str(r2)])
    assert (tmp_path / "o" / "scaling.csv").read_text() == table


@pytest.mark.parametrize(
    "change,what",
    [({"model": {**MODEL, "name": "cdgcn"}}, "model"), ({"task": {**TASK, "name": "node_classification"}}, "task")],
)
def test_refuses_different_model_or_task(tmp_path, change, what):
    """Same dataset, but another model or task: no speed-up between them (strategies may differ, see below)."""
    scaling = _scaling()
    data = _dataset(tmp_path, "ds", "{}")
    r1 = _run_dir(tmp_path, "run-p1", 1, 50, 8, _epochs(1, [2.0, 1.0]), data)
    r2 = _run_dir(tmp_path, "run-p2", 2, 50, 8, _epochs(2, [2.0, 0.6]), data, **change)
    with pytest.raises(SystemExit, match=rf"cannot compare .*run-p1 \(P=1\) with .*run-p2 \(P=2\): {what} differs"):
        scaling.main(["plot", "--out", str(tmp_path / "o"), str(r1), str(r2)])


def test_weak_scaling_needs_same_vertices_per_rank(tmp_path):
    """Weak scaling compares different graphs by design, but only at the same N/P and T."""
    scaling = _scaling()
    r1 = _run_dir(tmp_path, "run-p1", 1, 300, 5, _epochs(1, [2.0, 1.0]), _dataset(tmp_path, "g1", '{"N": 300}'))
    r2 = _run_dir(tmp_path, "run-p2", 2, 600, 5, _epochs(2, [2.0, 1.25]), _dataset(tmp_path, "g2", '{"N": 600}'))
    scaling.main(["plot", "--mode", "weak", "--out", str(tmp_path / "o"), str(r1), str(r2)])
    rows = (tmp_path / "o" / "scaling.csv").read_text().splitlines()
    assert rows[2].split(",")[13] == "0.8"  # efficiency t1 / t2 = 1.0 / 1.25
    r3 = _run_dir(tmp_path, "run-p4", 4, 1000, 5, _epochs(4, [2.0, 1.5]), _dataset(tmp_path, "g4", '{"N": 1000}'))
    with pytest.raises(SystemExit, match=r"vertices per rank N/P differs \(300\.0 vs 250\.0\)"):
        scaling.main(["plot", "--mode", "weak", "--out", str(tmp_path / "o2"), str(r1), str(r3)])


def test_runs_of_the_other_mode_are_refused_with_the_mode_to_use(tmp_path):
    """slurm-weak.sh's runs plotted without --mode weak (the default is strong) were refused as 'N differs ... plot
    these in separate sweeps', which they are not; a strong sweep's runs under --mode weak likewise. Each refusal
    now names the mode their sizes fit; runs of neither get no such hint."""
    scaling = _scaling()
    weak = [_run_dir(tmp_path, f"w{P}", P, 300 * P, 5, _epochs(P, [2.0, 1.0]), _dataset(tmp_path, f"g{P}", "{}"))
            for P in (1, 2)]
    with pytest.raises(SystemExit, match=r"N \(vertices\) differs \(300 vs 600\).*then plot --mode weak\)$"):
        scaling.main(["plot", "--out", str(tmp_path / "o1"), *map(str, weak)])
    data = _dataset(tmp_path, "ds", "{}")
    strong = [_run_dir(tmp_path, f"s{P}", P, 300, 5, _epochs(P, [2.0, 1.0]), data) for P in (1, 2)]
    with pytest.raises(SystemExit, match=r"N/P differs \(300\.0 vs 150\.0\).*then plot --mode strong, the default\)$"):
        scaling.main(["plot", "--mode", "weak", "--out", str(tmp_path / "o2"), *map(str, strong)])
    other = _run_dir(tmp_path, "x2", 2, 500, 5, _epochs(2, [2.0, 1.0]), _dataset(tmp_path, "g5", "{}"))
    with pytest.raises(SystemExit, match=r"plot these in separate sweeps$"):
        scaling.main(["plot", "--out", str(tmp_path / "o3"), str(weak[0]), str(other)])


def _csv(path):
    import csv

    return {(r["strategy"], int(r["P"])): r for r in csv.DictReader(open(path))}


def test_speedup_is_against_the_fastest_p1_run_of_any_strategy(tmp_path, capsys):
    """Issue 13: vertex at P = 1 takes 2.0 s, snapshot 1.0 s; vertex at P = 2 takes 1.0 s. Against its own
    P = 1 run vertex would show 2.0x (super-linear), against the fastest P = 1 run it is 1.0x, efficiency 0.5."""
    scaling = _scaling()
    data = _dataset(tmp_path, "ds", "{}")
    runs = [_run_dir(tmp_path, "snap-p1", 1, 50, 8, _epochs(1, [3.0, 1.0]), data),
            _run_dir(tmp_path, "vert-p1", 1, 50, 8, _epochs(1, [3.0, 2.0]), data, strategy="vertex"),
            _run_dir(tmp_path, "vert-p2", 2, 50, 8, _epochs(2, [3.0, 1.0]), data, strategy="vertex"),
            _run_dir(tmp_path, "snap-p2", 2, 50, 8, _epochs(2, [3.0, 0.625]), data)]
    out = tmp_path / "o"
    scaling.main(["plot", "--out", str(out), *map(str, runs)])
    rows = _csv(out / "scaling.csv")
    assert float(rows[("vertex", 2)]["speedup"]) == pytest.approx(1.0)
    assert float(rows[("vertex", 2)]["efficiency"]) == pytest.approx(0.5)
    assert float(rows[("vertex", 1)]["speedup"]) == pytest.approx(0.5)  # slower than snapshot on one rank
    assert float(rows[("snapshot", 2)]["speedup"]) == pytest.approx(1.6)
    assert float(rows[("snapshot", 1)]["speedup"]) == pytest.approx(1.0)
    assert {r["baseline"] for r in rows.values()} == {"snapshot P=1"}
    assert {float(r["baseline_s"]) for r in rows.values()} == {1.0}
    printed = capsys.readouterr().out
    assert "against the fastest P=1 run of any strategy: snapshot, 1.000 s" in printed
    for name in ("time_split.png", "speedup.png", "volume.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    # the fastest P = 1 run is the baseline whichever strategy it is
    fast = _run_dir(tmp_path, "chunk-p1", 1, 50, 8, _epochs(1, [3.0, 0.8]), data, strategy="chunk")
    scaling.main(["plot", "--out", str(tmp_path / "o2"), *map(str, runs), str(fast)])
    rows = _csv(tmp_path / "o2" / "scaling.csv")
    assert float(rows[("snapshot", 1)]["speedup"]) == pytest.approx(0.8)
    assert float(rows[("vertex", 2)]["efficiency"]) == pytest.approx(0.4)
    assert {r["baseline"] for r in rows.values()} == {"chunk P=1"}
    assert "another trajectory" not in capsys.readouterr().err  # full-batch strategies: the same work
    seq = _run_dir(tmp_path, "seq-p2", 2, 50, 8, _epochs(2, [3.0, 0.5]), data, strategy="sequences")
    scaling.main(["plot", "--out", str(tmp_path / "o3"), *map(str, runs), str(seq)])
    assert "note: sequences trains another trajectory than snapshot" in capsys.readouterr().err


def test_baseline_without_a_p1_run_is_the_fastest_at_the_smallest_p(tmp_path):
    """No P = 1 run: speed-up and efficiency against the fastest run at the smallest P (here P = 2)."""
    scaling = _scaling()
    data = _dataset(tmp_path, "ds", "{}")
    runs = [_run_dir(tmp_path, "vert-p2", 2, 50, 8, _epochs(2, [3.0, 1.5]), data, strategy="vertex"),
            _run_dir(tmp_path, "snap-p2", 2, 50, 8, _epochs(2, [3.0, 1.0]), data),
            _run_dir(tmp_path, "vert-p4", 4, 50, 8, _epochs(4, [3.0, 1.0]), data, strategy="vertex")]
    scaling.main(["plot", "--out", str(tmp_path / "o"), *map(str, runs)])
    rows = _csv(tmp_path / "o" / "scaling.csv")
    assert float(rows[("vertex", 4)]["speedup"]) == pytest.approx(1.0)
    assert float(rows[("vertex", 4)]["efficiency"]) == pytest.approx(0.5)  # 1.0 * 2 / 4
    assert {r["baseline"] for r in rows.values()} == {"snapshot P=2"}


def test_sweep_adds_the_baseline_strategy_at_the_smallest_p():
    """``run --strategy vertex`` also runs snapshot at the smallest P (the speed-up reference); not twice."""
    import argparse

    scaling = _scaling()
    ns = argparse.Namespace(strategy=["vertex"], ranks=[1, 2, 4], baseline=["snapshot"])
    assert scaling._sweep_runs(ns) == [("vertex", 1), ("vertex", 2), ("vertex", 4), ("snapshot", 1)]
    ns = argparse.Namespace(strategy=["snapshot", "vertex"], ranks=[2, 4], baseline=["snapshot"])
    assert scaling._sweep_runs(ns) == [("snapshot", 2), ("snapshot", 4), ("vertex", 2), ("vertex", 4)]
    ns = argparse.Namespace(strategy=["vertex"], ranks=[1, 2], baseline=[])
    assert scaling._sweep_runs(ns) == [("vertex", 1), ("vertex", 2)]


@pytest.mark.parametrize("hosts, threads, expect", [
    ("elsewhere", 10 ** 6, False),  # an older summary naming another host (rank 0's only): not run here
    ("here", 10 ** 6, True),  # an older summary naming this host: every rank taken to have run here
    ("here:all", 64, True),  # every rank on this machine with more threads than its cores
    ("here:1+elsewhere:rest", 1, False),  # one rank here, the others on another node: within this machine's cores
    ("here:1+elsewhere:rest", 10 ** 6, True),
])
def test_oversubscribed_counts_the_ranks_on_this_machine_only(tmp_path, hosts, threads, expect):
    """``oversubscribed`` compares this machine's cores with the threads of the ranks that ran on it, from
    summary.json's ``hosts``: a 4-rank run on 4 nodes is not oversubscribed because rank 0's node is this one."""
    import os

    P = 4
    d = _run_dir(tmp_path, "run", P, 100, 5, _epochs(P, [1.0, 1.0]), _dataset(tmp_path, "d", "{}"))
    summary = json.loads((d / "summary.json").read_text())
    env = summary["environment"]
    env["threads_per_rank"] = threads
    here = os.uname().nodename
    if hosts == "here":
        env.update(host=here)
    elif hosts == "here:all":
        env.update(host=here, hosts={here: P})
    elif hosts == "here:1+elsewhere:rest":
        env.update(host=here, hosts={here: 1, "elsewhere": P - 1})
    (d / "summary.json").write_text(json.dumps(summary))
    assert _scaling().read_run(d)["oversubscribed"] is expect


@pytest.mark.parametrize("host_cpus, threads, expect", [
    ({"n1": 4, "n2": 4}, 2, False),  # 2 ranks x 2 threads on each 4-CPU node
    ({"n1": 4, "n2": 3}, 2, True),  # the second node has 3 CPUs for its 4 threads
    ({"n1": 64, "n2": 64}, 33, True),
])
def test_oversubscribed_per_node_from_the_summary_s_cpu_counts(tmp_path, host_cpus, threads, expect):
    """A run on a cluster's nodes (none of them this machine) is judged by each node's CPUs for the job
    (summary.json ``host_cpus``, the union of its ranks' affinities) against its ranks' threads."""
    P = 4
    d = _run_dir(tmp_path, "run", P, 100, 5, _epochs(P, [1.0, 1.0]), _dataset(tmp_path, "d", "{}"))
    summary = json.loads((d / "summary.json").read_text())
    summary["environment"].update(threads_per_rank=threads, host="n1", hosts={"n1": 2, "n2": 2}, host_cpus=host_cpus)
    (d / "summary.json").write_text(json.dumps(summary))
    assert _scaling().read_run(d)["oversubscribed"] is expect


def test_an_event_stream_run_and_an_epoch_resumed_within(tmp_path, capsys):
    """A ``memory`` (TGN) run's plan.json holds neither N nor T (KeyError: 'num_vertices' before): N comes from the
    dataset's manifest. An epoch a resume continued within timed only its batches after the resume's: left out of
    the row; a run with no other epoch is refused in one line saying so."""
    scaling = _scaling()
    data = _dataset(tmp_path, "ev", json.dumps({"format": "hpcdgnn-events", "num_vertices": 77}))
    runs = []
    for P, times, partial in ((1, [9.0, 2.0, 2.2], None), (2, [5.0, 0.3, 1.1, 1.3], 2)):
        d = _run_dir(tmp_path, f"tgn-p{P}", P, 77, 0, _epochs(P, times), data, strategy="memory")
        (d / "plan.json").write_text(json.dumps({"kind": "memory", "num_ranks": P, "minibatch": P}))
        if partial:  # epoch 2 was resumed after 40 of its batches: its 0.3 s are the rest's
            records = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
            records[partial - 1]["resumed_after_batches"] = 40
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        runs.append(d)
    scaling.main(["plot", "--out", str(tmp_path / "plot"), *map(str, runs)])
    rows = {int(line.split()[0]): line.split() for line in capsys.readouterr().out.splitlines()
            if line.split()[:1] in (["1"], ["2"])}
    assert float(rows[1][2]) == 2.1 and float(rows[2][2]) == 1.2  # P = 2: the median of 1.1 and 1.3, not 0.3
    with warnings.catch_warnings():  # the helper's summary: the median of no steady epoch
        warnings.simplefilter("ignore", RuntimeWarning)
        only = _run_dir(tmp_path, "tgn-only", 1, 77, 0, _epochs(1, [0.4]), data, strategy="memory")
    (only / "plan.json").write_text(json.dumps({"kind": "memory", "num_ranks": 1}))
    record = json.loads((only / "metrics.jsonl").read_text())
    (only / "metrics.jsonl").write_text(json.dumps({**record, "resumed_after_batches": 3}) + "\n")
    with pytest.raises(SystemExit, match="has no epochs at P = 1 but one a resume continued within"):
        scaling.main(["plot", "--out", str(tmp_path / "plot2"), str(only)])


# --- `run`'s decisions, with a stand-in launcher: no MPI job, no training -------------------------------------------

_FAKE_LAUNCHER = '''#!{python}
"""Stands in for `mpirun -np P`: copies a finished run of P ranks (template-pP) to --output, as the job's strategy;
fails as hpcdgnn does for strategy vertex with --set strategy.vertex_ranks=1; pre-empted where preempt-RUNNAME is."""
import json, shutil, sys
from pathlib import Path
import yaml
here = Path(__file__).parent
P, argv = int(sys.argv[1]), sys.argv[2:]  # argv: python -m hpcdgnn run JOB --output RUNDIR [--set ...]
with open(here / "calls.txt", "a") as f:
    f.write(" ".join(argv[4:]) + "\\n")
if argv[4] == "--resume":
    run = Path(argv[5])
    if (here / f"fail-resume-{{run.name}}").exists():
        print(f"hpcdgnn: error: --resume {{run}}: data.path: no dataset there", file=sys.stderr)
        sys.exit(2)
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({{**summary, "status": "completed"}}))
    sys.exit(0)
job, run = yaml.safe_load(Path(argv[4]).read_text()), Path(argv[argv.index("--output") + 1])
if job["strategy"]["name"] == "vertex" and "strategy.vertex_ranks=1" in argv:
    print("hpcdgnn: error: strategy.vertex_ranks: no such setting of strategy vertex", file=sys.stderr)
    sys.exit(2)
shutil.copytree(here / f"template-p{{P}}", run)
cfg = yaml.safe_load((run / "config.resolved.yaml").read_text())
cfg["strategy"]["name"], cfg["data"]["path"] = job["strategy"]["name"], job["data"]["path"]
(run / "config.resolved.yaml").write_text(yaml.safe_dump(cfg))
manifest = json.loads((Path(job["data"]["path"]) / "manifest.json").read_text())
if "num_vertices" in manifest:  # a generated graph's N and T
    plan = json.loads((run / "plan.json").read_text())
    plan.update(num_vertices=manifest["num_vertices"], num_snapshots=manifest["num_snapshots"])
    (run / "plan.json").write_text(json.dumps(plan))
if (here / f"preempt-{{run.name}}").exists():
    (here / f"preempt-{{run.name}}").unlink()
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({{**summary, "status": "preempted"}}))
    (run / "checkpoints" / "epoch-000001").mkdir(parents=True)  # what it resumes from
    (run / "checkpoints" / "epoch-000001" / "COMPLETE").write_text("{{}}")
    sys.exit(75)
'''


def _fake_launcher(tmp_path, ranks=(1, 2, 3)):
    """A launcher for ``run --launcher``: finished runs of P ranks from templates written by :func:`_run_dir`, in
    milliseconds. Returns (the --launcher value, the file it logs each call's arguments to)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    data = _dataset(tmp_path, "template-data", "{}")
    for P in ranks:
        _run_dir(bin_, f"template-p{P}", P, 50, 8, _epochs(P, [3.0, 1.0 / P, 1.1 / P]), data)
    launch = bin_ / "launch"
    launch.write_text(_FAKE_LAUNCHER.format(python=sys.executable))
    launch.chmod(0o755)
    return f"{launch} {{P}}", bin_ / "calls.txt"


def _sweep(capsys, *args):
    """``scaling.py run ARGS`` in this process: (exit code, stdout, stderr)."""
    code = 0
    try:
        _scaling().main(["run", *map(str, args)])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
        if not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_failed_run_is_reported_the_rest_run_and_a_rerun_continues_the_sweep(tmp_path, capsys):
    """The user trial's sweep (vertex refuses strategy.vertex_ranks): it ended at the first failure with no CSV and
    a re-run into the same --out was refused. Now every grid run happens and is reported, each vertex run is named
    with its command and error line, the exit is non-zero; a re-run of the same command keeps the completed runs
    (none launched again), resumes a pre-empted one, sets a dead one aside and writes its report beside the first.
    Other settings into that --out are refused in one line, before anything is written."""
    launcher, calls = _fake_launcher(tmp_path)
    data, out = _dataset(tmp_path, "ds", "{}"), tmp_path / "sweep"
    sweep = ["--ranks", 1, 2, 3, "--strategy", "grid", "vertex", "--baseline", "--data", data, "--epochs", 2,
             "--set", "strategy.vertex_ranks=1", "--out", out, "--launcher", launcher]
    (tmp_path / "bin" / "preempt-run-grid-p2").write_text("")
    code, stdout, stderr = _sweep(capsys, *sweep)
    assert code == 1 and "Traceback" not in stderr, stderr
    for P in (1, 2, 3):
        assert (f"failed: vertex P={P}: failed (exit 2): hpcdgnn: error: strategy.vertex_ranks: no such setting"
                in stderr), stderr
        assert f"command: {launcher.format(P=P)} " in stderr
    assert "failed: grid P=2: pre-empted (exit 75; a re-run of this sweep resumes it)" in stderr, stderr
    assert [(r["strategy"], r["P"], r["status"]) for r in map(dict, _csv(out / "scaling.csv").values())] == [
        ("grid", "1", "completed"), ("grid", "3", "completed")]
    first = {name: (out / name).read_bytes() for name in ("scaling.csv", "speedup.png")}
    # the same command again: grid P = 1 and 3 kept, grid P = 2 resumed, vertex tried again
    (out / "run-vertex-p1").mkdir()  # as a run killed before its summary
    calls.write_text("")
    code, stdout, stderr = _sweep(capsys, *sweep)
    assert code == 1
    assert f"grid P=1: completed by an earlier run of this sweep ({out / 'run-grid-p1'}); kept" in stdout
    launched = calls.read_text().splitlines()
    assert not any("run-grid-p1" in c or "run-grid-p3" in c for c in launched), launched
    assert f"--resume {out / 'run-grid-p2'}" in launched
    assert len(list(out.glob("run-vertex-p1.attempt-*"))) == 1 and "set aside as run-vertex-p1.attempt-" in stdout
    (report,) = out.glob("report-*")
    assert sorted(int(r["P"]) for r in _csv(report / "scaling.csv").values()) == [1, 2, 3]
    assert {name: (out / name).read_bytes() for name in first} == first  # the first report stays
    # other settings: refused before anything is written, naming what differs
    jobs = {p.name: p.read_text() for p in out.glob("job-*")}
    for change, says in ((["--epochs", 3], "train.epochs 2 there, 3 now"),
                         (["--set", "strategy.vertex_ranks=2"], "its launcher and --set were")):
        code, stdout, stderr = _sweep(capsys, *sweep, *change)
        assert code == 2 and says in stderr and stderr.count("\n") == 1, stderr
        assert "a re-run continues one only with the same settings" in stderr
    assert {p.name: p.read_text() for p in out.glob("job-*")} == jobs
    assert len(list(out.glob("report-*"))) == 1


def test_a_run_pre_empted_before_its_first_checkpoint_is_run_again_not_resumed(tmp_path):
    """summary.json says preempted also for a stop in a new run's set-up or first epoch, which leaves no
    checkpoint: --resume would refuse it at every re-run of the sweep; it is set aside and run again instead."""
    scaling = _scaling()
    run = _run_dir(tmp_path, "run-p2", 2, 50, 8, _epochs(2, [3.0, 1.0]), _dataset(tmp_path, "ds", "{}"))
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "preempted"}))
    assert scaling._run_state(run) == "incomplete"
    (run / "checkpoints" / "epoch-000001").mkdir(parents=True)
    (run / "checkpoints" / "epoch-000001" / "COMPLETE").write_text("{}")
    assert scaling._run_state(run) == "preempted"


def test_a_sweep_into_an_earlier_one_s_out_refuses_its_graphs_and_keeps_its_report(tmp_path, capsys):
    """The user trial: a weak sweep into the --out of one with other sizes reused its graph-p1 and graph-p2 (N/P
    was not the one asked) and wrote over its scaling.csv and plots. A graph whose manifest's N, T or density
    differ is refused in one line; a sweep of other runs (no shared names, the same graph) reports beside."""
    launcher, _ = _fake_launcher(tmp_path)
    out = tmp_path / "weak"
    out.mkdir()
    for P in (1, 2):  # the earlier sweep's graphs: --vertices-per-rank 256 --snapshots 4
        _dataset(out, f"graph-p{P}", json.dumps({"num_vertices": 256 * P, "num_snapshots": 4,
                                                  "source": {"generator": "ibm-6.3-uniform", "density": 3.0}}))
    weak = ["--mode", "weak", "--ranks", 1, 2, "--epochs", 2, "--out", out, "--launcher", launcher]
    code, _, stderr = _sweep(capsys, *weak, "--strategy", "vertex", "--vertices-per-rank", 512, "--snapshots", 8)
    assert code == 2 and stderr.count("\n") == 1, stderr
    assert f"{out / 'graph-p1'}: a graph an earlier sweep generated, not the one asked for (N 256 there, 512 asked; " \
           "T 4 there, 8 asked)" in stderr
    assert not list(out.glob("job-*"))
    code, _, stderr = _sweep(capsys, *weak, "--vertices-per-rank", 256, "--snapshots", 4, "--density", 2)
    assert code == 2 and "density 3.0 there, 2.0 asked" in stderr, stderr
    # the same graphs: the snapshot sweep, then a vertex one beside it
    code, _, stderr = _sweep(capsys, *weak, "--vertices-per-rank", 256, "--snapshots", 4)
    assert code == 0, stderr
    first = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    code, stdout, stderr = _sweep(capsys, *weak, "--vertices-per-rank", 256, "--snapshots", 4, "--strategy", "vertex")
    assert code == 0, stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name in first} == first
    (report,) = out.glob("report-*")
    assert "holds an earlier report (scaling.csv, plots); this one goes beside it" in stdout
    assert set(_csv(report / "scaling.csv")) == {("vertex", 1), ("vertex", 2), ("snapshot", 1)}


def test_a_graph_that_cannot_be_generated_is_one_line_and_a_second_sweep_at_once_is_refused(tmp_path, capsys):
    """Generation failing (here: out of memory) was a CalledProcessError traceback after hpcdgnn's line; now a
    failure of the runs that need it, in one line each. A sweep into an --out another one is writing was not
    stopped (both generated the same graph; their job files could cross): refused, nothing written."""
    import fcntl

    launcher, calls = _fake_launcher(tmp_path)
    out = tmp_path / "w"
    code, stdout, stderr = _sweep(capsys, "--mode", "weak", "--ranks", 1, "--vertices-per-rank", 64, "--snapshots",
                                  3, "--density", 1e9, "--out", out, "--launcher", launcher)
    assert code == 1 and "Traceback" not in stderr, stderr
    assert f"failed: snapshot P=1: generating {out / 'graph-p1'} failed (exit 2): hpcdgnn: error: generate: out of " \
           "memory" in stderr, stderr
    assert not calls.exists() and not (out / "scaling.csv").exists()
    busy = tmp_path / "busy"
    busy.mkdir()
    with open(busy / ".scaling.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code, _, stderr = _sweep(capsys, "--ranks", 1, "--data", _dataset(tmp_path, "ds", "{}"), "--out", busy,
                                 "--launcher", launcher)
    assert code == 2 and stderr == (f"scaling.py: error: --out {busy}: another scaling.py run is writing there now; "
                                    "wait for it to end (then a re-run continues the sweep), or give another --out\n")
    assert [p.name for p in busy.iterdir()] == [".scaling.lock"] and not calls.exists()


@pytest.mark.parametrize(("args", "says"), [
    (["--ranks", "0", "2"], "--ranks 0 2: must be 1 or more"),
    (["--ranks", "2", "2"], "--ranks 2 2: each rank count once"),
    (["--ranks", "1", "--epochs", "0"], "--epochs 0: must be 1 or more"),
    (["--mode", "weak", "--ranks", "1", "--data", "D"], "--data is for strong scaling"),
    (["--ranks", "1", "2", "--data", "/nonexistent"], "--data /nonexistent: no dataset there"),  # not per run
])
def test_bad_sweep_arguments_are_one_line_and_exit_2(tmp_path, capsys, args, says):
    """``--ranks 0 2`` ran mpirun -np 0 (a rank on every slot) and recorded that run as p0."""
    out = tmp_path / "o"
    code, _, stderr = _sweep(capsys, *args, "--out", out)
    assert code == 2 and says in stderr and stderr.count("\n") == 1, stderr
    assert not out.exists()


def test_speedup_axes_hold_super_linear_efficiency_and_label_every_p(tmp_path, monkeypatch):
    """Efficiency 1.76 went off ax2.set_ylim(0, 1.1); the log2 axes labelled powers of 2 only (P = 3 unlabelled)."""
    scaling = _scaling()
    data = _dataset(tmp_path, "ds", "{}")
    runs = [_run_dir(tmp_path, f"run-p{P}", P, 50, 8, _epochs(P, [3.0, t]), data)
            for P, t in ((1, 1.0), (2, 0.284), (3, 0.25))]  # efficiency 1.76 at P = 2
    figures = _figures(monkeypatch)
    scaling.main(["plot", "--out", str(tmp_path / "o"), *map(str, runs)])
    ax, ax2 = figures["speedup.png"].axes
    assert ax2.get_ylim()[1] >= 1.76
    for name, axes in (("speedup.png", ax), ("volume.png", figures["volume.png"].axes[0])):
        labels = [t.get_text() for t in axes.get_xticklabels() if t.get_visible() and t.get_text()]
        assert labels == ["1", "2", "3"], (name, labels)
        assert not [t.get_text() for t in axes.get_xticklabels(minor=True) if t.get_text()]


def test_plot_leaves_out_the_attempts_the_job_scripts_set_aside(tmp_path, capsys):
    """runs/SWEEP/p* also matched p1.attempt-TIME (a dead attempt jobs/lib.sh moved aside, no summary.json): it
    was 'not a finished hpcdgnn run' and no plot. Left out with a note; the CSV has status and threads per rank."""
    import csv

    scaling = _scaling()
    data = _dataset(tmp_path, "ds", "{}")
    runs = [_run_dir(tmp_path, f"p{P}", P, 50, 8, _epochs(P, [3.0, 1.0 / P]), data) for P in (1, 2)]
    dead = tmp_path / "p1.attempt-20261205-101500"
    dead.mkdir()
    (dead / "config.resolved.yaml").write_text("{}")
    scaling.main(["plot", "--out", str(tmp_path / "o"), str(runs[0]), str(dead), str(runs[1])])
    err = capsys.readouterr().err
    assert f"note: {dead}: left out: an attempt that stopped, set aside when it was run again (by the job scripts, " \
           "jobs/lib.sh, or a re-run of a scaling.py sweep)" in err
    rows = list(csv.DictReader(open(tmp_path / "o" / "scaling.csv")))
    assert [(r["P"], r["status"], r["threads_per_rank"]) for r in rows] == [("1", "completed", "1"),
                                                                          ("2", "completed", "1")]
    with pytest.raises(SystemExit, match="every run directory given is an attempt set aside"):
        scaling.main(["plot", "--out", str(tmp_path / "o2"), str(dead)])


def test_memory_layouts_are_lines_of_their_own_and_the_csv_says_each(tmp_path):
    """TGN's exact 2x1x1 and approximate 1x1x2 at P = 2 were two rows called `memory`, one line of the speed-up
    figure; now each layout is its line (`memory (minibatch)`, `memory (memory)`), both starting at the P = 1 run,
    and scaling.csv's `layout` column says which; a grid's sides are those plan.json holds."""
    import csv

    scaling = _scaling()
    data = _dataset(tmp_path, "ds", "{}")
    runs = []
    for name, P, sides in (("p1", 1, (1, 1, 1)), ("p2i", 2, (2, 1, 1)), ("p2k", 2, (1, 1, 2))):
        d = _run_dir(tmp_path, name, P, 50, 8, _epochs(P, [3.0, 1.0, 1.0]), data, strategy="memory")
        cfg = yaml.safe_load((d / "config.resolved.yaml").read_text())
        cfg["strategy"].update(zip(("minibatch", "epoch", "memory"), sides, strict=True))
        (d / "config.resolved.yaml").write_text(yaml.safe_dump(cfg))
        runs.append(d)
    rows = scaling.add_scaling([scaling.read_run(d) for d in runs], "strong")
    lines = scaling._lines(rows)
    assert {k: [Path(r["run_dir"]).name for r in v] for k, v in lines.items()} == {
        "memory (minibatch)": ["p1", "p2i"], "memory (memory)": ["p1", "p2k"]}
    scaling.write_csv(rows, tmp_path / "scaling.csv")
    with open(tmp_path / "scaling.csv") as f:
        assert sorted(r["layout"] for r in csv.DictReader(f)) == ["1x1x1", "1x1x2", "2x1x1"]
    grid = scaling._layout({"name": "grid", "snapshot_ranks": 0, "vertex_ranks": 0},
                           {"ranks": [{"group": 0}, {"group": 1}, {"group": 2}]})
    assert grid == {"layout": "3x1", "line": "grid (snapshot_ranks)"}


def test_a_resume_that_fails_is_reported_failed_not_pre_empted_again(tmp_path, capsys):
    """A pre-empted run whose resume then failed (its dataset moved: exit 2, summary.json left as the pre-emption
    wrote it) was reported "pre-empted (exit 2; a re-run of this sweep resumes it)" on every re-run, its error line
    and traceback unsaid; it is pre-empted only where this launch wrote that summary."""
    launcher, _ = _fake_launcher(tmp_path)
    out = tmp_path / "sweep"
    sweep = ["--ranks", 1, 2, "--data", _dataset(tmp_path, "ds", "{}"), "--epochs", 2, "--out", out,
             "--launcher", launcher]
    (tmp_path / "bin" / "preempt-run-p2").write_text("")
    code, _, stderr = _sweep(capsys, *sweep)
    assert code == 1 and "failed: snapshot P=2: pre-empted (exit 75; a re-run of this sweep resumes it)" in stderr
    (tmp_path / "bin" / "fail-resume-run-p2").write_text("")
    code, _, stderr = _sweep(capsys, *sweep)
    assert code == 1 and "pre-empted" not in stderr, stderr
    assert (f"failed: snapshot P=2: failed (exit 2): hpcdgnn: error: --resume {out / 'run-p2'}: data.path: no "
            "dataset there") in stderr, stderr


_ORPHAN_LAUNCHER = '''#!{python}
"""As {base}, but for run {name}: its rank 0 (a child holding RUNDIR/run.lock) goes on {seconds} s after this
launcher exits 1, as mpirun on SIGTERM does, then leaves summary.json preempted and a checkpoint."""
import fcntl, json, os, subprocess, sys
from pathlib import Path
argv = sys.argv[2:]
if "--output" not in argv or Path(argv[argv.index("--output") + 1]).name != "{name}":
    os.execv("{base}", ["{base}", *sys.argv[1:]])
run = Path(argv[argv.index("--output") + 1])
subprocess.run(["{base}", *sys.argv[1:]], check=True)
fd = os.open(run / "run.lock", os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
rank0 = """
import json, sys, time
from pathlib import Path
run = Path(sys.argv[1])
time.sleep({seconds})
summary = json.loads((run / "summary.json").read_text())
(run / "summary.json").write_text(json.dumps({{**summary, "status": "preempted"}}))
(run / "checkpoints" / "epoch-000001").mkdir(parents=True)
(run / "checkpoints" / "epoch-000001" / "COMPLETE").write_text("{{}}")
with open(sys.argv[2], "a") as f:
    f.write("rank 0 of " + run.name + " let go\\\\n")
"""
subprocess.Popen([sys.executable, "-c", rank0, str(run), str(Path("{base}").parent / "calls.txt")], pass_fds=(fd,),
                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # mpirun's ranks
                 # write to it, not to the sweep's pipe: the sweep does not wait for them through the pipe
sys.exit(1)
'''


def test_a_launcher_that_exits_before_its_ranks_is_waited_for_and_a_live_run_is_not_set_aside(tmp_path, capsys):
    """The user trial: SIGTERM to a sweep's mpirun made it exit 1 at once while its ranks still trained, checkpointed
    and wrote summary.json (preempted): the sweep printed 'failed (exit 1): <an epoch line>' and started the next
    run beside them. Now it waits for the run's rank 0 to let go of run.lock, then names it pre-empted, and the
    next run starts after. A re-run that finds a run still training (its launcher or sweep gone) refuses in one line
    instead of setting the live run aside and training it again beside itself."""
    import fcntl

    launcher, calls = _fake_launcher(tmp_path)
    base = launcher.split()[0]
    orphan = tmp_path / "bin" / "orphan-launch"
    orphan.write_text(_ORPHAN_LAUNCHER.format(python=sys.executable, base=base, name="run-p2", seconds=1.5))
    orphan.chmod(0o755)
    out = tmp_path / "sweep"
    sweep = ["--ranks", 1, 2, 3, "--data", _dataset(tmp_path, "ds", "{}"), "--epochs", 2, "--out", out,
             "--launcher", f"{orphan} {{P}}"]
    code, stdout, stderr = _sweep(capsys, *sweep)
    assert code == 1, stderr
    assert "snapshot P=2: its launcher exited while its ranks still run in" in stdout
    assert "failed: snapshot P=2: pre-empted (exit 1; a re-run of this sweep resumes it)" in stderr, stderr
    launched = calls.read_text().splitlines()
    assert launched.index("rank 0 of run-p2 let go") < next(i for i, c in enumerate(launched) if "run-p3" in c)
    # the same command again resumes it; with a run that still trains, it refuses before anything is written
    (out / "run-p3" / "summary.json").unlink()  # as a run killed in its last epoch, its launcher gone
    with open(out / "run-p3" / "run.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code, _, stderr = _sweep(capsys, *sweep)
    assert code == 2 and stderr.count("\n") == 1, stderr
    assert f"{out / 'run-p3'}: a run trains there now" in stderr
    assert not list(out.glob("*.attempt-*")) and (out / "run-p3").is_dir()
    code, _, stderr = _sweep(capsys, *sweep)
    assert code == 0, stderr
    assert f"--resume {out / 'run-p2'}" in calls.read_text()


def _figures(monkeypatch):
    """The figures ``plot`` saves, by file name, kept open for the test to read."""
    import matplotlib.figure

    figures = {}
    real = matplotlib.figure.Figure.savefig

    def spy(self, fname, *a, **kw):
        real(self, fname, *a, **kw)
        figures[Path(fname).name] = self

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    return figures


@pytest.mark.parametrize(("mode", "speedup", "efficiency"), [
    ("strong", "speed-up t(1) / t(P)", "parallel efficiency t(1) / (P·t(P))"),
    ("weak", "scaled speed-up P·t(1) / t(P)", "weak-scaling efficiency t(1) / t(P)"),
])
def test_speedup_axes_say_what_they_plot_and_the_legend_hides_no_point(tmp_path, monkeypatch, mode, speedup,
                                                                       efficiency):
    """A weak sweep's speed-up axis said 'speed-up over the fastest P=1 run' for P·t(1)/t(P) (3.3 where P = 2 ran
    1.67x as fast as P = 1); each axis now gives its formula. The legend, in the upper left of the axes, covered
    the baseline's points (speed-up and efficiency 1 at P = 1): no plotted point is under it now."""
    import numpy as np

    scaling = _scaling()
    figures = _figures(monkeypatch)
    data = _dataset(tmp_path, "ds", "{}")
    runs = []
    for strategy in ("snapshot", "vertex"):
        for P, t in ((1, 1.0), (2, 0.6), (3, 0.5)):
            N = 50 * P if mode == "weak" else 50
            runs.append(_run_dir(tmp_path, f"{strategy}-p{P}", P, N, 8, _epochs(P, [3.0, t * (1.2 if strategy ==
                                                                                          "vertex" else 1)]), data,
                                 strategy=strategy))
    scaling.main(["plot", "--mode", mode, "--out", str(tmp_path / "o"), *map(str, runs)])
    fig = figures["speedup.png"]
    ax, ax2 = fig.axes
    assert (ax.get_ylabel(), ax2.get_ylabel()) == (speedup, efficiency)
    rows = scaling.add_scaling([scaling.read_run(d) for d in runs], mode)
    plotted = {(line.get_label(), tuple(line.get_xdata()), tuple(np.round(line.get_ydata(), 12)))
               for a in (ax, ax2) for line in a.get_lines()}
    for key in ("speedup", "efficiency"):
        for strategy in ("snapshot", "vertex"):
            want = [r for r in rows if r["strategy"] == strategy]
            label = f"{'speed-up' if key == 'speedup' else 'efficiency'} {strategy}"
            assert (label, tuple(r["P"] for r in want), tuple(np.round([r[key] for r in want], 12))) in plotted
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    for a in (ax, ax2):
        for line in a.get_lines():
            for x, y in a.transData.transform(np.column_stack([line.get_xdata(), line.get_ydata()])):
                assert not legend.contains(x, y), (line.get_label(), x, y)
