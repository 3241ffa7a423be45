#!/bin/sh
# PostgreSQL (Debian's package) on the same data and query as
# `aiostore bench seqscan`: table bar(a int, b text, c text, d int) with
# ROWS rows of (i, md5(i::text), 'abcdefghijklmnopqrstuvwxyz', i), then
# `SELECT count(*) FROM bar` after a restart with the page cache dropped
# (PostgreSQL 15 has no direct I/O, so cold means dropped caches), three
# times, with shared_buffers=128MB and max_parallel_workers_per_gather=0
# (aiostore scans with one session).
#
# Usage (as root): benches/pg_seqscan.sh [ROWS] [DIR]
# Default ROWS=21474836 (2 GiB, like `aiostore bench seqscan`).
set -eu
ROWS=${1:-21474836}
DIR=${2:-/var/tmp/aiostore-pg-seqscan}
. "$(dirname "$0")/pg_env.sh"
as_pg "$BIN/pg_ctl -D $DIR -l $DIR/log -w start >/dev/null"
HAVE=$(as_pg "$PSQL -c \"select count(*) from bar\"" 2>/dev/null || echo 0)
if [ "$HAVE" != "$ROWS" ]; then
    echo "building bar with $ROWS rows ..." >&2
    as_pg "$PSQL -c \"drop table if exists bar\" -c \"create table bar(a int, b text, c text, d int)\" -c \"insert into bar select i, md5(i::text), 'abcdefghijklmnopqrstuvwxyz', i from generate_series(1, $ROWS) i\" -c \"vacuum freeze bar\" -c checkpoint"
fi
SIZE=$(as_pg "$PSQL -c \"select pg_relation_size('bar')\"")
for run in 1 2 3; do
    as_pg "$BIN/pg_ctl -D $DIR -w stop >/dev/null"
    sync; echo 3 > /proc/sys/vm/drop_caches
    as_pg "$BIN/pg_ctl -D $DIR -l $DIR/log -w start >/dev/null"
    T=$(as_pg "$PSQL -c '\\timing on' -c 'select count(*) from bar'" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p')
    echo "postgresql $(basename $(dirname $BIN)) count(*) rows=$ROWS bytes=$SIZE run=$run ms=$T mib_s=$(echo "$SIZE / 1048576 / ($T / 1000)" | bc -l | cut -c1-7)"
done
as_pg "$BIN/pg_ctl -D $DIR -w stop >/dev/null"
