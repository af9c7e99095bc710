#!/usr/bin/env bash
# Everything on a fresh machine: install, prepare the bundled CollegeMsg input, train on 2 ranks.
#   bash jobs/quickstart.sh [extra 'run' arguments, e.g. --set train.epochs=5]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash install.sh
VENV=${HPCDGNN_VENV:-.venv}
export PATH="$PWD/$VENV/bin:$PATH"
if [ ! -f inputs/collegemsg/manifest.json ]; then
  python -m hpcdgnn prepare inputs/CollegeMsg.txt.gz --format snap --snapshots 30 --log-features \
    --output inputs/collegemsg
fi
# Open MPI refuses root and more ranks than cores unless told; harmless elsewhere.
MPI_FLAGS=()
if mpirun --version 2>&1 | grep -q "Open MPI"; then
  MPI_FLAGS+=(--oversubscribe)
  if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
fi
exec mpirun "${MPI_FLAGS[@]}" -np 2 python -m hpcdgnn run jobs/quickstart.yaml "$@"
