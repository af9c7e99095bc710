"""perf/scaling.py ``plot`` on hand-written run directories: bar height = printed ``epoch s``, mixed work refused.

The run directories are written with the same files and keys a real run writes
(``config.resolved.yaml``, ``plan.json``, ``metrics.jsonl`` records built with
:func:`hpcdgnn.metrics.timers.summarize_over_ranks` as the epoch recorder does,
``summary.json`` with ``metrics/summary.py``'s keys), but with chosen epoch
times, so no MPI launch is needed and nothing depends on timing.
"""

from __future__ import annotations

import json
import shutil
import warnings

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
