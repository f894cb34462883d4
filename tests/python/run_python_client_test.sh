#!/usr/bin/env bash
# Generates the Python stubs (client/python/gen_stubs.sh, the command the
# README gives) into a scratch folder and runs the third-party agent test
# against SERVER_BIN with a python3 that has gRPC (Debian's python3-grpcio).
# Usage: run_python_client_test.sh SOURCE_DIR SERVER_BIN
set -euo pipefail
src=$1 server=$2
py=""
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c "import grpc, google.protobuf" 2>/dev/null; then py=$candidate; break; fi
done
if [ -z "$py" ]; then
  echo "no python3 with grpc (deploy/install_deps.sh --tests installs python3-grpcio): skipped"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$src/client/python/gen_stubs.sh" "$tmp/gen" >/dev/null
exec "$py" "$src/tests/python/third_party_agent_test.py" "$server" "$tmp/gen" "$src/client/python"
