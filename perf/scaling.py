"""Strong- and weak-scaling sweeps: one run per rank count, then a CSV and plots (IBM §6.3, Fig. 4/5).

    # run a sweep here (oversubscribed beyond this machine's cores) and plot it
    python perf/scaling.py run --mode strong --ranks 1 2 4 8 --out perf/results/strong [JOB options]
    python perf/scaling.py run --mode weak   --ranks 1 2 4 8 --out perf/results/weak --vertices-per-rank 4096

    # several strategies in one sweep (each at every P), speed-ups against the fastest P = 1 run of any
    python perf/scaling.py run --mode strong --ranks 1 2 --strategy snapshot vertex chunk --out perf/results/cmp

    # and the node's ceiling: P one-rank runs at once (ceiling.csv; see "The node's ceiling")
    python perf/scaling.py run --mode strong --ranks 1 2 --data DIR --ceiling --out perf/results/strong-ceiling

    # your own job file as every run's base (its data, model, task, strategy and options; the sweep sets P)
    python perf/scaling.py run --mode strong --ranks 1 2 4 --job job.yaml --out perf/results/mine

    # any job setting for every run (hpcdgnn run --set), e.g. the measured re-cut of the block plan
    python perf/scaling.py run --mode strong --ranks 1 2 --data DIR --epochs 30 --set strategy.balance=measured \
        --out perf/results/strong-measured

    # plot run directories made elsewhere, e.g. by jobs/slurm-strong.sh's job array on a cluster
    python perf/scaling.py plot --out perf/results/cluster RUNDIR [RUNDIR ...]

``run`` launches ``mpirun -np P python -m hpcdgnn run JOB`` per rank count (or
the command of ``--launcher``, e.g. ``"srun -n {P} --mpi=pmix"`` inside an allocation: install.sh's Open MPI
speaks PMIx only, and under srun's default PMI each task is a 1-rank MPI world; docs/jobs.md), one
after another. Strong scaling trains one dataset (``--data``, or an IBM §6.3
graph generated once); weak scaling generates, per P, a graph with
N = vertices-per-rank · P at fixed T and density (IBM §6.3) — rank counts must
then be given in ascending order so each graph is generated once. ``--strategy``
takes one strategy or several (each runs at every P); the ``--baseline``
strategies (default: ``snapshot``, the single-process engine) also run at the
smallest P when not swept, so that a sweep of one strategy is measured against
the fastest way to do the same work on one rank, not against itself.

A run that fails does not end the sweep: its command and error line are printed
(a pre-empted one, exit 75, says so), the other runs go on, the report holds those
that completed, and ``run`` exits 1 naming the failures. A launcher that exits while
its ranks still run (mpirun on SIGTERM exits at once, its ranks then checkpoint) is
waited for: the next run starts once the run's rank 0 lets go of its ``run.lock``
(at most ``HPCDGNN_RUN_LOCK_WAIT`` s, else the sweep stops there), and the run is
named pre-empted when it left a checkpoint to resume. Run the same command
again (same ``--out``, same settings) to continue: runs whose ``summary.json``
says completed are kept, a pre-empted one is resumed (``hpcdgnn run --resume``),
any other is set aside as ``run-NAME.attempt-TIME`` and run again. Each run's job
file (``job-NAME.yaml``) records its launcher and ``--set`` in its first line; a re-run whose
job, ``--set`` or ``--launcher`` differ (not the interpreter's or --out's spelling) is refused in one line before
anything is written, as is a graph generated earlier (``graph``, ``graph-pP``)
whose manifest's N, T or density differ from those asked. Nothing an earlier sweep
wrote is overwritten: where ``--out`` holds a report already, the new one goes
beside it, into ``--out/report-TIME/``. One sweep at a time writes into an
``--out`` (a second is refused while the first runs), and a re-run that finds a run
still training (its sweep stopped, its ranks not) is refused in one line.

``plot`` (also run at the end of ``run``) reads each run directory's
``summary.json`` and ``metrics.jsonl`` and writes, into ``--out``
(directories named ``*.attempt-*``, dead attempts the job scripts or a re-run of a sweep set aside, are left out
with a note):

* ``scaling.csv`` — one row per run: P, N, T, model, strategy, the steady
  epoch time (median over non-warm-up epochs of the slowest rank's epoch time, a profiled epoch left out; with
  none, the last warm-up epoch's: as ``summary.json``'s ``steady_epoch_seconds.median``) and its split into
  load (``load_s``: reading and host -> device snapshot moves; ``transfer_s`` in CSVs before 2026-12-05),
  compute and communication (``comm_s``: the time it was under way), bytes sent per
  epoch (``bytes_per_epoch``: each rank's payload handed to MPI for the others, summed over ranks — an all-reduce
  counts its buffer once per rank, not what a ring algorithm puts on the wire, 2(P-1)/P × the buffer per rank,
  while an all-to-all counts what it sends; the records split bytes by tag, not by kind of collective, so the
  CSV has no wire estimate), transfer bytes per epoch, peak engine memory (``engine_peak_bytes``: an estimate, resident
  inputs plus saved tensors, not a measurement: see ``peak_rss_bytes``), speed-up and
  parallel efficiency, the baseline they are taken against (``baseline``,
  ``baseline_s``), and last ``comm_exposed_s`` (the part of the communication the
  slowest rank spent blocked in MPI: what the split adds up with) and ``comm_late_s``
  (the wait for the last rank to reach each exchange — imbalance, not the network —
  as the mean over ranks: the slowest rank waits least, and which rank is slowest
  changes from epoch to epoch; empty for runs that predate it), then ``status`` (``summary.json``'s:
  a ``preempted`` run's row is of the epochs it ran), ``threads_per_rank``, ``layout``, and ``epochs_timed`` and
  ``timed_epochs`` (``steady``, or ``last warm-up`` / ``profiled`` for a run without a steady epoch: a slower
  time; as ``summary.json``'s ``steady_epoch_seconds.over``), ``eval_s`` (the evaluation pass, where the records
  time it apart: ``memory.eval_seconds``; empty for other strategies, whose evaluation is split over the ranks like
  their training), ``train_s`` (``epoch_s`` less ``eval_s``: the time the speed-ups compare), ``epoch_min_s`` and
  ``epoch_max_s`` (the fastest and slowest of the epochs timed: each point is one run, not repeated; ``plot`` warns
  where the steady epochs spread over :data:`SPREAD_WARN`, a slow second warm-up epoch being common: raise
  ``train.warmup_epochs``), ``peak_rss_bytes`` and ``gpu_peak_bytes`` (measured: the largest rank's process RSS
  high-water mark — interpreter, set-up and epochs — and, on GPU, its most allocated over the attempt; beside
  ``engine_peak_bytes``, which is an estimate: resident inputs plus the saved tensors autograd held), and
  ``comm_late_slowest_s`` (the slowest rank's wait for the last rank, the rank of the split; ``comm_late_s`` is the
  mean over ranks), ``setup_s`` and ``pretrain_s`` (``summary.json``'s set-up and pre-training seconds, once per
  run, in no epoch; a resumed run's of its last attempt);
* ``time_split.png`` — stacked bars of load / compute / exposed communication per run
  (the slowest rank's), each bar exactly as high as the run's ``epoch s`` (printed above it);
* ``speedup.png`` — speed-up and parallel efficiency against P (one line per
  strategy), with the ideal line; each axis gives its formula, the legend is below the axes;
* ``volume.png`` — communication volume per epoch against P (one line per strategy).

**Training time.** Speed-up and efficiency (and the node's ceiling) compare ``train_s``, the epoch less the
evaluation where its records time it apart, always; elsewhere ``train_s`` is ``epoch_s``. Under the ``memory``
(DistTGL) strategy one memory group evaluates while the others wait for it, so its evaluation is not split across
ranks: it was most of an epoch at P = 3 (17.6 of 23.0 s), and a speed-up of epoch times measured that one rank's
evaluation, not the parallel training. The evaluation stays beside it (``eval_s``, hatched on the time bars).

**The baseline.** Speed-up and efficiency are taken against the *fastest run at the
smallest P of any strategy* in the set (strong: speed-up t_base / t(P) and efficiency
t_base · P_min / (t(P) · P); weak, where the work grows with P: the scaled speed-up
(P / P_min) · t_base / t(P), work per second, and efficiency t_base / t(P)), not against
each strategy's own run at that P. A strategy that pays for its machinery on one rank (halo exchanges with
nothing to exchange, index copies) would otherwise show a super-linear speed-up over
its own slow P = 1 time while being slower than the single-process engine (issue 13).

Figures of runs with more ranks × threads than this machine has cores are
titled "oversubscribed": they show how the program behaves, not how it scales.

**The node's ceiling** (``run --ceiling``, strong scaling from P = 1 on this node): for each
P > 1, P copies of the P = 1 baseline job run at once, independently (no MPI between them), and
``ceiling.csv`` records ceiling(P) = P · t(1) / t(P copies at once) (the slowest copy) — the speed-up
P ranks would reach here with no communication and no imbalance at all, where the ranks share the
caches and memory of one node. The table prints each run's share of it, and ``speedup.png`` marks it.
On the 2-core development VM two independent one-rank TM-GCN runs at once each ran 19-32 % slower
than one alone (compute-only loops: not at all), so no program reaches 2x there (issue 13 item 3).

The split is that of the median epoch itself (the mean of the two middle ones
for an even count), not a mean over all steady epochs: a bar of mean parts
stood at the *mean* epoch time while the table printed the median, so bar and
number disagreed whenever epochs varied (issue: "bar height did not match its
``epoch s``"). Each epoch record's slowest-rank split sums to its epoch time
(compute is the rest of the wall time), so the parts of the median epoch(s)
stack to ``epoch_s``; where a rank's load and communication overlapped and
compute was clamped at 0 the parts overshoot, and ``plot`` says so and marks the
true height.

Speed-up compares epoch times, which is meaningful only between runs of the same
work: ``plot`` refuses runs that differ in model or task settings, and, for
strong scaling, in dataset (the sha256 of ``data.path``'s
``manifest.json`` where it can be read here, else ``data.path``, plus N and T);
for weak scaling, in T or in vertices per rank N/P; and runs timed under other conditions: ``train.dtype``,
device, torch threads per rank, the kind of epochs timed (``timed_epochs``), ``comm.backend`` between runs of
P > 1, and a strategy's options between its own runs (but for the layout that scales with P: memory's i×j×k,
grid's sides). The error names both runs, and the other mode where
their sizes are that mode's (a weak sweep's runs plotted as strong scaling, the default).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_epoch import error_line, generate_graph, mpirun_cmd, run_env  # noqa: E402

_MiB = 1024.0 * 1024.0

FIELDS = [
    "P", "N", "T", "model", "strategy", "epoch_s", "load_s", "compute_s", "comm_s", "bytes_per_epoch",
    "transfer_bytes_per_epoch", "engine_peak_bytes", "speedup", "efficiency", "oversubscribed", "run_dir",
    "baseline", "baseline_s",
    # added later, at the end so that the columns before keep their places
    "comm_exposed_s", "comm_late_s",
    # summary.json's status (a pre-empted run's row is of the epochs it ran) and its environment's torch threads per
    # rank (the time of a rank depends on them)
    "status", "threads_per_rank",
    # the strategy's layout as the run trained it (memory's i×j×k, grid's sides, snapshot's checkpoint blocks)
    "layout",
    # what epoch_s is the median of: how many epochs, of which kind (a run without a steady epoch stands for
    # one with its warm-up epoch's time, slower than the steady ones it would have had)
    "epochs_timed", "timed_epochs",
    # the evaluation pass a record times apart (the memory strategy's: one group evaluates while the others wait)
    # and the epoch without it, the time speed-up and efficiency compare (module docstring, "Training time")
    "eval_s", "train_s",
    # the fastest and slowest of the epochs timed: one run's spread (each point is one run, not repeats)
    "epoch_min_s", "epoch_max_s",
    # measured memory beside engine_peak_bytes, an estimate: the largest rank's process RSS high-water mark and,
    # on GPU, its most allocated (both the whole attempt's, set-up included)
    "peak_rss_bytes", "gpu_peak_bytes",
    # comm_late_s is the mean over ranks; this is the slowest rank's, the rank of the other time columns
    "comm_late_slowest_s",
    # once per run, in no epoch: the set-up (reading, partitioning, plans) and a pre-training phase (TGN's static
    # memory), summary.json's, this attempt's
    "setup_s", "pretrain_s",
]

#: what ``bytes_per_epoch`` counts (hpcdgnn/comm/stats.py): each rank's payload handed to MPI for other ranks, summed;
#: an all-reduce counts its buffer once per rank, not the 2(P-1)/P × buffer a ring sends, and the records give
#: bytes per tag, not per kind of collective, so no wire estimate can be made from them
BYTES_LABEL = "handed to MPI by all ranks (an all-reduce: its buffer per rank, not wire bytes)"

#: steady epochs whose slowest is more than this × the fastest: a warning (a second warm-up epoch, often slow)
SPREAD_WARN = 1.3


def _manifest_sha256(data_path: str) -> str | None:
    """sha256 of the dataset's manifest.json (it lists every shard's sha256), or None where it is not here."""
    try:
        return hashlib.sha256((Path(data_path) / "manifest.json").read_bytes()).hexdigest()
    except OSError:
        return None


def _dataset_vertices(data_path: str) -> int | None:
    """N from the dataset's manifest.json (an event stream's plan holds none), or None where it is not here."""
    try:
        return int(json.loads((Path(data_path) / "manifest.json").read_text())["num_vertices"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def median_epochs(steady: list[dict]) -> list[dict]:
    """The record(s) whose slowest-rank epoch time is the median: the middle one, or the two middle ones."""
    ranked = sorted(steady, key=lambda r: r["slowest"]["epoch"])
    mid = len(ranked) // 2
    return ranked[mid : mid + 1] if len(ranked) % 2 else ranked[mid - 1 : mid + 1]


def oversubscribed(env: dict, cores: int) -> bool:
    """Whether some node ran more threads (ranks there x ``threads_per_rank``) than it had CPUs for the job:
    summary.json's ``host_cpus`` per node; older summaries lack it (then this machine's ``cores``, for the ranks
    that ran on it: a cluster run is not judged) or ``hosts`` too (they name rank 0's host, as if every rank
    ran there)."""
    hosts = env.get("hosts", {env["host"]: env["num_ranks"]})
    cpus = env.get("host_cpus")
    if cpus:
        return any(n * env["threads_per_rank"] > cpus.get(h, n * env["threads_per_rank"]) for h, n in hosts.items())
    return hosts.get(os.uname().nodename, 0) * env["threads_per_rank"] > cores


def read_run(run_dir: Path) -> dict:
    """One CSV row (without speed-up and efficiency) from a finished run directory.

    ``epoch_s`` is the median of the slowest rank's epoch times over steady epochs and the
    load / compute / comm columns are the split of that same median epoch (mean of the two
    middle epochs for an even count), so the stacked bar of ``time_split.png`` is ``epoch_s``.
    The ``_``-prefixed keys identify the work (dataset, model, task) for :func:`check_comparable`.
    """
    if not run_dir.is_dir():
        pattern = any(c in str(run_dir) for c in "*?[")
        raise SystemExit(f"{run_dir}: no such run directory" + (" (a shell pattern that matched nothing: the job "
                                                                  "scripts name a sweep's runs runs/<job name>-<sweep "
                                                                  "or job id>[-<time>]/pP)" if pattern else ""))
    for name in ("summary.json", "metrics.jsonl", "config.resolved.yaml", "plan.json"):
        if not (run_dir / name).is_file():
            raise SystemExit(f"{run_dir}: no {name}: not a finished hpcdgnn run (stopped before its end, or still "
                             "running); leave it out, or finish it with --resume")
    summary = json.loads((run_dir / "summary.json").read_text())
    if summary.get("status") not in (None, "completed"):
        print(f"note: {run_dir}: status {summary['status']} after {summary.get('epochs')} epochs; its steady epochs "
              "are those it ran", file=sys.stderr)
    env = summary["environment"]
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    # a run resumed on another rank count: only the epochs of the count it is reported under (summary's P)
    mine = [r for r in recs if len(r["per_rank"]["epoch"]) == env["num_ranks"]]
    if len(mine) < len(recs):
        print(f"note: {run_dir}: {len(recs) - len(mine)} of its epochs ran on another rank count (a resume on "
              f"P = {env['num_ranks']}); left out", file=sys.stderr)
    recs = mine
    # an epoch resumed within timed only its batches after the resume's
    whole = [r for r in recs if not r.get("resumed_after_batches")]
    # as summary.json's steady_epoch_seconds: steady epochs, a profiled one (slowed by its profiler) left out; else
    # the last warm-up epoch; else the profiled ones
    plain = [r for r in whole if not r.get("profiled")]
    steady = [r for r in plain if not r["warmup"]]
    timed = "steady" if steady else "last warm-up" if plain else "profiled"  # as steady_epoch_seconds.over
    if not steady and whole:
        steady = plain[-1:] or whole
        print(f"note: {run_dir}: no steady epoch (each a warm-up or profiled one): the "
              + (f"last warm-up epoch's ({steady[0]['epoch']}) time" if plain else "profiled epochs' times")
              + " stand for it", file=sys.stderr)
    if not steady:
        raise SystemExit(f"{run_dir}: metrics.jsonl has no epochs at P = {env['num_ranks']}" + (
            " but one a resume continued within (it timed only its batches after the resume's): train one more "
            "epoch" if recs else ""))
    cfg = yaml.safe_load((run_dir / "config.resolved.yaml").read_text())
    plan = json.loads((run_dir / "plan.json").read_text())
    middle = median_epochs(steady)
    times = [r["slowest"]["epoch"] for r in steady]
    if timed == "steady" and len(times) > 1 and max(times) > SPREAD_WARN * min(times):
        warm = cfg.get("train", {}).get("warmup_epochs")
        print(f"warning: {run_dir}: its {len(times)} steady epochs took {min(times):.3f} to {max(times):.3f} s "
              f"({max(times) / min(times):.2f}x, over {SPREAD_WARN}x): the epoch time of one run is uncertain; where "
              "the slow ones come first (caches, allocator still warming up), leave them out with "
              + (f"train.warmup_epochs={warm + 1}" if isinstance(warm, int) else "train.warmup_epochs")
              + " (--set) and more --epochs", file=sys.stderr)

    evals = [r.get("memory", {}).get("eval_seconds") for r in middle]
    eval_s = None if None in evals else sum(evals) / len(evals)

    def mean(key: str, fallback: str | None = None, over: str = "slowest") -> float | None:
        """The middle epochs' ``key``: the slowest rank's, or with ``over="time"`` the mean over ranks (older
        records may lack it: then ``fallback``'s, or None)."""
        get = (lambda r: r["slowest"].get(key)) if over == "slowest" else (lambda r: r["time"].get(key, {}).get("mean"))
        if any(get(r) is None for r in middle):
            return None if fallback is None else mean(fallback, over=over)
        return sum(get(r) for r in middle) / len(middle)

    cores = os.cpu_count() or 1
    return {
        "P": env["num_ranks"],
        # an event stream's plan (memory) holds neither: N from its manifest, T none (the events are its time)
        "N": plan.get("num_vertices", _dataset_vertices(str(cfg["data"]["path"]))),
        "T": plan.get("num_snapshots"),
        "model": cfg["model"]["name"],
        "strategy": cfg["strategy"]["name"],
        **_layout(cfg["strategy"], plan),
        "epoch_s": mean("epoch"),
        "load_s": mean("load"),
        "compute_s": mean("compute"),
        "comm_s": mean("comm"),
        "comm_exposed_s": mean("comm_exposed", "comm"),  # without overlap the same as comm
        "comm_late_s": mean("comm_late", over="time"),
        "comm_late_slowest_s": mean("comm_late"),
        "setup_s": summary.get("totals", {}).get("setup_seconds"),
        "pretrain_s": summary.get("totals", {}).get("pretrain_seconds"),
        "bytes_per_epoch": sum(r["bytes_sent"] for r in steady) / len(steady),
        "transfer_bytes_per_epoch": sum(r.get("transfer_bytes", 0) for r in steady) / len(steady),
        "engine_peak_bytes": max(summary["memory"]["engine_peak_bytes"]),
        "oversubscribed": oversubscribed(env, cores),
        "run_dir": str(run_dir),
        "status": summary.get("status"),  # older summaries have none
        "threads_per_rank": env.get("threads_per_rank"),
        "epochs_timed": len(steady),
        "timed_epochs": timed,
        "eval_s": eval_s,
        "epoch_min_s": min(times),
        "peak_rss_bytes": max(summary["memory"].get("peak_rss_bytes") or [None]),
        "gpu_peak_bytes": max(summary["memory"].get("gpu_max_allocated_bytes") or [None]),
        "epoch_max_s": max(times),
        "train_s": mean("epoch") - (eval_s or 0.0),
        "_data_path": str(cfg["data"]["path"]),
        "_manifest_sha256": _manifest_sha256(str(cfg["data"]["path"])),
        "_model_cfg": cfg.get("model"),
        "_task_cfg": cfg.get("task"),
        "_strategy_cfg": {k: v for k, v in cfg["strategy"].items() if k not in _LAYOUT_KEYS},
        # how the work ran (older records lack some: None, then not compared)
        "_dtype": cfg.get("train", {}).get("dtype", env.get("dtype")),
        "_device": env.get("device"),
        "_backend": cfg.get("comm", {}).get("backend", env.get("comm_backend")),
    }


def check_comparable(rows: list[dict], mode: str) -> None:
    """Refuse to compute a speed-up between runs of different work; the message names both runs.

    Strong scaling: same dataset (manifest sha256 when both manifests are readable here, else the
    same ``data.path``), N and T. Weak scaling: the dataset grows with P by design, so the same T
    and vertices per rank N/P. Both: the same model and task sections, and the same conditions of the time:
    ``train.dtype`` (float64 doubles the bytes moved and computed: a float64 baseline made float32 runs look
    super-linear), device, torch threads per rank and the kind of epochs timed (steady, or a slower warm-up or
    profiled one); ``comm.backend`` between runs that communicate (P > 1). Strategies may differ: they
    are ways to do the same work, and the speed-up is taken against the fastest of them (:func:`add_scaling`);
    runs of one strategy must have the same options, but for the layout that scales with P
    (:data:`_LAYOUT_KEYS`). Where an older record lacks a setting it is not compared.

    Raises:
        SystemExit: the first pair (smallest-P run, other run) that differs.
    """
    seen: dict[tuple[str, int], str] = {}
    for r in rows:  # not an error (repeats are a way to see the noise), but every row is compared with the base
        key = (r.get("line", r["strategy"]), r["P"])
        if key in seen:
            print(f"warning: {seen[key]} and {r['run_dir']} are both {key[0]} at P={r['P']}: each row is "
                  "one run, and the speed-ups are taken against the fastest run at the smallest P", flush=True)
        seen.setdefault(key, str(r["run_dir"]))
    base = min(rows, key=lambda r: r["P"])
    first = {}  # per strategy, its smallest-P run: the reference for its options
    for r in sorted(rows, key=lambda r: r["P"]):
        first.setdefault(r["strategy"], r)
    talking = [r for r in rows if r["P"] > 1]
    for r in rows:
        checks = [
            ("model", base["_model_cfg"], r["_model_cfg"]),
            ("task", base["_task_cfg"], r["_task_cfg"]),
            ("T (snapshots)", base["T"], r["T"]),
            ("train.dtype", base.get("_dtype"), r.get("_dtype")),
            ("device", base.get("_device"), r.get("_device")),
            ("threads per rank", base.get("threads_per_rank"), r.get("threads_per_rank")),
            ("epochs timed (timed_epochs)", base.get("timed_epochs"), r.get("timed_epochs")),
        ]
        checks = [c for c in checks if c[0] in ("model", "task", "T (snapshots)") or None not in c[1:]]
        ref = first[r["strategy"]]
        if ref is not r and ref.get("_strategy_cfg") is not None and r.get("_strategy_cfg") is not None:
            checks.append((f"strategy options of {r['strategy']}", ref["_strategy_cfg"], r["_strategy_cfg"]))
        if r["P"] > 1 and talking[0].get("_backend") is not None and r.get("_backend") is not None:
            checks.append(("comm.backend", talking[0]["_backend"], r["_backend"]))
        if mode == "strong":
            checks.append(("N (vertices)", base["N"], r["N"]))
            a, b = base["_manifest_sha256"], r["_manifest_sha256"]
            if a is not None and b is not None:
                checks.append(("dataset (manifest.json sha256)", a, b))
            else:
                checks.append(("dataset (data.path)", base["_data_path"], r["_data_path"]))
        elif base["N"] is not None and r["N"] is not None:
            checks.append(("vertices per rank N/P", base["N"] / base["P"], r["N"] / r["P"]))
        for what, va, vb in checks:
            if va != vb:
                other = (ref if what.startswith("strategy options") else talking[0] if what == "comm.backend"
                         else base)
                raise SystemExit(
                    f"scaling.py plot: cannot compare {other['run_dir']} (P={other['P']}) with {r['run_dir']}"
                    f" (P={r['P']}): {what} differs ({va!r} vs {vb!r}); a {mode}-scaling speed-up needs the same"
                    " work in every run, so plot these in separate sweeps" + _other_mode(base, r, mode, what)
                )


def _other_mode(base: dict, row: dict, mode: str, what: str) -> str:
    """The hint, where the runs differ only as the other mode's runs do (a weak sweep's N grows with P, a strong
    sweep's N/P shrinks), that they are that mode's runs; else ''.

    Args:
        base: the smallest-P run's row (:func:`read_run`).
        row: the run that differs from it.
        mode: the mode asked for, ``strong`` or ``weak``.
        what: the check that failed (:func:`check_comparable`'s names).
    """
    if base["N"] is None or row["N"] is None:
        return ""
    if mode == "strong" and what == "N (vertices)" and base["N"] / base["P"] == row["N"] / row["P"]:
        return " (they hold the same vertices per rank N/P: runs of a weak-scaling sweep? then plot --mode weak)"
    if mode == "weak" and what == "vertices per rank N/P" and base["N"] == row["N"]:
        return " (they hold the same N: runs of a strong-scaling sweep? then plot --mode strong, the default)"
    return ""


def baseline(rows: list[dict]) -> dict:
    """The run speed-ups are taken against: the fastest (smallest ``train_s``) at the smallest P, of any strategy."""
    p0 = min(r["P"] for r in rows)
    return min((r for r in rows if r["P"] == p0), key=lambda r: r["train_s"])


#: strategy options that set the parallel layout, derived from or scaling with P (:func:`_layout`): they may
#: differ between the runs of a strategy, its other options may not
_LAYOUT_KEYS = frozenset({"minibatch", "epoch", "memory", "snapshot_ranks", "vertex_ranks"})


def _layout(options: dict, plan: dict) -> dict[str, str]:
    """``layout``: the strategy's parallel layout as the run trained it — ``memory``'s i×j×k, ``grid``'s sides
    (derived from P where the job left them 0), ``snapshot``'s checkpoint blocks — and ``line``: the plots' line,
    the strategy with the dimensions that scale (``memory (minibatch)`` is exact, ``memory (memory)`` DistTGL's
    approximation: one line each, not one mixing them; a P = 1 run, where none scales, starts every line)."""
    name = options["name"]
    if name == "memory":
        sides = {k: int(options.get(k, 1)) for k in ("minibatch", "epoch", "memory")}
    elif name == "grid":
        ranks = plan.get("ranks") or []
        groups = 1 + max((r.get("group", 0) for r in ranks), default=0)
        sides = {"snapshot_ranks": groups, "vertex_ranks": max(1, len(ranks) // groups)}
    else:
        blocks = int(options.get("blocks", 1) or 1)
        return {"layout": f"blocks {blocks}" if blocks > 1 else "", "line": name}
    scaling = [k for k, v in sides.items() if v > 1]
    return {"layout": "x".join(str(v) for v in sides.values()),
            "line": f"{name} ({', '.join(scaling)})" if scaling else name}


def _lines(rows: list[dict]) -> dict[str, list[dict]]:
    """The plots' lines (:func:`_layout`'s ``line``), each in P order; a strategy's rows where nothing scales (P = 1)
    start each of its lines that scale, rather than being a line of one point."""
    keys = list(dict.fromkeys(r.get("line", r["strategy"]) for r in rows))
    lines = {k: [r for r in rows if r.get("line", r["strategy"]) == k] for k in keys}
    for k in [k for k in keys if " (" not in k]:
        scaled = [j for j in keys if j.startswith(k + " (")]
        for j in scaled:
            lines[j] = sorted(lines[k] + lines[j], key=lambda r: r["P"])
        if scaled:
            del lines[k]
    return lines


def _full_batch(strategy: str) -> bool | None:
    """Whether ``strategy`` trains the full batch each epoch (None: not a strategy of this hpcdgnn)."""
    from hpcdgnn.strategies.registry import get_strategy

    try:
        return bool(get_strategy(strategy).full_batch)
    except KeyError:  # a run of an older or newer hpcdgnn: no note rather than no table
        return None


def add_scaling(rows: list[dict], mode: str) -> list[dict]:
    """Speed-up and efficiency against :func:`baseline` (strong: t0/tP and t0·P0/(tP·P); weak: t0/tP), t the
    training time ``train_s`` (the epoch less an evaluation its records time apart: module docstring).

    Rows come back ordered by strategy (in order of first appearance) then P.

    Raises:
        SystemExit: runs of different work (:func:`check_comparable`).
    """
    check_comparable(rows, mode)
    order = {s: i for i, s in reversed(list(enumerate(r["strategy"] for r in rows)))}
    rows = sorted(rows, key=lambda r: (order[r["strategy"]], r["P"]))
    base = baseline(rows)
    kind = _full_batch(base["strategy"])
    other = sorted({r["strategy"] for r in rows if kind is not None and _full_batch(r["strategy"]) not in (None, kind)})
    if other:  # an epoch of sampled batches is not an epoch of the full batch: said, not refused
        print(f"note: {', '.join(other)} train{'s' if len(other) == 1 else ''} another trajectory than "
              f"{base['strategy']} (full batch or sampled batches): their speed-ups compare epoch times, not the time "
              "to the same loss", file=sys.stderr)
    for r in rows:
        r["baseline"], r["baseline_s"] = f"{base['strategy']} P={base['P']}", base["train_s"]
        ratio = base["train_s"] / r["train_s"]
        if mode == "strong":
            r["speedup"] = ratio
            r["efficiency"] = ratio * base["P"] / r["P"]
        else:  # weak: the work grows with P, so the ideal is a flat epoch time
            r["speedup"] = ratio * r["P"] / base["P"]
            r["efficiency"] = ratio
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    """The sweep's rows as CSV."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in FIELDS})


#: the figures :func:`plot` writes
_FIGURES = ("time_split.png", "speedup.png", "volume.png")


def _label_ranks(ax, Ps: list[int]) -> None:
    """Ticks on the log2 P axis at the P values of the data, labelled with them: the log axis labels powers of 2
    only, so a P = 3 run stood between unlabelled ticks."""
    from matplotlib.ticker import NullLocator

    ax.set_xticks(Ps, [str(p) for p in Ps])
    ax.xaxis.set_minor_locator(NullLocator())


def plot(rows: list[dict], out: Path, mode: str, ceilings: dict[int, float] | None = None) -> list[Path]:
    """The three figures (see the module docstring); returns their paths. ``ceilings``: the node's ceiling
    speed-up per P (:func:`run_ceiling`), marked on the speed-up figure."""
    import matplotlib

    matplotlib.use("Agg")  # batch nodes have no display
    import matplotlib.pyplot as plt

    by_strategy = _lines(rows)
    strategies = list(by_strategy)
    base = baseline(rows)
    label = f"{rows[0]['model']}, {', '.join(strategies)}, {mode} scaling"
    if any(r["oversubscribed"] for r in rows):
        label += " (oversubscribed)"
    x = list(range(len(rows)))
    files = []

    def save(fig, ax, ylabel: str, name: str, note: str = "") -> None:
        """The axes every figure shares (P on x, the sweep's title), then write and close it."""
        ax.set_xlabel("ranks P")
        ax.set_ylabel(ylabel)
        ax.set_title(label + note, fontsize=9)
        files.append(out / name)
        fig.tight_layout()
        fig.savefig(files[-1], dpi=120, bbox_inches="tight")  # "tight": a legend outside the axes is in the file
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(rows)), 4))
    bottom = [0.0] * len(rows)
    # the split that adds up to the epoch: compute is the wall time less load and *exposed* communication
    # (communication hidden behind computation counts in compute, not twice)
    for name, vals in (("load", [r["load_s"] for r in rows]), ("compute", [r["compute_s"] for r in rows]),
                       ("communication (exposed)", [r["comm_exposed_s"] for r in rows])):
        ax.bar(x, vals, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    if any(r.get("eval_s") for r in rows):  # the part of the bar one memory group spent evaluating
        evals = [r.get("eval_s") or 0.0 for r in rows]
        ax.bar(x, evals, bottom=[r["epoch_s"] - e for r, e in zip(rows, evals, strict=True)], fill=False,
               hatch="//", edgecolor="k", lw=0, label="of it evaluation (one group; others wait)")
    for i, (r, top) in enumerate(zip(rows, bottom, strict=True)):
        if abs(top - r["epoch_s"]) > 1e-9 * max(1.0, r["epoch_s"]):
            # compute was clamped at 0 on an epoch whose load and comm overlapped: show the true height
            print(f"warning: {r['run_dir']}: load + compute + exposed comm = {top:.3f} s exceeds epoch_s"
                  f" {r['epoch_s']:.3f} s (load and communication overlapped); the black line marks epoch_s",
                  file=sys.stderr)
            ax.hlines(r["epoch_s"], i - 0.4, i + 0.4, colors="k")
        ax.annotate(f"{r['epoch_s']:.3f}", (i, max(top, r["epoch_s"])), ha="center", va="bottom", fontsize=8)
    ticks = [str(r["P"]) if len(strategies) == 1 else f"{r.get('line', r['strategy'])}\n{r['P']}" for r in rows]
    ax.set_xticks(x, ticks, fontsize=8 if len(strategies) > 1 else None)
    ax.set_ylim(top=ax.get_ylim()[1] * 1.25)  # room above the tallest bar and its label for the legend
    ax.legend(loc="upper center", ncol=3, fontsize=8, frameon=False)
    save(fig, ax, "seconds per epoch (slowest rank)", "time_split.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    ax2 = ax.twinx()
    Ps = sorted({r["P"] for r in rows})
    for s in strategies:
        sr = by_strategy[s]
        tag = "" if len(strategies) == 1 else f" {s}"
        line = ax.plot([r["P"] for r in sr], [r["speedup"] for r in sr], "o-", label=f"speed-up{tag}")[0]
        ax2.plot([r["P"] for r in sr], [r["efficiency"] for r in sr], "s:", color="tab:red" if len(strategies) == 1
                 else line.get_color(), label=f"efficiency{tag}")
    ideal = [p / base["P"] for p in Ps]  # strong: t0 / (t0 / (P / P0)); weak: the same by definition
    ax.plot(Ps, ideal, "k--", lw=0.8, label="ideal")
    if ceilings:
        cp = sorted(ceilings)
        ax.plot(cp, [ceilings[p] for p in cp], "k_", ms=18, mew=2, label="node ceiling (P one-rank runs at once)")
        ax.set_zorder(ax2.get_zorder() + 1)  # the speed-up axes on top: the efficiency markers may sit there
        ax.patch.set_visible(False)
    # from the data: a super-linear efficiency (caches) exceeds 1
    ax2.set_ylim(0, 1.1 * max(1.0, *(r["efficiency"] for r in rows)))
    P0 = base["P"]
    t0, per = f"t({P0})", ("P" if P0 == 1 else f"(P/{P0})")  # t0: the baseline's training time
    if mode == "strong":
        ylabel = f"speed-up {t0} / t(P)"
        ylabel2 = f"parallel efficiency {t0} / ({per}·t(P))"
    else:  # the work grows with P: the speed-up is the scaled one (work per second), the efficiency the time ratio
        ylabel, ylabel2 = f"scaled speed-up {per}·{t0} / t(P)", f"weak-scaling efficiency {t0} / t(P)"
    ax2.set_ylabel(ylabel2)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    _label_ranks(ax, Ps)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    # below the axes: inside them it covered the baseline's points (speed-up and efficiency 1 at the smallest P are
    # always in the upper left)
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2,
              fontsize=8, frameon=False)
    save(fig, ax, ylabel, "speedup.png",
         f"\nt: training time per epoch (epoch less evaluation); baseline: the fastest P={P0} run of any strategy "
         f"({base['strategy']}, {base['train_s']:.3f} s)")

    fig, ax = plt.subplots(figsize=(6, 4))
    for s in strategies:
        sr = by_strategy[s]
        tag = "" if len(strategies) == 1 else f" ({s})"
        ax.plot([r["P"] for r in sr], [r["bytes_per_epoch"] / _MiB for r in sr], "o-", label=f"{BYTES_LABEL}{tag}")
        if any(r["transfer_bytes_per_epoch"] for r in sr):
            ax.plot([r["P"] for r in sr], [r["transfer_bytes_per_epoch"] / _MiB for r in sr], "s--",
                    label=f"host -> device transfer{tag}")
    ax.set_xscale("log", base=2)
    _label_ranks(ax, Ps)
    ax.legend(fontsize=8)
    save(fig, ax, "MiB per epoch", "volume.png")
    return files


def report(rows: list[dict], out: Path, mode: str, ceilings: dict[int, float] | None = None) -> None:
    """Write the CSV and the plots, and print the table (speed-up and efficiency against :func:`baseline`;
    with ``ceilings``, each run's speed-up as a share of the node's ceiling at its P)."""
    _check_out(out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "scaling.csv")
    files = plot(rows, out, mode, ceilings)
    base = baseline(rows)
    print(f"speed-up and efficiency of the training time (train s: the epoch less the evaluation where its records "
          f"time it apart, the memory strategy's) against the fastest P={base['P']} run of any strategy: "
          f"{base['strategy']}, {base['train_s']:.3f} s ({base['run_dir']})")
    print(f"MiB/ep: {BYTES_LABEL}")
    print(f"{'P':>4} {'N':>9} {'epoch s':>9} {'train s':>9} {'load':>9} {'compute':>9} {'comm':>9} {'exposed':>9} "
          f"{'late(m)':>9} {'MiB/ep':>9} {'speed-up':>9} {'effic.':>7}  strategy")
    for r in rows:
        late = "-" if r["comm_late_s"] is None else f"{r['comm_late_s']:.3f}"
        n = "-" if r["N"] is None else r["N"]  # an event stream's N where its manifest is not here
        print(f"{r['P']:>4} {n:>9} {r['epoch_s']:>9.3f} {r['train_s']:>9.3f} {r['load_s']:>9.3f} "
              f"{r['compute_s']:>9.3f} {r['comm_s']:>9.3f} {r['comm_exposed_s']:>9.3f} {late:>9} "
              f"{r['bytes_per_epoch'] / _MiB:>9.2f} {r['speedup']:>9.2f} {r['efficiency']:>7.2f}"
              f"  {r['strategy']}" + (f" {r['layout']}" if r.get("layout") else "")
              + ("  oversubscribed" if r["oversubscribed"] else "")
              + (f"  {r['status']}" if r["status"] not in (None, "completed") else "")
              + (f"  {r['speedup'] / ceilings[r['P']]:.0%} of the node's ceiling {ceilings[r['P']]:.2f}"
                 if ceilings and r["P"] in ceilings else ""))
    even = [f"{Path(r['run_dir']).name} ({r['epochs_timed']})" for r in rows if r["epochs_timed"] % 2 == 0]
    if even:  # the median of an even count is the mean of the middle two: of 2 epochs, their mean
        print(f"note: epoch s is the mean of the two middle epochs timed where a run timed an even number: "
              f"{', '.join(even)}")
    print("epoch s: the median of one run's steady epochs (the CSV's epochs_timed, epoch_min_s, epoch_max_s); "
          "scaling.py runs each point once: run a sweep again into another --out to see the spread between runs")
    print(f"wrote {out / 'scaling.csv'} and {', '.join(f.name for f in files)}")


def _launch(launcher: str | None, P: int) -> list[str]:
    return shlex.split(launcher.format(P=P)) if launcher else mpirun_cmd(P)


def _job_base(args: argparse.Namespace) -> dict:
    """``--job``'s sections (``{}`` without one; refused in one line where it is no readable YAML mapping), and
    the defaults of ``--model``, ``--hidden``, ``--strategy``, ``--epochs`` and (strong scaling) ``--data`` filled
    from it, else from the generated-graph sweep's."""
    base: dict = {}
    if args.job is not None:
        try:
            base = yaml.safe_load(args.job.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            _refuse(f"--job {args.job}: {' '.join(str(getattr(e, 'strerror', None) or e).split())}")
        if not isinstance(base, dict) or not all(v is None or isinstance(v, dict) for v in base.values()):
            _refuse(f"--job {args.job}: not a job file (a mapping of sections: data, model, task, train, ...)")
        from hpcdgnn.config.schema import ModelConfig, StrategyConfig, TrainConfig

        base = {name: dict(section or {}) for name, section in base.items()}  # `task:` alone: its defaults
        # a section without a name is hpcdgnn's default one, whose keys it holds: not the generated graph's sweep's
        base["model"] = {"name": ModelConfig.name, **base.get("model", {})}
        base["strategy"] = {"name": StrategyConfig.name, **base.get("strategy", {})}
        base["train"] = {"epochs": TrainConfig.epochs, **base.get("train", {})}
    elif args.hidden is None:
        args.hidden = 16
    section = {name: base.get(name) or {} for name in ("data", "model", "strategy", "train")}
    args.model = args.model or section["model"].get("name") or "tmgcn"
    args.strategy = args.strategy or [section["strategy"].get("name") or "snapshot"]
    args.epochs = args.epochs if args.epochs is not None else section["train"].get("epochs", 4)
    if args.mode == "strong" and not args.data and section["data"].get("path"):
        args.data = str(section["data"]["path"])  # a job's path is relative to the working directory, as here
    return base


def _job_of(args: argparse.Namespace, data: Path, strategy: str) -> dict:
    """The job of one run: ``--job``'s sections (:func:`_job_base`), the dataset, model, strategy and epochs of
    the sweep in place of its own (a section of another model or strategy than the job's starts empty: its keys
    are that one's), threads per rank pinned (``--threads``: a P = 1 baseline on every core against ranks of one
    thread each would be no speed-up of P)."""
    base = args.base

    def kept(name: str, value: str) -> dict:
        section = base.get(name) or {}
        return dict(section) if section.get("name") == value else {}

    return {**base,
            # absolute: a re-run with --out spelt another way (relative, absolute) asks the same
            "data": {**(base.get("data") or {}), "path": str(Path(data).resolve()),
                     "validate": (base.get("data") or {}).get("validate", "structure")},
            # --hidden, else the job's for its own model, else that model's default
            "model": {**kept("model", args.model), "name": args.model,
                      **({"hidden": args.hidden} if args.hidden is not None else {})},
            "strategy": {**kept("strategy", strategy), "name": strategy,
                         **({"blocks": args.blocks} if args.blocks > 1 and strategy == "snapshot" else {})},
            "train": {**(base.get("train") or {}), "epochs": args.epochs, "threads": args.threads}}


def _sweep_runs(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(strategy, P) of every run of the sweep: each ``--strategy`` at every P, then each ``--baseline``
    strategy not swept at the smallest P only (the speed-up reference, see :func:`baseline`)."""
    runs = [(s, P) for s in args.strategy for P in args.ranks]
    runs += [(s, min(args.ranks)) for s in args.baseline if s not in args.strategy]
    return runs


def _settings(args: argparse.Namespace) -> list[str]:
    """``--set`` of every run of the sweep (and of the ceiling's copies): ``hpcdgnn run --set KEY=VALUE ...``."""
    return ["--set", *args.set] if args.set else []


def _check_out(out: Path) -> None:
    """``--out`` must be a directory (or not yet there)."""
    if out.exists() and not out.is_dir():
        raise SystemExit(f"--out {out}: is a file; give a directory for the runs, CSV and plots")


def _refuse(message: str) -> None:
    """Bad input: one line, exit 2 (as hpcdgnn's own errors)."""
    print(f"scaling.py: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _lock_out(out: Path):
    """Hold ``--out``'s lock for the whole sweep (the returned file; released when the process ends): two sweeps
    started at once into one --out generated the same graph twice (one failed half-way) and could each take the
    other's run names. The caller closes it."""
    import fcntl

    f = open(out / ".scaling.lock", "a")  # noqa: SIM115 - held until the caller closes it
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        _refuse(f"--out {out}: another scaling.py run is writing there now; wait for it to end (then a re-run "
                "continues the sweep), or give another --out")
    return f


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def _set_aside(path: Path) -> Path:
    """Rename ``path`` to ``path.attempt-YYYYmmdd-HHMMSS`` (the job scripts' name for a dead attempt, which
    ``plot`` leaves out) rather than delete it: a user's run is never lost."""
    stamp = _stamp()
    aside = path.with_name(f"{path.name}.attempt-{stamp}")
    n = 1
    while aside.exists():  # two in one second
        n += 1
        aside = path.with_name(f"{path.name}.attempt-{stamp}-{n}")
    path.rename(aside)
    return aside


#: the first line of a job file scaling.py writes: the launcher and ``--set`` it runs with (so that a re-run can
#: tell whether it asks the same: they are not in the job itself; the interpreter's path and --out's spelling,
#: which another venv or a relative --out change, are not compared)
_RAN = "# perf/scaling.py runs this job with launcher and --set: "


def _job_differs(old: str, new: str) -> str | None:
    """What differs between the job file an earlier sweep wrote (``old``) and the one this sweep would write, in
    words; None where they are the same."""
    def split(text: str) -> tuple[str | None, dict]:
        first, _, rest = text.partition("\n")
        return (first[len(_RAN):], yaml.safe_load(rest)) if first.startswith(_RAN) else (None, yaml.safe_load(text))

    def flat(d, key=""):
        if not isinstance(d, dict):
            return {key: d}
        return {k: v for name, sub in d.items() for k, v in flat(sub, f"{key}.{name}" if key else name).items()}

    (old_cmd, old_job), (new_cmd, new_job) = split(old), split(new)
    a, b = flat(old_job or {}), flat(new_job)
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
    if keys:
        return ", ".join(f"{k} {a.get(k)!r} there, {b.get(k)!r} now" for k in keys)
    if old_cmd is None:
        return "written by a scaling.py that did not record its command: its --set and --launcher are unknown"
    if old_cmd != new_cmd:
        return f"its launcher and --set were {old_cmd!r}, now {new_cmd!r}"
    return None


def _rank_wait() -> float:
    """Seconds to wait for a run's rank 0 to let go of its run directory (``HPCDGNN_RUN_LOCK_WAIT``, as a run
    waits for another holder)."""
    from hpcdgnn.run_lock import run_lock_wait

    return run_lock_wait()


def _await_ranks(run_dir: Path, what: str) -> bool:
    """Wait, after ``run_dir``'s launcher exited, until no process holds it (rank 0's ``run.lock``, held while it
    trains and until its checkpoint and summary.json are written), at most :func:`_rank_wait` seconds.

    Args:
        run_dir: the run directory the launcher's ranks train in.
        what: the run's name in the sweep's lines (``STRATEGY P=P``).

    Returns:
        True once it is let go (or cannot be told: a file system without locks); False after the wait.
    """
    from hpcdgnn.run_lock import run_alive

    deadline, said = time.monotonic() + _rank_wait(), False
    while run_alive(run_dir):
        if not said:
            print(f"  {what}: its launcher exited while its ranks still run in {run_dir}; waiting for them to end",
                  flush=True)
            said = True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _summary_stamp(run_dir: Path) -> tuple[int, int] | None:
    """``run_dir``'s summary.json as (inode, modification time in ns), or None where there is none: whether a
    run wrote it anew (hpcdgnn replaces it whole)."""
    try:
        st = (run_dir / "summary.json").stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _run_state(run_dir: Path) -> str:
    """``absent``, ``training`` (a process holds its ``run.lock`` now: a run whose sweep or launcher ended before
    it), ``completed``, ``preempted`` (summary.json says so and a complete checkpoint is there to resume: a stop in
    a new run's set-up, or in its first epoch, leaves none) or ``incomplete`` (anything else: failed, killed,
    diverged, pre-empted without a checkpoint)."""
    from hpcdgnn.run_lock import run_alive
    from hpcdgnn.train.checkpoint import latest_checkpoint

    if not run_dir.exists():
        return "absent"
    if run_alive(run_dir):
        return "training"
    try:
        status = json.loads((run_dir / "summary.json").read_text()).get("status")
        saved = yaml.safe_load((run_dir / "config.resolved.yaml").read_text()) or {}
    except (OSError, ValueError, AttributeError, yaml.YAMLError):
        return "incomplete"
    if status == "preempted":
        where = (saved.get("checkpoint") or {}).get("dir") or run_dir / "checkpoints"
        return "preempted" if latest_checkpoint(where) is not None else "incomplete"
    return status if status == "completed" else "incomplete"


def _graph_mismatch(data: Path, vertices: int, snapshots: int, density: float) -> str | None:
    """Why the graph an earlier sweep generated at ``data`` is not the one asked for now (None: it is, or none is
    there yet)."""
    if not data.exists():
        return None
    try:
        manifest = json.loads((data / "manifest.json").read_text())
    except (OSError, ValueError):
        return "it holds no readable manifest.json (a generation that stopped half-way?); remove it"
    have = {"N": manifest.get("num_vertices"), "T": manifest.get("num_snapshots"),
            "density": (manifest.get("source") or {}).get("density", density)}
    want = {"N": vertices, "T": snapshots, "density": density}
    diff = [f"{k} {have[k]} there, {want[k]} asked" for k in want if have[k] != want[k]]
    return "; ".join(diff) or None


def _generate(data: Path, vertices: int, snapshots: int, density: float) -> str | None:
    """Generate the sweep's graph (:func:`bench_epoch.generate_graph`); returns None, or why it failed (one
    line: the failure is the runs' that need the graph, not the sweep's end)."""
    try:
        generate_graph(data, vertices, snapshots, density)
    except RuntimeError as e:
        return str(e)
    return None


def _plan_sweep(args: argparse.Namespace, out: Path) -> list[dict]:
    """Each run of the sweep: its names, job text, command and state; refused (one line, exit 2) before anything
    is written where an earlier sweep in ``out`` asked for other settings under the same names, or generated a
    graph other than the one asked for (it was reused silently, then a weak sweep's N/P was not the one asked)."""
    plan = _sweep_runs(args)
    named = len({s for s, _ in plan}) > 1  # run directories carry the strategy when there are several
    entries = []
    for strategy, P in plan:
        name = f"{strategy}-p{P}" if named else f"p{P}"
        if args.mode == "strong":
            data, vertices = (Path(args.data), None) if args.data else (out / "graph", args.vertices)
        else:
            data, vertices = out / f"graph-p{P}", args.vertices_per_rank * P
        if vertices is not None and (why := _graph_mismatch(data, vertices, args.snapshots, args.density)):
            _refuse(f"{data}: a graph an earlier sweep generated, not the one asked for ({why}); give another --out")
        job, run_dir = out / f"job-{name}.yaml", out / f"run-{name}"
        cmd = [*_launch(args.launcher, P), sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(run_dir),
               *_settings(args)]
        text = _RAN + shlex.join([*_launch(args.launcher, P), *_settings(args)]) + "\n" + yaml.safe_dump(
            _job_of(args, data, strategy))
        state = _run_state(run_dir)
        if state == "training":  # set aside and run again, it would train beside its own copy
            _refuse(f"{run_dir}: a run trains there now (its rank 0 holds run.lock: a run of an earlier sweep that "
                    "was stopped while its ranks went on); wait for it to end, then run the same command again")
        # checked before anything is written: an earlier sweep's runs and the job files they ran stay together
        if job.exists():
            if why := _job_differs(job.read_text(), text):
                _refuse(f"{job}: an earlier sweep's job with other settings ({why}); a sweep never overwrites an "
                        "earlier one's runs or jobs, and a re-run continues one only with the same settings: give "
                        "another --out")
        elif state != "absent":
            _refuse(f"{run_dir} exists without its {job.name}: not a run of this sweep; a sweep never overwrites a "
                    "run: give another --out")
        entries.append({"strategy": strategy, "P": P, "name": name, "data": data, "vertices": vertices, "job": job,
                        "run_dir": run_dir, "text": text, "cmd": cmd, "state": state})
    return entries


def run_sweep(args: argparse.Namespace) -> tuple[list[Path], list[str]]:
    """One run per strategy and rank count (see :func:`_sweep_runs`); returns the run directories that finished
    and a line per failed run.

    A failed run does not end the sweep: its command and error line are printed and the rest run. A re-run with
    the same ``--out`` and settings continues the sweep: runs completed earlier are kept, a pre-empted one is
    resumed, any other (failed, killed) is set aside as ``run-NAME.attempt-TIME`` and run again."""
    out = Path(args.out)
    entries = _plan_sweep(args, out)
    runs: list[Path] = []
    failures: list[str] = []
    bad_graphs: dict[Path, str] = {}
    for e in entries:
        strategy, P, run_dir = e["strategy"], e["P"], e["run_dir"]
        what = f"{strategy} P={P}"
        if e["state"] == "completed":
            print(f"  {what}: completed by an earlier run of this sweep ({run_dir}); kept", flush=True)
            runs.append(run_dir)
            continue
        data = e["data"]
        if e["vertices"] is not None and not (data / "manifest.json").exists() and data not in bad_graphs:
            why = _generate(data, e["vertices"], args.snapshots, args.density)
            if why:
                print(f"  {why}", file=sys.stderr, flush=True)
                bad_graphs[data] = why
        if data in bad_graphs:
            failures.append(f"{what}: {bad_graphs[data]}")
            continue
        if not e["job"].exists():
            with open(e["job"], "x") as f:  # "x": never over a job another process wrote since the check
                f.write(e["text"])
        cmd = e["cmd"]
        if e["state"] == "preempted":  # it has a checkpoint: continue it (the job's settings are its own)
            cmd = [*_launch(args.launcher, P), sys.executable, "-m", "hpcdgnn", "run", "--resume", str(run_dir)]
        elif e["state"] == "incomplete":
            print(f"  {what}: {run_dir} did not finish in an earlier run of this sweep; set aside as "
                  f"{_set_aside(run_dir).name}, run again", flush=True)
        print("+", shlex.join(cmd), flush=True)
        t0, before = time.perf_counter(), _summary_stamp(run_dir)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env())
        if proc.returncode != 0:
            # a launcher stopped by a signal (mpirun on SIGTERM) exits at once while its ranks still checkpoint:
            # the next run would share the node with them, and the run's state is the one they leave
            if not _await_ranks(run_dir, what):
                why = (f"failed (exit {proc.returncode}), and its rank 0 still holds {run_dir / 'run.lock'} after "
                       f"{_rank_wait():.0f} s (HPCDGNN_RUN_LOCK_WAIT): the sweep stops here, the runs left would share "
                       "the node with its ranks; end them, then run the same command again")
                print(f"  {what}: {why}", file=sys.stderr, flush=True)
                failures.append(f"{what}: {why}; command: {shlex.join(cmd)}")
                break
            # pre-empted this time (exit 75, or a summary written anew): a resume that failed (a moved dataset, a
            # crash) leaves the pre-emption's summary before it
            state = _run_state(run_dir)
            if state == "preempted" and proc.returncode != 75 and _summary_stamp(run_dir) == before:
                state = "incomplete"
            if state == "preempted":
                why = f"pre-empted (exit {proc.returncode}; a re-run of this sweep resumes it)"
            elif proc.returncode == 75:
                why = "pre-empted before its first checkpoint (exit 75; a re-run of this sweep runs it again)"
            else:
                why = f"failed (exit {proc.returncode}): {error_line(proc)}"
            if proc.returncode not in (2, 75) and state != "preempted":  # a crash: its traceback says more
                print(proc.stderr[-2000:], file=sys.stderr, flush=True)
            print(f"  {what}: {why}", file=sys.stderr, flush=True)
            failures.append(f"{what}: {why}; command: {shlex.join(cmd)}")
            continue
        steady = json.loads((run_dir / "summary.json").read_text())["steady_epoch_seconds"]["median"]
        print(f"  {what}: done in {time.perf_counter() - t0:.1f} s, steady epoch {steady:.3f} s "
              f"({run_dir})", flush=True)
        runs.append(run_dir)
    return runs, failures


def _report_dir(out: Path) -> Path:
    """Where a sweep's CSV and plots go: ``out``, or where ``out`` holds an earlier report (a partial sweep's, or
    another sweep's) a new ``out/report-TIME`` beside it, never over it."""
    if not any((out / name).exists() for name in ("scaling.csv", "ceiling.csv", *_FIGURES)):
        return out
    dest = out / f"report-{_stamp()}"
    n = 1
    while dest.exists():
        n += 1
        dest = out / f"report-{_stamp()}-{n}"
    dest.mkdir()
    print(f"note: {out} holds an earlier report (scaling.csv, plots); this one goes beside it, into {dest}",
          flush=True)
    return dest


def run_ceiling(args: argparse.Namespace, runs: list[dict], dest: Path) -> tuple[dict[int, float], list[str]]:
    """The node's ceiling speed-up per P > 1 (module docstring): P copies of the P = 1 baseline run's job at
    once, each launched as that run was; writes ``dest/ceiling.csv`` and returns ``{P: ceiling}`` and a line per
    P whose copies failed (the others are still measured). ``runs``: the sweep's runs as :func:`read_run` read
    them (once: it warns of a run's spread)."""
    out = Path(args.out)
    ones = [r for r in runs if r["P"] == 1]
    if not ones:
        return {}, ["ceiling: no P = 1 run finished, so there is no one-rank job to copy"]
    alone = min(ones, key=lambda r: r["train_s"])  # as the speed-ups: training time
    job = Path(alone["run_dir"]).parent / f"job-{Path(alone['run_dir']).name.removeprefix('run-')}.yaml"
    ceilings, lines, failures = {}, [], []
    for P in sorted(p for p in set(args.ranks) if p > 1):
        dirs = [out / f"ceiling-p{P}-copy{i}" for i in range(P)]
        for d in dirs:  # an earlier sweep's copies: the copies must run at once, so all of them again
            if d.exists():
                print(f"  ceiling: {d} is an earlier run's; set aside as {_set_aside(d).name}", flush=True)
        procs = [subprocess.Popen([*_launch(None, 1), sys.executable, "-m", "hpcdgnn", "run", str(job), "--output",
                                   str(d), *_settings(args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=run_env())
                 for d in dirs]
        failed = []
        for d, proc in zip(dirs, procs, strict=True):
            log = proc.communicate()[0]
            if proc.returncode != 0:
                failed.append(f"ceiling P={P}: copy {d.name} failed (exit {proc.returncode}): "
                              f"{error_line(subprocess.CompletedProcess([], proc.returncode, log, ''))}")
        if failed:
            print("\n".join(f"  {f}" for f in failed), file=sys.stderr, flush=True)
            failures += failed
            continue
        times = [read_run(d)["train_s"] for d in dirs]
        ceilings[P] = P * alone["train_s"] / max(times)
        lines.append({"P": P, "alone_s": alone["train_s"], "copies_s": " ".join(f"{t:.6f}" for t in times),
                      "ceiling_speedup": ceilings[P], "job": str(job)})
        print(f"node ceiling P={P}: {P} one-rank runs at once {', '.join(f'{t:.3f}' for t in times)} s/epoch, "
              f"one alone {alone['train_s']:.3f} s -> at most {ceilings[P]:.2f}x", flush=True)
    with open(dest / "ceiling.csv", "x", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["P", "alone_s", "copies_s", "ceiling_speedup", "job"])
        w.writeheader()
        w.writerows(lines)
    return ceilings, failures


def _is_attempt(run_dir: Path) -> bool:
    """A dead attempt the job scripts (jobs/lib.sh) or a re-run of a sweep set aside: ``NAME.attempt-TIME``."""
    return ".attempt-" in run_dir.name


def main(argv: list[str] | None = None) -> None:
    """Parse arguments; run a sweep and plot it, or plot existing run directories."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a sweep here, then plot it")
    r.add_argument("--mode", choices=["strong", "weak"], default="strong")
    r.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8])
    r.add_argument("--out", required=True, help="directory for graphs, runs, CSV and plots (a re-run with the same "
                                                "settings continues the sweep there)")
    r.add_argument("--job", type=Path,
                   help="a job YAML every run starts from: its sections as written, its data.path for strong "
                        "scaling (unless --data; weak scaling generates its graphs), its model and strategy "
                        "unless --model/--hidden/--strategy name others; the sweep sets train.epochs (its value "
                        "unless --epochs) and train.threads (--threads)")
    r.add_argument("--data", help="strong scaling: dataset directory (default: the --job's, else generate an IBM "
                                  "§6.3 graph)")
    r.add_argument("--vertices", type=int, default=1 << 14, help="strong scaling: N of the generated graph")
    r.add_argument("--vertices-per-rank", type=int, default=1 << 12, help="weak scaling: N / P")
    r.add_argument("--snapshots", type=int, default=32)
    r.add_argument("--density", type=float, default=3.0)
    r.add_argument("--model", help="model.name (default: the --job's, else tmgcn)")
    r.add_argument("--strategy", nargs="+",
                   help="strategies swept, each at every P (default: the --job's, else snapshot)")
    r.add_argument("--baseline", nargs="*", default=["snapshot"],
                   help="strategies also run at the smallest P when not swept: the speed-up is taken against the "
                        "fastest run at that P of any strategy (default: snapshot; none: --baseline with no name)")
    r.add_argument("--hidden", type=int, help="model.hidden (default: the --job's, else 16)")
    r.add_argument("--epochs", type=int,
                   help="epochs per run; the first is warm-up (default: the --job's train.epochs, else 4)")
    r.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    r.add_argument("--blocks", type=int, default=1, help="strategy.blocks (snapshot strategy)")
    r.add_argument("--launcher", help="launch command with {P}, e.g. 'srun -n {P} --mpi=pmix' (default: mpirun -np P)")
    r.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                   help="job settings of every run (hpcdgnn run --set), e.g. strategy.balance=measured "
                        "train.warmup_epochs=3")
    r.add_argument("--ceiling", action="store_true",
                   help="strong scaling from P = 1 on this node: also run P copies of the P = 1 job at once per P > 1 "
                        "(the node's ceiling speed-up, ceiling.csv)")
    p = sub.add_parser("plot", help="CSV and plots of existing run directories")
    p.add_argument("--out", required=True)
    p.add_argument("--mode", choices=["strong", "weak"], default="strong")
    p.add_argument("run_dirs", nargs="+", type=Path)
    args = ap.parse_args(argv)
    ceiling = args.cmd == "run" and args.ceiling
    if ceiling and (args.mode != "strong" or min(args.ranks) != 1 or args.launcher):
        ap.error("--ceiling: strong scaling from --ranks 1 on this node (no --launcher)")
    if args.cmd == "plot":  # another plot's table and figures stay: a new --out for a new plot
        made = [Path(args.out) / name for name in ("scaling.csv", "ceiling.csv", *_FIGURES)]
        if any(p.exists() for p in made):
            raise SystemExit(f"--out {args.out}: holds {next(p for p in made if p.exists()).name} already; a plot "
                             "never overwrites (give a new --out)")
        run_dirs = [d for d in args.run_dirs if not _is_attempt(d)]
        for d in args.run_dirs:  # a glob such as runs/hpcdgnn-strong-SWEEP/p* also matches them
            if _is_attempt(d):
                print(f"note: {d}: left out: an attempt that stopped, set aside when it was run again (by the job "
                      "scripts, jobs/lib.sh, or a re-run of a scaling.py sweep)", file=sys.stderr)
        if not run_dirs:
            raise SystemExit("scaling.py plot: every run directory given is an attempt set aside; nothing to plot")
        report(add_scaling([read_run(d) for d in run_dirs], args.mode), Path(args.out), args.mode)
        return
    # run: the arguments first, before --out is made or locked
    args.base = _job_base(args)
    for name, values in (("--ranks", args.ranks), ("--vertices", [args.vertices]),
                         ("--vertices-per-rank", [args.vertices_per_rank]), ("--snapshots", [args.snapshots]),
                         ("--epochs", [args.epochs])):
        if min(values) < 1:  # mpirun -np 0 starts a rank on every slot: a run of another P recorded as p0
            _refuse(f"{name} {' '.join(map(str, values))}: must be 1 or more")
    if len(set(args.ranks)) < len(args.ranks):
        _refuse(f"--ranks {' '.join(map(str, args.ranks))}: each rank count once (each names one run directory)")
    if args.mode == "weak" and args.data:
        _refuse("--data is for strong scaling; weak scaling generates one graph per P")
    if args.data and not (Path(args.data) / "manifest.json").is_file():  # else every run fails on it, one by one
        _refuse(f"--data {args.data}: no dataset there (no manifest.json): give a directory 'hpcdgnn prepare' or "
                "'generate' wrote")
    out = Path(args.out)
    _check_out(out)
    out.mkdir(parents=True, exist_ok=True)
    lock = _lock_out(out)
    try:
        run_dirs, failures = run_sweep(args)
        if run_dirs:  # what finished is reported even when other runs failed
            dest = _report_dir(out)
            ceilings, rows = None, [read_run(d) for d in run_dirs]
            if ceiling:
                ceilings, failed = run_ceiling(args, rows, dest)
                failures += failed
            report(add_scaling(rows, args.mode), dest, args.mode, ceilings)
        if failures:
            for f in failures:
                print(f"failed: {f}", file=sys.stderr)
            raise SystemExit(f"scaling.py: {len(failures)} failed (above), the report holds the runs that completed; "
                             "where the cause was not the settings (a node, a pre-emption) the same command continues "
                             "the sweep, keeping what completed; other settings need another --out")
    finally:  # released here, not whenever the file object is collected (a caller's next sweep into --out)
        lock.close()


if __name__ == "__main__":
    main()
