#!/bin/sh
# PostgreSQL (Debian's package) loading the same CSV as `aiostore bench
# copy`: COPY bar_load FROM '<csv>' (FORMAT csv) into a new table
# bar_load(a int, b text, c text, d int), page cache dropped before each
# load (the CSV is read cold, as aiostore's is), three runs per mode:
#
#   wal    the default configuration (wal_level=replica): every row is
#          WAL-logged and the commit flushes the WAL;
#   nowal  wal_level=minimal and CREATE TABLE + COPY in one transaction,
#          so PostgreSQL skips the WAL and syncs the table at commit. The
#          closer comparison while aiostore has no WAL.
#
# Uses the data directory and settings of benches/pg_seqscan.sh
# (benches/pg_env.sh).
#
# Usage (as root): benches/pg_copy.sh CSV [DIR]
# CSV is the file `aiostore bench copy` writes (bench/seqscan/bar-<rows>.csv
# in its data directory); it must be readable by the postgres user.
set -eu
CSV=$1
DIR=${2:-/var/tmp/aiostore-pg-seqscan}
. "$(dirname "$0")/pg_env.sh"
CSV_BYTES=$(stat -c %s "$CSV")
for mode in wal nowal; do
    if [ $mode = nowal ]; then
        OPTS="-c wal_level=minimal -c max_wal_senders=0"
    else
        OPTS=""
    fi
    for run in 1 2 3; do
        as_pg "$BIN/pg_ctl -D $DIR -l $DIR/log -o '$OPTS' -w start >/dev/null"
        as_pg "$PSQL -c 'drop table if exists bar_load' -c checkpoint"
        sync; echo 3 > /proc/sys/vm/drop_caches
        T=$(as_pg "$PSQL -c '\\timing on' -c 'begin' -c 'create table bar_load(a int, b text, c text, d int)' -c \"copy bar_load from '$CSV' (format csv)\" -c 'commit'" \
            | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | paste -sd+ | bc)
        ROWS=$(as_pg "$PSQL -c 'select count(*) from bar_load'")
        echo "postgresql $(basename $(dirname $BIN)) copy-from mode=$mode rows=$ROWS csv_bytes=$CSV_BYTES run=$run ms=$T mib_s=$(echo "$CSV_BYTES / 1048576 / ($T / 1000)" | bc -l | cut -c1-7) rows_s=$(echo "$ROWS / ($T / 1000)" | bc -l | cut -d. -f1)"
        as_pg "$BIN/pg_ctl -D $DIR -w stop >/dev/null"
    done
done
