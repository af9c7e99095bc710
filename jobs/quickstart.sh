#!/usr/bin/env bash
# Everything on a fresh machine: install, prepare the bundled CollegeMsg input, train on 2 ranks.
#   bash jobs/quickstart.sh [extra 'run' arguments, e.g. --set train.epochs=5]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash install.sh
VENV=${HPCDGNN_VENV:-.venv}
case $VENV in /*) ;; *) VENV=$PWD/$VENV ;; esac  # absolute as given, else under the checkout
export PATH="$VENV/bin:$PATH"
if [ ! -f inputs/collegemsg/manifest.json ]; then
  python -m hpcdgnn prepare inputs/CollegeMsg.txt.gz --format snap --snapshots 30 --log-features \
    --output inputs/collegemsg
fi
# hpcdgnn-mpirun (hpcdgnn/launch.py): mpirun plus what Open MPI needs here (as root: OMPI_ALLOW_RUN_AS_ROOT*;
# more ranks than cores: --oversubscribe; --bind-to none); nothing added for other MPIs
exec hpcdgnn-mpirun -np 2 python -m hpcdgnn run jobs/quickstart.yaml "$@"
