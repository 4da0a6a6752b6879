#!/usr/bin/env bash
# Stop engines started by the serve-*.sh scripts. Each runs in its own process
# group whose id is the PID in its pidfile: this sends SIGTERM to that group
# (the server and all its worker processes, nothing else), waits, then SIGKILLs
# whatever is left, and removes the pidfile. Safe to call twice or on a
# missing pidfile.
#
# Usage: scripts/engines/stop-engine.sh PIDFILE...
# Env:   STOP_TIMEOUT  seconds to wait after SIGTERM before SIGKILL (default 30)
set -euo pipefail

[ $# -gt 0 ] || { echo "usage: $0 PIDFILE..." >&2; exit 2; }

group_alive() {
  kill -0 -- "-$1" 2>/dev/null
}

for pidfile in "$@"; do
  if [ ! -f "$pidfile" ]; then
    echo "stop-engine: no pidfile $pidfile (not running)" >&2
    continue
  fi
  pgid=$(cat "$pidfile")
  case $pgid in '' | *[!0-9]* | 0 | 1)
    echo "stop-engine: bad pid '$pgid' in $pidfile" >&2
    rm -f "$pidfile"
    continue ;;
  esac
  if group_alive "$pgid"; then
    kill -TERM -- "-$pgid" 2>/dev/null || true
    deadline=$(($(date +%s) + ${STOP_TIMEOUT:-30}))
    while group_alive "$pgid" && [ "$(date +%s)" -lt "$deadline" ]; do
      sleep 0.2
    done
    if group_alive "$pgid"; then
      echo "stop-engine: process group $pgid still alive after SIGTERM; sending SIGKILL" >&2
      kill -KILL -- "-$pgid" 2>/dev/null || true
      sleep 0.5
    fi
    echo "stop-engine: stopped process group $pgid ($pidfile)" >&2
  fi
  rm -f "$pidfile"
done
