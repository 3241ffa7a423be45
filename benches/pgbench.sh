#!/usr/bin/env bash
# pgbench against `aiostore serve` and PostgreSQL (Debian's package), the
# same workloads side by side: `pgbench -i -s SCALE` (load time), then the
# select-only (-S) and TPC-B-like scripts at each client count, -M
# prepared, SECONDS each, warm; and select-only once more per client count
# cold (both servers restarted and the page cache dropped before each
# run). Runs of the two systems alternate cell by cell, so the disk's and
# the machine's swings land on both. Both with shared_buffers=128MB, fsync
# and synchronous_commit on, buffered I/O; connections through each
# server's Unix socket in /tmp. Prints one line per run (tps, failed
# transactions, latency average and percentiles from pgbench's per-
# transaction log) and the ratios aiostore / PostgreSQL.
#
# Usage (as root, after `cargo build --profile production`: the release
# build without this crate's debug_assert!s, as PostgreSQL's package is
# built without its assertions; AIOSTORE=path runs another binary):
#   benches/pgbench.sh [--scale 50] [--seconds 60] [--clients "1 8 32"]
#                      [--io-method worker] [--quick] [--loads 1] [--load-only]
#                      [--rounds 1]
# --quick: scale 5, 10 s runs, for a look in two minutes.
# --loads N: `pgbench -i` N times per system, alternating (each drops and
# makes the tables again); --load-only: stop after the loads.
# --rounds N: each cell N times, the two systems alternating and taking
# turns at going first; the ratio is of the two medians. On a machine
# whose speed swings by ±15 % from one run to the next, one pair of runs
# per cell says less than its digits.
# Directories: /var/tmp/pgbench-pg and /var/tmp/pgbench-aio (made anew
# unless KEEP=1 and they hold tables of the same scale).
set -euo pipefail
cd "$(dirname "$0")/.."

SCALE=50
SECONDS_PER_RUN=60
CLIENTS="1 8 32"
IO_METHOD=""
LOADS=1
LOAD_ONLY=0
ROUNDS=1
while [ $# -gt 0 ]; do
    case $1 in
        --scale) SCALE=$2; shift 2 ;;
        --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
        --clients) CLIENTS=$2; shift 2 ;;
        --io-method) IO_METHOD=$2; shift 2 ;;
        --quick) SCALE=5; SECONDS_PER_RUN=10; shift ;;
        --loads) LOADS=$2; shift 2 ;;
        --load-only) LOAD_ONLY=1; shift ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        *) echo "unknown argument $1 (see the comment at the top of $0)" >&2; exit 2 ;;
    esac
done
if [ "$(id -u)" != 0 ]; then
    echo "run as root: PostgreSQL runs as user postgres and the page cache is dropped" >&2
    exit 2
fi
AIOSTORE=${AIOSTORE:-target/production/aiostore}
[ -x "$AIOSTORE" ] || { echo "$AIOSTORE is not built: cargo build --profile production" >&2; exit 2; }
AIOSTORE=$(realpath "$AIOSTORE")

DIR=/var/tmp/pgbench-pg
PG_BENCH_PORT=${PG_BENCH_PORT:-54329}
OPTS="-c fsync=on -c synchronous_commit=on -c max_connections=100"
# shellcheck source=benches/pg_env.sh
. benches/pg_env.sh
PGBENCH="$BIN/pgbench"

AIO_DIR=/var/tmp/pgbench-aio
AIO_PORT=${AIO_PORT:-54331}
AIO_LOG=$AIO_DIR.log
aio_start() {
    local method=()
    [ -n "$IO_METHOD" ] && method=(-c "io_method=$IO_METHOD")
    "$AIOSTORE" --data-dir "$AIO_DIR" -c port=$AIO_PORT -c unix_socket_directories=/tmp \
        -c shared_buffers=128MB -c synchronous_commit=on -c max_connections=100 \
        "${method[@]}" serve >>"$AIO_LOG" 2>&1 &
    AIO_PID=$!
    for _ in $(seq 1 300); do
        [ -S /tmp/.s.PGSQL.$AIO_PORT ] && return 0
        kill -0 $AIO_PID 2>/dev/null || { echo "aiostore serve stopped; see $AIO_LOG" >&2; exit 1; }
        sleep 0.1
    done
    echo "aiostore serve never listened; see $AIO_LOG" >&2
    exit 1
}
aio_stop() {
    kill -TERM $AIO_PID 2>/dev/null || true
    wait $AIO_PID 2>/dev/null || true
}
trap 'aio_stop; stop 2>/dev/null || true' EXIT

# bench SYSTEM ARGS…: pgbench against SYSTEM (aio or pg).
bench() {
    local system=$1
    shift
    case $system in
        aio) "$PGBENCH" -h /tmp -p $AIO_PORT "$@" postgres ;;
        pg) as_pg "$PGBENCH -h /tmp -p $PORT $* postgres" ;;
    esac
}

restart_cold() {
    aio_stop
    stop
    sync
    echo 3 > /proc/sys/vm/drop_caches
    start
    aio_start
}

echo "# pgbench.sh: scale $SCALE, $SECONDS_PER_RUN s per run, $ROUNDS round(s) per cell, clients: $CLIENTS; $(nproc) cores"
echo "# both: shared_buffers=128MB, fsync=on, synchronous_commit=on, buffered I/O, Unix socket, -M prepared"
echo "# PostgreSQL: $($BIN/postgres --version)"

rm -rf "$AIO_DIR" "$AIO_LOG"
"$AIOSTORE" --data-dir "$AIO_DIR" init >/dev/null
start
aio_start
echo "# aiostore: $("$AIOSTORE" --version) ($AIOSTORE), io_method=$("$BIN/psql" -h /tmp -p $AIO_PORT -At -c 'SHOW io_method' postgres)"

# Load: pgbench -i, timed by pgbench itself (the last load's times are
# the ones the ratio takes).
printf "%-9s %-14s %8s\n" system step seconds
for _ in $(seq 1 "$LOADS"); do
    for system in aio pg; do
        out=$(bench $system -i -s "$SCALE" -q 2>&1)
        secs=$(echo "$out" | sed -n 's/^done in \([0-9.]*\) s.*/\1/p')
        [ -n "$secs" ] || { echo "pgbench -i failed on $system: $out" >&2; exit 1; }
        printf "%-9s %-14s %8s   %s\n" $system "init -s $SCALE" "$secs" "$(echo "$out" | sed -n 's/^done in [0-9.]* s (\(.*\))\./\1/p')"
        eval "load_$system=$secs"
    done
done
echo "load ratio (PostgreSQL / aiostore time): $(echo "scale=2; $load_pg / $load_aio" | bc)"
[ "$LOAD_ONLY" = 1 ] && exit 0

LOGDIR=$(mktemp -d /tmp/pgbench-logs.XXXXXX)
chmod 777 "$LOGDIR"
# run SYSTEM LABEL CLIENTS ARGS…: one timed run; prints its line and
# sets TPS.
run() {
    local system=$1 label=$2 clients=$3
    shift 3
    local jobs=$(( clients < 2 ? 1 : 2 ))
    rm -f "$LOGDIR"/pgbench_log.*
    local out
    out=$(cd "$LOGDIR" && bench $system -n -M prepared -c "$clients" -j $jobs -T "$SECONDS_PER_RUN" \
        -l --log-prefix="$LOGDIR/pgbench_log" --sampling-rate=0.1 "$@" 2>&1) || {
        echo "pgbench failed on $system: $out" >&2; exit 1; }
    TPS=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
    local failed avg pcts
    failed=$(echo "$out" | sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p')
    avg=$(echo "$out" | sed -n 's/^latency average = \([0-9.]*\) ms/\1/p')
    # Column 3 of the per-transaction log: the latency in microseconds.
    pcts=$(cat "$LOGDIR"/pgbench_log.* | awk '{print $3}' | sort -n | awk '
        { v[NR] = $1 }
        END { if (NR == 0) { print "- - -"; exit }
              printf "%.3f %.3f %.3f", v[int(NR*0.50)+1]/1000, v[int(NR*0.95)+1]/1000, v[int(NR*0.99)+1]/1000 }')
    printf "%-9s %-22s %7s %10.0f %7s %8s %s\n" $system "$label" $clients "$TPS" "${failed:-?}" "$avg" "$pcts"
}

# median N…: the middle value (the mean of the two middle ones).
median() {
    printf "%s\n" "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2 }'
}

# cell LABEL CLIENTS COLD ARGS…: ROUNDS runs of each system, alternating
# and taking turns at going first (each restarted cold first if COLD is
# 1); sets ratio[LABEL CLIENTS] to the ratio of the median rates.
cell() {
    local label=$1 c=$2 cold=$3
    shift 3
    local aio=() pg=() order system
    for round in $(seq 1 "$ROUNDS"); do
        order="aio pg"
        [ $((round % 2)) = 0 ] && order="pg aio"
        for system in $order; do
            [ "$cold" = 1 ] && restart_cold
            run $system "$label" "$c" "$@"
            if [ $system = aio ]; then aio+=("$TPS"); else pg+=("$TPS"); fi
        done
    done
    ratio["$label $c"]=$(echo "scale=2; $(median "${aio[@]}") / $(median "${pg[@]}")" | bc)
}

printf "\n%-9s %-22s %7s %10s %7s %8s %s\n" system workload clients tps failed avg_ms "p50_ms p95_ms p99_ms"
declare -A ratio
for workload in select-only tpcb; do
    for c in $CLIENTS; do
        args=()
        [ $workload = select-only ] && args=(-S)
        cell "$workload warm" "$c" 0 "${args[@]}"
    done
done
for c in $CLIENTS; do
    cell "select-only cold" "$c" 1 -S
done

echo
echo "ratios, aiostore tps / PostgreSQL tps, medians of $ROUNDS round(s) (targets: select-only >= 1.0 at every count; TPC-B-like >= 1.0 at 8 and 32):"
for key in "${!ratio[@]}"; do
    echo "  $key clients: ${ratio[$key]}"
done | sort
rm -rf "$LOGDIR"
