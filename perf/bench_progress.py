"""How fast one chunk exchange moves, by who moves it (issue 13 item 6; :mod:`hpcdgnn.comm.progress`).

One exchange of the chunked redistribution (``strategy.overlap_chunks``): every rank sends each other
rank the box [its S snapshots] x [that rank's chunk of n vertex rows] of its (S, N, F) float32 snapshot
layout — a strided box, which MPI moves as a derived datatype — into a (P·S, n, F) chunk layout. The
training thread posts it and waits; it is moved by

- ``calls``: the training thread's own wait (``MPI_Wait`` inside the library);
- ``poll``: a progress thread calling ``MPI_Testsome``, sleeping ``POLL_S`` between rounds that completed
  nothing (``comm.progress: thread`` without a spare core), the training thread blocked on the exchange's
  flag meanwhile — the rate at which a chunk moves while the training thread computes;
- ``driven``: the same thread, with the training thread waiting as training waits for a chunk it needs:
  it takes the exchange back from the thread and waits inside MPI itself (``ProgressThread.await_exchange``);
- ``dedicated``: a progress thread waiting inside ``MPI_Waitsome`` (with a spare core).

Prints the median time from post to completion and the rate per rank, side by side in one run, and each
mode's time over the first's (``--movers``: all four by default, ``calls`` first). Run it where each rank
and its thread have a core (but for ``driven``, the training thread waits on an event meanwhile, so on 2 cores 2
ranks do)::

    python perf/bench_progress.py --ranks 2 --chunks 4 16
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_epoch import REPO, mpirun_cmd, run_env  # noqa: E402

MOVERS = ("calls", "poll", "driven", "dedicated")


def chunk_boxes(me: int, P: int, S: int, N: int, K: int) -> tuple[list, tuple[int, int], list]:
    """Chunk 0 of K of the snapshot -> vertex redistribution (each rank ``S`` snapshots of ``N`` rows, rank q's
    rows its ``N / P`` range) as seen from rank ``me``: the boxes it sends, the (P·S, rows) leading shape of
    what it receives, and where each rank's box lands in it (``Exchange.ialltoall_boxes``'s arguments)."""
    bounds = [N * q // P for q in range(P + 1)]
    n = [(bounds[q + 1] - bounds[q]) // K for q in range(P)]
    send = [((0, S), (bounds[q], bounds[q] + n[q])) for q in range(P)]
    land = [((p * S, (p + 1) * S), (0, n[me])) for p in range(P)]
    return send, (P * S, n[me]), land


def worker(args) -> None:
    """Under mpirun: time the exchange per K and mode; rank 0 prints."""
    import torch

    sys.path.insert(0, str(REPO))
    from hpcdgnn.comm.communicator import Communicator
    from hpcdgnn.comm.progress import ProgressThread

    torch.set_num_threads(1)
    comm = Communicator()
    me, P, S, N, F = comm.rank, comm.size, args.snapshots, args.vertices, args.hidden
    x = torch.randn(S, N, F)
    rows = []
    for K in args.chunks:
        send, shape, land = chunk_boxes(me, P, S, N, K)
        recv = torch.empty(*shape, F)
        for mode in args.movers:
            comm.progress._thread = None if mode == "calls" else ProgressThread.start(comm._MPI, mode == "dedicated")
            times = []
            for _ in range(args.reps + 1):
                comm.barrier()
                t0 = time.perf_counter()
                pending = comm.exchange.ialltoall_boxes(x, send, recv, land, tag="bench")
                if mode == "poll" and pending.completed is not None:  # the thread alone, as while training computes
                    pending.completed.wait()
                comm.exchange.wait(pending)
                times.append(time.perf_counter() - t0)
            comm.progress.stop()
            assert all(bool((recv[p * S:(p + 1) * S] != 0).any()) for p in range(P))
            slowest = float(comm.gather_array([np.median(times[1:])], tag="bench").max())
            rows.append((K, mode, slowest, (P - 1) * S * shape[1] * F * 4))
    if me == 0:
        print(f"one chunk exchange: P = {P}, S = {S} snapshots per rank, N = {N}, F = {F} float32; "
              f"median of {args.reps}, slowest rank")
        print(f"{'K':>3} {'moved by':>10} {'bytes/rank':>11} {'ms':>8} {'GB/s/rank':>10} {'/first':>7}")
        first = {}
        for K, mode, t, nbytes in rows:
            first.setdefault(K, t)
            print(f"{K:>3} {mode:>10} {nbytes:>11} {t * 1e3:>8.2f} {nbytes / t / 1e9:>10.2f} "
                  f"{t / first[K]:>7.2f}")


def parser() -> argparse.ArgumentParser:
    """The command line (also :func:`probe_ms`'s defaults)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--chunks", type=int, nargs="+", default=[4, 16], help="K: the chunk is N / (P K) rows")
    ap.add_argument("--vertices", type=int, default=32768)
    ap.add_argument("--snapshots", type=int, default=32, help="S: snapshots per rank")
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--movers", nargs="+", choices=MOVERS, default=list(MOVERS),
                    help="who moves the exchange; the ratio column is against the first")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return ap


def main() -> None:
    args = parser().parse_args()
    if args.worker:
        return worker(args)
    sys.exit(subprocess.run(command(args), cwd=REPO, env=dict(run_env(), OMP_NUM_THREADS="1")).returncode)


def command(args) -> list[str]:
    """The mpirun command line of the worker for ``args``."""
    return [*mpirun_cmd(args.ranks), sys.executable, __file__, "--worker", "--chunks", *map(str, args.chunks),
            "--vertices", str(args.vertices), "--snapshots", str(args.snapshots), "--hidden", str(args.hidden),
            "--reps", str(args.reps), "--movers", *args.movers]


def probe_ms(ranks: int, reps: int = 9) -> float:
    """Milliseconds one unchunked exchange of the default layout takes now (the training thread's own wait,
    slowest rank's median): the machine's present transfer rate, which other benchmarks record beside each
    of their runs (``perf/bench_overlap.py --probe``); nan where the probe failed (said on stderr), so that
    one failed launch costs the benchmark one figure, not its runs."""
    args = parser().parse_args(["--ranks", str(ranks), "--chunks", "1", "--reps", str(reps), "--movers", "calls"])
    proc = subprocess.run(command(args), cwd=REPO, env=dict(run_env(), OMP_NUM_THREADS="1"), capture_output=True,
                          text=True)
    out = proc.stdout.splitlines()
    head = next((i for i, ln in enumerate(out) if ln.split()[:3] == ["K", "moved", "by"]), None)
    if proc.returncode != 0 or head is None or head + 1 >= len(out):
        print(f"perf/bench_progress.py: the probe failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}",
              file=sys.stderr)
        return float("nan")
    return float(out[head + 1].split()[3])


if __name__ == "__main__":
    main()
