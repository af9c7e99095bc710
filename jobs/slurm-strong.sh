#!/usr/bin/env bash
# SLURM strong-scaling sweep: one fixed graph, a job array whose task id indexes the rank counts RANKS_LIST.
#   bash jobs/slurm-strong.sh [run arguments]     submits one array task per rank count P, each on the
#                                                 ceil(P / RANKS_PER_NODE) whole nodes it needs, sized from the
#                                                 environment below (defaults: the #SBATCH lines); a P for
#                                                 which sinfo lists no such nodes would pend forever: it is
#                                                 not submitted (a warning, a line, exit 1) unless SUBMIT_ANYWAY=1
#   sbatch jobs/slurm-strong.sh [run arguments]   every array task gets the largest allocation below; override
#                                                 sizes on the command line, e.g. sbatch --nodes=2 --array=0-2 ...
# Keep --array=0-(n-1) for the n entries of RANKS_LIST, and --nodes x --ntasks-per-node >= the largest.
# A small cluster (here: 1 node of 2 CPUs, sinfo -N -o '%N %c %G' shows the sizes):
#   RANKS_LIST="1 2" RANKS_PER_NODE=2 CPUS_PER_TASK=1 EXCLUSIVE=0 TIME=00:20:00 bash jobs/slurm-strong.sh
#
# Environment (sbatch passes the submitting shell's environment):
#   JOB          job YAML (default jobs/strong.yaml; its generated graph is written when absent)
#   RANKS_LIST   rank counts, indexed by SLURM_ARRAY_TASK_ID (default "1 2 4 8 16 32 64")
#   submission with 'bash' (each defaults to its #SBATCH line):
#     RANKS_PER_NODE  --ntasks-per-node (P < RANKS_PER_NODE asks for P)   CPUS_PER_TASK  --cpus-per-task
#     GPUS_PER_NODE   --gpus-per-node (default none: CPU)                 TIME           --time
#     EXCLUSIVE       1: whole nodes (--exclusive, default); 0: share them (--oversubscribe), the tasks one
#                     at a time (--dependency=singleton: two of them on one node disturb each other's times)
#     SUBMIT_ANYWAY   1: submit a P that sinfo says no node set can take (a partition sinfo does not show
#                     you, nodes about to be added); default 0: skip it, as it would pend until scancel
#     SBATCH_FLAGS    more sbatch options, split at spaces (e.g. "--partition=short -A proj"); SBATCH_* input
#                     variables such as SBATCH_PARTITION work as well
#   RUNDIR       run directory (default runs/<job name>-<sweep>/p<P>; sweep = SWEEP, else the array job id and
#                submit time, which a requeued task finds again: jobs/lib.sh "Run directory")
#   SWEEP        sweep name in the default RUNDIR (set by the 'bash' submission to a timestamp)
#   HPCDGNN_RUNS parent of the default RUNDIR (default runs)
#   DATA, HPCDGNN_PYTHON, HPCDGNN_SETUP (e.g. a file with your 'module load' lines), HPCDGNN_VENV: jobs/lib.sh
#   HPCDGNN_LAUNCHER   auto (default: srun --mpi=pmix for Open MPI when Slurm offers it, else mpirun), srun or
#                      mpirun; HPCDGNN_SRUN_MPI forces srun --mpi=<value>; SRUN_FLAGS, MPIRUN_FLAGS extra flags
# GPUs: GPUS_PER_NODE=G RANKS_PER_NODE=G with 'bash', or turn the '##SBATCH --gpus-per-node' line into '#SBATCH'.
# Pre-emption: SIGUSR1 120 s before the time limit (up to 60 s earlier); ranks checkpoint and exit 75; the task
# requeues, waits about 2 minutes (Slurm's hold on a requeued job) and resumes.
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
  source jobs/lib.sh
  hpcdgnn_check_ranks_list "$RANKS_LIST" || exit 2  # before any submission: a bad entry aborts the loop midway
  _header() { sed -n "s/^#SBATCH --$1=\([^ ]*\).*/\1/p" jobs/slurm-strong.sh | head -n 1; }
  rpn=${RANKS_PER_NODE:-$(_header ntasks-per-node)}
  cpt=${CPUS_PER_TASK:-$(_header cpus-per-task)}
  gpn=${GPUS_PER_NODE:-$(_header gpus-per-node)}
  gpn=${gpn:-0}
  limit=${TIME:-$(_header time)}
  for v in rpn cpt gpn; do
    if ! [[ ${!v} =~ ^[0-9]+$ ]] || { [ "$v" != gpn ] && [ "${!v}" = 0 ]; }; then
      echo "hpcdgnn-job: RANKS_PER_NODE, CPUS_PER_TASK, GPUS_PER_NODE must be whole numbers (got '${!v}')" >&2
      exit 2
    fi
  done
  flags=(--cpus-per-task="$cpt" --time="$limit")
  if [ "$gpn" -gt 0 ]; then flags+=(--gpus-per-node="$gpn"); fi
  # shared nodes: the sweep's tasks would run at once where CPUs are free, side by side on a node (its caches,
  # memory bandwidth), each timing the other's load; singleton runs the tasks of this job name one at a time
  if [ "${EXCLUSIVE:-1}" = 0 ]; then flags+=(--oversubscribe --dependency=singleton); else flags+=(--exclusive); fi
  while IFS= read -r f; do flags+=("$f"); done < <(hpcdgnn_extra_flags SBATCH_FLAGS)
  export SWEEP=${SWEEP:-$(date +%Y%m%d-%H%M%S)} JOB RANKS_LIST
  refused=() skipped=()
  for i in "${!_ranks[@]}"; do
    p=${_ranks[$i]}
    tpn=$((p < rpn ? p : rpn))
    nodes=$(((p + rpn - 1) / rpn))
    if ! hpcdgnn_check_request "$nodes" "$tpn" "$cpt" "$gpn" "P=$p" && [ "${SUBMIT_ANYWAY:-0}" != 1 ]; then
      echo "hpcdgnn-job: P=$p not submitted (it would pend forever); SUBMIT_ANYWAY=1 submits it" >&2
      skipped+=("$p")
      continue
    fi
    if ! sbatch --array="$i" --nodes="$nodes" --ntasks-per-node="$tpn" "${flags[@]}" jobs/slurm-strong.sh "$@"; then
      refused+=("$p")
    fi
  done
  if [ "${#refused[@]}" -gt 0 ]; then
    echo "hpcdgnn-job: sbatch refused P = ${refused[*]}" >&2
  fi
  if [ "${#refused[@]}" -gt 0 ] || [ "${#skipped[@]}" -gt 0 ]; then exit 1; fi
  exit 0
fi

cd "${HPCDGNN_ROOT:-${SLURM_SUBMIT_DIR:-.}}"
source jobs/lib.sh
hpcdgnn_init
hpcdgnn_check_ranks_list "$RANKS_LIST" || exit 2

i=${SLURM_ARRAY_TASK_ID:-0}
if [ "$i" -ge "${#_ranks[@]}" ]; then
  echo "hpcdgnn-job: array task $i but RANKS_LIST has ${#_ranks[@]} entries ($RANKS_LIST)" >&2
  exit 2
fi
P=${_ranks[$i]}
RPN=${SLURM_NTASKS_PER_NODE:-$P}
RPN=${RPN%%(*}  # "8(x2)" -> 8
if [ -z "${RUNDIR:-}" ]; then
  if [ -n "${SWEEP:-}" ]; then
    RUNDIR=${HPCDGNN_RUNS:-runs}/${SLURM_JOB_NAME:-hpcdgnn}-$SWEEP/p$P
  else
    hpcdgnn_capture RUNDIR hpcdgnn_job_rundir "${SLURM_JOB_NAME:-hpcdgnn}" || hpcdgnn_setup_failed
    RUNDIR=$RUNDIR/p$P
  fi
fi
hpcdgnn_ensure_job_data "$JOB" || hpcdgnn_setup_failed "$RUNDIR"
hpcdgnn_slurm_launch "$P" $(((P + RPN - 1) / RPN))
hpcdgnn_train "$JOB" "$RUNDIR" "$@"
hpcdgnn_exit "$HPCDGNN_RC" "$RUNDIR"
