#!/bin/sh
# PostgreSQL (Debian's package) beside `aiostore bench commit`: pgbench
# with a one-row INSERT script (fsync on, synchronous_commit on, the
# defaults) at 1, 8 and 32 clients for SECONDS each, into
# bench_commit(session int, n int) as aiostore's sessions insert.
# pgbench's clients go through a Unix socket; aiostore's sessions are
# threads in its process, so compare the scaling (32 clients against 1)
# more than the absolute rates.
#
# Usage (as root): benches/pg_commit.sh [SECONDS] [DIR]
set -eu
SECONDS_PER_CASE=${1:-3}
DIR=${2:-/var/tmp/aiostore-pg-seqscan}
. "$(dirname "$0")/pg_env.sh"
SCRIPT=$(mktemp /tmp/pg_commit.XXXXXX.sql)
chmod 644 "$SCRIPT"
echo 'INSERT INTO bench_commit VALUES (:client_id, 1);' > "$SCRIPT"
as_pg "$BIN/pg_ctl -D $DIR -l $DIR/log -w start >/dev/null"
trap 'as_pg "$BIN/pg_ctl -D $DIR -w stop >/dev/null"; rm -f "$SCRIPT"' EXIT
as_pg "$PSQL -c 'drop table if exists bench_commit' -c 'create table bench_commit (session int, n int)' -c checkpoint"
for clients in 1 8 32; do
    TPS=$(as_pg "$BIN/pgbench -h /tmp -p $PORT -n -f $SCRIPT -c $clients -j $clients -T $SECONDS_PER_CASE postgres" \
        | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    echo "postgresql $(basename $(dirname $BIN)) commit clients=$clients seconds=$SECONDS_PER_CASE tps=$TPS"
done
