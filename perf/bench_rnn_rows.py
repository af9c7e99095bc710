"""A time encoder's LSTM over many rows, whole or a block of rows at a time (issue 13 items 2 and 6: where the
chunked snapshot strategy's speed comes from).

    python perf/bench_rnn_rows.py [--steps 64] [--features 32] [--hidden 16] [--rows 16384 32768]
                                  [--chunks 1 4 8 16] [--repeat 4]

Forward + backward (a square loss on the outputs) of one LSTM layer over (T, N, F) float32 on one thread, the
rows split into K equal blocks run one after the other (rows never mix in an RNN: the same arithmetic per row),
by two implementations: torch's ``nn.LSTM`` module (one oneDNN node; what CD-GCN's ``run_rnn`` calls) and
hpcdgnn's scan (:func:`hpcdgnn.ops.scan.run_torch_rnn`: the input projection hoisted into one GEMM, then a
step loop). Prints the median seconds and the ratio to torch's module over all rows at once.

Measured 2026-11-28 on the 2-core VM (torch 2.13.0 CPU; T = 64, F = 32, H = 16), ratios to torch's module whole:
N = 32768 (``perf/results/rnn-rows/s31_rows32768.log``): the scan 1.06 whole, 0.58 at K = 8, 0.54 at K = 16 (2048
rows a block); torch's module 0.85 at K = 8, 0.58 at K = 16 (0.84 in a scratch run before: noisy). N = 16384 (a
rank's rows at P = 2; scratch run): the scan 0.57 at K = 16, torch's 0.82. A block's per-step gates (2048 x 4H
floats, 512 KiB) stay in the core's cache; the whole batch's (8 MiB) do not. CD-GCN's time encoder runs torch's
module over all of a rank's rows. A first try of blocks in ``nn.models.base.run_rnn`` (the scan, 512 KiB of gates
a block; not kept) moved CD-GCN's whole P = 1 epoch on gen32k little: 4.10-4.38 s against 4.64-6.25 in one
round, 4.55-5.22 against 4.50-5.13 in the next (steady epochs, the same losses): the encoder is not most of it.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hpcdgnn.ops.scan import run_torch_rnn


def timed(fn, repeat: int) -> float:
    """Median seconds of ``repeat`` calls after one warm-up."""
    fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--features", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--rows", type=int, nargs="+", default=[16384, 32768])
    ap.add_argument("--chunks", type=int, nargs="+", default=[1, 4, 8, 16])
    ap.add_argument("--repeat", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    T, F, H = args.steps, args.features, args.hidden
    print(f"LSTM forward + backward, T = {T}, F = {F}, H = {H}, float32, 1 thread; median of {args.repeat}")
    print(f"{'rows':>7} {'K':>4} {'rows/block':>10} {'torch s':>9} {'scan s':>9} {'torch/whole':>12} "
          f"{'scan/whole':>11}")
    for N in args.rows:
        rnn = torch.nn.LSTM(F, H)
        x = torch.randn(T, N, F)

        def step(K: int, scan: bool) -> None:
            for p in rnn.parameters():
                p.grad = None
            xi = x.clone().requires_grad_(True)
            outs = [(run_torch_rnn(rnn, c) if scan else rnn(c))[0] for c in xi.chunk(K, dim=1)]
            sum(o.square().sum() for o in outs).backward()

        whole = None
        for K in args.chunks:
            t_torch, t_scan = timed(lambda: step(K, False), args.repeat), timed(lambda: step(K, True), args.repeat)
            whole = whole or t_torch  # the first --chunks value (1 by default): torch's module over all rows
            print(f"{N:>7} {K:>4} {-(-N // K):>10} {t_torch:>9.3f} {t_scan:>9.3f} {t_torch / whole:>12.2f} "
                  f"{t_scan / whole:>11.2f}", flush=True)


if __name__ == "__main__":
    main()
