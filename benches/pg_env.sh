# Shared by benches/pg_*.sh (sourced, as root): PostgreSQL from Debian's
# package in DIR (created with initdb on first use: shared_buffers=128MB
# as aiostore's default, no parallel workers since aiostore scans with one
# session, its own port and socket directory), and helpers.
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
PORT=54329
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
