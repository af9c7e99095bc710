#!/usr/bin/env bash
# Issue 61's GPU checks, prepared for a lent device's short budget (15 minutes of device time, start included):
# each part is one `run` call of about four minutes, every step under its own time limit, logs into $OUT.
#
#   a  the GPU-only tests (the pairs and negatives built on the device, fused Adam on CUDA, the host scan,
#      the graph-difference decoder, memory_share); perf/bench_pygt.py --device cuda for EvolveGCN-O and CD-GCN
#      on the generator graph (N = 2^15, T = 64, written there) and on email-Eu-core in 64 slices (§3's aim:
#      >= 3x PyG Temporal, same GPU, side by side)
#   b  perf/bench_tgn.py --device cuda --against pyg on CollegeMsg's first 30,000 events, under PyG's protocol and
#      under the defaults (§1's "the same benchmark on the GPU"); perf/bench_memory.py --device cuda:
#      strategy.blocks 1 4 16 under both transfers on the generator graph (§3: bytes and time on the GPU)
#
# Here first (a machine with PyPI; the device host has no internet):
#   bash perf/device/pack.sh                       # Open MPI + mpi4py wheels -> .device/wheels
#   bash perf/device/issue61.sh --stage [--pygt-src DIR]
#       # email-Eu-core -> .device/data; PyG's wheels -> .device/pyg (used where the host lacks torch_geometric);
#       # DIR: a checkout of PyTorch Geometric Temporal's source (bench_pygt.py's docstring) -> .device/pygt-src
#   bash perf/device/issue61.sh --rehearse a b     # the same steps on this CPU at toy sizes: no typo costs device time
# Then, with the device tool: run(command="bash perf/device/issue61.sh a", carry=[".device"], timeout_s=300),
# and the same with "b". Each step's log is $OUT/issue61-<part>-<step>.log; $OUT/issue61-<part>.log says which
# steps ran, how long, and their exit status (124: cut off by its limit).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
REPO=$PWD
PY=${PYTHON:-python3}

stage() {
  local pygt=""
  while [ $# -gt 0 ]; do
    case $1 in
      --pygt-src) pygt=${2:?--pygt-src DIR}; shift 2 ;;
      *) echo "issue61.sh --stage: unknown argument $1" >&2; exit 2 ;;
    esac
  done
  local shared="$REPO/../shared/data" venv=${HPCDGNN_VENV:-.venv} pyver=${DEVICE_PYTHON:-3.12}
  mkdir -p .device/data
  cp "$shared/email-Eu-core-temporal.txt.gz" .device/data/ || exit 1
  rm -rf .device/pyg && mkdir -p .device/pyg
  "$venv/bin/python" -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version "$pyver" \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    torch_geometric -d .device/pyg || exit 1
  if [ -n "$pygt" ]; then
    rm -rf .device/pygt-src && mkdir -p .device/pygt-src
    cp -r "$pygt/torch_geometric_temporal" .device/pygt-src/ || exit 1
  fi
  du -sh .device/* ; echo "carry: [\".device\"] (64 MiB at most)"
}

# the step runner: `step NAME LIMIT_S command...`, its output into $OUT/issue61-$PART-NAME.log
step() {
  local name=$1 limit=$2; shift 2
  local log="$OUT/issue61-$PART-$name.log" t0=$SECONDS rc
  echo "== $name (limit ${limit} s): $*" | tee -a "$SUMMARY"
  timeout --signal=TERM --kill-after=10 "$limit" "$@" > "$log" 2>&1
  rc=$?
  echo "   $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$SUMMARY"
  tail -n 25 "$log"
}

setup() {
  {
    date -u; env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc  # nproc reports OMP_NUM_THREADS (1, below) where set
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
    git log --oneline -1 2>/dev/null; command -v "$PY"
  } >> "$SUMMARY" 2>&1
  if [ "$REHEARSE" = 0 ]; then
    if ! "$PY" -c "import mpi4py.MPI" 2>/dev/null && ls .device/wheels/*.whl >/dev/null 2>&1; then
      "$PY" -m pip install -q --no-index --no-deps --disable-pip-version-check .device/wheels/*.whl >> "$SUMMARY" 2>&1
    fi
    if ! "$PY" -c "import torch_geometric" 2>/dev/null && ls .device/pyg/*.whl >/dev/null 2>&1; then
      # into the host's environment, which a fresh machine discards: pip adds only what it lacks (not its numpy)
      "$PY" -m pip install -q --no-index --disable-pip-version-check --find-links .device/pyg torch_geometric \
        >> "$SUMMARY" 2>&1
    fi
  fi
  "$PY" - >> "$SUMMARY" 2>&1 <<'EOF'
import importlib, torch
print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
for m in ("numpy", "numba", "h5py", "mpi4py", "yaml", "torch_geometric"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:
        print(m, "MISSING", type(e).__name__, e)
EOF
  tail -n 9 "$SUMMARY"
}

# the generator graph once per call (IBM §6.3's, as every earlier GPU figure: seed 1, density 3)
generated() {
  [ -f "$WORK/gen/manifest.json" ] || step generate 60 "$PY" -m hpcdgnn generate --output "$WORK/gen" \
    --vertices "$GEN_N" --snapshots "$GEN_T" --density 3 --seed 1
}

part_a() {
  step tests "$TESTS_S" "$PY" -m pytest -q -p no:cacheprovider -rs tests/ops/test_scan.py \
    tests/ops/test_kernels.py tests/tasks/test_link_prediction.py tests/train/test_optim.py \
    tests/data/test_graph_diff.py tests/comm/test_device.py
  generated
  step pygt-gen32k 150 "$PY" perf/bench_pygt.py --device "$DEV" --dataset "$WORK/gen" --models evolvegcn_o cdgcn \
    --cdgcn-pygt dygrae --epochs "$EPOCHS" --warmup 1 --csv "$OUT/pygt.csv"
  step pygt-email64 100 "$PY" perf/bench_pygt.py --device "$DEV" --input "$EMAIL" --snapshots "$EMAIL_T" \
    --models evolvegcn_o cdgcn --cdgcn-pygt dygrae --epochs "$EPOCHS" --warmup 1 --csv "$OUT/pygt.csv"
}

part_b() {
  step tgn-pyg-protocol 110 "$PY" perf/bench_tgn.py --against pyg --device "$DEV" --inputs college \
    --max-events "$TGN_EVENTS" --epochs 2 --configs 1x1x1 --eval-protocol per_batch --train-protocol per_batch \
    --memory-time event
  step tgn-defaults 80 "$PY" perf/bench_tgn.py --against pyg --device "$DEV" --inputs college --max-events "$TGN_EVENTS" \
    --epochs 2 --configs 1x1x1
  generated
  step blocks-transfer 120 "$PY" perf/bench_memory.py --device "$DEV" --data "$WORK/gen" --vertices "$GEN_N" \
    --snapshots "$GEN_T" --density 3 --blocks 1 4 "$BLOCKS" --transfer graph_difference base --epochs 3
}

if [ "${1:-}" = --stage ]; then
  shift; stage "$@"; exit 0
fi
REHEARSE=0
if [ "${1:-}" = --rehearse ]; then
  REHEARSE=1; shift
fi
[ $# -gt 0 ] || { echo "usage: issue61.sh [--rehearse] a|b ... | --stage [--pygt-src DIR]" >&2; exit 2; }
if [ "$REHEARSE" = 1 ]; then  # this machine's venv, the CPU, toy sizes: every step's code path, quickly
  PY=${PYTHON:-${HPCDGNN_VENV:-.venv}/bin/python}
  OUT=${OUT:-$(mktemp -d /tmp/issue61-rehearsal-XXXX)}
  DEV=cpu GEN_N=2048 GEN_T=8 EPOCHS=2 EMAIL_T=8 TGN_EVENTS=2000 TESTS_S=300 BLOCKS=8
  EMAIL=${EMAIL:-$REPO/../shared/data/email-Eu-core-temporal.txt.gz}
else
  OUT=${OUT:?the device tool sets OUT; elsewhere give OUT=DIR}
  DEV=cuda GEN_N=32768 GEN_T=64 EPOCHS=4 EMAIL_T=64 TGN_EVENTS=30000 TESTS_S=120 BLOCKS=16
  EMAIL=$REPO/.device/data/email-Eu-core-temporal.txt.gz
fi
mkdir -p "$OUT" || exit 1  # OUT=DIR given by hand may not exist yet: every log would fail to open
WORK=$(mktemp -d /tmp/issue61-work-XXXX)
trap 'rm -rf "$WORK"' EXIT  # the generated graph: a rehearsal on a shared machine leaves nothing in /tmp
# bench_pygt's PyG Temporal: the staged source, unless given
[ -d .device/pygt-src ] && export HPCDGNN_PYGT_PATH=${HPCDGNN_PYGT_PATH:-$REPO/.device/pygt-src}
export OMP_NUM_THREADS=1  # one host thread per process, as every earlier GPU figure
for PART in "$@"; do
  SUMMARY="$OUT/issue61-$PART.log"
  case $PART in
    a) setup; part_a ;;
    b) setup; part_b ;;
    *) echo "issue61.sh: unknown part $PART (a or b)" >&2; exit 2 ;;
  esac
done
echo "logs: $OUT"
