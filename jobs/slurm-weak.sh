#!/usr/bin/env bash
# SLURM weak-scaling sweep (IBM §6.3): N = n1 * P vertices at fixed T and density, P over RANKS_LIST,
# one run after another inside one allocation. The job YAML's data.path names the P = 1 graph as
# <dir>/n<n1>-t<T>-f<density>[-s<seed>]; the graph of each P, <dir>/n<n1*P>-t<T>-f<density>[-s<seed>],
# is generated when absent (n1 = 65536 = 2^16 by default, so N = 2^16 * P).
#   sbatch jobs/slurm-weak.sh [run arguments]     (submit from the repository root)
#
# Environment (sbatch passes the submitting shell's environment):
#   JOB          job YAML (default jobs/weak.yaml)
#   RANKS_LIST   rank counts (default: 1 2 4 ... up to the allocation's tasks)
#   RUNDIR       sweep directory (default runs/<job name>-<job id>-<submit time>, which a requeued job finds
#                again: jobs/lib.sh "Run directory"); each P runs in RUNDIR/p<P>
#   HPCDGNN_RUNS parent of the default RUNDIR (default runs)
#   HPCDGNN_PYTHON, HPCDGNN_SETUP (e.g. a file with your 'module load' lines), HPCDGNN_VENV: jobs/lib.sh
#   HPCDGNN_LAUNCHER   auto (default: srun --mpi=pmix for Open MPI when Slurm offers it, else mpirun), srun or
#                      mpirun; HPCDGNN_SRUN_MPI forces srun --mpi=<value>; SRUN_FLAGS, MPIRUN_FLAGS extra flags
# Sizes: the #SBATCH lines below; override them on the sbatch command line (options there win), e.g.
#   sbatch --nodes=2 --ntasks-per-node=2 --cpus-per-task=16 jobs/slurm-weak.sh
# GPUs: turn the '##SBATCH --gpus-per-node' line into '#SBATCH' with G = --ntasks-per-node, or pass
# --gpus-per-node=G to sbatch.
# Pre-emption: SIGUSR1 120 s before the time limit (it may come up to 60 s earlier); the running P checkpoints
# and exits 75, the job requeues and waits about 2 minutes (Slurm's hold on a requeued job), finished P
# (RUNDIR/p<P>/summary.json) are skipped and the interrupted one resumes.
#SBATCH --job-name=hpcdgnn-weak
#SBATCH --nodes=8
#SBATCH --ntasks-per-node=8
##SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=4
#SBATCH --exclusive
#SBATCH --time=04:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out
set -euo pipefail
JOB=${JOB:-jobs/weak.yaml}  # <- the line a user edits
cd "${HPCDGNN_ROOT:-${SLURM_SUBMIT_DIR:-.}}"
source jobs/lib.sh
hpcdgnn_init

NTASKS=${SLURM_NTASKS:-1}
RPN=${SLURM_NTASKS_PER_NODE:-$NTASKS}
RPN=${RPN%%(*}
if [ -z "${RANKS_LIST:-}" ]; then
  RANKS_LIST=
  for ((p = 1; p <= NTASKS; p *= 2)); do RANKS_LIST="$RANKS_LIST $p"; done
fi
hpcdgnn_check_ranks_list "$RANKS_LIST" || exit 2
if [ -z "${RUNDIR:-}" ]; then hpcdgnn_capture RUNDIR hpcdgnn_job_rundir "${SLURM_JOB_NAME:-hpcdgnn}" || hpcdgnn_setup_failed; fi

base='' name='' parent=''  # set by hpcdgnn_capture
hpcdgnn_capture base hpcdgnn_data_path "$JOB" || hpcdgnn_setup_failed  # a signal that ended it: the stop's 75
hpcdgnn_capture name basename "$base" || hpcdgnn_setup_failed
hpcdgnn_capture parent dirname "$base" || hpcdgnn_setup_failed
if ! [[ $name =~ ^n([0-9]+)-(t[0-9]+-f[0-9.]+(-s[0-9]+)?)$ ]]; then
  echo "hpcdgnn-job: $JOB: data.path '$base' must be named n<N>-t<T>-f<density>[-s<seed>] for the weak sweep" >&2
  exit 2
fi
n1=${BASH_REMATCH[1]} rest=${BASH_REMATCH[2]}

rc=0 last=$RUNDIR
for P in $RANKS_LIST; do
  if [ "$P" -gt "$NTASKS" ]; then
    echo "hpcdgnn-job: skipping P=$P: the allocation has $NTASKS tasks" >&2
    continue
  fi
  last=$RUNDIR/p$P  # the run a pre-emption leaves to resume (or to start)
  if hpcdgnn_signalled; then
    rc=$HPCDGNN_EXIT_PREEMPTED  # the warning came between two runs: requeue before starting another
    break
  fi
  data="$parent/n$((n1 * P))-$rest"
  hpcdgnn_ensure_data "$data" || hpcdgnn_setup_failed "$last"
  hpcdgnn_slurm_launch "$P" $(((P + RPN - 1) / RPN))
  DATA=$data hpcdgnn_train "$JOB" "$RUNDIR/p$P" "$@"
  rc=$HPCDGNN_RC
  if [ "$rc" != 0 ]; then break; fi
done
hpcdgnn_exit "$rc" "$last"
