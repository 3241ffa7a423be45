#!/bin/sh
# PostgreSQL (Debian's package) loading the same CSV as `aiostore bench
# copy`: COPY bar_load FROM '<csv>' (FORMAT csv) into bar_load(a int,
# b text, c text, d int), page cache dropped before each load (the CSV is
# read cold, as aiostore's is), fsync on, RUNS runs per mode (default 3):
#
#   wal    wal_level=replica (the default) and the table created by an
#          earlier transaction: every page is WAL-logged and the COPY's
#          commit flushes the WAL. Only the COPY is timed, as aiostore's
#          `wal` case times only its COPY.
#   nowal  wal_level=minimal, max_wal_senders=0 and BEGIN; CREATE TABLE;
#          COPY; COMMIT, so PostgreSQL skips the WAL and syncs the table at
#          commit. All four statements are timed, as aiostore's `nowal`
#          case times all four.
#
# Uses the data directory and settings of benches/pg_seqscan.sh
# (benches/pg_env.sh). `aiostore bench copy --pg-script benches/pg_copy.sh`
# runs it after its own loads, on the same CSV, and prints the ratios.
#
# Usage (as root): benches/pg_copy.sh CSV [DIR]
# CSV is the file `aiostore bench copy` writes (bench/seqscan/bar-<rows>.csv
# in its data directory); it must be readable by the postgres user.
set -eu
CSV=$1
DIR=${2:-/var/tmp/aiostore-pg-seqscan}
. "$(dirname "$0")/pg_env.sh"
CSV_BYTES=$(stat -c %s "$CSV")
RUNS=${RUNS:-3}
for mode in wal nowal; do
    if [ $mode = nowal ]; then
        OPTS="-c wal_level=minimal -c max_wal_senders=0"
        SETUP="-c 'drop table if exists bar_load' -c checkpoint"
        LOAD="-c 'begin' -c 'create table bar_load(a int, b text, c text, d int)' -c \"copy bar_load from '$CSV' (format csv)\" -c 'commit'"
    else
        OPTS="-c wal_level=replica"
        SETUP="-c 'drop table if exists bar_load' -c 'create table bar_load(a int, b text, c text, d int)' -c checkpoint"
        LOAD="-c \"copy bar_load from '$CSV' (format csv)\""
    fi
    for run in $(seq 1 $RUNS); do
        as_pg "$BIN/pg_ctl -D $DIR -l $DIR/log -o '$OPTS' -w start >/dev/null"
        as_pg "$PSQL $SETUP"
        sync; echo 3 > /proc/sys/vm/drop_caches
        T=$(as_pg "$PSQL -c '\\timing on' $LOAD" \
            | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | paste -sd+ | bc)
        ROWS=$(as_pg "$PSQL -c 'select count(*) from bar_load'")
        echo "postgresql $(basename $(dirname $BIN)) copy-from mode=$mode rows=$ROWS csv_bytes=$CSV_BYTES run=$run ms=$T mib_s=$(echo "$CSV_BYTES / 1048576 / ($T / 1000)" | bc -l | cut -c1-7) rows_s=$(echo "$ROWS / ($T / 1000)" | bc -l | cut -d. -f1)"
        as_pg "$BIN/pg_ctl -D $DIR -w stop >/dev/null"
    done
done
