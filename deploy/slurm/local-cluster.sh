#!/usr/bin/env bash
# A two-node Slurm cluster on this one machine, for trying the slurm
# executor and for the tests: munged, slurmctld and two slurmd (node1,
# node2, each with its own port), eight placeholder GPUs per node as gres.
# Needs root and Debian's slurmctld, slurmd, slurm-client and munge.
#
#   deploy/slurm/local-cluster.sh start DIR   # prints: export SLURM_CONF=DIR/slurm.conf
#   SLURM_CONF=DIR/slurm.conf srun -N2 --gres=gpu:8 hostname
#   deploy/slurm/local-cluster.sh stop DIR
set -euo pipefail
cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  sed -n '2,10p' "$0"; exit 2
fi
base_port=${INFRARSI_SLURM_PORT:-16817}

stop() {
  for pidfile in "$dir"/slurmd-node1.pid "$dir"/slurmd-node2.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile" 2>/dev/null || true)
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  done
  for pidfile in "$dir"/slurmd-node1.pid "$dir"/slurmd-node2.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile" 2>/dev/null || true)
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

case "$cmd" in
  stop) stop; exit 0 ;;
  start) ;;
  *) echo "local-cluster: unknown command '$cmd' (start or stop)" >&2; exit 2 ;;
esac

for bin in munged slurmctld slurmd srun sinfo; do
  command -v "$bin" >/dev/null || { echo "local-cluster: $bin not installed (apt install slurmctld slurmd slurm-client munge)" >&2; exit 3; }
done
[ "$(id -u)" -eq 0 ] || { echo "local-cluster: must run as root (slurmd)" >&2; exit 3; }

dir=$(mkdir -p "$dir" && cd "$dir" && pwd)
mkdir -p "$dir/munge" "$dir/ctld" "$dir/spool-node1" "$dir/spool-node2"
chmod 700 "$dir/munge"
for n in node1 node2; do
  mkdir -p "$dir/gpus/$n"
  for i in $(seq 0 7); do : > "$dir/gpus/$n/gpu$i"; done
done
[ -f "$dir/munge/munge.key" ] || { head -c 1024 /dev/urandom > "$dir/munge/munge.key"; chmod 400 "$dir/munge/munge.key"; }

cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
cat > "$dir/slurm.conf" <<CONF
ClusterName=infrarsi-local
SlurmctldHost=localhost
SlurmctldPort=$base_port
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
SlurmdTimeout=10
InactiveLimit=0
KillWait=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=node1 NodeAddr=127.0.0.1 NodeHostname=localhost Port=$((base_port + 1)) CPUs=$cpus RealMemory=$mem Gres=gpu:8 State=UNKNOWN
NodeName=node2 NodeAddr=127.0.0.1 NodeHostname=localhost Port=$((base_port + 2)) CPUs=$cpus RealMemory=$mem Gres=gpu:8 State=UNKNOWN
PartitionName=local Nodes=node1,node2 Default=YES MaxTime=INFINITE OverSubscribe=YES State=UP
CONF
cat > "$dir/gres.conf" <<CONF
AutoDetect=off
NodeName=node1 Name=gpu File=$dir/gpus/node1/gpu[0-7]
NodeName=node2 Name=gpu File=$dir/gpus/node2/gpu[0-7]
CONF

export SLURM_CONF="$dir/slurm.conf"
munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/munge.seed" --force
slurmctld -f "$dir/slurm.conf" -i
slurmd -f "$dir/slurm.conf" -N node1
slurmd -f "$dir/slurm.conf" -N node2
# Ready when both nodes are idle.
for _ in $(seq 100); do
  idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle' || true)
  [ "$idle" -ge 2 ] && { echo "export SLURM_CONF=$dir/slurm.conf"; exit 0; }
  sleep 0.2
done
echo "local-cluster: the nodes did not come up; logs in $dir" >&2
sinfo -N 2>&1 >&2 || true
exit 1
