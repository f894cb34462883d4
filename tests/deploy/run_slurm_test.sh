#!/usr/bin/env bash
# Runs the slurm executor's integration tests (tests/integration/slurm_test.cc)
# on a two-node Slurm started here with deploy/slurm/local-cluster.sh, and
# stops it afterwards. Skips (77) where Slurm's packages are not installed
# or the tests do not run as root (slurmd needs it).
# Usage: run_slurm_test.sh SOURCE_DIR SLURM_TEST_BINARY [gtest flags]
set -euo pipefail
src=$1
bin=$2
shift 2
for b in munged slurmctld slurmd srun sbatch sinfo scontrol scancel; do
  command -v "$b" >/dev/null || { echo "$b not installed (deploy/install_deps.sh --tests): skipped"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "not root (slurmd needs it): skipped"; exit 77; }
command -v python3 >/dev/null || { echo "python3 not installed: skipped"; exit 77; }
tmp=$(mktemp -d)
export INFRARSI_SLURM_PORT=$(( 20000 + ($$ * 7) % 20000 ))
trap '"$src/deploy/slurm/local-cluster.sh" stop "$tmp"; rm -rf "$tmp"' EXIT
"$src/deploy/slurm/local-cluster.sh" start "$tmp" > /dev/null
export SLURM_CONF="$tmp/slurm.conf"
export INFRARSI_SLURM_DIR="$tmp"
"$bin" "$@"
