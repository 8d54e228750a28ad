#!/usr/bin/env bash
# A single-node Slurm cluster on loopback for the tests (slurm-wlm and munge from Debian):
#   tools/slurm/local-cluster.sh start DIR   # writes DIR/slurm.conf, starts munged, slurmctld, slurmd
#   tools/slurm/local-cluster.sh stop DIR    # stops what start started
# Clients find it with SLURM_CONF=DIR/slurm.conf. Ports $NPUOPT_SLURM_PORT and the next (default 16817,
# not Slurm's 6817, so that a real cluster on the machine is left alone). Needs root (slurmd runs jobs
# as their user).
set -euo pipefail
action=${1:?start|stop}
dir=$(mkdir -p "${2:?DIR}" && cd "$2" && pwd)
host=$(hostname -s)
conf="$dir/slurm.conf"
port=${NPUOPT_SLURM_PORT:-16817}

stop_pid() {  # stop the daemon whose pid file is $1
  local file=$1
  [ -f "$file" ] || return 0
  local pid; pid=$(cat "$file" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

case "$action" in
  start)
    for tool in slurmctld slurmd sbatch squeue scancel munged; do
      command -v "$tool" >/dev/null || { echo "local-cluster: $tool not found (apt-get install slurm-wlm munge)" >&2; exit 1; }
    done
    [ "$(id -u)" = 0 ] || { echo "local-cluster: needs root (slurmd)" >&2; exit 1; }
    mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
    cat >"$conf" <<CONF
ClusterName=npuopt-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
ReturnToService=2
MpiDefault=none
MinJobAge=300
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=npuopt Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
    # munge: its own key and socket under DIR, so that the machine's munge (if any) is untouched
    if [ ! -f "$dir/munge/munge.key" ]; then
      dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
      chmod 400 "$dir/munge/munge.key"
    fi
    stop_pid "$dir/munge/munged.pid"
    munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
      --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munge.seed"
    export SLURM_CONF="$conf"
    stop_pid "$dir/slurmctld.pid"; stop_pid "$dir/slurmd.pid"
    slurmctld -c -f "$conf"
    slurmd -N "$host" -f "$conf"
    for _ in $(seq 100); do
      if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
        echo "local-cluster: up (SLURM_CONF=$conf, node $host, $(nproc) CPUs)"
        exit 0
      fi
      sleep 0.2
    done
    echo "local-cluster: the node did not come up; logs: $dir/slurmctld.log $dir/slurmd.log" >&2
    tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
    exit 1
    ;;
  stop)
    stop_pid "$dir/slurmd.pid"
    stop_pid "$dir/slurmctld.pid"
    stop_pid "$dir/munge/munged.pid"
    echo "local-cluster: stopped"
    ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
