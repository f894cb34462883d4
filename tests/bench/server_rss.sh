#!/usr/bin/env bash
# The server's resident memory over many whole sessions through its real
# front door: an infrarsi-server, one replay agent, and the CLI running
# session create, doctor and run on the demo spec, N times; the server's
# VmRSS printed every EVERY sessions (its cache keeps 16 finished sessions,
# so past that the figure should level off).
# Usage: [SERVER_FLAGS="--malloc-arenas 0"] tests/bench/server_rss.sh [BUILD_DIR=build] [N=100] [EVERY=20]
set -euo pipefail
build=${1:-build}
n=${2:-100}
every=${3:-20}
here=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
trap 'kill $server $agent 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
"$build/server/infrarsi-server" --listen "127.0.0.1:$port" --db "$dir/irsi.db" --log-level warn \
  ${SERVER_FLAGS:-} &
server=$!
sleep 0.5
"$build/client/infrarsi-agent" --server "127.0.0.1:$port" --gpu-model H200 --gpu-count 1 \
  --executors replay --log-level warn &
agent=$!
cli() { "$build/client/infrarsi" --server "127.0.0.1:$port" "$@"; }
rss() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$server/status"; }
echo "sessions  server RSS (MB)"
echo "0         $(rss)"
start=$(date +%s)
for i in $(seq 1 "$n"); do
  id=$(cli session create "$here/data/specs/demo-h200-gpt-354m.yaml" | grep -o 'ses-[0-9a-f]*' | head -1)
  cli doctor "$id" > /dev/null 2>&1
  cli run "$id" > /dev/null 2>&1
  if [ $((i % every)) -eq 0 ]; then echo "$i        $(rss)"; fi
done
echo "($n sessions in $(( $(date +%s) - start )) s)"
