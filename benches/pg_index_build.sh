#!/bin/sh
# PostgreSQL (Debian's package) building the same indexes on the same data
# as `aiostore bench index-build`: table bar(a int, b text COLLATE "C",
# c text, d int) with ROWS rows of (i, md5(i::text),
# 'abcdefghijklmnopqrstuvwxyz', i), VACUUM FREEZE'd, then
# `CREATE INDEX bar_a_idx ON bar (a)` and `CREATE INDEX bar_b_idx ON bar (b)`,
# RUNS runs each (default 3), the index dropped and a checkpoint taken
# between runs.
#
# Settings, as aiostore's build runs: maintenance_work_mem=MAINTENANCE_WORK_MEM
# (default 64MB, PostgreSQL's default), max_parallel_maintenance_workers=0
# (aiostore builds with one session), wal_level=replica (PostgreSQL's
# default: every index page is logged as a full image, as aiostore logs
# them); column b is COLLATE "C" because aiostore's text order is byte
# order. Shared with benches/pg_seqscan.sh: shared_buffers=128MB and the
# rest of benches/pg_env.sh.
#
# CACHES (default "warm"), each of:
#   warm   the table read once before the runs (count(*)), so it is in the
#          page cache;
#   cold   the server stopped, the page cache dropped and the server
#          started again before each run.
#
# COLUMNS (default "a b") chooses the indexes, FIRST_RUN (default 1) the
# first run's number: `aiostore bench index-build` calls the script once
# per run (RUNS=1), right after its own run of the same case, so that the
# two systems' runs alternate on a machine whose load changes.
#
# Prints one line per run:
#   postgresql 15 create-index column=a cache=warm rows=… run=1 ms=…
# `aiostore bench index-build --pg-script benches/pg_index_build.sh` runs
# it after its own builds and prints the ratios.
#
# Usage (as root): benches/pg_index_build.sh [ROWS] [DIR]
set -eu
ROWS=${1:-5000000}
DIR=${2:-/var/tmp/aiostore-pg-index-build}
RUNS=${RUNS:-3}
MWM=${MAINTENANCE_WORK_MEM:-64MB}
CACHES=${CACHES:-warm}
COLUMNS=${COLUMNS:-a b}
FIRST_RUN=${FIRST_RUN:-1}
. "$(dirname "$0")/pg_env.sh"
OPTS="-c maintenance_work_mem=$MWM -c max_parallel_maintenance_workers=0 -c wal_level=replica"
start
trap stop EXIT
HAVE=$(as_pg "$PSQL -c \"select count(*) from bar\"" 2>/dev/null || echo 0)
COLL=$(as_pg "$PSQL -c \"select collation_name from information_schema.columns where table_name = 'bar' and column_name = 'b'\"" 2>/dev/null || echo none)
if [ "$HAVE" != "$ROWS" ] || [ "$COLL" != C ]; then
    echo "building bar with $ROWS rows ..." >&2
    as_pg "$PSQL -c \"drop table if exists bar\" -c 'create table bar(a int, b text collate \"C\", c text, d int)' -c \"insert into bar select i, md5(i::text), 'abcdefghijklmnopqrstuvwxyz', i from generate_series(1, $ROWS) i\" -c \"vacuum freeze bar\" -c checkpoint"
fi
VERSION=$(basename "$(dirname "$BIN")")
for cache in $CACHES; do
    for col in $COLUMNS; do
        as_pg "$PSQL -c 'drop index if exists bar_${col}_idx' -c checkpoint"
        if [ "$cache" = warm ]; then
            as_pg "$PSQL -c 'select count(*) from bar'" >/dev/null
        fi
        for run in $(seq "$FIRST_RUN" $((FIRST_RUN + RUNS - 1))); do
            if [ "$cache" = cold ]; then
                stop
                sync; echo 3 > /proc/sys/vm/drop_caches
                start
            fi
            T=$(as_pg "$PSQL -c '\\timing on' -c 'create index bar_${col}_idx on bar ($col)'" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p')
            echo "postgresql $VERSION create-index column=$col cache=$cache rows=$ROWS run=$run ms=$T"
            as_pg "$PSQL -c 'drop index bar_${col}_idx' -c checkpoint"
        done
    done
done
