#!/bin/sh
# PostgreSQL (Debian's package) running the same cold queries on the same
# data as `aiostore bench bitmapscan`: table btree_test(a int, b int,
# pad text) with ROWS rows, row i (0-based) = (a, i, repeat(md5(i::text), 3))
# where j = i * MULT mod ROWS picks a: the first row of j has a = 1, the
# next 10 a = 10, … the next 100000 a = 100000, the others a unique
# 1000000 + j (the statement is a copy of `bitmapscan::insert_sql`);
# index btree_test_a_idx on a, VACUUM FREEZE, ANALYZE. MULT comes from
# aiostore (`bitmapscan::multiplier`), so that the matching rows lie on
# the same pages on both systems.
#
# For each k in MATCHING (default "1 10 100 1000 10000 100000") and scan
# in SCANS (default "bitmap index"), RUNS runs (default 1), each cold: the
# server stopped, the page cache dropped, the server started; then in one
# psql session the scan's settings (the same names as aiostore's:
#   bitmap  enable_indexscan=off, enable_seqscan=off
#   index   enable_bitmapscan=off, enable_seqscan=off
#   seq     enable_indexscan=off, enable_bitmapscan=off),
# a plain EXPLAIN of the query (planning only: the catalogs and statistics
# read before the clock, as aiostore's run does; PostgreSQL's planner also
# reads the index metapage, which aiostore's timed query reads) whose
# plan must name the scan's node, and the timed query, by psql's \timing:
#   SELECT count(b) FROM btree_test WHERE a = k
# Settings: benches/pg_env.sh (shared_buffers=128MB, no parallel
# workers); effective_io_concurrency at PostgreSQL 15's default (1) unless
# EFFECTIVE_IO_CONCURRENCY is set.
#
# Prints one line per run:
#   postgresql 15 bitmapscan k=… method=bitmap rows=… run=1 count=… ms=…
# `aiostore bench bitmapscan --pg-script benches/pg_bitmapscan.sh` calls
# it once per run (RUNS=1, MATCHING and SCANS one case), right after its
# own run of the same case, so that the two systems' runs alternate.
#
# Usage (as root): benches/pg_bitmapscan.sh ROWS MULT [DIR]
set -eu
ROWS=$1
MULT=$2
DIR=${3:-/var/tmp/aiostore-pg-bitmapscan}
RUNS=${RUNS:-1}
FIRST_RUN=${FIRST_RUN:-1}
MATCHING=${MATCHING:-1 10 100 1000 10000 100000}
SCANS=${SCANS:-bitmap index}
. "$(dirname "$0")/pg_env.sh"
OPTS=${EFFECTIVE_IO_CONCURRENCY:+-c effective_io_concurrency=$EFFECTIVE_IO_CONCURRENCY}
start
trap stop EXIT
WANT="rows=$ROWS mult=$MULT"
HAVE=$(as_pg "$PSQL -c \"select obj_description('btree_test'::regclass, 'pg_class')\"" 2>/dev/null || echo none)
if [ "$HAVE" != "$WANT" ]; then
    echo "building btree_test with $ROWS rows ..." >&2
    A="1 * ((j >= 0 and j < 1)::int) + 10 * ((j >= 1 and j < 11)::int) + 100 * ((j >= 11 and j < 111)::int) + 1000 * ((j >= 111 and j < 1111)::int) + 10000 * ((j >= 1111 and j < 11111)::int) + 100000 * ((j >= 11111 and j < 111111)::int) + (1000000 + j) * ((j >= 111111)::int)"
    as_pg "$PSQL -c 'drop table if exists btree_test' -c 'create table btree_test (a int, b int, pad text)' -c \"insert into btree_test select $A, i, repeat(md5(i::text), 3) from (select i, ((i::bigint * $MULT) % $ROWS)::int as j from generate_series(0, $ROWS - 1) as g(i)) as s\" -c 'create index btree_test_a_idx on btree_test (a)' -c 'vacuum freeze btree_test' -c 'analyze btree_test' -c \"comment on table btree_test is '$WANT'\" -c checkpoint"
fi
VERSION=$(basename "$(dirname "$BIN")")
for k in $MATCHING; do
    for scan in $SCANS; do
        Q="select count(b) from btree_test where a = $k"
        for run in $(seq "$FIRST_RUN" $((FIRST_RUN + RUNS - 1))); do
            cold_query "$scan" "$Q"
            echo "postgresql $VERSION bitmapscan k=$k method=$scan rows=$ROWS run=$run count=$RESULT ms=$MS"
        done
    done
done
