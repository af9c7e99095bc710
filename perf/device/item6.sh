#!/usr/bin/env bash
# On a lent GPU host (device tool, `carry: [".device"]`, after perf/device/pack.sh here): issue 13 item 6's
# benchmark on the host's cores, where each rank's progress thread gets a core of its own. Logs go to $OUT.
#   run: bash perf/device/item6.sh   (timeout_s 600; about 7-9 minutes)
# 1. the MPI wheels into the image's python3; hpcdgnn from this tree (no install: python -m from the root)
# 2. one chunk exchange moved by a waiting thread against the training thread (perf/bench_progress.py)
# 3. CD-GCN on the generator graph N = 2^15, T = 64, P = 2: K = 1 with calls, K = 16 with calls and with a thread,
#    epoch by epoch in one run (--interleave), 2 runs of 30 epochs (3 warm-up: 9 whole cycles), with the exchange-by-exchange
#    trace; ranks on cores 0-7 (2 x (train thread + progress thread) fit)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
{
  date; nproc; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  # the carried files themselves (the image's own mpi4py may be built for no MPI library it has)
  python3 -m pip install -q --no-index --no-deps --force-reinstall .device/wheels/*.whl
  python3 -c "import torch, numba, h5py, mpi4py; from mpi4py import MPI; print(torch.__version__, numba.__version__, h5py.__version__, mpi4py.__version__, MPI.Get_library_version().splitlines()[0])" ||
    { echo "item6.sh: mpi4py does not start: run perf/device/pack.sh here for the host's python3 and carry .device"; exit 1; }
  git log --oneline -1 2>/dev/null; lscpu | grep -E 'Model name|^CPU\(s\)|Thread'
  [ -f /tmp/d/gen32k/manifest.json ] ||  # a warm machine's, from a first try
    python3 -m hpcdgnn generate --vertices 32768 --snapshots 64 --density 3 --seed 1 --output /tmp/d/gen32k
} 2>&1 | tee "$OUT/setup.log" || exit 1
# timeouts: the call's 600 s less the set-up (about 30 s)
timeout 100 taskset -c 0-7 python3 perf/bench_progress.py --ranks 2 --chunks 4 16 2>&1 | tee "$OUT/bench_progress.log"
timeout 430 taskset -c 0-7 python3 perf/bench_overlap.py --data /tmp/d/gen32k --device cpu --ranks 2 --interleave \
  --configs 1:calls 16:calls 16:thread --epochs 30 --warmup 3 --reps 2 --trace 2>&1 | tee "$OUT/overlap_gen32k.log"
