#!/usr/bin/env bash
# Starts the local two-node Slurm (deploy/slurm/local-cluster.sh), runs
# build/tests/slurm_overhead on it, and stops it.
# Usage: tests/bench/slurm_overhead.sh [BUILD_DIR] [--trials N]
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
shift || true
tmp=$(mktemp -d)
export INFRARSI_SLURM_PORT=${INFRARSI_SLURM_PORT:-$(( 20000 + ($$ * 7) % 20000 ))}
trap '"$src/deploy/slurm/local-cluster.sh" stop "$tmp"; rm -rf "$tmp"' EXIT
"$src/deploy/slurm/local-cluster.sh" start "$tmp" > /dev/null
export SLURM_CONF="$tmp/slurm.conf"
"$build/tests/slurm_overhead" "$@"
