#!/usr/bin/env bash
# The units in deploy/systemd/ pass `systemd-analyze verify` without a word
# (it exits 0 on unknown keys and bad values and only prints them, so any
# output fails), pointed at the binaries just built, and the server's
# documented config file is read by the server itself.
# Usage: systemd_units_test.sh SOURCE_DIR SERVER_BIN AGENT_BIN
set -euo pipefail
src=$1 server=$2 agent=$3
if ! command -v systemd-analyze >/dev/null; then
  echo "systemd-analyze not installed: skipped"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for u in infrarsi-server infrarsi-agent; do
  sed -e "s|/usr/local/bin/infrarsi-server|$server|" -e "s|/usr/local/bin/infrarsi-agent|$agent|" \
    "$src/deploy/systemd/$u.service" > "$tmp/$u.service"
done
out=$(cd "$tmp" && systemd-analyze verify ./infrarsi-server.service ./infrarsi-agent.service 2>&1) || {
  echo "$out"; exit 1; }
if [ -n "$out" ]; then
  echo "systemd-analyze verify said:"; echo "$out"; exit 1
fi
# The config file as shipped, with a scratch database, loopback and no TLS
# files: the server parses every key (an unknown one is an error) and starts.
sed -e "s|/var/lib/infrarsi/infrarsi.db|$tmp/db|" -e 's|^tls-cert.*||' -e 's|^tls-key.*||' \
    -e 's|0.0.0.0:7420|127.0.0.1:0|' "$src/deploy/systemd/infrarsi-server.conf" > "$tmp/server.conf"
coproc SERVER { exec "$server" --config "$tmp/server.conf" 2>"$tmp/err"; }
first=""
read -r -t 10 first <&"${SERVER[0]}" || true  # its first line, as soon as it is written
kill "$SERVER_PID" 2>/dev/null || true
wait "$SERVER_PID" 2>/dev/null || true
case "$first" in
  "infrarsi-server listening on 127.0.0.1:"*) ;;
  *) echo "the server did not start from the config file: $first"; cat "$tmp/err"; exit 1 ;;
esac
echo "units verified; config read"
