# shellcheck shell=bash
# Shared logic of the job scripts in jobs/: sourced (from the repository root), never run on its own.
#
#   hpcdgnn_init               source $HPCDGNN_SETUP, choose the Python, trap the pre-emption signals
#   hpcdgnn_data_path JOB      the dataset directory the job uses ($DATA, else the YAML's data.path)
#   hpcdgnn_ensure_data DIR    create DIR when absent: CollegeMsg prepared as quickstart.sh does when
#                              DIR is named collegemsg, or a graph generated from a name n<N>-t<T>-f<f>[-s<seed>]
#   hpcdgnn_train JOB RUNDIR [run args]
#                              "${HPCDGNN_LAUNCH[@]}" python -m hpcdgnn run JOB --output|--resume RUNDIR,
#                              with SIGUSR1/SIGTERM forwarded to the launcher; sets HPCDGNN_RC
#   hpcdgnn_run_state RUNDIR   new | completed | checkpointed (resume it) | stale (no complete checkpoint)
#   hpcdgnn_exit RC [RUNDIR]   exit; on 75 (pre-empted) requeue the batch job (SLURM) or let LSF's
#                              '#BSUB -Q 75' requeue it; the requeued job resumes from RUNDIR
#   hpcdgnn_srun RANKS [NODES] HPCDGNN_LAUNCH=(srun --ntasks=RANKS ...)
#   hpcdgnn_extra_flags VAR    the words of $VAR, one per line (SRUN_FLAGS, MPIRUN_FLAGS, ...)
#
# Environment (all optional):
#   HPCDGNN_SETUP          file sourced first (module loads, conda/venv activation of your site)
#   HPCDGNN_PYTHON         Python that has hpcdgnn (default: python; .venv/bin is put first on PATH
#                          when install.sh's .venv exists and HPCDGNN_PYTHON is unset)
#   HPCDGNN_VENV           the virtual environment directory looked for (default .venv)
#   DATA                   dataset directory, overriding the YAML's data.path (passed as --set data.path)
#   HPCDGNN_ARGS           extra 'run' arguments, split at spaces (e.g. "--set train.epochs=5"); for
#                          submissions that cannot pass arguments ('bsub < script', arrays)
#   HPCDGNN_MAX_REQUEUES   SLURM: stop requeueing after this many restarts (default 20)
#
# Exit codes of 'python -m hpcdgnn run' (hpcdgnn/errors.py): 0 done, 2 user error (bad YAML or data),
# 75 pre-empted (checkpoint written: requeue and resume), anything else a crash.

# read by the scripts that source this file
# shellcheck disable=SC2034
HPCDGNN_EXIT_PREEMPTED=75
HPCDGNN_LAUNCH=()
HPCDGNN_RC=0
_hpcdgnn_child=
_hpcdgnn_forwarded=0
_hpcdgnn_got_usr1=0
_hpcdgnn_got_term=0

_hpcdgnn_log() { echo "hpcdgnn-job: $*" >&2; }

# A pre-emption warning (SLURM --signal=B:USR1@T, LSF -wa USR1) or a termination reaches this shell: ask the
# ranks to checkpoint at the next epoch boundary by sending SIGUSR1 to the launcher, which forwards it
# (srun, mpirun and jsrun forward SIGUSR1 to every task; Open MPI's mpirun would kill them on SIGTERM).
_hpcdgnn_on_signal() {
  case $1 in
    USR1) _hpcdgnn_got_usr1=1 ;;
    *) _hpcdgnn_got_term=1 ;;
  esac
  _hpcdgnn_log "$(date '+%F %T') SIG$1: asking the ranks to checkpoint at the next epoch boundary"
  if [ -n "$_hpcdgnn_child" ]; then
    kill -USR1 "$_hpcdgnn_child" 2>/dev/null || true
    _hpcdgnn_forwarded=1
  fi
}

hpcdgnn_signalled() { [ "$_hpcdgnn_got_usr1" = 1 ] || [ "$_hpcdgnn_got_term" = 1 ]; }

hpcdgnn_init() {
  if [ -n "${HPCDGNN_SETUP:-}" ]; then
    set +u  # module and conda scripts read unset variables
    # shellcheck disable=SC1090
    source "$HPCDGNN_SETUP"
    set -u
  fi
  local venv=${HPCDGNN_VENV:-.venv}
  if [ -z "${HPCDGNN_PYTHON:-}" ] && [ -x "$venv/bin/python" ]; then
    PATH="$PWD/$venv/bin:$PATH"
    export PATH
  fi
  HPCDGNN_PY=${HPCDGNN_PYTHON:-python}
  if ! "$HPCDGNN_PY" -c "import hpcdgnn" 2>/dev/null; then
    _hpcdgnn_log "'$HPCDGNN_PY' cannot import hpcdgnn: run 'bash install.sh' or set HPCDGNN_PYTHON / HPCDGNN_SETUP"
    exit 2
  fi
  trap '_hpcdgnn_on_signal USR1' USR1
  trap '_hpcdgnn_on_signal TERM' TERM
  trap '_hpcdgnn_on_signal INT' INT
}

hpcdgnn_data_path() {  # JOB
  if [ -n "${DATA:-}" ]; then
    echo "$DATA"
    return 0
  fi
  "$HPCDGNN_PY" - "$1" <<'EOF'
import sys, yaml
try:
    with open(sys.argv[1]) as f:
        job = yaml.safe_load(f) or {}
    print(((job.get("data") or {}).get("path")) or "")
except Exception as e:  # the run itself reports the YAML error properly
    sys.stderr.write(f"hpcdgnn-job: cannot read data.path from {sys.argv[1]}: {e}\n")
EOF
}

_hpcdgnn_find_input() {  # FILE: inputs/FILE or ../shared/data/FILE
  local d
  for d in inputs ../shared/data; do
    if [ -f "$d/$1" ]; then
      echo "$d/$1"
      return 0
    fi
  done
  return 1
}

hpcdgnn_ensure_data() {  # DIR
  local dir=$1 name tmp src
  if [ -z "$dir" ]; then
    _hpcdgnn_log "the job names no data.path"
    return 2
  fi
  [ -f "$dir/manifest.json" ] && return 0
  name=$(basename "$dir")
  mkdir -p "$(dirname "$dir")"
  # written under a private name and renamed into place: concurrent array tasks never see a half dataset
  tmp="$dir.tmp-${HOSTNAME:-host}-$$"
  rm -rf "$tmp"
  if [ "$name" = collegemsg ]; then
    if ! src=$(_hpcdgnn_find_input CollegeMsg.txt.gz); then
      _hpcdgnn_log "$dir is absent and CollegeMsg.txt.gz is in neither inputs/ nor ../shared/data/"
      return 2
    fi
    _hpcdgnn_log "preparing $dir from $src"
    "$HPCDGNN_PY" -m hpcdgnn prepare "$src" --format snap --snapshots 30 --log-features --output "$tmp" ||
      { rm -rf "$tmp"; return 2; }
  elif [[ $name =~ ^n([0-9]+)-t([0-9]+)-f([0-9.]+)(-s([0-9]+))?$ ]]; then
    _hpcdgnn_log "generating $dir (IBM §6.3 random graph)"
    "$HPCDGNN_PY" -m hpcdgnn generate --output "$tmp" --vertices "${BASH_REMATCH[1]}" \
      --snapshots "${BASH_REMATCH[2]}" --density "${BASH_REMATCH[3]}" --seed "${BASH_REMATCH[5]:-1}" ||
      { rm -rf "$tmp"; return 2; }
  else
    _hpcdgnn_log "dataset $dir does not exist; write it with 'python -m hpcdgnn prepare|generate --output $dir'"
    return 2
  fi
  if ! "$HPCDGNN_PY" -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$tmp" "$dir" 2>/dev/null; then
    rm -rf "$tmp"  # another task got there first
  fi
  [ -f "$dir/manifest.json" ]
}

# new (absent or empty), completed (summary.json says so), checkpointed (a complete checkpoint: resume it)
# or stale (something else: an attempt that stopped before its first checkpoint). Checkpoints are
# <checkpoint.dir, default RUNDIR/checkpoints>/epoch-NNNNNN/ with a COMPLETE file (hpcdgnn/train/checkpoint.py).
hpcdgnn_run_state() {  # RUNDIR
  "$HPCDGNN_PY" - "$1" <<'EOF'
import json, sys
from pathlib import Path
import yaml
run = Path(sys.argv[1])
if not run.is_dir() or not any(run.iterdir()):
    print("new"); sys.exit()
try:
    if json.loads((run / "summary.json").read_text()).get("status", "completed") == "completed":
        print("completed"); sys.exit()
except (OSError, ValueError):
    pass
ckpt = run / "checkpoints"
try:
    saved = yaml.safe_load((run / "config.resolved.yaml").read_text()) or {}
    ckpt = Path((saved.get("checkpoint") or {}).get("dir") or ckpt)
except (OSError, yaml.YAMLError):
    pass
complete = ckpt.is_dir() and any((d / "COMPLETE").is_file() for d in ckpt.iterdir() if not d.name.endswith(".tmp"))
print("checkpointed" if complete else "stale")
EOF
}

hpcdgnn_train() {  # JOB RUNDIR [run args...]; launcher in HPCDGNN_LAUNCH; result in HPCDGNN_RC
  local job=$1 rundir=$2 mode rc a prev=
  shift 2
  HPCDGNN_RC=0
  if hpcdgnn_signalled; then
    _hpcdgnn_log "a pre-emption signal came before $rundir started: not starting it"
    HPCDGNN_RC=$HPCDGNN_EXIT_PREEMPTED
    return 0
  fi
  local state
  state=$(hpcdgnn_run_state "$rundir") || state="unreadable"
  case $state in
    completed)
      _hpcdgnn_log "$rundir is finished (summary.json: completed); nothing to do"
      return 0
      ;;
    checkpointed) mode=--resume ;;
    new) mode=--output ;;
    stale)
      # an earlier attempt stopped before its first checkpoint (e.g. a node failure): keep it, start over
      local aside
      aside="$rundir.attempt-$(date +%Y%m%d-%H%M%S)"
      _hpcdgnn_log "$rundir has no complete checkpoint; moving it to $aside and starting over"
      mv "$rundir" "$aside"
      mode=--output
      ;;
    *)
      _hpcdgnn_log "cannot tell the state of $rundir ($state); not touching it"
      HPCDGNN_RC=2
      return 0
      ;;
  esac
  local args=(-m hpcdgnn run "$job" "$mode" "$rundir" "$@")
  while IFS= read -r a; do args+=("$a"); done < <(hpcdgnn_extra_flags HPCDGNN_ARGS)
  if [ -n "${DATA:-}" ]; then
    args+=(--set "data.path=$DATA")
  fi
  mkdir -p "$(dirname "$rundir")"
  _hpcdgnn_log "$(date '+%F %T') ${HPCDGNN_LAUNCH[*]} $HPCDGNN_PY ${args[*]}"
  # in the background, so that a trapped signal runs its handler at once instead of after the run
  _hpcdgnn_forwarded=0
  "${HPCDGNN_LAUNCH[@]}" "$HPCDGNN_PY" "${args[@]}" &
  _hpcdgnn_child=$!
  if hpcdgnn_signalled && [ "$_hpcdgnn_forwarded" = 0 ]; then
    kill -USR1 "$_hpcdgnn_child" 2>/dev/null || true  # the signal came between the fork and the line above
  fi
  while :; do
    if wait "$_hpcdgnn_child"; then rc=0; else rc=$?; fi
    # After a trapped signal, wait returns > 128 at once while the launcher runs on: wait again. That next
    # wait gives the launcher's own status, or 127 if the status just seen was already the launcher's.
    if [ "$rc" = 127 ] && [ -n "$prev" ]; then
      rc=$prev
      break
    fi
    if [ "$rc" -gt 128 ] && hpcdgnn_signalled; then
      prev=$rc
      continue
    fi
    break
  done
  _hpcdgnn_child=
  # shellcheck disable=SC2034
  HPCDGNN_RC=$rc
  _hpcdgnn_log "$(date '+%F %T') run exited with $rc ($rundir)"
  return 0
}

hpcdgnn_exit() {  # RC [RUNDIR]
  local rc=$1 rundir=${2:-}
  if [ "$rc" != "$HPCDGNN_EXIT_PREEMPTED" ]; then
    exit "$rc"
  fi
  local cancelled=0
  if [ "$_hpcdgnn_got_term" = 1 ] && [ "$_hpcdgnn_got_usr1" = 0 ]; then
    cancelled=1  # SIGTERM/SIGINT without the USR1 warning: scancel/bkill or the hard limit, not a requeue
  fi
  if [ -n "${SLURM_JOB_ID:-}" ]; then
    local restarts=${SLURM_RESTART_COUNT:-0} max=${HPCDGNN_MAX_REQUEUES:-20}
    if [ "$cancelled" = 1 ]; then
      _hpcdgnn_log "terminated: checkpoint kept in $rundir; resubmit with RUNDIR=$rundir to resume"
    elif [ "$restarts" -ge "$max" ]; then
      _hpcdgnn_log "pre-empted after $restarts requeues (HPCDGNN_MAX_REQUEUES=$max): not requeueing;" \
        "resubmit with RUNDIR=$rundir to resume"
    else
      _hpcdgnn_log "pre-empted: checkpoint in $rundir; requeueing job $SLURM_JOB_ID (restart $((restarts + 1)))"
      scontrol requeue "$SLURM_JOB_ID" || _hpcdgnn_log "scontrol requeue failed; resubmit with RUNDIR=$rundir"
    fi
    exit "$rc"
  fi
  if [ -n "${LSB_JOBID:-}" ]; then
    if [ "$cancelled" = 1 ]; then
      # '#BSUB -Q 75' would requeue a killed job: leave with 143 (terminated) instead
      _hpcdgnn_log "terminated: checkpoint kept in $rundir; resubmit with RUNDIR=$rundir to resume"
      exit 143
    fi
    _hpcdgnn_log "pre-empted: checkpoint in $rundir; LSF requeues the job (#BSUB -Q 75) and it resumes"
    exit "$rc"
  fi
  _hpcdgnn_log "pre-empted: checkpoint in $rundir; resume with RUNDIR=$rundir and the same command"
  exit "$rc"
}

hpcdgnn_extra_flags() {  # NAME_OF_VARIABLE: its words, one per line (site flags such as SRUN_FLAGS)
  local words=()
  read -r -a words <<<"${!1:-}"
  if [ "${#words[@]}" -gt 0 ]; then printf '%s\n' "${words[@]}"; fi
}

hpcdgnn_srun() {  # RANKS [NODES]: HPCDGNN_LAUNCH=(srun ...)
  HPCDGNN_LAUNCH=(srun --ntasks="$1")
  if [ -n "${2:-}" ]; then HPCDGNN_LAUNCH+=(--nodes="$2"); fi
  if [ -n "${HPCDGNN_SRUN_MPI:-}" ]; then HPCDGNN_LAUNCH+=(--mpi="$HPCDGNN_SRUN_MPI"); fi
  local f
  while IFS= read -r f; do HPCDGNN_LAUNCH+=("$f"); done < <(hpcdgnn_extra_flags SRUN_FLAGS)
  # Slurm >= 22.05: srun does not inherit --cpus-per-task from the allocation unless told
  if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK; fi
}
