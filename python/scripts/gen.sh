#!/usr/bin/env bash
# Regenerates the committed Python stubs (src/kvoffload/v1/kvoffload_pb2*.py) from
# api/kvoffload/v1/kvoffload.proto with protoc and grpc_python_plugin (Debian:
# protobuf-compiler, protobuf-compiler-grpc). An argument writes them under that directory
# instead (tests/test_stubs.py regenerates into a temporary one and compares).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
repo="$(cd "$here/.." && pwd)"
out="${1:-$here/src}"
plugin="$(command -v grpc_python_plugin)" || { echo "gen.sh: grpc_python_plugin not found (apt-get install protobuf-compiler-grpc)" >&2; exit 1; }
mkdir -p "$out"
protoc -I "$repo/api" --python_out="$out" --grpc_python_out="$out" \
  --plugin=protoc-gen-grpc_python="$plugin" "$repo/api/kvoffload/v1/kvoffload.proto"
