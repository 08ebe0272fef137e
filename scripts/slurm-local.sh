#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying `posenc compare --slurm`
# and for its tests. Run as root.
#
#   scripts/slurm-local.sh start   installs slurm-wlm and munge if missing, writes
#                                  a minimal configuration with its own ports and
#                                  key, starts munged, slurmctld and slurmd, and
#                                  waits until the node is idle
#   scripts/slurm-local.sh stop    ends the job steps, then the daemons of this
#                                  cluster (found by its directory, not only by
#                                  pid files), and says what it ended
#   scripts/slurm-local.sh env     prints the line that points Slurm's commands
#                                  (sbatch, squeue, ...) at this cluster
#
# Everything it writes lives in $POSENC_SLURM_DIR (default /tmp/posenc-slurm),
# except a line for this host in /etc/hosts where the host name does not
# resolve (a fresh debootstrap root); the packages' own install adds users,
# /etc/munge, /etc/slurm and services (docs/cluster.md). Clients find the
# cluster through SLURM_CONF:
#   eval "$(scripts/slurm-local.sh env)"; sbatch ...
set -euo pipefail
dir=${POSENC_SLURM_DIR:-/tmp/posenc-slurm}
conf=$dir/slurm.conf
say() { echo "slurm-local: $*" >&2; }

# Every process of this cluster, whatever its pid files say: the daemons
# (started with this directory on their command line or SLURM_CONF in their
# environment), the slurmstepd of each job step (slurmd starts them detached,
# so they outlive it) and every process below those. "PID NAME" lines.
cluster_processes() {
  local p pid comm ours=() child parent
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    comm=$(cat "$p/comm" 2>/dev/null) || continue
    case "$comm" in munged | slurmctld | slurmscriptd | slurmd | slurmstepd) ;; *) continue ;; esac
    if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -qF -- "$dir/" ||
       { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qxF -- "SLURM_CONF=$conf"; then
      ours+=("$pid")
    fi
  done
  # Their descendants (a job's own processes), by parent pid, until none is new.
  local found=1
  while [ $found -eq 1 ]; do
    found=0
    for p in /proc/[0-9]*; do
      child=${p#/proc/}
      parent=$(awk '{print $4}' "$p/stat" 2>/dev/null) || continue
      [[ " ${ours[*]} " == *" $parent "* && " ${ours[*]} " != *" $child "* ]] || continue
      ours+=("$child"); found=1
    done
  done
  for pid in "${ours[@]}"; do echo "$pid $(cat "/proc/$pid/comm" 2>/dev/null || echo gone)"; done
}

# Ends the job steps first, then slurmd and slurmctld, munged (their
# authentication) last; each gets SIGTERM, then SIGKILL after 5 s. Says what it
# ended, and fails if anything of the cluster is still there.
stop() {
  local order name pid left ended=0
  # Cancel what the controller knows of while it still answers (quietly; it may be gone).
  if [ -s "$conf" ] && command -v squeue >/dev/null; then
    SLURM_CONF=$conf timeout 5 squeue -h -o %A 2>/dev/null | sort -u |
      xargs -r env SLURM_CONF="$conf" timeout 5 scancel --full 2>/dev/null || true
  fi
  for order in job slurmd slurmctld munged; do
    local pids=()
    while read -r pid name; do
      case "$order:$name" in
        job:munged | job:slurmctld | job:slurmscriptd | job:slurmd) ;;
        job:*) pids+=("$pid") ;;
        slurmctld:slurmctld | slurmctld:slurmscriptd | slurmd:slurmd | munged:munged) pids+=("$pid") ;;
      esac
    done < <(cluster_processes)
    [ ${#pids[@]} -gt 0 ] || continue
    local names=""
    for pid in "${pids[@]}"; do names+=" $(cat "/proc/$pid/comm" 2>/dev/null || echo gone)($pid)"; done
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 50); do
      left=0
      for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left=1; done
      [ $left -eq 0 ] && break
      sleep 0.1
    done
    [ $left -eq 1 ] && kill -KILL "${pids[@]}" 2>/dev/null
    say "ended$names"
    ended=1
  done
  rm -f "$dir"/munged.pid "$dir"/slurmctld.pid "$dir"/slurmd.pid
  sleep 0.2
  if left=$(cluster_processes) && [ -n "$left" ]; then
    say "still running after SIGKILL: $(echo "$left" | tr '\n' ' ')"
    return 1
  fi
  [ $ended -eq 1 ] || say "nothing of the cluster in $dir was running"
  return 0
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
  if [ -n "$(cluster_processes)" ]; then
    say "already running (in $dir); run '$0 stop' first"; exit 2
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
# The scheduler's passes over pending jobs: every 60 s (main) and 30 s
# (backfill) by default, so a requeued task waited up to 30 s past its begin
# time to start again and a job in "high" up to a minute to preempt; a test
# cluster of one node can afford a pass every second or two.
SchedulerParameters=sched_interval=2,bf_interval=1
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MaxArraySize=1001
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
# Preemption by partition priority, to try what a cluster's preemption does to
# a run: a job in "high" preempts one in "low-requeue" (Slurm requeues it) or
# "low-cancel" (Slurm cancels it; posenc's script requeues it), each after a
# 5 s grace time. A batch job's processes get nothing until the grace time
# ends, then SIGTERM (seen with Slurm 22.05), so a longer one would only
# make the tests wait. Jobs in "debug", the default, are never preempted.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=OFF
PartitionName=low-requeue Nodes=$host MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=5
PartitionName=low-cancel Nodes=$host MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL GraceTime=5
PartitionName=high Nodes=$host MaxTime=INFINITE State=UP PriorityTier=2
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
