"""EvolveGCN-O's self-fed weight scan on a GPU against the same scan on the host (issue 13 item 8).

    python perf/bench_host_scan.py [--steps 64] [--sizes 8 16 24 32 48 64 96 128 256] [--repeat 15]

For each F = H in ``--sizes``: forward + backward of :func:`hpcdgnn.ops.scan.self_fed_lstm`
over ``--steps`` steps (float32, one host thread), once with every tensor on the GPU and the scan
there (``HOST_SCAN_MAX_MACS = -1``), once through the host scan (the limit lifted); the median of
``--repeat`` timed calls after two warm-ups, synchronised. Prints milliseconds and the ratio: where
it falls below 1 the GPU scan wins, which sets ``HOST_SCAN_MAX_MACS``.

Measured 2026-11-25 on an H100 (torch 2.11+cu130, T = 64): GPU 12–16 ms at every size (launches),
host 1.2 ms (F = H = 8), 2.8 (16), 4.7 (32), 20 (48), 32 (64): the host wins up to F·4H² = 131k
multiply-adds a step, the GPU from 442k (``perf/results/gpu-h100/host_scan.log``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pygt import timed  # noqa: E402  (this script's tree first on sys.path, as bench_pygt puts it)

from hpcdgnn.ops import scan as recurrent  # noqa: E402


def main() -> None:
    """Time both placements for every size and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 24, 32, 48, 64, 96, 128, 256])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_host_scan: needs a GPU (torch sees none)")
    dev = torch.device("cuda")
    torch.set_num_threads(1)

    limit = recurrent.HOST_SCAN_MAX_MACS
    print(f"{'F=H':>4s} {'MACs/step':>10s} {'gpu ms':>8s} {'host ms':>8s} {'gpu/host':>8s}")
    try:
        for h in args.sizes:
            cell = nn.LSTMCell(h, h).to(dev)
            w0 = torch.randn(h, h, device=dev, requires_grad=True)

            def scan():
                y, _ = recurrent.self_fed_lstm(cell, w0, torch.zeros_like(w0), args.steps)
                y.sum().backward()

            recurrent.HOST_SCAN_MAX_MACS = -1
            gpu = timed(scan, args.repeat, dev, warmup=2)
            recurrent.HOST_SCAN_MAX_MACS = 1 << 62
            host = timed(scan, args.repeat, dev, warmup=2)
            print(f"{h:4d} {h * 4 * h * h:10d} {gpu * 1e3:8.2f} {host * 1e3:8.2f} {gpu / host:8.2f}", flush=True)
    finally:
        recurrent.HOST_SCAN_MAX_MACS = limit


if __name__ == "__main__":
    main()
