#!/usr/bin/env bash
# A private single-node Slurm for the job-script tests (tests/jobs/test_slurm_cluster.py), Debian/Ubuntu, as root,
# without systemd. Its configuration, state, logs and PID files all live in $SLURM_STATE; the system's
# /etc/slurm and /etc/munge are not touched and the daemons listen on their own port and socket, so a site's
# Slurm and munge are left alone.
#
#   bash tests/jobs/slurm_setup.sh install   apt-get install slurm-wlm munge libpmix (when missing)
#   bash tests/jobs/slurm_setup.sh start     install if needed, write $SLURM_STATE/slurm.conf, start a private munged
#                                            (own key and socket in $SLURM_STATE) and a fresh slurmctld (clean
#                                            state: job ids from 1) + slurmd; waits until the node is idle.
#                                            Run again, it restarts them: what a controller state reset does
#   bash tests/jobs/slurm_setup.sh stop      stop the daemons this script started (by their PID files) and the
#                                            job processes of this cluster
#   bash tests/jobs/slurm_setup.sh status    exit 0 when both daemons run and the node answers
#
# Clients (sbatch, srun, scontrol, sinfo) find this cluster through SLURM_CONF=$SLURM_STATE/slurm.conf.
# Environment: SLURM_STATE (default ${TMPDIR:-/tmp}/hpcdgnn-slurm), SLURM_PORT (slurmctld's port, default 16817;
# slurmd uses the next one), SLURM_REQUEUE_HOLD (seconds a requeued job waits, Slurm's cred_expire, default 5;
# a production cluster keeps Slurm's 120), HPCDGNN_SLURM_NO_INSTALL=1 (never call apt-get).
# The test cluster: MpiDefault=none (what many sites have, srun --mpi=pmix must be asked for), no GPUs, CR_CPU.
set -euo pipefail
S=${SLURM_STATE:-${TMPDIR:-/tmp}/hpcdgnn-slurm}
PORT=${SLURM_PORT:-16817}
HOLD=${SLURM_REQUEUE_HOLD:-5}
export SLURM_CONF=$S/slurm.conf

log() { echo "slurm_setup: $*" >&2; }

have_packages() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null &&
    command -v munged >/dev/null && ls /usr/lib/*/libpmix.so >/dev/null 2>&1
}

install() {
  have_packages && return 0
  if [ "${HPCDGNN_SLURM_NO_INSTALL:-0}" = 1 ]; then
    log "Slurm is not installed and HPCDGNN_SLURM_NO_INSTALL=1"
    return 1
  fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    log "Slurm is not installed, and installing it needs root and apt-get (Debian/Ubuntu)"
    return 1
  fi
  # libpmix-dev: Slurm's mpi/pmix plugin dlopen()s the unversioned libpmix.so, which only the -dev package has
  # (without it 'srun --mpi=pmix' fails with "mpi/pmix_v4: can not load PMIx library")
  log "installing slurm-wlm munge libpmix2 libpmix-dev"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge libpmix2 libpmix-dev ||
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        slurm-wlm munge libpmix2 libpmix-dev; }
  have_packages
}

alive() { [ -s "$S/$1.pid" ] && kill -0 "$(cat "$S/$1.pid")" 2>/dev/null; }

stop() {
  local p pid ids=()
  if alive slurmctld; then # cancel this cluster's jobs while the controller can (their ranks get SIGTERM)
    mapfile -t ids < <(squeue -h -o %A 2>/dev/null || true)
    if [ "${#ids[@]}" -gt 0 ]; then
      scancel "${ids[@]}" 2>/dev/null || true
      for _ in $(seq 1 60); do
        [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break
        sleep 0.25
      done
    fi
  fi
  for p in slurmd slurmctld munged; do
    if alive "$p"; then
      pid=$(cat "$S/$p.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
    fi
    rm -f "$S/$p.pid"
  done
  # step daemons of this cluster that outlived slurmd (they carry its SLURM_CONF): by their PIDs
  for pid in $(pgrep -x slurmstepd 2>/dev/null || true); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURM_CONF=$S/slurm.conf"; then
      kill "$pid" 2>/dev/null || true
    fi
  done
}

start_munge() {  # a private munged: its own key, socket, PID and log files in $S
  mkdir -p "$S/munge" "$S/munge-run"
  chmod 700 "$S/munge"
  chmod 755 "$S/munge-run"
  if [ ! -s "$S/munge/munge.key" ]; then
    dd if=/dev/urandom bs=1 count=1024 of="$S/munge/munge.key" 2>/dev/null
    chmod 400 "$S/munge/munge.key"
  fi
  # --force: munged refuses a socket under directories others cannot enter (pytest's tmp_path is 0700)
  munged --force --socket="$S/munge-run/munge.socket" --key-file="$S/munge/munge.key" \
    --pid-file="$S/munged.pid" --log-file="$S/log/munged.log" --seed-file="$S/munge/munged.seed"
  for _ in $(seq 1 40); do
    munge -S "$S/munge-run/munge.socket" -n 2>/dev/null | unmunge -S "$S/munge-run/munge.socket" >/dev/null 2>&1 &&
      return 0
    sleep 0.25
  done
  log "munged does not answer; $S/log/munged.log:"
  tail -n 20 "$S/log/munged.log" >&2 || true
  return 1
}

start() {
  install
  [ "$(id -u)" = 0 ] || { log "start needs root (slurmd runs jobs as their users)"; return 1; }
  stop
  rm -rf "$S/ctld" "$S/d"
  mkdir -p "$S/ctld" "$S/d" "$S/log"
  chmod 755 "$S"
  start_munge
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc)
  mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2))
  cat >"$S/slurm.conf" <<CONF
# written by tests/jobs/slurm_setup.sh: a private single-node test cluster
ClusterName=hpcdgnn-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: how long a requeued job is held (and a step credential lives); Slurm's default is 120 s
AuthInfo=cred_expire=$HOLD,socket=$S/munge-run/munge.socket
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$S/log/jobcomp.txt
MpiDefault=none
StateSaveLocation=$S/ctld
SlurmdSpoolDir=$S/d
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
MailProg=/bin/true
KillWait=5
MinJobAge=600
CONF
  # -c: a clean controller state, so job ids start again at 1 (what an admin's state reset does)
  setsid nohup slurmctld -D -c -i >"$S/log/slurmctld.stdout" 2>&1 </dev/null &
  echo $! >"$S/slurmctld.pid"
  for _ in $(seq 1 40); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.25; done
  setsid nohup slurmd -D -N "$host" >"$S/log/slurmd.stdout" 2>&1 </dev/null &
  echo $! >"$S/slurmd.pid"
  for _ in $(seq 1 80); do
    if sinfo -h -o %t 2>/dev/null | grep -q idle; then
      log "cluster up: SLURM_CONF=$SLURM_CONF ($(sinfo -h -o '%D node(s), %c CPUs, state %t'))"
      return 0
    fi
    sleep 0.25
  done
  log "the node never became idle; logs in $S/log:"
  tail -n 20 "$S/log/slurmctld.log" "$S/log/slurmd.log" "$S"/log/*.stdout >&2 || true
  return 1
}

status() {
  alive slurmctld && alive slurmd && sinfo -h -o %t 2>/dev/null | grep -q -E 'idle|mix|alloc'
}

case ${1:-} in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  *)
    echo "usage: bash tests/jobs/slurm_setup.sh install|start|stop|status" >&2
    exit 2
    ;;
esac
