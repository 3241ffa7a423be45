# Shared by benches/pg_*.sh (sourced, as root): PostgreSQL from Debian's
# package in DIR (created with initdb on first use: shared_buffers=128MB
# as aiostore's default, no parallel workers since aiostore scans with one
# session, its own port and socket directory), and helpers: as_pg, start
# and stop, scan_settings, cold_query.
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
# PG_BENCH_PORT chooses another port, where another cluster holds this
# one (the server is started with -p, so a cluster made before follows).
PORT=${PG_BENCH_PORT:-54329}
PSQL="$BIN/psql -h /tmp -p $PORT -d postgres -X -q -t -A -v ON_ERROR_STOP=1"
as_pg() { su postgres -c "$*"; }
if [ ! -f "$DIR/PG_VERSION" ]; then
    mkdir -p "$DIR" && chown postgres "$DIR"
    as_pg "$BIN/initdb -D $DIR -A trust >/dev/null"
    cat >> "$DIR/postgresql.conf" <<CONF
shared_buffers = 128MB
max_parallel_workers_per_gather = 0
port = $PORT
unix_socket_directories = '/tmp'
CONF
fi
# The server, started with the calling script's OPTS (its -c settings).
start() { as_pg "$BIN/pg_ctl -D $DIR -l $DIR/log -o '-p $PORT ${OPTS:-}' -w start >/dev/null"; }
stop() { as_pg "$BIN/pg_ctl -D $DIR -w stop >/dev/null"; }
# scan_settings SCAN: SET, the session settings that force the scan
# (bitmap, index or seq: the same names and values as aiostore's
# `bitmapscan::ScanMethod::settings`), and NODE, the plan node EXPLAIN
# must show for it.
scan_settings() {
    case $1 in
        bitmap) SET="set enable_indexscan = off; set enable_seqscan = off"; NODE="Bitmap Heap Scan" ;;
        index) SET="set enable_bitmapscan = off; set enable_seqscan = off"; NODE="Index Scan using" ;;
        seq) SET="set enable_indexscan = off; set enable_bitmapscan = off"; NODE="Seq Scan" ;;
        *) echo "unknown scan $1 (bitmap, index or seq)" >&2; exit 1 ;;
    esac
}
# cold_query SCAN QUERY: runs QUERY cold (the server stopped, the page
# cache dropped, the server started) in one psql session: the scan's
# settings, a plain EXPLAIN of the query (planning only: the catalogs and
# statistics read before the clock, as aiostore's runs do) whose plan must
# name the scan's node, and the query timed by psql's \timing. Sets RESULT
# (the query's last row, unaligned) and MS.
cold_query() {
    scan_settings "$1"
    stop
    sync; echo 3 > /proc/sys/vm/drop_caches
    start
    OUT=$(as_pg "$PSQL -c '$SET' -c 'explain $2' -c '\\timing on' -c '$2'")
    if ! echo "$OUT" | grep -q "$NODE"; then
        echo "$1 scan asked for, but PostgreSQL's plan is: $OUT" >&2
        exit 1
    fi
    RESULT=$(echo "$OUT" | grep -v "^Time:" | tail -1)
    MS=$(echo "$OUT" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -1)
}
