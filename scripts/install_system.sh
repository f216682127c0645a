#!/usr/bin/env bash
# Install the Debian packages the test suite needs, and only those that are missing.
#
# Idempotent: a second run installs nothing and does not touch the network. `apt-get update` runs only
# when at least one package is missing. Package maintainer scripts are kept from starting the system
# daemons (redis-server on 6379, the postgresql "main" cluster on 5432): the tests start their own servers
# (tests/services.py, scripts/with_postgres.sh), so a system daemon would only be a stray process.
#
# Usage: scripts/install_system.sh   (as root, or with sudo available)
set -euo pipefail

log() { printf '[install_system] %s\n' "$*"; }
die() { printf '[install_system] ERROR: %s\n' "$*" >&2; exit 1; }

# Packages, each with a file it must provide; both are checked so that a package removed by hand
# but with its binary still lying around (or the reverse) is noticed.
#   redis-server        apt redis 7, which pytest starts for the tests that need it (tests/services.py)
#   postgresql-15       server binaries (initdb, pg_ctl, postgres) under /usr/lib/postgresql/15/bin
#   postgresql-client-15  psql
#   postgresql-common   pg_virtualenv, the throw-away cluster of scripts/with_postgres.sh
#   chromium            headless browser driven by Playwright via executable_path=/usr/bin/chromium
#   chromium-driver     chromedriver, for anything that prefers WebDriver
#   fonts-dejavu-core   a real font so that screenshots render text instead of boxes
#   util-linux          unshare, for the namespaces of scripts/isolated.sh (essential, normally present)
#   iproute2            ip, to bring up the loopback in that network namespace
#   procps              ps/pgrep, for inspecting what a test run started
PACKAGES=(
    "redis-server:/usr/bin/redis-server"
    "postgresql-15:/usr/lib/postgresql/15/bin/pg_ctl"
    "postgresql-client-15:/usr/lib/postgresql/15/bin/psql"
    "postgresql-common:/usr/bin/pg_virtualenv"
    "chromium:/usr/bin/chromium"
    "chromium-driver:/usr/bin/chromedriver"
    "fonts-dejavu-core:/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    "util-linux:/usr/bin/unshare"
    "iproute2:/sbin/ip"
    "procps:/usr/bin/ps"
)

SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "not root and sudo is not available"
    SUDO=(sudo)
fi

is_installed() {
    # dpkg's own record is authoritative; "install ok installed" excludes half-configured packages.
    local pkg="$1" file="$2" status
    status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
    [[ "$status" == "install ok installed" && -e "$file" ]]
}

missing=()
for entry in "${PACKAGES[@]}"; do
    pkg="${entry%%:*}"
    file="${entry#*:}"
    if is_installed "$pkg" "$file"; then
        log "ok       $pkg ($file)"
    else
        log "missing  $pkg"
        missing+=("$pkg")
    fi
done

# Keep maintainer scripts from starting daemons while we install. Debian's invoke-rc.d and
# deb-systemd-invoke both consult /usr/sbin/policy-rc.d; exit code 101 means "action forbidden".
# Only a policy we created ourselves is removed afterwards.
POLICY=/usr/sbin/policy-rc.d
created_policy=0
remove_policy() {
    if [[ "$created_policy" -eq 1 ]]; then
        "${SUDO[@]}" rm -f "$POLICY"
        log "removed temporary $POLICY"
    fi
}
trap remove_policy EXIT

if [[ "${#missing[@]}" -gt 0 ]]; then
    if [[ ! -e "$POLICY" ]]; then
        printf '#!/bin/sh\n# temporary, written by scripts/install_system.sh\nexit 101\n' \
            | "${SUDO[@]}" tee "$POLICY" >/dev/null
        "${SUDO[@]}" chmod 0755 "$POLICY"
        created_policy=1
        log "wrote temporary $POLICY so package installs start no daemons"
    fi
    log "apt-get update"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    log "apt-get install ${missing[*]}"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    log "all system packages already installed; nothing to do"
fi

# If a system daemon got started anyway (a policy-rc.d that allows it, or systemd presets), stop it and
# keep it from coming back at boot. Our own services never use these ports.
stop_system_service() {
    local name="$1" pidfile="$2" pid
    if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
        if systemctl is-active --quiet "$name" 2>/dev/null || systemctl is-enabled --quiet "$name" 2>/dev/null; then
            log "disabling and stopping system service $name (systemd)"
            "${SUDO[@]}" systemctl disable --now "$name" >/dev/null 2>&1 || true
        fi
        return 0
    fi
    if [[ -f "$pidfile" ]]; then
        pid="$(head -n 1 "$pidfile" 2>/dev/null || true)"
        if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
            log "stopping system service $name (pid $pid from $pidfile)"
            if [[ -x "/etc/init.d/$name" ]]; then
                "${SUDO[@]}" "/etc/init.d/$name" stop >/dev/null 2>&1 || "${SUDO[@]}" kill "$pid" || true
            else
                "${SUDO[@]}" kill "$pid" || true
            fi
        fi
    fi
}
# Only for packages installed by this run: a daemon someone set up earlier on a developer machine is
# theirs, and cannot clash with the test servers, which run in a network namespace of their own.
for pkg in "${missing[@]}"; do
    case "$pkg" in
        redis-server) stop_system_service redis-server /run/redis/redis-server.pid ;;
        postgresql-15) stop_system_service postgresql /var/run/postgresql/15-main.pid ;;
    esac
done

log "chromium: $(/usr/bin/chromium --version 2>/dev/null || echo 'version unknown')"
log "redis-server: $(/usr/bin/redis-server --version 2>/dev/null | awk '{print $3}')"
log "postgres: $(/usr/lib/postgresql/15/bin/postgres --version 2>/dev/null || echo 'version unknown')"
log "done"
