#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying `posenc compare --slurm`
# and for its tests. Run as root.
#
#   scripts/slurm-local.sh start   installs slurm-wlm and munge if missing, writes
#                                  a minimal configuration with its own ports and
#                                  key, starts munged, slurmctld and slurmd, and
#                                  waits until the node is idle
#   scripts/slurm-local.sh stop    ends exactly the daemons that `start` began,
#                                  by their pid files
#   scripts/slurm-local.sh env     prints the line that points Slurm's commands
#                                  (sbatch, squeue, ...) at this cluster
#
# Everything lives in $POSENC_SLURM_DIR (default /tmp/posenc-slurm). Nothing
# under /etc changes, except a line for this host in /etc/hosts where the
# host name does not resolve (a fresh debootstrap root). Clients find the
# cluster through SLURM_CONF:
#   eval "$(scripts/slurm-local.sh env)"; sbatch ...
set -euo pipefail
dir=${POSENC_SLURM_DIR:-/tmp/posenc-slurm}
conf=$dir/slurm.conf
say() { echo "slurm-local: $*" >&2; }

daemon_pids() {
  local f
  for f in "$dir"/munged.pid "$dir"/slurmctld.pid "$dir"/slurmd.pid; do
    [ -s "$f" ] && echo "$(cat "$f") $(basename "$f" .pid)"
  done
  return 0
}

stop() {
  local pid name
  # slurmd and slurmctld first, munged (their authentication) last.
  for name in slurmd slurmctld munged; do
    [ -s "$dir/$name.pid" ] || continue
    pid=$(cat "$dir/$name.pid")
    # Only a process of that name: a pid file left by a crash may name a new process.
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]; then
      kill "$pid"
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
      say "stopped $name ($pid)"
    fi
    rm -f "$dir/$name.pid"
  done
}

# A free TCP port from the kernel's ephemeral range, not one Slurm's defaults use.
free_port() {
  local port
  for _ in $(seq 100); do
    port=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "$port"; return; fi
  done
  say "no free port found"; exit 1
}

start() {
  [ "$(id -u)" -eq 0 ] || { say "run as root (slurmd starts jobs as their user)"; exit 2; }
  if [ -n "$(daemon_pids)" ]; then
    say "already started (pid files in $dir); run '$0 stop' first"; exit 2
  fi
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    say "installing slurm-wlm and munge"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >&2
  fi
  mkdir -p "$dir"/state "$dir"/spool "$dir"/munge
  chmod 700 "$dir"/munge
  [ -s "$dir/munge/munge.key" ] || dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/munge.seed"

  local host cpus version cgroup
  host=$(hostname -s)
  if ! getent hosts "$host" >/dev/null; then
    echo "127.0.0.1 $host" >>/etc/hosts
    say "added '127.0.0.1 $host' to /etc/hosts (slurmd must resolve its own name)"
  fi
  cpus=$(nproc)
  version=$(slurmctld -V | sed -n 's/^slurm[^0-9]*\([0-9]*\)\..*/\1/p')
  # Slurm 22.05 (Debian 12) needs a cgroup plugin named even with task/none; 23.11
  # and later (Debian 13's 24.11) can switch cgroups off.
  if [ "${version:-0}" -ge 23 ]; then cgroup=disabled; else cgroup=cgroup/v1; fi
  if [ "$cgroup" = disabled ]; then
    printf 'CgroupPlugin=disabled\n' >"$dir/cgroup.conf"
  else
    printf 'CgroupPlugin=%s\nIgnoreSystemd=yes\n' "$cgroup" >"$dir/cgroup.conf"
  fi
  cat >"$conf" <<EOF
# A one-node cluster written by posenc's scripts/slurm-local.sh.
ClusterName=posenc
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
# cred_expire: a requeued task may start again this many seconds after it
# stopped (default 120, long for tests; earlier fails with "Job credential revoked").
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MaxArraySize=1001
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$conf
  slurmctld -f "$conf"
  slurmd -f "$conf"
  for _ in $(seq 100); do
    if sinfo -h -N -o '%T' 2>/dev/null | grep -qx idle; then
      say "up: node $host idle, $cpus CPUs, config $conf"
      return 0
    fi
    sleep 0.2
  done
  say "the node did not become idle within 20 s; logs: $dir/slurmctld.log $dir/slurmd.log"
  tail -n 5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
  stop
  exit 1
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
