#!/usr/bin/env bash
# SLURM, several nodes with G GPUs each, one rank per GPU (P = nodes x G ranks).
#   sbatch jobs/slurm-nodes.sh [run arguments]        (submit from the repository root)
#   other sizes: sbatch --nodes=8 --ntasks-per-node=4 --gpus-per-node=4 jobs/slurm-nodes.sh
#   CPU-only nodes: turn the --gpus-per-node line below into '##SBATCH' and submit e.g.
#     JOB=jobs/strong.yaml sbatch --ntasks-per-node=2 --cpus-per-task=32 jobs/slurm-nodes.sh
#     (one rank per socket; train.threads 0 uses the task's cores)
#
# Environment (sbatch passes the submitting shell's environment):
#   JOB          job YAML (default jobs/gpu.yaml; its generated graph is written when absent)
#   RANKS        ranks (default SLURM_NTASKS)
#   RUNDIR       run directory (default runs/<job name>-<job id>: a requeued job finds and resumes it)
#   HPCDGNN_RUNS parent of the default RUNDIR (default runs)
#   DATA, HPCDGNN_PYTHON, HPCDGNN_SETUP (e.g. a file with your 'module load' lines), HPCDGNN_VENV: jobs/lib.sh
#   HPCDGNN_SRUN_MPI   srun --mpi= value (e.g. pmix) where the site needs one; SRUN_FLAGS extra srun flags
# Pre-emption: SLURM sends SIGUSR1 120 s before the time limit (--signal); the ranks checkpoint at the
# next epoch boundary and exit 75; the job requeues itself and resumes from RUNDIR.
#SBATCH --job-name=hpcdgnn-nodes
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out
set -euo pipefail
JOB=${JOB:-jobs/gpu.yaml}  # <- the line a user edits
cd "${HPCDGNN_ROOT:-${SLURM_SUBMIT_DIR:-.}}"
source jobs/lib.sh
hpcdgnn_init

RANKS=${RANKS:-${SLURM_NTASKS:-1}}
RUNDIR=${RUNDIR:-${HPCDGNN_RUNS:-runs}/${SLURM_JOB_NAME:-hpcdgnn}-${SLURM_JOB_ID:-0}}
hpcdgnn_ensure_data "$(hpcdgnn_data_path "$JOB")" || exit 2
hpcdgnn_srun "$RANKS"
hpcdgnn_train "$JOB" "$RUNDIR" "$@"
hpcdgnn_exit "$HPCDGNN_RC" "$RUNDIR"
