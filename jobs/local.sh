#!/usr/bin/env bash
# Run a job on this machine under mpirun (no batch system); resumable like the batch scripts.
#   NP=2 bash jobs/local.sh [run arguments, e.g. --set train.epochs=5]
#
# Environment:
#   JOB            job YAML (default jobs/local.yaml: CD-GCN on CollegeMsg, prepared from inputs/ if absent)
#   NP             number of ranks (default 2)
#   RUNDIR         run directory (default runs/<JOB's file name without .yaml>-<time>, as python -m hpcdgnn run's);
#                  an existing one with checkpoints is resumed
#   DATA           dataset directory overriding the YAML's data.path
#   HPCDGNN_MPIRUN mpirun to use (default: the venv's, else mpirun on PATH), MPIRUN_FLAGS extra mpirun flags
#   HPCDGNN_PYTHON, HPCDGNN_SETUP, HPCDGNN_VENV: see jobs/lib.sh
# The launcher is hpcdgnn-mpirun's (hpcdgnn/launch.py): for Open MPI it sets OMPI_ALLOW_RUN_AS_ROOT=1
# OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 when run as root, adds --oversubscribe when NP exceeds the cores and
# --bind-to none unless MPIRUN_FLAGS bind (docs/jobs.md).
# kill -USR1 (or Ctrl-C) stops at the next epoch boundary (or between two batches) with a checkpoint and exit code 75;
# run again with RUNDIR=<that directory> to resume; a second Ctrl-C stops at once, without that checkpoint (exit 130).
# Paths are relative to the repository root.
set -euo pipefail
JOB=${JOB:-jobs/local.yaml}  # <- the line a user edits
cd "${HPCDGNN_ROOT:-$(dirname "${BASH_SOURCE[0]}")/..}"
source jobs/lib.sh
hpcdgnn_init

NP=${NP:-2}
# no $(...) or <(...) from here on: with the traps set, bash <= 5.2 can lose a signal in their parse (jobs/lib.sh)
printf -v stamp '%(%Y%m%d-%H%M%S)T' -1
name=${JOB##*/}  # the job file's stem, as a run without --output names its directory
name=${name%.yaml}
name=${name%.yml}
RUNDIR=${RUNDIR:-${HPCDGNN_RUNS:-runs}/$name-$stamp}
hpcdgnn_ensure_job_data "$JOB" || hpcdgnn_setup_failed "$RUNDIR"

# mpirun with what this machine needs, as hpcdgnn-mpirun would run it ("env VAR=1 ... mpirun ...": env
# execs mpirun, so the signals lib.sh forwards reach mpirun itself)
MPI_FLAGS=()
hpcdgnn_extra_flags MPIRUN_FLAGS MPI_FLAGS
launch=
hpcdgnn_capture launch "$HPCDGNN_PY" -m hpcdgnn.launch --print "${MPI_FLAGS[@]}" -np "$NP" \
  || hpcdgnn_setup_failed "$RUNDIR"
_hpcdgnn_log "mpirun: ${launch//$'\n'/ }"
# through hpcdgnn-mpirun, whose mpirun has a process group of its own: a terminal's Ctrl-C reaches this script and
# the launcher, which pass it to the ranks as SIGUSR1 (checkpoint, exit 75); mpirun itself would exit 1 at once
HPCDGNN_LAUNCH=("$HPCDGNN_PY" -m hpcdgnn.launch "${MPI_FLAGS[@]}" -np "$NP")

hpcdgnn_train "$JOB" "$RUNDIR" "$@"
hpcdgnn_exit "$HPCDGNN_RC" "$RUNDIR"
