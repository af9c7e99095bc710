#!/usr/bin/env bash
# SLURM strong-scaling sweep: one fixed graph, a job array whose task id indexes the rank counts RANKS_LIST.
#   sbatch jobs/slurm-strong.sh [run arguments]   every array task gets the largest allocation below
#   bash jobs/slurm-strong.sh [run arguments]     submits one array task per rank count, each sized
#                                                 ceil(P / ranks per node) whole nodes (no idle nodes)
# Keep --array=0-(n-1) for the n entries of RANKS_LIST, and --nodes x --ntasks-per-node >= the largest.
#
# Environment (sbatch passes the submitting shell's environment):
#   JOB          job YAML (default jobs/strong.yaml; its generated graph is written when absent)
#   RANKS_LIST   rank counts, indexed by SLURM_ARRAY_TASK_ID (default "1 2 4 8 16 32 64")
#   RUNDIR       run directory (default runs/<job name>-<sweep>/p<P>, sweep = the array job id)
#   SWEEP        sweep name in the default RUNDIR (set by the 'bash' submission to a timestamp)
#   HPCDGNN_RUNS parent of the default RUNDIR (default runs)
#   DATA, HPCDGNN_PYTHON, HPCDGNN_SETUP (e.g. a file with your 'module load' lines), HPCDGNN_VENV: jobs/lib.sh
#   HPCDGNN_SRUN_MPI   srun --mpi= value (e.g. pmix) where the site needs one; SRUN_FLAGS extra srun flags
# GPUs: turn the '##SBATCH --gpus-per-node' line into '#SBATCH' with G = --ntasks-per-node.
# Pre-emption: SIGUSR1 120 s before the time limit; ranks checkpoint and exit 75; the task requeues and resumes.
#SBATCH --job-name=hpcdgnn-strong
#SBATCH --array=0-6
#SBATCH --nodes=8
#SBATCH --ntasks-per-node=8
##SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=4
#SBATCH --exclusive
#SBATCH --time=01:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%A_%a.out
set -euo pipefail
JOB=${JOB:-jobs/strong.yaml}  # <- the line a user edits
RANKS_LIST=${RANKS_LIST:-1 2 4 8 16 32 64}
read -r -a _ranks <<<"$RANKS_LIST"

if [ -z "${SLURM_JOB_ID:-}" ]; then
  # submission: one array task per rank count, each on the whole nodes it needs
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  rpn=$(sed -n 's/^#SBATCH --ntasks-per-node=\([0-9]*\).*/\1/p' jobs/slurm-strong.sh)
  export SWEEP=${SWEEP:-$(date +%Y%m%d-%H%M%S)} JOB RANKS_LIST
  for i in "${!_ranks[@]}"; do
    p=${_ranks[$i]}
    sbatch --array="$i" --nodes=$(((p + rpn - 1) / rpn)) jobs/slurm-strong.sh "$@"
  done
  exit 0
fi

cd "${HPCDGNN_ROOT:-${SLURM_SUBMIT_DIR:-.}}"
source jobs/lib.sh
hpcdgnn_init

i=${SLURM_ARRAY_TASK_ID:-0}
if [ "$i" -ge "${#_ranks[@]}" ]; then
  echo "hpcdgnn-job: array task $i but RANKS_LIST has ${#_ranks[@]} entries ($RANKS_LIST)" >&2
  exit 2
fi
P=${_ranks[$i]}
RPN=${SLURM_NTASKS_PER_NODE:-$P}
RPN=${RPN%%(*}  # "8(x2)" -> 8
RUNDIR=${RUNDIR:-${HPCDGNN_RUNS:-runs}/${SLURM_JOB_NAME:-hpcdgnn}-${SWEEP:-${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}}/p$P}
hpcdgnn_ensure_data "$(hpcdgnn_data_path "$JOB")" || exit 2
hpcdgnn_srun "$P" $(((P + RPN - 1) / RPN))
hpcdgnn_train "$JOB" "$RUNDIR" "$@"
hpcdgnn_exit "$HPCDGNN_RC" "$RUNDIR"
