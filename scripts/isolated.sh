#!/usr/bin/env bash
# Run a command in network and PID namespaces of its own (unshare(1) from util-linux; needs root):
#
#   network  the loopback is the only interface there, so whatever the command's processes listen on,
#            127.0.0.1 or the wildcard address, is reachable from inside the namespace only: not from
#            another machine, nor from this machine's other processes. FalkorDB's Bolt listener binds the
#            wildcard address and has no option to bind another; this is what keeps it on loopback
#            (tests/services.py refuses to start FalkorDB outside such a namespace). Ports cannot clash
#            with a daemon or another test run on the same machine either.
#   PID      the bash that runs the command is PID 1 of the namespace; when it exits, the kernel kills
#            every process still in the namespace, so no server outlives the run whatever happened
#            (pytest stops its servers itself; this covers a pytest that was killed). --kill-child does
#            the same when unshare itself is killed. /proc is mounted anew so that ps and mirakuru see
#            the namespace's processes.
#
# Usage: scripts/isolated.sh COMMAND [ARG...]
#   e.g. scripts/isolated.sh .venv/bin/python -m pytest -m services
# The command sees SMARTMEMORY_ISOLATED=1. Nothing inside can reach the network beyond this machine's
# loopback: install packages before.
set -euo pipefail

if [[ $# -eq 0 ]]; then
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
fi
if [[ "$(id -u)" -ne 0 ]]; then
    echo "[isolated] needs root: creating network and PID namespaces takes CAP_SYS_ADMIN (make test runs as root)" >&2
    exit 1
fi
# Not `exec "$@"`: bash stays PID 1, reaping orphans (a postmaster whose pg_ctl exited) until the command ends.
exec env SMARTMEMORY_ISOLATED=1 unshare --net --pid --mount-proc --fork --kill-child -- \
    bash -c 'ip link set dev lo up || exit 1; "$@"; exit $?' isolated "$@"
