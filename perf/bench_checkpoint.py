"""What a checkpoint of the event regime's node memory costs in host memory and time: ``torch.save`` of numpy
copies (what the checkpoint did before) against hpcdgnn's writer, which saves the live arrays as tensor storages
(``hpcdgnn/train/checkpoint.py``: ``_ArrayPickler``; ``NodeMemory.state(copy=False)``).

    python perf/bench_checkpoint.py [--nodes 1000000] [--memory-dim 100] [--edge-dim 172] [--file NEW_PATH]

A node memory of N rows (d + mail values, mail 2d + D, float32; times and mails' gaps in float64, as under
``model.memory_time: event``) is written as a rank's checkpoint file, and held in memory as a pre-emption's
hold does (``CheckpointManager.hold``). Each case is a fresh process (its peak resident set, ``ru_maxrss``, less
the peak before the write), printed side by side with the ratios: the extra peak in units of the node memory's
size, and the seconds.

Measured on the 2-core VM: perf/results/preemption/README.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CASE = r"""
import io, json, resource, sys, time
from pathlib import Path
import numpy as np, torch
from hpcdgnn.strategies.node_memory import NodeMemory
from hpcdgnn.train import checkpoint as ck

way, where, n, d, D, path = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]), Path(sys.argv[6])
memory = NodeMemory(None, n, d, 2 * d + D, np.float32, gaps=True)
memory.values[:] = 1.0  # touched, as a trained memory is
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t0 = time.perf_counter()
if way == "torch.save":
    state = {"rng": ck._rng_state(), "strategy": {"memory": memory.state()}}
    if where == "file":
        with open(path, "wb") as f:
            torch.save(state, f)
    else:
        torch.save(state, io.BytesIO())
else:
    state = {"rng": ck._rng_state(), "strategy": {"memory": memory.state(copy=False)}}
    if where == "file":
        ck._atomic_save(state, path)
    else:
        ck._serialised(state)
seconds = time.perf_counter() - t0
extra = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
path.unlink(missing_ok=True)
print(json.dumps({"bytes": memory.nbytes, "extra": extra, "seconds": seconds}))
"""


def _case(way: str, where: str, args) -> dict:
    out = subprocess.run([sys.executable, "-c", CASE, way, where, str(args.nodes), str(args.memory_dim),
                          str(args.edge_dim), args.file], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--memory-dim", type=int, default=100)
    ap.add_argument("--edge-dim", type=int, default=172, help="D, the edge features (JODIE wikipedia's 172)")
    ap.add_argument("--file", default=None,
                    help="scratch path the file case writes and deletes; must not exist (default: in a new "
                    "temporary directory)")
    args = ap.parse_args()
    # the case deletes what it wrote: a path that exists is a user's file, never written over nor deleted
    if args.file is not None and Path(args.file).exists():
        ap.error(f"--file {args.file}: exists; the file case writes and deletes it, give a path that does not exist")
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-bench-checkpoint-") as tmp:
        args.file = args.file or str(Path(tmp) / "checkpoint.pt")  # a fresh directory: two runs never share it
        _table(args)


def _table(args) -> None:
    """Run the four cases and print their table."""
    print(f"{'written to':10s} {'node memory':>12s} {'torch.save extra':>17s} {'hpcdgnn extra':>14s} "
          f"{'torch.save s':>13s} {'hpcdgnn s':>10s} {'time ratio':>10s}")
    for where in ("file", "memory"):
        old, new = _case("torch.save", where, args), _case("hpcdgnn", where, args)
        size = old["bytes"]
        print(f"{where:10s} {size / 2**30:9.2f} GiB {old['extra'] / size:16.2f}x {new['extra'] / size:13.2f}x "
              f"{old['seconds']:13.2f} {new['seconds']:10.2f} {old['seconds'] / max(new['seconds'], 1e-9):9.1f}x")


if __name__ == "__main__":
    main()
