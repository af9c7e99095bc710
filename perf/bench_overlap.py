"""Communication hidden behind compute under the snapshot strategy (issue 13 item 6).

    python perf/bench_overlap.py --data DIR [--ranks 2] [--chunks 1 4 8] [--interleave] [--model cdgcn]
                                 [--hidden 16] [--epochs 8] [--warmup 3] [--reps 3] [--blocks 1] [--grad-buckets 1]
                                 [--device cpu] [--trace] [--probe]

Runs ``strategy: snapshot`` at P = ``--ranks`` (one thread per rank) with
``strategy.overlap_chunks`` = each of ``--chunks`` (in that order, the first the baseline),
on the same data, the configurations alternating run by run (``--reps`` rounds), and
prints per configuration, over the steady epochs of all its runs (the first ``--warmup`` epochs
of a run are left out: unchunked, CD-GCN on gen32k took 2–3× its steady time in epoch 2 and 1.3–1.6× in
epoch 3, in its LSTM over all of a rank's rows, whose large blocks page-fault until the allocator holds
enough freed memory for them (``perf/results/rnn-rows/s32_lstm_warm.log``); chunked, up to 1.6× in epoch 2):

* epoch: median wall time of an epoch (slowest rank, metrics.jsonl ``time.epoch.max``);
* comm: median communication time (``time.comm``, mean over ranks): blocking calls'
  durations plus non-blocking exchanges' post-to-completion time. It is not time the bytes
  were moving: they move only inside MPI calls, so a chunk posted before the
  computation and waited for after it counts the whole computation as under way. So no
  "hidden" share (comm - exposed over comm) is printed: it would read high
  while nothing moved. Compare exposed times across configurations instead;
* exposed: median exposed communication time (``time.comm_exposed``, mean over ranks):
  the part of comm spent blocked in MPI calls (equal to comm without overlap);
* @slowest: the exposed time of the epoch's slowest rank (``slowest.comm_exposed``), the
  part on the critical path: what a faster rank spends waiting for a slower one is slack
  that no overlap can hide (every exchange is all-to-all);
* the ratio exposed / exposed of the first configuration (the first of ``--chunks``) — the issue's goal
  is <= 0.5 at P = 2;
* late: median of the part of exposed spent before the last rank reached the exchange
  (``time.comm_late``, mean over ranks; :mod:`hpcdgnn.metrics.waits`): waiting for a slower rank,
  which no overlap can hide; and the rest, exposed - late, the transfer left exposed — what
  overlap can hide — with its ratio to the first configuration's;
* the loss of the last epoch (the same for every configuration: overlap changes no result);
* below the table, per configuration, the spread (25th-75th percentile over the steady epochs of all its
  runs) of exposed and of exposed - late: a ratio whose spread overlaps the first configuration's is noise;
* then, per configuration, the median exposed seconds of each communicator tag
  (metrics.jsonl ``comm_by_tag``): which exchange the remaining exposed time belongs to;
* with ``--probe``, how fast the machine moved bytes between the ranks just before and just after each run
  (one unchunked exchange, :func:`probe_ms`), and, where the probes fall into two states (a
  virtual machine's cores placed closer or farther apart by its host), the table again for the runs of
  each state;
* with ``--interleave``, the configurations share each run instead of alternating run by run: ``--reps`` jobs,
  each cycling through them epoch by epoch (in order, then reversed: A B B A A B ...; each epoch's
  configuration set between epochs, :meth:`~hpcdgnn.strategies.snapshot.SnapshotStrategy.set_overlap_chunks`,
  outside the epoch's clock and counters), with the probe's
  unchunked exchange timed before every epoch. Below the tables, each configuration's exposed time over
  the first's *within a cycle* (median and quartiles over the cycles), over all cycles and over those whose
  probes lie in one machine state. Why: on this project's 2-core VM the host's placement of the cores changes
  every few seconds to minutes, and K = 1's exposed time with it (0.07-0.10 or 0.18-0.25 s an epoch); runs one
  after the other compared configurations across states by chance, epochs of one cycle share the state.
  ``comm.grad_buckets`` is ``--grad-buckets`` in every epoch, and the loss column is each configuration's
  last epoch's (the run's trajectory is one);
* with ``--trace`` (``debug.trace_exchanges``), below that, per configuration and tag, every
  exchange in the order posted: the milliseconds blocked in it and, of them, late (mean over
  steady epochs and ranks). With K chunks a layer's forward posts its K chunks to the vertex
  layout, then K back as the RNN finishes each; what overlap cannot hide is the first chunk
  in and the last chunk out, and the late part — a chunk in between blocked long means the
  bytes did not move while the rank computed.

    python perf/bench_overlap.py --kernel [--ranks 2] [--vertices 32768] [--snapshots 64] [--hidden 16]
                                 [--chunks 1 4 8]

The kernel alone, on synchronised ranks: one temporal layer (snapshot -> vertex
redistribution, an LSTM over the vertex range, the reverse redistribution, forward and
backward) at the sizes given, ranks meeting at a barrier before each repetition, so that
what is exposed is the transfer itself and not a slower rank (a loaded machine's noise).
Below the table, per rank, the seconds spent inside posts, waits and tests of the
non-blocking exchanges: where the exposed time of chunked exchanges goes.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_epoch import mpirun_cmd, run_env, run_job  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def chunk_boxes(me: int, P: int, S: int, N: int, K: int) -> tuple[list, tuple[int, int], list]:
    """Chunk 0 of K of the snapshot -> vertex redistribution (each rank ``S`` snapshots of ``N`` rows, rank q's
    rows its ``N / P`` range) as seen from rank ``me``: the boxes it sends, the (P·S, rows) leading shape of
    what it receives, and where each rank's box lands in it (``Exchange.ialltoall_boxes``'s arguments)."""
    bounds = [N * q // P for q in range(P + 1)]
    n = [(bounds[q + 1] - bounds[q]) // K for q in range(P)]
    send = [((0, S), (bounds[q], bounds[q] + n[q])) for q in range(P)]
    land = [((p * S, (p + 1) * S), (0, n[me])) for p in range(P)]
    return send, (P * S, n[me]), land


def job_of(args, K: int, buckets: int) -> dict:
    """The job of one configuration: ``strategy.overlap_chunks: K``, ``comm.grad_buckets: buckets``."""
    return {
        "data": {"path": str(args.data), "validate": "structure"},
        "model": {"name": args.model, "hidden": args.hidden, "layers": 2},
        "task": {"name": "link_prediction"},
        "train": {"epochs": args.epochs, "threads": 1, "dtype": "float32", "warmup_epochs": args.warmup, "seed": 0,
                  "device": args.device},
        "strategy": {"name": "snapshot", "overlap_chunks": K, "blocks": args.blocks},
        "comm": {"grad_buckets": buckets},
        "debug": {"trace_exchanges": args.trace},
    }


def _trace(run_dir: Path, epochs: set[int]) -> list[dict]:
    """The trace lines (``debug.trace_exchanges``) of every rank for ``epochs``."""
    return [x for f in sorted((run_dir / "trace").glob("exchanges.rank*.jsonl"))
            for x in map(json.loads, f.read_text().splitlines()) if x["epoch"] in epochs]


def run(work: Path, args, K: int, rep: int) -> tuple[list[dict], list[dict]]:
    """One job with ``overlap_chunks: K``: its steady epochs' records and (``--trace``) the steady epochs'
    trace lines of every rank."""
    tag = f"k{K}-r{rep}"
    first = K == configs(args)[0]
    recs = run_job(job_of(args, K, 1 if first else args.grad_buckets), args.ranks, work, tag, REPO,
                   env={"OMP_NUM_THREADS": "1"})
    run_dir = work / f"run-{tag}"
    steady = [r for r in recs if not r["warmup"]] or recs[-1:]
    trace = _trace(run_dir, {r["epoch"] for r in steady}) if args.trace else []
    return steady, trace


#: the probe of the machine's state: one unchunked exchange of the redistribution's layout, each rank's
#: snapshots x every rank's rows of the vertices, 16 float32 each (13 or 33 ms on this project's VM)
PROBE_SNAPSHOTS, PROBE_VERTICES = 32, 32768


def probe(comm, layout: list, reps: int = 3) -> float:
    """Milliseconds of the median of ``reps`` unchunked exchanges at the probe's size (its own box copied, the
    others' sent), slowest rank, through hpcdgnn's communicator; ``layout``: the probe's tensor and boxes, made
    at its first call and kept (two 64 MiB tensors a rank)."""
    import torch

    if not layout:
        send, shape, land = chunk_boxes(comm.rank, comm.size, PROBE_SNAPSHOTS, PROBE_VERTICES, 1)
        layout[:] = [torch.ones(PROBE_SNAPSHOTS, PROBE_VERTICES, 16), send, (*shape, 16), land]
    x, send, shape, land = layout
    times = []
    for _ in range(reps):
        comm.barrier()
        t = time.perf_counter()
        comm.exchange.alltoall_boxes(x, send, shape, land, tag="probe", reuse="probe")
        times.append(time.perf_counter() - t)
    return 1e3 * float(comm.gather_array([float(np.median(times))], tag="probe").max())


def probe_worker(reps: int) -> None:
    """Under mpirun: :func:`probe` once; rank 0 prints its milliseconds."""
    import torch

    sys.path.insert(0, str(REPO))
    from hpcdgnn.comm.communicator import Communicator

    torch.set_num_threads(1)
    comm = Communicator()
    ms = probe(comm, [], reps)
    if comm.rank == 0:
        print(f"probe_ms {ms}", flush=True)


def probe_ms(ranks: int, reps: int = 9) -> float:
    """Milliseconds one unchunked exchange takes now (:func:`probe` in a launch of its own): the machine's
    present transfer rate, recorded beside each run (``--probe``); nan where the probe failed (said on
    stderr), so that one failed launch costs the benchmark one figure, not its runs."""
    cmd = [*mpirun_cmd(ranks), sys.executable, __file__, "--probe-worker", "--reps", str(reps)]
    proc = subprocess.run(cmd, cwd=REPO, env=dict(run_env(), OMP_NUM_THREADS="1"), capture_output=True, text=True)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("probe_ms ")), None)
    if proc.returncode != 0 or line is None:
        print(f"perf/bench_overlap.py: the probe failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}",
              file=sys.stderr)
        return float("nan")
    return float(line.split()[1])

#: rank 0 of an interleaved run writes here, per epoch, the configuration it ran (:func:`interleave_worker`)
SCHEDULE = "interleave.jsonl"


def interleave_worker(args, rest: list[str]) -> int:
    """Under mpirun: ``hpcdgnn run`` (``rest``: its arguments) whose epochs cycle through the configurations,
    in order in even cycles and reversed in odd ones (so no configuration always follows the same one);
    rank 0 writes which ran in each epoch to :data:`SCHEDULE` in the run directory."""
    sys.path.insert(0, str(REPO))
    import hpcdgnn.train.trainer as trainer
    from hpcdgnn.__main__ import main as hpcdgnn_main

    order = configs(args)
    at = next(i for i, a in enumerate(rest) if a == "--output" or a.startswith("--output="))
    out = Path(rest[at].partition("=")[2] or rest[at + 1])
    layout: list = []  # the probe's tensor and boxes, made at its first call

    class Cycling(trainer.EpochRecorder):
        """Switches the configuration before the epoch's clock and counters start, after timing :func:`probe`
        (outside the epoch's counters too). The probe's two 64 MiB tensors a rank live for the run and pass
        through the caches before every epoch: interleaved epochs compare with each other, not with those of a
        run without them."""

        begun = 0

        def begin(self, kept_scores=None) -> None:
            i, m = self.begun, len(order)
            self.begun += 1
            K = order[i % m] if (i // m) % 2 == 0 else order[m - 1 - i % m]
            ms = probe(self.comm, layout)
            self.strategy.set_overlap_chunks(K)
            if self.comm.rank == 0:
                with open(out / SCHEDULE, "a") as f:
                    f.write(json.dumps({"epoch": (self.resumed_at or 0) + i + 1, "K": K, "probe_ms": ms}) + "\n")
            super().begin(kept_scores)

    trainer.EpochRecorder = Cycling
    return hpcdgnn_main(rest)


class Cycle(NamedTuple):
    """One cycle of an interleaved run: per configuration its exposed seconds over the first configuration's
    (nan where that is 0), and the probes (ms) before each of its epochs and after its last."""

    ratios: np.ndarray
    probes: tuple[float, ...]


def run_interleaved(work: Path, args, rep: int) -> tuple[list["Run"], list[Cycle], list[float]]:
    """One job whose epochs cycle through the configurations (``--interleave``): per configuration a
    :class:`Run` of its steady epochs, the steady cycles (every epoch of them past the warm-up) and the
    probes before the steady epochs."""
    order = configs(args)
    tag = f"interleave-r{rep}"
    program = [__file__, "--interleave-worker", "--chunks", *map(str, order), "--"]
    recs = run_job(job_of(args, order[0], args.grad_buckets), args.ranks, work, tag, REPO,
                   env={"OMP_NUM_THREADS": "1"}, program=program)
    run_dir = work / f"run-{tag}"
    ran = {x["epoch"]: x for x in map(json.loads, (run_dir / SCHEDULE).read_text().splitlines())}
    of = {r["epoch"]: ran[r["epoch"]]["K"] for r in recs}
    steady = [r for r in recs if not r["warmup"]]
    trace = _trace(run_dir, {r["epoch"] for r in steady}) if args.trace else []
    runs = [Run(c, [r for r in steady if of[r["epoch"]] == c], [t for t in trace if of[t["epoch"]] == c])
            for c in order]
    m, cycles = len(order), []
    by_epoch = {r["epoch"]: r for r in steady}
    for c0 in range(0, len(recs) - m + 1, m):  # epochs c0 + 1 .. c0 + m: one cycle
        cycle = [by_epoch.get(e) for e in range(c0 + 1, c0 + m + 1)]
        if all(cycle):
            exposed = {of[r["epoch"]]: r["time"]["comm_exposed"]["mean"] for r in cycle}
            probes = tuple(ran[e]["probe_ms"] for e in range(c0 + 1, c0 + m + 2) if e in ran)
            first = exposed[order[0]]
            cycles.append(Cycle(np.array([exposed[c] / first if first > 0 else np.nan for c in order]), probes))
    return runs, cycles, [ran[r["epoch"]]["probe_ms"] for r in steady]


def trace_rows(lines: list[dict]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per tag, the mean over ``lines`` (steady epochs x ranks) of each of its exchanges' blocked and late
    seconds, by its place among the epoch's exchanges of that tag; a tag whose count varies is left out."""
    per: dict[str, list[list[tuple[float, float]]]] = {}
    for x in lines:
        seq: dict[str, list[tuple[float, float]]] = {}
        for k, _, blocked, late in x["exchanges"]:
            seq.setdefault(x["tags"][k], []).append((blocked, np.nan if late is None else late))
        for t, v in seq.items():
            per.setdefault(t, []).append(v)
    out = {}
    for t, seqs in sorted(per.items()):
        if len({len(v) for v in seqs}) == 1 and len(seqs) == len(lines):
            a = np.array(seqs)  # (lines, exchanges, 2)
            out[t] = (a[:, :, 0].mean(axis=0), a[:, :, 1].mean(axis=0))
    return out


def kernel_worker(args) -> None:
    """Under mpirun: time one temporal layer per K (see the module docstring); rank 0 prints."""
    import time
    from types import SimpleNamespace

    import torch

    sys.path.insert(0, str(REPO))
    from hpcdgnn.comm.communicator import Communicator
    from hpcdgnn.partition.plan import PartitionPlan
    from hpcdgnn.strategies.snapshot import SnapshotStrategy

    torch.set_num_threads(1)
    comm = Communicator()
    # where the exposed time goes: seconds inside posts, waits and tests (this rank, per repetition)
    spent = {"post": 0.0, "wait": 0.0, "test": 0.0}

    def timed(name: str, f):
        def call(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t
        return call

    for name, method in (("post", "ialltoall_boxes"), ("wait", "wait"), ("test", "test")):
        setattr(comm.exchange, method, timed(name, getattr(comm.exchange, method)))
    me, P, T, N, F = comm.rank, comm.size, args.snapshots, args.vertices, args.hidden
    vb = [N * q // P for q in range(P + 1)]
    plan = PartitionPlan(kind="snapshot", num_ranks=P, num_snapshots=T, num_vertices=N,
                         snapshot_owner=[t % P for t in range(T)], snapshot_bounds=None, vertex_bounds=vb, ranks=[])
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(F, F)
    layer = SimpleNamespace(temporal=lambda y, state: lstm(y, state))
    y0 = torch.randn(len(plan.snapshots_of(me)), N, F)
    rows = []
    for K in configs(args):
        s = SnapshotStrategy.__new__(SnapshotStrategy)
        s.comm, s.ctx = comm, SimpleNamespace(job=SimpleNamespace(strategy=SimpleNamespace(overlap_chunks=K)))
        s._init_exchange(plan)
        reps = []  # per repetition: layer, comm, exposed, posts, waits, tests (seconds)
        for _ in range(args.reps + 1):
            y = y0.clone().requires_grad_(True)
            comm.barrier()
            before = comm.stats.snapshot()
            spent.update(post=0.0, wait=0.0, test=0.0)
            t0 = time.perf_counter()
            if s._chunk_boxes is None:
                z, _ = layer.temporal(s._to_vertex(y, "k.v"), None)
                out = s._to_snapshot(z, "k.s")
            else:
                out, _ = s._encode_overlapped(layer, 0, y, None, 0)
            out.backward(torch.ones_like(out))
            d = comm.stats.since(before, "redistribute")
            reps.append([time.perf_counter() - t0, d.seconds, d.exposed, spent["post"], spent["wait"], spent["test"]])
        mine = np.median(np.array(reps[1:]), axis=0)
        rows.append((K, comm.gather_array(mine, tag="bench").reshape(P, -1)))
    if me == 0:
        print(f"kernel: P = {P}, T = {T}, N = {N}, F = {F}, LSTM forward + backward, ranks synchronised; "
              f"medians of {args.reps}, means over ranks")
        print(f"{'K':>3} {'layer s':>9} {'comm s':>9} {'exposed s':>10} {'exposed/first':>14}")
        first = rows[0][1][:, 2].mean()
        for K, r in rows:
            t, c, e = r[:, :3].mean(axis=0)
            print(f"{K:>3} {t:>9.3f} {c:>9.3f} {e:>10.3f} {e / first:>14.2f}")
        print("\nexposed seconds per rank: inside posts (they make the own box's copy), waits, tests")
        for K, r in rows:
            print(f"{K:>3} " + "  ".join(
                f"rank {q}: {x[3]:.3f} / {x[4]:.3f} / {x[5]:.3f}" for q, x in enumerate(r)))


def _exposed(records: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Per epoch record: the exposed seconds (mean over ranks), and (late, exposed - late) of the epochs that
    have a late figure (one whose exchanges the ranks recorded differently has none; metrics/waits.py)."""
    times = [r["time"] for r in records]
    split = [(t["comm_late"]["mean"], t["comm_exposed"]["mean"] - t["comm_late"]["mean"])
             for t in times if "comm_late" in t]
    return np.array([t["comm_exposed"]["mean"] for t in times]), np.array(split).reshape(-1, 2)


def configs(args) -> list[int]:
    """The overlap_chunks of every configuration, in order: ``--chunks``."""
    return list(args.chunks)


class Run(NamedTuple):
    """One job's results: its configuration (``overlap_chunks``), its steady epochs' records and trace lines,
    and the probes taken just before and just after it (``--probe``; empty without)."""

    config: int
    records: list[dict]
    trace: list[dict]
    probes: tuple[float, ...] = ()


def machine_states(probes: list[float], gap: float = 1.4) -> list[tuple[str, tuple[float, float]]]:
    """The machine states the probes saw, each as (name, (lowest, highest probe)): ``only`` unless two sorted
    neighbours differ by more than ``gap`` times; then ``fast`` and ``slow``, split at the widest such step.

    Why: a virtual machine's host moves where it runs the guest's cores, and with that how fast ranks pass
    bytes between them — on this project's 2-core VM a core-to-core cache-line round trip took 55–80 or
    310–390 ns (``perf/vm/core_pingpong.c``), one unchunked exchange 13 or 33 ms, each for half a minute to
    several (``perf/results/README.md``, thirty-second session). Whether a ratio between configurations
    holds in both states, the tables per state show."""
    seen = sorted(p for p in probes if not math.isnan(p))  # a failed probe is nan
    if not seen:
        return []
    steps = [b / a for a, b in zip(seen, seen[1:], strict=False)]
    if not steps or max(steps) <= gap:
        return [("only", (seen[0], seen[-1]))]
    cut = int(np.argmax(steps))
    return [("fast", (seen[0], seen[cut])), ("slow", (seen[cut + 1], seen[-1]))]


def state_of(run: Run, states: list[tuple[str, tuple[float, float]]]) -> str | None:
    """The state both of ``run``'s probes lie in; None where it has none, a failed one, or they differ."""
    for name, (lo, hi) in states:
        if run.probes and all(lo <= p <= hi for p in run.probes):  # a nan compares false
            return name
    return None


def table(order: list[int], steady: dict[int, list[dict]]) -> None:
    """Per configuration, the medians over ``steady`` (its steady epochs' records), ratios against the
    first configuration's; a configuration without records reads ``no run``, and ratios against it nan."""
    print(f"{'K':>3} {'epoch s':>9} {'comm s':>9} {'exposed s':>10} {'@slowest':>9} "
          f"{'exposed/first':>14} {'late s':>7} {'exp-late s':>11} {'/first':>7} {'MiB/epoch':>10} {'loss':>10}")
    base = base_transfer = None
    for K in order:
        rs = steady[K]
        if not rs:
            print(f"{K:>3}    no run")
            base = float("nan") if base is None else base
            base_transfer = float("nan") if base_transfer is None else base_transfer
            continue
        epoch = float(np.median([r["time"]["epoch"]["max"] for r in rs]))
        comm = float(np.median([r["time"]["comm"]["mean"] for r in rs]))
        exposed_all, split = _exposed(rs)
        exposed = float(np.median(exposed_all))
        late_s, transfer_s = np.median(split, axis=0) if len(split) else (float("nan"), float("nan"))
        base = exposed if base is None else base
        base_transfer = transfer_s if base_transfer is None else base_transfer
        slow = float(np.median([r["slowest"]["comm_exposed"] for r in rs]))
        mib = float(np.median([r["bytes_sent"] for r in rs])) / 2**20
        print(f"{K:>3} {epoch:>9.3f} {comm:>9.3f} {exposed:>10.3f} "
              f"{slow:>9.3f} {exposed / base:>14.2f} {late_s:>7.3f} {transfer_s:>11.3f} "
              f"{transfer_s / base_transfer:>7.2f} {mib:>10.1f} {rs[-1]['loss']:>10.6f}")


def main() -> None:
    """Alternate the configurations, then print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--chunks", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--model", default="cdgcn")
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3,
                    help="leading epochs of each run left out (train.warmup_epochs): with K = 1 on gen32k "
                         "epochs 2 and 3 ran 1.3-3x the steady time")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=1)
    ap.add_argument("--grad-buckets", type=int, default=1,
                    help="comm.grad_buckets of every K but the first (with --interleave: of every epoch)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"], help="train.device of the runs")
    ap.add_argument("--trace", action="store_true",
                    help="debug.trace_exchanges: print each exchange's blocked and late time, in order")
    ap.add_argument("--probe", action="store_true",
                    help="time an unchunked exchange between runs (probe_ms); where the probes "
                         "fall into two states, tabulate the runs again per state")
    ap.add_argument("--interleave", action="store_true",
                    help="all configurations in one job per rep, epoch by epoch in cycles; prints per-cycle ratios")
    ap.add_argument("--kernel", action="store_true", help="time one temporal layer on synchronised ranks")
    ap.add_argument("--kernel-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--interleave-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--probe-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--vertices", type=int, default=32768)
    ap.add_argument("--snapshots", type=int, default=64)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)  # the interleave worker's: hpcdgnn run's arguments
    args = ap.parse_args(argv[:cut])
    if min(args.chunks) < 1:
        ap.error(f"--chunks {' '.join(map(str, args.chunks))}: each must be >= 1")
    if len(set(args.chunks)) < len(args.chunks):
        ap.error(f"--chunks {' '.join(map(str, args.chunks))}: a configuration named twice")
    if args.probe_worker:
        return probe_worker(args.reps)
    if args.interleave_worker:
        sys.exit(interleave_worker(args, argv[cut + 1:]))
    if args.kernel_worker:
        return kernel_worker(args)
    if args.kernel:
        cmd = [*mpirun_cmd(args.ranks), sys.executable, __file__, "--kernel-worker",
               "--chunks", *map(str, args.chunks),
               "--vertices", str(args.vertices), "--snapshots", str(args.snapshots), "--hidden", str(args.hidden),
               "--reps", str(args.reps)]
        sys.exit(subprocess.run(cmd, cwd=REPO, env=dict(run_env(), OMP_NUM_THREADS="1")).returncode)
    if args.data is None:
        ap.error("--data is required (or --kernel)")
    if not 0 <= args.warmup < args.epochs:
        ap.error(f"--warmup {args.warmup}: must leave at least one of --epochs {args.epochs} steady")
    order = configs(args)
    runs: list[Run] = []
    if args.interleave:
        if args.probe:
            ap.error("--probe times the machine between runs; with --interleave the configurations share each run")
        m = len(order)
        if m * (-(-args.warmup // m) + 1) > args.epochs:  # cycles start at epochs 1, m + 1, ...
            ap.error(f"--interleave: --epochs {args.epochs} leaves no whole cycle of the {m} configurations after "
                     f"--warmup {args.warmup} (cycles begin at epochs 1, {m + 1}, {2 * m + 1}, ...)")
        return interleaved(args, order)
    after = probe_ms(args.ranks) if args.probe else None  # a run's probe after is the next one's before
    with tempfile.TemporaryDirectory(prefix="bench_overlap-") as tmp:
        for rep in range(args.reps):
            for K in (order if rep % 2 == 0 else order[::-1]):
                recs, trace = run(Path(tmp), args, K, rep)
                before, after = after, probe_ms(args.ranks) if args.probe else None
                runs.append(Run(K, recs, trace, () if after is None else (before, after)))
                print(_rep_line(rep, K, recs, late=True)
                      + ("" if after is None else f"  probe {before:.1f} {after:.1f} ms"), flush=True)
    report(args, order, runs,
           f"{args.reps} runs x {args.epochs - args.warmup} steady epochs per configuration; medians")


def _rep_line(rep: int, K: int, recs: list[dict], numbered: bool = False, late: bool = False) -> str:
    """A run's progress line: its steady epochs' numbers (``numbered``: an interleaved run's share of them), wall
    times, exposed and (``late``) late seconds."""
    return (f"  rep {rep} K={K}:"
            + ("" if not numbered else " epochs " + " ".join(str(r["epoch"]) for r in recs) + " ")
            + " epoch " + " ".join(f"{r['time']['epoch']['max']:.3f}" for r in recs)
            + "  exposed " + " ".join(f"{r['time']['comm_exposed']['mean']:.3f}" for r in recs)
            + ("" if not late else "  late " + " ".join(
                f"{r['time'].get('comm_late', {}).get('mean', float('nan')):.3f}" for r in recs)))


def interleaved(args, order: list[int]) -> None:
    """``--interleave``: ``--reps`` jobs, each cycling through the configurations epoch by epoch; the
    report of :func:`report`, then the exposed time's ratios within each cycle."""
    runs: list[Run] = []
    cycles: list[Cycle] = []
    probes: list[float] = []  # one a steady epoch (a cycle's include the next cycle's first)
    with tempfile.TemporaryDirectory(prefix="bench_overlap-") as tmp:
        for rep in range(args.reps):
            mine, ratios, seen = run_interleaved(Path(tmp), args, rep)
            runs += mine
            cycles += ratios
            probes += seen
            for x in mine:
                print(_rep_line(rep, x.config, x.records, numbered=True), flush=True)
            if ratios:
                print(f"  rep {rep}: per cycle, exposed / first's [probes, ms]: " + "  ".join(
                    "/".join(f"{v:.2f}" for v in c.ratios[1:]) + " [" + " ".join(f"{p:.1f}" for p in c.probes) + "]"
                    for c in ratios), flush=True)
    report(args, order, runs,
           f"{args.reps} runs, each cycling through the {len(order)} configurations epoch by epoch, "
           f"{args.epochs - args.warmup} steady epochs in all; medians (loss: of each configuration's last epoch)")
    if not cycles:
        return
    print(f"\nwithin each cycle (of {args.epochs - args.warmup} steady epochs, those cycles whose epochs are all "
          "steady): exposed over the first configuration's exposed in the same cycle, median (25th-75th "
          "percentile); a cycle's epochs share the machine's state")
    ratios_table(order, cycles, "all")
    states = machine_states(probes)
    print("probes (an unchunked exchange before each epoch, ms): " + (
        "one machine state" if len(states) < 2 else
        ", ".join(f"{name} {lo:.1f}-{hi:.1f}" for name, (lo, hi) in states)
        + "; cycles whose probes all lie in one state, by state:"))
    for name, (lo, hi) in states if len(states) > 1 else ():
        ratios_table(order, [c for c in cycles if all(lo <= p <= hi for p in c.probes)], name)


def ratios_table(order: list[int], cycles: list[Cycle], what: str) -> None:
    """Per configuration, the median (25th-75th percentile) over ``cycles`` of its in-cycle ratio."""
    if not cycles:
        print(f"  {what}: no cycle")
        return
    a = np.array([c.ratios for c in cycles])  # (cycles, configurations)
    for j, K in enumerate(order[1:], 1):
        q25, q50, q75 = np.nanpercentile(a[:, j], [25, 50, 75])
        print(f"  {what} ({len(a)} cycles): {K:>3} {q50:.2f} "
              f"({q25:.2f}-{q75:.2f})")


def report(args, order: list[int], runs: list["Run"], what: str) -> None:
    """Print the tables over ``runs`` (their configurations' steady epochs): medians, probes and machine
    states (``--probe``), spreads, exposed time by tag and (``--trace``) exchange by exchange."""
    steady = {c: [r for x in runs if x.config == c for r in x.records] for c in order}
    traces = {c: [t for x in runs if x.config == c for t in x.trace] for c in order}
    print(f"\nsnapshot strategy, P = {args.ranks}, {args.model} hidden {args.hidden}, data {args.data}, {what}")
    table(order, steady)
    if args.probe:
        print("\nprobe: an unchunked exchange just before and just after each run, ms")
        for K in order:
            print(f"{K:>3} " + "  ".join("/".join(f"{p:.1f}" for p in x.probes) for x in runs if x.config == K))
        states = machine_states([p for x in runs for p in x.probes])
        if len(states) == 1:
            print("one machine state: no two probes differ by more than a factor 1.4 between sorted neighbours")
        for name, (lo, hi) in states if len(states) > 1 else ():
            inside = [x for x in runs if state_of(x, states) == name]
            if not inside:
                print(f"\nno run had the machine in its {name} state (probes {lo:.1f}-{hi:.1f} ms) before and after")
                continue
            print(f"\nruns with the machine in its {name} state before and after (probes {lo:.1f}-{hi:.1f} ms): "
                  f"{len(inside)}; medians, ratios against the first configuration's runs in this state")
            table(order, {c: [r for x in inside if x.config == c for r in x.records] for c in order})
        if len(states) > 1:
            print(f"runs that changed state between their probes, or lack one (left out of both): "
                  f"{sum(1 for x in runs if state_of(x, states) is None)}")
    print("\nspread over the steady epochs of all runs (25th-75th percentile): exposed s, exposed - late s; "
          "ratios of medians whose spreads overlap the first configuration's are within this machine's noise")
    for K in order:
        if not steady[K]:
            print(f"{K:>3} no run")
            continue
        exposed_all, split = _exposed(steady[K])
        exposed_q = np.percentile(exposed_all, [25, 75])
        transfer_q = np.percentile(split[:, 1], [25, 75]) if len(split) else (float("nan"), float("nan"))
        print(f"{K:>3} exposed {exposed_q[0]:.3f}-{exposed_q[1]:.3f}"
              f"  exposed - late {transfer_q[0]:.3f}-{transfer_q[1]:.3f}")
    print("\nexposed seconds by tag (median over steady epochs of the mean over ranks; max over ranks; "
          "late: of the mean, before the last rank arrived)")
    for K in order:
        rs = steady[K]
        tags = sorted({t for r in rs for t in r["comm_by_tag"]})
        print(f"{K:>3} " + "  ".join(
            f"{t} {np.median([r['comm_by_tag'].get(t, {}).get('exposed', 0.0) for r in rs]):.3f}"
            f" ({np.median([r['comm_by_tag'].get(t, {}).get('exposed_max', 0.0) for r in rs]):.3f};"
            f" late {np.median([r['comm_by_tag'].get(t, {}).get('late', float('nan')) for r in rs]):.3f})"
            for t in tags))
    if args.trace:
        print("\nexchange by exchange (debug.trace_exchanges; mean over steady epochs and ranks, in the order the"
              " exchanges of the tag were posted): ms blocked / of them late")
        for K in order:
            for t, (blocked, late) in trace_rows(traces[K]).items():
                print(f"{K:>3} {t}: " + " ".join(
                    f"{1e3 * b:.1f}/{1e3 * w:.1f}" for b, w in zip(blocked, late, strict=True)))


if __name__ == "__main__":
    main()
