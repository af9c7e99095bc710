#!/usr/bin/env bash
# Run a job on this machine under mpirun (no batch system); resumable like the batch scripts.
#   NP=2 bash jobs/local.sh [run arguments, e.g. --set train.epochs=5]
#
# Environment:
#   JOB            job YAML (default jobs/local.yaml: CD-GCN on CollegeMsg, prepared from inputs/ if absent)
#   NP             number of ranks (default 2)
#   RUNDIR         run directory (default runs/local-<time>); an existing one with checkpoints is resumed
#   DATA           dataset directory overriding the YAML's data.path
#   HPCDGNN_MPIRUN launcher (default mpirun; Open MPI gets --oversubscribe), MPIRUN_FLAGS extra flags
#   HPCDGNN_PYTHON, HPCDGNN_SETUP, HPCDGNN_VENV: see jobs/lib.sh
# Open MPI as root also needs OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in the environment.
# kill -USR1 (or Ctrl-C) stops at the next epoch boundary with a checkpoint and exit code 75;
# run again with RUNDIR=<that directory> to resume. Paths are relative to the repository root.
set -euo pipefail
JOB=${JOB:-jobs/local.yaml}  # <- the line a user edits
cd "${HPCDGNN_ROOT:-$(dirname "${BASH_SOURCE[0]}")/..}"
source jobs/lib.sh
hpcdgnn_init

NP=${NP:-2}
RUNDIR=${RUNDIR:-${HPCDGNN_RUNS:-runs}/local-$(date +%Y%m%d-%H%M%S)}
hpcdgnn_ensure_data "$(hpcdgnn_data_path "$JOB")" || exit 2

MPIRUN=${HPCDGNN_MPIRUN:-mpirun}
HPCDGNN_LAUNCH=("$MPIRUN")
if "$MPIRUN" --version 2>&1 | grep -q "Open MPI"; then
  HPCDGNN_LAUNCH+=(--oversubscribe)  # more ranks than cores is fine for a try-out
fi
while IFS= read -r f; do HPCDGNN_LAUNCH+=("$f"); done < <(hpcdgnn_extra_flags MPIRUN_FLAGS)
HPCDGNN_LAUNCH+=(-np "$NP")

hpcdgnn_train "$JOB" "$RUNDIR" "$@"
hpcdgnn_exit "$HPCDGNN_RC" "$RUNDIR"
