#!/usr/bin/env bash
# deploy/slurm/local-cluster.sh brings up a two-node Slurm on this machine
# that runs one job across both nodes with eight gres GPUs each (the
# cluster the slurm executor's tests will run on), and stops it cleanly.
# Skips (77) where Slurm's packages are not installed or not run as root.
# Usage: slurm_local_cluster_test.sh SOURCE_DIR
set -euo pipefail
src=$1
for bin in munged slurmctld slurmd srun sbatch sinfo; do
  command -v "$bin" >/dev/null || { echo "$bin not installed (deploy/install_deps.sh --tests): skipped"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "not root (slurmd needs it): skipped"; exit 77; }
tmp=$(mktemp -d)
export INFRARSI_SLURM_PORT=$(( 20000 + $$ % 20000 ))
trap '"$src/deploy/slurm/local-cluster.sh" stop "$tmp"; rm -rf "$tmp"' EXIT
"$src/deploy/slurm/local-cluster.sh" start "$tmp" > "$tmp/env"
export SLURM_CONF="$tmp/slurm.conf"

# One step on both nodes, each with its rank and the job's node count.
out=$(timeout 60 srun -N2 --gres=gpu:8 bash -c 'echo "$SLURM_NODEID $SLURMD_NODENAME $SLURM_JOB_NUM_NODES"' | sort)
expected=$'0 node1 2\n1 node2 2'
if [ "$out" != "$expected" ]; then
  echo "srun -N2 said:"; echo "$out"; echo "expected:"; echo "$expected"; exit 1
fi
# A batch job: its exit code comes back through sbatch --wait.
timeout 60 sbatch --wait -N2 --gres=gpu:8 -o "$tmp/job.out" --wrap 'srun true' > /dev/null
if timeout 60 sbatch --wait -N1 -o "$tmp/fail.out" --wrap 'exit 3' > /dev/null 2>&1; then
  echo "a failing job was reported as succeeded"; exit 1
fi
# More GPUs than a node has are refused at once, not queued forever.
if timeout 20 srun -N1 --gres=gpu:9 true 2> "$tmp/refused.err"; then
  echo "a job asking for 9 GPUs on an 8-GPU node ran"; exit 1
fi
grep -qi "Requested node configuration is not available" "$tmp/refused.err" || {
  echo "unexpected refusal:"; cat "$tmp/refused.err"; exit 1; }
echo "two-node local Slurm: srun -N2 --gres=gpu:8 ran on node1 and node2"
