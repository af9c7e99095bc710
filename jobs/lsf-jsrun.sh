#!/usr/bin/env bash
# LSF with jsrun (IBM CSM clusters such as Summit/Lassen): NODES nodes, one rank per GPU.
#   bsub -P <project> < jobs/lsf-jsrun.sh        (submit from the repository root; bsub reads the #BSUB lines)
#   more nodes: bsub -nnodes 16 ... < jobs/lsf-jsrun.sh
# One jsrun resource set per node holds its G GPUs and G ranks, so every rank sees the node's GPUs and
# train.device: auto gives it the GPU of its local rank.
#
# Environment (bsub passes the submitting shell's environment):
#   JOB            job YAML (default jobs/gpu.yaml; its generated graph is written when absent)
#   NODES          compute nodes (default: those in LSB_DJOB_HOSTFILE without the launch node)
#   GPUS_PER_NODE  G, ranks per node (default 6); CPUS_PER_NODE cores given to them (default 42)
#   RUNDIR         run directory (default runs/<job name>-<job id>-<submit time>: the requeued job, which keeps
#                  its id and submit time, resumes it; a later job that gets the same id does not)
#   HPCDGNN_RUNS   parent of the default RUNDIR (default runs)
#   DATA, HPCDGNN_PYTHON, HPCDGNN_SETUP (e.g. a file with your 'module load' lines), HPCDGNN_VENV: jobs/lib.sh
#   JSRUN_FLAGS    extra jsrun flags
# Pre-emption: LSF sends SIGUSR1 2 minutes before the run limit (-wa/-wt); the ranks checkpoint at the next
# epoch boundary (or between two batches) and exit 75, which '-Q 75' requeues; the requeued job keeps its id and resumes RUNDIR.
#BSUB -J hpcdgnn-jsrun
#BSUB -nnodes 2
#BSUB -W 2:00
#BSUB -wa USR1
#BSUB -wt 2
#BSUB -Q "75"
#BSUB -o hpcdgnn-jsrun.%J.out
set -euo pipefail
JOB=${JOB:-jobs/gpu.yaml}  # <- the line a user edits
cd "${HPCDGNN_ROOT:-${LS_SUBCWD:-.}}"
source jobs/lib.sh
hpcdgnn_init

compute_nodes() { sort -u "$1" | grep -vc -e '^batch' -e '^login' || true; }  # the hosts but the launch/batch node
if [ -z "${NODES:-}" ]; then
  if [ -z "${LSB_DJOB_HOSTFILE:-}" ] || [ ! -r "$LSB_DJOB_HOSTFILE" ]; then
    _hpcdgnn_log "no LSF host file to count the nodes in (LSB_DJOB_HOSTFILE=${LSB_DJOB_HOSTFILE:-}): run it inside" \
      "an LSF job (bsub < jobs/lsf-jsrun.sh), or set NODES"
    exit 2
  fi
  # hpcdgnn_capture, not $(...) (jobs/lib.sh, "Command substitution") nor bare backquotes ("One Ctrl-C")
  hpcdgnn_capture NODES compute_nodes "$LSB_DJOB_HOSTFILE" || hpcdgnn_setup_failed
  if [ "$NODES" = 0 ]; then
    _hpcdgnn_log "$LSB_DJOB_HOSTFILE lists no compute node (only batch/login hosts): set NODES"
    exit 2
  fi
fi
G=${GPUS_PER_NODE:-6}
CPUS=${CPUS_PER_NODE:-42}
if [ -z "${RUNDIR:-}" ]; then hpcdgnn_capture RUNDIR hpcdgnn_job_rundir "${LSB_JOBNAME:-hpcdgnn}" || hpcdgnn_setup_failed; fi
hpcdgnn_ensure_job_data "$JOB" || hpcdgnn_setup_failed "$RUNDIR"
HPCDGNN_LAUNCH=(jsrun --nrs "$NODES" --rs_per_host 1 --tasks_per_rs "$G" --gpu_per_rs "$G"
  --cpu_per_rs "$CPUS" --bind "packed:$((CPUS / G))" --launch_distribution packed)
hpcdgnn_extra_flags JSRUN_FLAGS HPCDGNN_LAUNCH
hpcdgnn_train "$JOB" "$RUNDIR" "$@"
hpcdgnn_exit "$HPCDGNN_RC" "$RUNDIR"
