#!/bin/sh
# Build and run the C baseline of PostgreSQL's page checksum.
# Usage: benches/c/run.sh [MIB]   (default 64)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
OUT="$TMP/pg_checksum"
cc -O3 -march=native -o "$OUT" "$HERE/pg_checksum.c"
"$OUT" --bench "${1:-64}"
