#!/usr/bin/env bash
# LSF with mpirun (any LSF cluster; the MPI's mpirun reads the LSF allocation): RANKS ranks over the
# slots of the job, ptile per node.
#   bsub < jobs/lsf-mpirun.sh                     (submit from the repository root; bsub reads the #BSUB lines)
#   other sizes: bsub -n 32 -R "span[ptile=8]" < jobs/lsf-mpirun.sh
# GPUs: turn the '##BSUB -gpu' line into '#BSUB' with num = ptile, and use JOB=jobs/gpu.yaml.
#
# Environment (bsub passes the submitting shell's environment):
#   JOB            job YAML (default jobs/strong.yaml; its generated graph is written when absent)
#   RANKS          ranks (default LSB_DJOB_NUMPROC, the job's slots)
#   RUNDIR         run directory (default runs/<job name>-<job id>-<submit time>: the requeued job, which keeps
#                  its id and submit time, resumes it; a later job that gets the same id does not)
#   HPCDGNN_RUNS   parent of the default RUNDIR (default runs)
#   DATA, HPCDGNN_PYTHON, HPCDGNN_SETUP (e.g. a file with your 'module load' lines), HPCDGNN_VENV: jobs/lib.sh
#   HPCDGNN_MPIRUN launcher (default mpirun); MPIRUN_FLAGS extra flags (e.g. --bind-to socket)
# Pre-emption: LSF sends SIGUSR1 2 minutes before the run limit (-wa/-wt); the ranks checkpoint at the next
# epoch boundary (or between two batches) and exit 75, which '-Q 75' requeues; the requeued job keeps its id and resumes RUNDIR.
#BSUB -J hpcdgnn-mpirun
#BSUB -n 16
#BSUB -R "span[ptile=8]"
#BSUB -x
##BSUB -gpu "num=8:mode=exclusive_process"
#BSUB -W 2:00
#BSUB -wa USR1
#BSUB -wt 2
#BSUB -Q "75"
#BSUB -o hpcdgnn-mpirun.%J.out
set -euo pipefail
JOB=${JOB:-jobs/strong.yaml}  # <- the line a user edits
cd "${HPCDGNN_ROOT:-${LS_SUBCWD:-.}}"
source jobs/lib.sh
hpcdgnn_init

RANKS=${RANKS:-${LSB_DJOB_NUMPROC:-1}}
if [ -z "${RUNDIR:-}" ]; then hpcdgnn_capture RUNDIR hpcdgnn_job_rundir "${LSB_JOBNAME:-hpcdgnn}" || hpcdgnn_setup_failed; fi
hpcdgnn_ensure_job_data "$JOB" || hpcdgnn_setup_failed "$RUNDIR"
hpcdgnn_mpirun_launch "$RANKS"  # unbound under Open MPI, as every launcher here: threads follow the binding
hpcdgnn_train "$JOB" "$RUNDIR" "$@"
hpcdgnn_exit "$HPCDGNN_RC" "$RUNDIR"
