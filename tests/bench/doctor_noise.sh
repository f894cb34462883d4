#!/usr/bin/env bash
# The doctor on quieter and noisier simulated clusters: the same workload
# (deploy/workloads/dense-8b-1x8-h100.yaml) with the simulator's run-to-run
# noise set to each value given, 8 baseline runs each; prints the measured CV
# and noise floor. Usage: tests/bench/doctor_noise.sh [BUILD_DIR] [noise_cv...]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
shift || true
levels=("$@")
[ ${#levels[@]} -gt 0 ] || levels=(0.002 0.01 0.06)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

coproc SERVER { exec "$build/server/infrarsi-server" --listen 127.0.0.1:0 --db "$work/db" --log-level warn; }
read -r line <&"${SERVER[0]}"
addr=${line##* }
"$build/client/infrarsi-agent" --server "$addr" --gpu-model H100 --gpu-count 8 --executors sim \
  --lease-wait-s 1 --log-level warn >/dev/null &
for noise in "${levels[@]}"; do
  sed "s/noise_cv: 0.01,/noise_cv: $noise,/; s/^name: .*/name: noise-$noise/" \
    "$root/deploy/workloads/dense-8b-1x8-h100.yaml" > "$work/noise-$noise.yaml"
  id=$("$build/client/infrarsi" --server "$addr" session create "$work/noise-$noise.yaml")
  printf 'noise_cv %-6s ' "$noise"
  "$build/client/infrarsi" --server "$addr" doctor "$id" --repeats 8 2>/dev/null
done
