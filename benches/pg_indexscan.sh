#!/bin/sh
# PostgreSQL (Debian's package) running the same cold queries on the same
# data as `aiostore bench indexscan` (issue 12): table
# btree_DATASET_MATCHES (a int, b text) WITH (fillfactor = 20) of ROWS rows,
# row i (1 ..= ROWS) = (a, md5(i::text)) with a from DATASET, MATCHES rows
# a value (the statements are copies of `indexscan::insert_sql`):
#   random      a = (d * h(i)) / P, d = ROWS / MATCHES, h(i) an integer
#               hash of i into [0, P), P = 2^31 - 1 (the reference draws
#               (d * random())::int; random() cannot give the same draws
#               on both systems, so both compute the same hash)
#   sequential  a = 1 + (i - 1) / MATCHES
#   cyclic      a = 1 + i % (ROWS / MATCHES)
# then index ${TABLE}_a_idx on a, VACUUM FREEZE, ANALYZE.
#
# The value queried is V (aiostore passes the one it picked); without V,
# the same rule picks it: of the 64 values from the middle of the range
# up, the one whose count is nearest MATCHES. For each query in QUERIES
# (default "point order"):
#   point  select count(b), sum(a) from T where a = V
#   order  select count(b), sum(a) from (select a, b from T where a >= V
#          order by a limit MATCHES) as s
# and scan in SCANS (default "bitmap index"), RUNS runs (default 1), each
# cold: the server stopped, the page cache dropped, the server started;
# then in one psql session the scan's settings (the same names as
# aiostore's:
#   bitmap  enable_indexscan=off, enable_seqscan=off
#   index   enable_bitmapscan=off, enable_seqscan=off
#   seq     enable_indexscan=off, enable_bitmapscan=off),
# a plain EXPLAIN of the query whose plan must name the scan's node, and
# the timed query, by psql's \timing. Settings: benches/pg_env.sh
# (shared_buffers=128MB, no parallel workers); effective_io_concurrency at
# PostgreSQL 15's default (1) unless EFFECTIVE_IO_CONCURRENCY is set.
#
# With ONLY_TABLE=1 every other btree_* table is dropped first, so that
# the cluster holds one table at a time (about 1.7 GB at 5 M rows);
# aiostore passes it unless run with --keep.
#
# Prints one line per run:
#   postgresql 15 indexscan dataset=… matches=… query=… scan=… rows=… v=… run=… result=COUNT|SUM ms=…
# `aiostore bench indexscan --pg-script benches/pg_indexscan.sh` calls it
# once per run (RUNS=1, one query and scan), right after its own run of
# the same case, so that the two systems' runs alternate.
#
# Usage (as root): benches/pg_indexscan.sh ROWS DATASET MATCHES [DIR]
set -eu
ROWS=$1
DATASET=$2
M=$3
DIR=${4:-/var/tmp/aiostore-pg-indexscan}
RUNS=${RUNS:-1}
FIRST_RUN=${FIRST_RUN:-1}
QUERIES=${QUERIES:-point order}
SCANS=${SCANS:-bitmap index}
ONLY_TABLE=${ONLY_TABLE:-0}
. "$(dirname "$0")/pg_env.sh"
OPTS=${EFFECTIVE_IO_CONCURRENCY:+-c effective_io_concurrency=$EFFECTIVE_IO_CONCURRENCY}
start
trap stop EXIT
T=btree_${DATASET}_$M
DISTINCT=$((ROWS / M))
P=2147483647
X="(i::bigint * 48271 % $P)"
case $DATASET in
    random) A="($DISTINCT * ((($X * $X) % $P * 16807 + $X) % $P) / $P)::int"; FIRST=0 ;;
    sequential) A="1 + (i - 1) / $M"; FIRST=1 ;;
    cyclic) A="1 + i % $DISTINCT"; FIRST=1 ;;
    *) echo "unknown data set $DATASET (random, sequential or cyclic)" >&2; exit 1 ;;
esac
if [ "$ONLY_TABLE" = 1 ]; then
    for other in $(as_pg "$PSQL -c \"select tablename from pg_tables where schemaname = 'public' and tablename like 'btree!_%' escape '!' and tablename <> '$T'\""); do
        as_pg "$PSQL -c 'drop table $other'"
    done
fi
WANT="rows=$ROWS"
HAVE=$(as_pg "$PSQL -c \"select obj_description('$T'::regclass, 'pg_class')\"" 2>/dev/null || echo none)
if [ "$HAVE" != "$WANT" ]; then
    echo "building $T with $ROWS rows ..." >&2
    as_pg "$PSQL -c 'drop table if exists $T' -c 'create table $T (a int, b text) with (fillfactor = 20)' -c \"insert into $T select $A, md5(i::text) from generate_series(1, $ROWS) as g(i)\" -c 'create index ${T}_a_idx on $T (a)' -c 'vacuum freeze $T' -c 'analyze $T' -c \"comment on table $T is '$WANT'\" -c checkpoint"
fi
LOW=$((FIRST + DISTINCT / 2))
V=${V:-$(as_pg "$PSQL -c 'select a from $T where a >= $LOW and a < $LOW + 64 group by a order by abs(count(*) - $M), a limit 1'")}
VERSION=$(basename "$(dirname "$BIN")")
for query in $QUERIES; do
    case $query in
        point) Q="select count(b), sum(a) from $T where a = $V" ;;
        order) Q="select count(b), sum(a) from (select a, b from $T where a >= $V order by a limit $M) as s" ;;
        *) echo "unknown query $query (point or order)" >&2; exit 1 ;;
    esac
    for scan in $SCANS; do
        for run in $(seq "$FIRST_RUN" $((FIRST_RUN + RUNS - 1))); do
            cold_query "$scan" "$Q"
            echo "postgresql $VERSION indexscan dataset=$DATASET matches=$M query=$query scan=$scan rows=$ROWS v=$V run=$run result=$RESULT ms=$MS"
        done
    done
done
