#!/usr/bin/env bash
# Generates the Python modules of infrarsi.v1 into OUT_DIR (default:
# client/python/gen): infrarsi/v1/infrarsi_pb2.py and infrarsi_pb2_grpc.py.
#
# Debian's python3-grpc-tools (1.14) ships a protoc too old for proto3
# `optional`; the system protoc (protobuf-compiler, 3.21) with Debian's
# grpc_python_plugin (protobuf-compiler-grpc) compiles it, and the modules
# run on python3-protobuf and python3-grpcio:
#   protoc -I proto --python_out=OUT --grpc_python_out=OUT \
#       --plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin \
#       proto/infrarsi/v1/infrarsi.proto
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$root/client/python/gen}"
plugin="$(command -v grpc_python_plugin || true)"
if [ -z "$plugin" ]; then
  echo "gen_stubs: grpc_python_plugin not found (apt install protobuf-compiler-grpc)" >&2
  exit 2
fi
mkdir -p "$out"
protoc -I "$root/proto" --python_out="$out" --grpc_python_out="$out" \
  --plugin=protoc-gen-grpc_python="$plugin" "$root/proto/infrarsi/v1/infrarsi.proto"
echo "$out"
