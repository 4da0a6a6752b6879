#!/usr/bin/env bash
# servebench `registry serve` against nginx serving the same response bodies from files, on the
# same machine in the same minutes (docs/performance.md §5).
#
#   scripts/bench-registry-vs-nginx.sh [SECONDS_PER_RUN=5] [ROUNDS=2] [RECORDS=10000]
#
# 1. builds servebench and the loadgen example (dev profile: the registry crates and all
#    dependencies are at opt-level 2, see Cargo.toml), generates a registry of RECORDS records;
# 2. starts `servebench registry serve` and saves, per route, the body it answers (no
#    Accept-Encoding, as wrk sends none) into a directory that nginx serves;
# 3. per round and route, runs wrk (closed loop, 1 thread, 32 keep-alive connections, SECONDS)
#    against servebench, then at once against nginx, printing req/s, p99 and the load average;
# 4. open loop (the project's loadgen, latency from each request's scheduled send time):
#    5,000 req/s over the list and search routes with a busy loop taking the other core, against
#    servebench and then nginx.
# Needs wrk, nginx (/usr/sbin/nginx), curl, python3. Everything runs on 127.0.0.1 and is stopped
# on exit.
set -euo pipefail
secs=${1:-5}
rounds=${2:-2}
records=${3:-10000}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
# nginx's workers (user nobody when started as root) must read the bodies.
chmod 755 "$work"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
cd "$root"
cargo build -q -p servebench -p servebench-registry-server --example loadgen
bin=$root/target/debug/servebench
loadgen=$root/target/debug/examples/loadgen
"$loadgen" --generate "$work/reg" --records "$records" >/dev/null
sb_port=18787
ng_port=18788
"$bin" registry serve "$work/reg" --port $sb_port 2>"$work/serve.log" &
pids+=($!)
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$sb_port/api/v1" && break; sleep 0.1; done
sb=http://127.0.0.1:$sb_port
sweep=$(curl -sf "$sb/api/v1/speed-sweeps?limit=1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
recipe=$(curl -sf "$sb/api/v1/recipes?limit=1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["recipe"]["id"])')
# name file path
routes=(
    "home home.html /"
    "search search.json /api/v1/recipes?q=sglang%20validated&sort_by=model"
    "sheet sheet.html /speed-sweeps/$sweep"
    "list list.json /api/v1/recipes?status=validated&engine=vllm"
    "detail detail.json /api/v1/recipes/$recipe"
    "index index.json /api/v1/index"
)
mkdir -p "$work/www" "$work/nginx"
for r in "${routes[@]}"; do
    read -r name file path <<<"$r"
    curl -sf -o "$work/www/$file" "$sb$path"
done
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes auto;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
    types { text/html html; application/json json; }
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    client_body_temp_path $work/nginx;
    proxy_temp_path $work/nginx;
    fastcgi_temp_path $work/nginx;
    uwsgi_temp_path $work/nginx;
    scgi_temp_path $work/nginx;
    server { listen 127.0.0.1:$ng_port; root $work/www; }
}
CONF
/usr/sbin/nginx -c "$work/nginx/nginx.conf" -g 'daemon off;' &
pids+=($!)
for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$ng_port/index.json" && break; sleep 0.1; done
curl -sf -o /dev/null "http://127.0.0.1:$ng_port/index.json" ||
    { echo "nginx does not answer: $(tail -3 "$work/nginx/error.log")" >&2; exit 1; }
for r in "${routes[@]}"; do
    read -r name file path <<<"$r"
    curl -sf -o "$work/sb.body" "$sb$path"
    curl -sf -o "$work/ng.body" "http://127.0.0.1:$ng_port/$file"
    cmp "$work/sb.body" "$work/ng.body" >&2 ||
        { echo "bodies differ for $name ($(stat -c %s "$work/sb.body") vs $(stat -c %s "$work/ng.body") bytes)" >&2; exit 1; }
    echo "body $name: $(stat -c %s "$work/www/$file") bytes"
done
run_wrk() { # url -> "req/s p99"
    wrk -t1 -c32 -d"${secs}s" --latency "$1" 2>/dev/null |
        awk '/Requests\/sec:/ {rps=$2} / 99%/ {p99=$2} END {print rps, p99}'
}
echo "closed loop: wrk -t1 -c32 -d${secs}s, rounds $rounds, machine $(nproc) cores"
printf '%-7s %5s %12s %12s %7s %10s %10s  %s\n' route round sb_req/s nginx_req/s ratio sb_p99 nginx_p99 loadavg
for round in $(seq "$rounds"); do
    for r in "${routes[@]}"; do
        read -r name file path <<<"$r"
        read -r s_rps s_p99 <<<"$(run_wrk "$sb$path")"
        read -r n_rps n_p99 <<<"$(run_wrk "http://127.0.0.1:$ng_port/$file")"
        ratio=$(python3 -c "print(f'{$s_rps/$n_rps:.2f}')")
        printf '%-7s %5s %12s %12s %7s %10s %10s  %s\n' "$name" "$round" "$s_rps" "$n_rps" "$ratio" "$s_p99" "$n_p99" "$(cut -d' ' -f1-3 /proc/loadavg)"
    done
done
echo "open loop: 5,000 req/s, 5 s, 32 connections, list + search alternating, a busy loop on the other core"
sh -c 'while :; do :; done' &
busy=$!
pids+=($busy)
echo "-- servebench"
"$loadgen" --target 127.0.0.1:$sb_port --rate 5000 --seconds 5 \
    --path "/api/v1/recipes?status=validated&engine=vllm" \
    --path "/api/v1/recipes?q=sglang%20validated&sort_by=model" | grep -E "achieved|latency|loadavg"
echo "-- nginx (same bodies)"
"$loadgen" --target 127.0.0.1:$ng_port --rate 5000 --seconds 5 \
    --path /list.json --path /search.json | grep -E "achieved|latency|loadavg"
kill $busy
grep -ciE "warn|error" "$work/serve.log" | sed 's/^/server log warnings: /'
