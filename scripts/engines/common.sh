# shellcheck shell=bash
# Shared helpers for scripts/engines/*.sh. Source it, don't run it:
#   . "$(dirname "${BASH_SOURCE[0]}")/common.sh"
#
# Sets ENGINES_DIR (cache of venvs, models, builds, logs, pidfiles) from
# SERVEBENCH_ENGINES_DIR, default ~/.cache/servebench-engines, and creates it.

ENGINES_DIR=${SERVEBENCH_ENGINES_DIR:-${ENGINES_DIR:-$HOME/.cache/servebench-engines}}
export ENGINES_DIR
mkdir -p "$ENGINES_DIR"

# The Python used to create venvs (CI: Python 3.11).
SB_PYTHON=${PYTHON:-python3}
export SB_PYTHON

# log MESSAGE...: timestamped line on stderr, prefixed with the script name.
log() {
  printf '[%s %s] %s\n' "$(date +%H:%M:%S)" "$(basename "$0")" "$*" >&2
}

die() {
  log "error: $*"
  exit 1
}

# now_s: seconds since the epoch with fractions (for startup timings).
now_s() {
  date +%s.%N
}

# elapsed_s START: seconds since START (from now_s), one decimal.
elapsed_s() {
  awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }'
}

# as_root CMD...: run CMD as root (directly, or through sudo when available).
as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo -n "$@"
  else
    die "need root (or sudo) to run: $*"
  fi
}

# apt_install PKG...: install Debian packages, running apt-get update once if needed.
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get install -y -q --no-install-recommends "$@" \
    || { as_root apt-get update -q && as_root apt-get install -y -q --no-install-recommends "$@"; }
}

# port_in_use PORT: true if something accepts TCP connections on 127.0.0.1:PORT.
port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port [START]: print the first free TCP port on 127.0.0.1 from START (default 18000).
free_port() {
  local p=${1:-18000}
  while port_in_use "$p"; do
    p=$((p + 1))
  done
  echo "$p"
}

# wait_ready URL PID LOG TIMEOUT_S: poll URL until it answers 2xx. Fails (tailing LOG)
# if PID exits first or TIMEOUT_S passes.
wait_ready() {
  local url=$1 pid=$2 logf=$3 timeout=$4 deadline
  deadline=$(($(date +%s) + timeout))
  until curl -sf -o /dev/null --max-time 2 "$url"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "process $pid exited before $url answered; last lines of $logf:"
      tail -n 40 "$logf" >&2 || true
      return 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "$url did not answer within ${timeout}s; last lines of $logf:"
      tail -n 40 "$logf" >&2 || true
      return 1
    fi
    sleep 0.5
  done
}

# make_venv DIR: create a venv with $SB_PYTHON. Debian's system Python needs the
# python3.X-venv package for that; install it if venv creation fails.
make_venv() {
  local dir=$1 pyver
  if "$SB_PYTHON" -m venv "$dir" 2>/dev/null; then
    return 0
  fi
  rm -rf "$dir"
  pyver=$("$SB_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  log "'$SB_PYTHON -m venv' failed; installing python$pyver-venv"
  apt_install "python$pyver-venv" || apt_install python3-venv
  "$SB_PYTHON" -m venv "$dir"
}
