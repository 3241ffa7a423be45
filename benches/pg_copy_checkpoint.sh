#!/bin/sh
# PostgreSQL (Debian's package) running the load of `aiostore bench
# copy-checkpoint` (the reference thread's parallel COPY experiment):
# SESSIONS pgbench clients (default 8), each COPYing the CSV into its own
# table copyckpt_<client> (a int, b text, c text, d int) with
# `copy … from 'CSV' (format csv)`, one COPY a transaction, for
# LOAD_SECONDS (default 60; pgbench -T, whose COPYs in flight then
# finish), then a CHECKPOINT timed by psql's \timing, with what the
# checkpointer wrote for it from pg_stat_bgwriter (buffers_checkpoint,
# checkpoint_write_time, checkpoint_sync_time).
#
# Settings, on top of benches/pg_env.sh's: shared_buffers =
# SHARED_BUFFERS_MIB (default 8192, aiostore's default), checkpoint_timeout
# = 1d and max_wal_size = 1TB so that no checkpoint runs during the load
# (counted: checkpoints_during_load), log_checkpoints = on. fsync,
# synchronous_commit and wal_level at their defaults (on, on, replica); the
# tables are created and checkpointed before the load, so every page is
# WAL-logged, as aiostore's are. PostgreSQL 15 writes through the page
# cache (it has no direct I/O).
#
# The cluster is the script's own (DIR, default
# /var/tmp/aiostore-pg-copyckpt): after a load its WAL holds about the
# load's size, kept for recycling. One this run made is removed at the end
# unless KEEP=1; one that was there before keeps its tables dropped.
#
# Prints one line:
#   postgresql 15 copy-checkpoint sessions=… seconds=… shared_buffers_mib=…
#   csv_bytes=… rows=… copies=… tps=… latency_avg_ms=… latency_stddev_ms=…
#   session_tps_min=… session_tps_median=… session_tps_max=… loaded_mib=…
#   checkpoints_during_load=… checkpoint_ms=… checkpoint_buffers=…
#   checkpoint_write_ms=… checkpoint_sync_ms=… checkpoint_mib=…
#   checkpoint_mib_s=… checkpoint_write_mib_s=…
# tps, copies and the latencies are pgbench's (-P makes it print the
# standard deviation); session_tps_* come from its per-transaction log
# (-l): a client's COPYs × tps / all COPYs. checkpoint_mib_s is over the
# statement's time (as aiostore's), checkpoint_write_mib_s over the
# checkpointer's write time (as the reference's).
#
# `aiostore bench copy-checkpoint --pg-script benches/pg_copy_checkpoint.sh`
# runs it after its own configurations, with the same CSV, sessions,
# seconds (rounded up) and shared_buffers.
#
# Usage (as root): benches/pg_copy_checkpoint.sh CSV [DIR]
set -eu
CSV=$1
DIR=${2:-/var/tmp/aiostore-pg-copyckpt}
SESSIONS=${SESSIONS:-8}
LOAD_SECONDS=${LOAD_SECONDS:-60}
SHARED_BUFFERS_MIB=${SHARED_BUFFERS_MIB:-8192}
KEEP=${KEEP:-0}
MADE=0
[ -f "$DIR/PG_VERSION" ] || MADE=1
if [ ! -r "$CSV" ]; then
    echo "pg_copy_checkpoint.sh: cannot read the CSV $CSV" >&2
    exit 1
fi
CSV_BYTES=$(stat -c %s "$CSV")
ROWS=$(wc -l < "$CSV")
# The same bound as aiostore's estimate: at most 200 MiB/s of CSV from all
# sessions, plus the COPYs in flight at the end, 1.35 bytes of table per
# byte of CSV, each logged once more in the WAL; and 1 GiB to spare.
NEED_MIB=$(( (200 * LOAD_SECONDS + SESSIONS * CSV_BYTES / 1048576) * 27 / 10 + 1024 ))
PARENT=$(dirname "$DIR")
FREE_MIB=$(df -Pm "$PARENT" | awk 'NR == 2 {print $4}')
if [ "$FREE_MIB" -lt "$NEED_MIB" ]; then
    echo "pg_copy_checkpoint.sh needs about $NEED_MIB MiB free in $PARENT for $SESSIONS sessions loading for $LOAD_SECONDS s (tables and WAL), and it has $FREE_MIB MiB: lower LOAD_SECONDS or SESSIONS, or give a DIR on a larger file system" >&2
    exit 1
fi
. "$(dirname "$0")/pg_env.sh"
VERSION=$(basename "$(dirname "$BIN")")
WORK=$(mktemp -d /tmp/pg_copy_checkpoint.XXXXXX)
chmod 755 "$WORK"
chown postgres "$WORK"
# The server reads the CSV as the postgres user: a copy where it cannot.
CSV_PG=$CSV
if ! as_pg "test -r '$CSV'"; then
    CSV_PG=$WORK/copyckpt.csv
    cp "$CSV" "$CSV_PG"
    chmod 644 "$CSV_PG"
fi
cleanup() {
    stop || true
    rm -rf "$WORK"
    if [ "$MADE" = 1 ] && [ "$KEEP" != 1 ]; then
        rm -rf "$DIR"
    fi
}
OPTS="-c shared_buffers=${SHARED_BUFFERS_MIB}MB -c checkpoint_timeout=1d -c max_wal_size=1TB -c log_checkpoints=on"
start
trap cleanup EXIT
TABLES_SQL=""
i=0
while [ "$i" -lt "$SESSIONS" ]; do
    TABLES_SQL="$TABLES_SQL drop table if exists copyckpt_$i; create table copyckpt_$i (a int, b text, c text, d int);"
    i=$((i + 1))
done
as_pg "$PSQL -c '$TABLES_SQL' -c checkpoint"
echo "copy copyckpt_:client_id from '$CSV_PG' (format csv);" > "$WORK/copy.sql"
chmod 644 "$WORK/copy.sql"
CHECKPOINTS="select checkpoints_timed + checkpoints_req from pg_stat_bgwriter"
# The checkpointer reports a checkpoint's figures just after it lets the
# CHECKPOINT return: a moment for those of the one above.
sleep 1
BEFORE_LOAD=$(as_pg "$PSQL -c '$CHECKPOINTS'")
OUT=$(as_pg "cd $WORK && $BIN/pgbench -h /tmp -p $PORT -n -f $WORK/copy.sql -c $SESSIONS -j $SESSIONS -T $LOAD_SECONDS -P $LOAD_SECONDS -l --log-prefix=$WORK/log postgres")
AFTER_LOAD=$(as_pg "$PSQL -c '$CHECKPOINTS'")
TPS=$(echo "$OUT" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
COPIES=$(echo "$OUT" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
LATENCY=$(echo "$OUT" | sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p')
STDDEV=$(echo "$OUT" | sed -n 's/^latency stddev = \([0-9.]*\) ms.*/\1/p')
if [ -z "$TPS" ] || [ -z "$COPIES" ] || [ "$COPIES" = 0 ] || [ -z "$STDDEV" ]; then
    echo "pgbench completed no COPY, or printed no tps or latency stddev: $OUT" >&2
    exit 1
fi
# Each client's COPYs from the per-transaction log (its first field), a
# client without any counting 0.
COUNTS=$(cat "$WORK"/log.* | awk '{n[$1]++} END {for (c in n) print n[c]}')
SEEN=$(echo "$COUNTS" | grep -c . || true)
ALL=$( (echo "$COUNTS"; i=$SEEN; while [ "$i" -lt "$SESSIONS" ]; do echo 0; i=$((i + 1)); done) | grep . | sort -n)
rate() { awk -v c="$1" -v t="$TPS" -v n="$COPIES" 'BEGIN {printf "%.4f", c * t / n}'; }
SESSION_MIN=$(rate "$(echo "$ALL" | head -1)")
SESSION_MAX=$(rate "$(echo "$ALL" | tail -1)")
SESSION_MEDIAN=$(rate "$(echo "$ALL" | awk '{a[NR] = $1} END {print ((NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}')")
LOADED_MIB=$(as_pg "$PSQL -c \"select round(sum(pg_relation_size(oid)) / 1048576.0, 1) from pg_class where relkind = 'r' and relname like 'copyckpt!_%' escape '!'\"")
STATS="select buffers_checkpoint || ' ' || checkpoint_write_time || ' ' || checkpoint_sync_time || ' ' || checkpoints_req from pg_stat_bgwriter"
set -- $(as_pg "$PSQL -c \"$STATS\"")
B0=$1 W0=$2 S0=$3 R0=$4
CHECKPOINT_MS=$(as_pg "$PSQL -c '\\timing on' -c checkpoint" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p')
tries=0
while :; do
    set -- $(as_pg "$PSQL -c \"$STATS\"")
    [ "$4" -gt "$R0" ] && break
    tries=$((tries + 1))
    if [ "$tries" -ge 50 ]; then
        echo "pg_stat_bgwriter did not count the CHECKPOINT within 10 s" >&2
        exit 1
    fi
    sleep 0.2
done
BUFFERS=$(($1 - B0))
WRITE_MS=$(awk -v a="$2" -v b="$W0" 'BEGIN {printf "%.0f", a - b}')
SYNC_MS=$(awk -v a="$3" -v b="$S0" 'BEGIN {printf "%.0f", a - b}')
CHECKPOINT_MIB=$(awk -v b="$BUFFERS" 'BEGIN {printf "%.1f", b * 8192 / 1048576}')
per_s() { awk -v m="$CHECKPOINT_MIB" -v ms="$1" 'BEGIN {printf "%.1f", (ms > 0 ? m / (ms / 1000) : 0)}'; }
echo "postgresql $VERSION copy-checkpoint sessions=$SESSIONS seconds=$LOAD_SECONDS shared_buffers_mib=$SHARED_BUFFERS_MIB csv_bytes=$CSV_BYTES rows=$ROWS copies=$COPIES tps=$TPS latency_avg_ms=$LATENCY latency_stddev_ms=$STDDEV session_tps_min=$SESSION_MIN session_tps_median=$SESSION_MEDIAN session_tps_max=$SESSION_MAX loaded_mib=$LOADED_MIB checkpoints_during_load=$((AFTER_LOAD - BEFORE_LOAD)) checkpoint_ms=$CHECKPOINT_MS checkpoint_buffers=$BUFFERS checkpoint_write_ms=$WRITE_MS checkpoint_sync_ms=$SYNC_MS checkpoint_mib=$CHECKPOINT_MIB checkpoint_mib_s=$(per_s "$CHECKPOINT_MS") checkpoint_write_mib_s=$(per_s "$WRITE_MS")"
if [ "$MADE" != 1 ] || [ "$KEEP" = 1 ]; then
    as_pg "$PSQL -c '$(echo "$TABLES_SQL" | sed 's/create table[^;]*;//g')' -c checkpoint"
fi
