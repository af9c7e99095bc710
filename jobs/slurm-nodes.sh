#!/usr/bin/env bash
# SLURM, several nodes, P = nodes x ranks per node. CPU nodes by default; GPUs only when you ask for them.
#   sbatch jobs/slurm-nodes.sh [run arguments]        (submit from the repository root)
#   other sizes: sbatch --nodes=8 --ntasks-per-node=2 --cpus-per-task=32 jobs/slurm-nodes.sh
#     (CPU: e.g. one rank per socket; train.threads 0 uses the task's --cpus-per-task cores)
#   GPU nodes, one rank per GPU (G = 4 here):
#     JOB=jobs/gpu.yaml sbatch --gpus-per-node=4 --ntasks-per-node=4 jobs/slurm-nodes.sh
#     (older SLURM: --gres=gpu:4; train.device: auto gives each rank the GPU of its local rank)
# Every #SBATCH size below can be overridden on the sbatch command line (options there win); add your site's
# -A/--partition there too.
#
# Environment (sbatch passes the submitting shell's environment):
#   JOB          job YAML (default jobs/strong.yaml, CPU, comm.backend mpi; its generated graph is written when absent)
#   RANKS        ranks (default SLURM_NTASKS)
#   RUNDIR       run directory (default runs/<job name>-<job id>-<submit time>: a requeued job finds and
#                resumes it; a later job that gets the same id does not; see jobs/lib.sh "Run directory")
#   HPCDGNN_RUNS parent of the default RUNDIR (default runs)
#   DATA, HPCDGNN_PYTHON, HPCDGNN_SETUP (e.g. a file with your 'module load' lines), HPCDGNN_VENV: jobs/lib.sh
#   HPCDGNN_LAUNCHER   auto (default: srun --mpi=pmix for Open MPI when Slurm offers it, else mpirun), srun or
#                      mpirun; HPCDGNN_SRUN_MPI forces srun --mpi=<value>; SRUN_FLAGS, MPIRUN_FLAGS extra flags
# Pre-emption: SLURM sends SIGUSR1 120 s before the time limit (--signal; it may come up to 60 s earlier);
# the ranks checkpoint at the next epoch boundary (or between two batches) and exit 75; the job requeues itself, waits about 2 minutes
# (Slurm holds a requeued job for its credential lifetime, 120 s by default) and resumes from RUNDIR.
#SBATCH --job-name=hpcdgnn-nodes
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out
set -euo pipefail
JOB=${JOB:-jobs/strong.yaml}  # <- the line a user edits
cd "${HPCDGNN_ROOT:-${SLURM_SUBMIT_DIR:-.}}"
source jobs/lib.sh
hpcdgnn_init

RANKS=${RANKS:-${SLURM_NTASKS:-1}}
if [ -z "${RUNDIR:-}" ]; then hpcdgnn_capture RUNDIR hpcdgnn_job_rundir "${SLURM_JOB_NAME:-hpcdgnn}" || hpcdgnn_setup_failed; fi
hpcdgnn_ensure_job_data "$JOB" || hpcdgnn_setup_failed "$RUNDIR"
hpcdgnn_slurm_launch "$RANKS"
hpcdgnn_train "$JOB" "$RUNDIR" "$@"
hpcdgnn_exit "$HPCDGNN_RC" "$RUNDIR"
