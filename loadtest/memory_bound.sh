#!/usr/bin/env bash
# The memory store's bound (store.memory.max_keys) under a flood of distinct clients: wrk
# sends every request with an X-Forwarded-For address from a pool of CLIENTS (default
# 2,000,000, loadtest/clients.lua) through a trusted peer, against a per-client token bucket
# on the memory store. Prints the keys held, the evictions counted and sluice's resident
# memory before and after (README "store.type: memory" quotes a run).
#   loadtest/memory_bound.sh                   50 s, the default bound (400,000)
#   MAX_KEYS=300000 CLIENTS=1000000 DURATION=25s loadtest/memory_bound.sh
# Needs nginx and wrk (loadtest/run.sh installs them). Env: SLUICE (default build/sluice),
# WORKERS (2), CONNS (32).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
SLUICE=${SLUICE:-$REPO/build/sluice}
WORKERS=${WORKERS:-2} CONNS=${CONNS:-32} DURATION=${DURATION:-50s}
CLIENTS=${CLIENTS:-2000000} MAX_KEYS=${MAX_KEYS:-400000}
say() { printf 'memory_bound: %s\n' "$*" >&2; }
command -v wrk >/dev/null && command -v nginx >/dev/null || { say "nginx and wrk are needed (loadtest/run.sh installs them)"; exit 1; }
[ -x "$SLUICE" ] || { say "no sluice binary at $SLUICE (make build)"; exit 1; }

W=$(mktemp -d /tmp/sluice-memory-bound-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { local i; for i in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
UP=$(port); PROXY=$(port); ADMIN=$(port)
while [ "$PROXY" = "$UP" ]; do PROXY=$(port); done
while [ "$ADMIN" = "$UP" ] || [ "$ADMIN" = "$PROXY" ]; do ADMIN=$(port); done

mkdir -p "$W/tmp"
user_line=""; [ "$(id -u)" -eq 0 ] && user_line="user root;"
cat >"$W/nginx.conf" <<CONF
$user_line
daemon off; worker_processes 1; pid $W/nginx.pid; error_log $W/error.log warn;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  client_body_temp_path $W/tmp/b; proxy_temp_path $W/tmp/p; fastcgi_temp_path $W/tmp/f; uwsgi_temp_path $W/tmp/u; scgi_temp_path $W/tmp/s;
  server { listen 127.0.0.1:$UP; location / { return 200 "ok\n"; } } }
CONF
cat >"$W/sluice.yaml" <<CONF
server: {listen: ["127.0.0.1:$PROXY"], workers: $WORKERS, idle_timeout: 300s}
admin: {listen: "127.0.0.1:$ADMIN"}
client_ip: {trusted_proxies: ["127.0.0.1/32"]}
store: {type: memory, memory: {max_keys: $MAX_KEYS}}
upstreams: {app: {servers: ["127.0.0.1:$UP"]}}
routes:
  - name: api
    match: {path_prefix: /}
    upstream: app
    limits: [{name: per_client, algorithm: token_bucket, rate: 1, per: 1m, burst: 1000000, key: [client_ip]}]
logging: {level: warn, access_log: "off", summary_interval: 0}
CONF
nginx -c "$W/nginx.conf" -p "$W" & PIDS+=($!)
"$SLUICE" --config "$W/sluice.yaml" >"$W/sluice.log" 2>&1 & SLUICE_PID=$!; PIDS+=($SLUICE_PID)
wait_port "$UP" && wait_port "$PROXY" && wait_port "$ADMIN" || { say "nginx or sluice did not start"; cat "$W/sluice.log" >&2; exit 1; }
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$SLUICE_PID/status"; }
metric() { curl -s "http://127.0.0.1:$ADMIN/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

before=$(rss)
say "$CLIENTS clients for $DURATION, bound $MAX_KEYS keys"
CLIENTS=$CLIENTS wrk -t2 -c"$CONNS" -d"$DURATION" -s "$HERE/clients.lua" "http://127.0.0.1:$PROXY/" >"$W/wrk.out" 2>&1
requests=$(awk '/requests in/ { print $1 }' "$W/wrk.out")
rps=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$W/wrk.out")
keys=$(metric sluice_memory_store_keys); evicted=$(metric sluice_memory_store_evictions_total)
printf 'requests %s (%s/s), keys held %s of %s, evictions %s, resident memory %s KB -> %s KB\n' \
  "$requests" "$rps" "$keys" "$MAX_KEYS" "$evicted" "$before" "$(rss)"
[ "$keys" -le $(( MAX_KEYS + 64 )) ] || { say "the store holds more keys than its bound"; exit 1; }
