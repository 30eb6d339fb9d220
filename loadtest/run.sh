#!/usr/bin/env bash
# sluice load test: sluice against nginx as a plain reverse proxy, same upstream, same machine.
#
#   loadtest/run.sh                 full run (every scenario at 64 and 1000 connections)
#   QUICK=1 loadtest/run.sh         smoke run (3 s per measurement, one round, fewer scenarios)
#
# Starts, on free 127.0.0.1 ports: redis-server (no persistence), an nginx "upstream" that
# answers every request with 200 "ok\n", nginx as a plain reverse proxy to it (the reference)
# and sluice (a generated config per scenario). For each scenario it runs wrk against nginx,
# then sluice, ROUNDS times (A B A B: machine noise hits both), and prints one table row.
# Writes loadtest/results/report.md, results/plot.png and the raw figures next to them.
# Everything it starts is stopped on exit, Ctrl-C included. See loadtest/README.md.
#
# Settings (environment):
#   DURATION=10s  ROUNDS=2  WARMUP=1s  THREADS=2 (wrk)  WORKERS=2 (sluice and the nginx proxy)
#   CONNS="64 1000"  SCENARIOS="none@64 token_bucket@1000 ... idle10k"  IDLE_CONNS=10000
#   UPSTREAM_WORKERS=1  SLUICE=build/sluice  RESULTS=loadtest/results  KEEP=1 (keep the work dir)
#   SHARED_BATCHES=1 (store.redis.shared_batches: true in every Redis scenario)
#   PACE_MS=2 (paced scenarios: each connection's pause between a response and its next request)
#   CPUS_LOAD= CPUS_PROXY= CPUS_UPSTREAM= CPUS_REDIS=  (taskset CPU lists, e.g. CPUS_LOAD=0-3
#     CPUS_PROXY=4-7 CPUS_UPSTREAM=8-11 CPUS_REDIS=12: each role on cores of its own; unset: anywhere)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=loadtest/browser_headers.sh
. "$HERE/browser_headers.sh"

ALL_SCENARIOS="none logged browser paced token_bucket token_bucket_browser token_bucket_memory token_bucket_paced sliding_window concurrency concurrency_clients reject90 reject100 clients100k clients100k_full clients100k_memory clients100k_limit_req"
if [ "${QUICK:-0}" = 1 ]; then
  DURATION=${DURATION:-3s}
  ROUNDS=${ROUNDS:-1}
  WARMUP=${WARMUP:-1s}
  SCENARIOS=${SCENARIOS:-"none@64 logged@64 browser@64 token_bucket@64 token_bucket_browser@64 token_bucket_memory@64 sliding_window@64 reject90@64 reject100@64 clients100k@64 clients100k_memory@64 clients100k_limit_req@64 none@1000 token_bucket@1000 idle10k"}
fi
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-2}
WARMUP=${WARMUP:-1s}
THREADS=${THREADS:-2}
WORKERS=${WORKERS:-2}
UPSTREAM_WORKERS=${UPSTREAM_WORKERS:-1}
CONNS=${CONNS:-"64 1000"}
IDLE_CONNS=${IDLE_CONNS:-10000}
SLUICE=${SLUICE:-$ROOT/build/sluice}
RESULTS=${RESULTS:-$HERE/results}
if [ -z "${SCENARIOS:-}" ]; then
  SCENARIOS=""
  for s in $ALL_SCENARIOS; do for c in $CONNS; do SCENARIOS+="$s@$c "; done; done
  SCENARIOS+="idle10k"
fi

say() { printf '%s\n' "loadtest: $*" >&2; }

# pin ROLE: the taskset prefix that keeps a role (load, proxy, upstream, redis) on its cores
pin() {
  local cpus=""
  case "$1" in
    load) cpus=${CPUS_LOAD:-} ;; proxy) cpus=${CPUS_PROXY:-} ;;
    upstream) cpus=${CPUS_UPSTREAM:-} ;; redis) cpus=${CPUS_REDIS:-} ;;
  esac
  [ -n "$cpus" ] && printf 'taskset -c %s' "$cpus"
}
die() { say "error: $*"; exit 1; }

# ---------------------------------------------------------------------------------------------
# Tools: install what is missing (Debian packages), build sluice if there is no binary.

NGINX=""
find_nginx() { NGINX=$(command -v nginx || true); [ -z "$NGINX" ] && [ -x /usr/sbin/nginx ] && NGINX=/usr/sbin/nginx; [ -n "$NGINX" ]; }

APT_UPDATED=0
apt_install() {  # apt_install PACKAGE...: the first one apt knows is installed
  local sudo="" pkg
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  for pkg in "$@"; do
    if [ "$APT_UPDATED" = 0 ] && ! apt-cache policy "$pkg" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
      say "apt-get update (package $pkg not known yet)"
      $sudo apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null && APT_UPDATED=1
    fi
    if apt-cache policy "$pkg" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
      say "installing $pkg"
      # policy-rc.d 101: the package must not start a system-wide nginx or redis on port 80/6379
      local made_policy=0
      if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
        $sudo chmod +x /usr/sbin/policy-rc.d
        made_policy=1
      fi
      $sudo apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "$pkg" >/dev/null
      local rc=$?
      [ "$made_policy" = 1 ] && $sudo rm -f /usr/sbin/policy-rc.d
      [ $rc -eq 0 ] && return 0
    fi
  done
  return 1
}

install_tools() {
  find_nginx || apt_install nginx-light nginx || die "cannot install nginx"
  find_nginx || die "nginx installed but not found"
  command -v wrk >/dev/null || apt_install wrk || die "cannot install wrk"
  command -v gnuplot >/dev/null || apt_install gnuplot-nox gnuplot || say "no gnuplot: no plot"
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null || apt_install redis-server || die "cannot install redis-server"
  command -v curl >/dev/null || apt_install curl || die "cannot install curl"
  command -v python3 >/dev/null || apt_install python3 || die "cannot install python3"
  if [ ! -x "$SLUICE" ]; then
    say "no $SLUICE: building it (cmake, Release, -j2)"
    bash "$ROOT/scripts/deps.sh" || die "scripts/deps.sh failed"
    cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
      cmake --build "$ROOT/build" -j2 --target sluice || die "build failed"
    SLUICE=$ROOT/build/sluice
  fi
}

# ---------------------------------------------------------------------------------------------
# Processes: every one we start is recorded; cleanup stops them all (TERM, then KILL).

W=""
PIDS=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  local waited=0
  for pid in "${PIDS[@]}"; do
    while kill -0 "$pid" 2>/dev/null && [ $waited -lt 50 ]; do sleep 0.1; waited=$((waited + 1)); done
    kill -KILL "$pid" 2>/dev/null
  done
  wait 2>/dev/null
  if [ -n "$W" ] && [ -d "$W" ]; then
    if [ "${KEEP:-0}" = 1 ]; then say "work dir kept: $W"; else rm -rf "$W"; fi
  fi
  exit $rc
}
trap cleanup EXIT
trap 'say interrupted; exit 130' INT TERM

forget_pid() { local keep=() p; for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done; PIDS=("${keep[@]}"); }

STOP_RC=0
stop_pid() {  # stop_pid PID [SECONDS]: TERM, wait, KILL; sets STOP_RC to its exit status
  local pid=$1 limit=$(( ${2:-10} * 10 )) i=0
  kill -TERM "$pid" 2>/dev/null
  while kill -0 "$pid" 2>/dev/null && [ $i -lt $limit ]; do sleep 0.1; i=$((i + 1)); done
  if kill -0 "$pid" 2>/dev/null; then say "pid $pid did not stop on SIGTERM: SIGKILL"; kill -KILL "$pid" 2>/dev/null; fi
  wait "$pid" 2>/dev/null
  STOP_RC=$?
  forget_pid "$pid"
}

seconds() {  # seconds 10s|2m|500ms -> whole seconds, at least 1
  case "$1" in
    *ms) echo 1 ;; *s) echo "${1%s}" ;; *m) echo $(( ${1%m} * 60 )) ;; *h) echo $(( ${1%h} * 3600 )) ;; *) echo "$1" ;;
  esac
}

free_ports() {  # free_ports N: N distinct free TCP ports on 127.0.0.1
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

wait_http() {  # wait_http URL SECONDS [PID]: until URL answers 200
  local url=$1 limit=$(( $2 * 10 )) pid=${3:-} i=0
  while [ $i -lt $limit ]; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$url")" = 200 ] && return 0
    [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && return 1
    sleep 0.1; i=$((i + 1))
  done
  return 1
}

rss_kb() {  # rss_kb PID...: summed VmRSS in KB
  local total=0 pid v
  for pid in "$@"; do
    v=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
    total=$((total + ${v:-0}))
  done
  echo "$total"
}

nginx_pids() { echo "$1 $(ps -o pid= --ppid "$1" | tr '\n' ' ')"; }  # master and workers
# cpu_ticks PID...: user + system CPU time used so far, summed, in clock ticks (1/100 s)
cpu_ticks() { local pid; for pid in "$@"; do cat "/proc/$pid/stat" 2>/dev/null; done | awk '{ sub(/^.*\) /, ""); t += $12 + $13 } END { print t + 0 }'; }
# ctx_switches PID...: context switches of every thread of the processes so far (voluntary and
# involuntary), summed
ctx_switches() {
  local pid; for pid in "$@"; do cat /proc/"$pid"/task/*/status 2>/dev/null; done |
    awk '/^(voluntary|nonvoluntary)_ctxt_switches:/ { t += $2 } END { print t + 0 }'
}

# ---------------------------------------------------------------------------------------------
# Configs.

write_nginx_confs() {
  local user_line=""
  [ "$(id -u)" -eq 0 ] && user_line="user root;"
  local d
  for d in nginx-up nginx-proxy; do mkdir -p "$W/$d/tmp"; done
  local common_http="
    access_log off;
    client_body_temp_path TMP/body; proxy_temp_path TMP/proxy; fastcgi_temp_path TMP/fastcgi;
    uwsgi_temp_path TMP/uwsgi; scgi_temp_path TMP/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    default_type text/plain;"

  cat >"$W/nginx-up/nginx.conf" <<EOF
# upstream: a small fixed body for every request
$user_line
daemon off;
worker_processes $UPSTREAM_WORKERS;
worker_rlimit_nofile $NOFILE;
pid $W/nginx-up/nginx.pid;
error_log $W/nginx-up/error.log warn;
events { worker_connections 16384; }
http {${common_http//TMP/$W/nginx-up/tmp}
  server {
    listen 127.0.0.1:$UP_PORT backlog=4096;
    location = /__status { stub_status; }
    location / { return 200 "ok\n"; }
  }
}
EOF

  # the proxying both servers of the reference do
  local proxy="
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
      proxy_set_header Via \"1.1 nginx\";"

  cat >"$W/nginx-proxy/nginx.conf" <<EOF
# reference: nginx as a plain reverse proxy to the upstream, same worker count as sluice
$user_line
daemon off;
worker_processes $WORKERS;
worker_rlimit_nofile $NOFILE;
pid $W/nginx-proxy/nginx.pid;
error_log $W/nginx-proxy/error.log warn;
events { worker_connections 16384; }
http {${common_http//TMP/$W/nginx-proxy/tmp}
  upstream app {
    server 127.0.0.1:$UP_PORT;
    keepalive 64;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
  }
  server {
    listen 127.0.0.1:$NGINX_PORT backlog=4096;
    location = /__status { stub_status; }
    location / {$proxy
    }
  }
  # logged: the plain proxy writing an access log (its default, combined format) to a file, as
  # sluice does in that scenario (its default format): what logging every request costs each
  server {
    listen 127.0.0.1:$NGINX_LOG_PORT backlog=4096;
    access_log $W/nginx-access.log;
    location / {$proxy
    }
  }
  # clients100k_limit_req: the same proxy with nginx's own per-node limiter, keyed on the
  # client (the X-Forwarded-For that wrk sends), as the clients100k token bucket: 1 per
  # minute, a burst of 1000000, so nothing is refused
  limit_req_zone \$http_x_forwarded_for zone=clients:64m rate=1r/m;
  server {
    listen 127.0.0.1:$NGINX_LR_PORT backlog=4096;
    location / {
      limit_req zone=clients burst=1000000 nodelay;
      limit_req_status 429;$proxy
    }
  }
}
EOF
}

# The limits are chosen so that only reject90/reject100 ever reject anything:
#   big token bucket: rate 1000000 per 1s (one token per microsecond, the finest grain) and a
#     burst of 1000000: refills faster than any loopback client can drain it.
#   clients100k: rate 1 per 1m, burst 1000000: per client at most a few dozen requests, far
#     from the burst; each key lives (TTL) a minute per request, so the keys are still there
#     to be measured (MEMORY USAGE) after the run.
#   clients100k_full: rate 1000 per 1s, burst 1000: a client comes back every second or two,
#     its bucket full again and its key gone (a full bucket has none): what most clients of a
#     per-client limit look like to the store.
#   sliding window: limit 10000000 per 1s: nothing is rejected, and the sorted set holds one
#     member per request of the last second only (a 1m window would grow it to millions).
#   reject: rate 1 per 1h, burst 1: the first request passes, every other one gets 429.
#   concurrency: at most 100000 requests in flight across every instance (one key, a global
#     cap, as Traefik's InFlightReq or nginx's limit_conn on a shared key): never reached, but
#     each request takes a slot in Redis and gives it back when its response is sent.
#   concurrency_clients: at most 8 requests in flight per client (100,000 clients, as
#     clients100k; Traefik's InFlightReq per source address, nginx's limit_conn per address):
#     never reached; a client's set is gone once its request is given back, so most
#     requests find none.
write_sluice_conf() {  # write_sluice_conf SCENARIO FILE
  local scenario=$1 file=$2 trusted="" routes access_log=off
  # logged: the access log (default format) to a file, beside nginx's (the reference's)
  [ "$scenario" = logged ] && access_log=$W/sluice-access.log
  local store="
  type: redis
  redis:
    address: \"127.0.0.1:$REDIS_PORT\""
  # SHARED_BATCHES=1: store.redis.shared_batches (a worker's waiting batch rides with another
  # worker's call), for before/after runs of one build.
  [ "${SHARED_BATCHES:-0}" = 1 ] && store="$store
    shared_batches: true"
  # The same token bucket decided in process, without Redis: what the limiter costs sluice
  # itself, apart from the round trip and Redis's own CPU.
  case "$scenario" in *_memory|*_limit_req) store="
  type: memory" ;; esac
  case "$scenario" in
    none|logged|browser|paced|idle10k) routes="
  - name: api
    match: { path_prefix: / }
    upstream: app" ;;
    token_bucket|token_bucket_browser|token_bucket_memory|token_bucket_paced) routes="
  - name: api
    match: { path_prefix: / }
    upstream: app
    limits:
      - { name: per_client, algorithm: token_bucket, rate: 1000000, per: 1s, burst: 1000000, key: [client_ip] }" ;;
    sliding_window) routes="
  - name: api
    match: { path_prefix: / }
    upstream: app
    limits:
      - { name: per_client, algorithm: sliding_window, limit: 10000000, window: 1s, key: [client_ip] }" ;;
    concurrency) routes="
  - name: api
    match: { path_prefix: / }
    upstream: app
    limits:
      - { name: in_flight, algorithm: concurrency, limit: 100000 }" ;;
    concurrency_clients) trusted='"127.0.0.1/32"'; routes="
  - name: api
    match: { path_prefix: / }
    upstream: app
    limits:
      - { name: per_client_in_flight, algorithm: concurrency, limit: 8, key: [client_ip] }" ;;
    reject100|reject90) routes="
  - name: pass
    match: { path_prefix: /pass }
    upstream: app
    limits:
      - { name: per_client, algorithm: token_bucket, rate: 1000000, per: 1s, burst: 1000000, key: [client_ip] }
  - name: deny
    match: { path_prefix: / }
    upstream: app
    limits:
      - { name: per_client, algorithm: token_bucket, rate: 1, per: 1h, burst: 1, key: [client_ip] }" ;;
    clients100k|clients100k_memory|clients100k_limit_req) trusted='"127.0.0.1/32"'; routes="
  - name: api
    match: { path_prefix: / }
    upstream: app
    limits:
      - { name: per_client, algorithm: token_bucket, rate: 1, per: 1m, burst: 1000000, key: [client_ip] }" ;;
    clients100k_full) trusted='"127.0.0.1/32"'; routes="
  - name: api
    match: { path_prefix: / }
    upstream: app
    limits:
      - { name: per_client, algorithm: token_bucket, rate: 1000, per: 1s, burst: 1000, key: [client_ip] }" ;;
    *) die "unknown scenario $scenario" ;;
  esac
  cat >"$file" <<EOF
# generated by loadtest/run.sh for scenario $scenario
server:
  listen: ["127.0.0.1:$SLUICE_PORT"]
  workers: $WORKERS
  max_connections: $((IDLE_CONNS + 2000))
  idle_timeout: 300s
admin:
  listen: "127.0.0.1:$ADMIN_PORT"
client_ip:
  trusted_proxies: [$trusted]
store:$store
upstreams:
  app:
    servers: ["127.0.0.1:$UP_PORT"]
routes:$routes
logging:
  level: info
  access_log: "$access_log"
  summary_interval: 0
EOF
}

# ---------------------------------------------------------------------------------------------
# Measurements.

SLUICE_PID=""
start_sluice() {  # start_sluice SCENARIO
  local conf="$W/sluice-$1.yaml"
  write_sluice_conf "$1" "$conf"
  cp "$conf" "$RESULTS/configs/sluice-$1.yaml"
  "$SLUICE" --check -c "$conf" >"$W/check.out" 2>&1 || { cat "$W/check.out" >&2; die "generated config for $1 refused"; }
  SLUICE_LOG="$W/sluice-$1.log"
  $(pin proxy) "$SLUICE" -c "$conf" >>"$SLUICE_LOG" 2>&1 &
  SLUICE_PID=$!
  PIDS+=("$SLUICE_PID")
  wait_http "http://127.0.0.1:$ADMIN_PORT/readyz" 15 "$SLUICE_PID" || { tail -20 "$SLUICE_LOG" >&2; die "sluice did not get ready ($1)"; }
}

stop_sluice() {  # sets STOP_RC to sluice's exit status
  STOP_RC=0
  [ -n "$SLUICE_PID" ] || return 0
  stop_pid "$SLUICE_PID" 40
  SLUICE_PID=""
}

metrics() { curl -s --max-time 5 "http://127.0.0.1:$ADMIN_PORT/metrics"; }
# "requests 429s store_errors" from sluice's /metrics
sluice_counts() {
  metrics | awk '
    /^sluice_requests_total\{/ { r += $NF; if ($0 ~ /code="429"/) l += $NF }
    /^sluice_store_errors_total/ { e += $NF }
    END { printf "%d %d %d\n", r, l, e }'
}
# Redis's own CPU time so far (user + system, INFO cpu), in microseconds
redis_cpu_usec() { redis-cli -p "$REDIS_PORT" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.0f\n", s * 1000000 }'; }
# "calls usec" of the decide calls (FCALL, EVALSHA, EVAL) in Redis
redis_evals() { redis-cli -p "$REDIS_PORT" INFO commandstats | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_(evalsha|eval|fcall):/ { n += $3; u += $5 } END { printf "%d %d\n", n, u }'; }
# kernel counter: connections dropped because an accept queue was full (whole machine)
# kernel counter: packets dropped because a CPU's input backlog was full (net.core.netdev_max_backlog;
# on loopback a burst of connections or segments can overflow it; each drop is a retransmission
# after 200 ms, or 1 s for a SYN)
backlog_drops() { local n=0 _p d _r; while read -r _p d _r; do n=$((n + 16#$d)); done </proc/net/softnet_stat; echo "$n"; }
listen_drops() { awk '$1 == "TcpExt:" && !h { for (i = 2; i <= NF; i++) if ($i == "ListenDrops") c = i; h = 1; next }
                      $1 == "TcpExt:" && h { print $c + 0 }' /proc/net/netstat; }
# "connections_accepted requests" of the upstream nginx (stub_status). Each reading counts
# itself (one connection, one request): a difference of two readings is one too high.
upstream_counts() { curl -s --max-time 5 "http://127.0.0.1:$UP_PORT/__status" | awk 'NR == 3 { print $1, $3 }'; }

# wrk output -> "rps p50_ms p99_ms non2xx socket_errors requests"
parse_wrk() {
  awk '
    function ms(v) {
      if (v ~ /us$/) return v * 0.001; if (v ~ /ms$/) return v + 0; if (v ~ /m$/) return v * 60000;
      if (v ~ /s$/) return v * 1000; return v + 0 }
    $1 == "50%" { p50 = ms($2) }
    $1 == "99%" { p99 = ms($2) }
    /^Requests\/sec:/ { rps = $2 }
    /requests in/ { req = $1 }
    /Non-2xx or 3xx responses:/ { bad = $NF }
    /Socket errors:/ { gsub(",", ""); err = $4 + $6 + $8 + $10 }
    END { printf "%.2f %.3f %.3f %d %d %d\n", rps, p50, p99, bad, err, req }' "$1"
}

run_wrk() {  # run_wrk PORT CONNS DURATION OUTFILE SCENARIO
  local port=$1 conns=$2 dur=$3 out=$4 scenario=$5 script="" path=/ headers=()
  case "$scenario" in
    clients100k|clients100k_full|clients100k_memory|clients100k_limit_req|concurrency_clients) script="$HERE/clients.lua" ;;
    reject90) script="$HERE/reject90.lua" ;;
    paced|*_paced) script="$HERE/paced.lua" ;;
    reject100) path=/deny ;;
    *) path=/ ;;
  esac
  # browser, token_bucket_browser: the fields a browser sends (12 with Host, about 560 bytes
  # of head), where wrk sends Host alone.
  case "$scenario" in
    browser|*_browser) headers=("${BROWSER_HEADERS[@]}") ;;
  esac
  # In the background and waited for: a trapped Ctrl-C or TERM interrupts `wait` at once (it
  # would not interrupt a foreground command), and cleanup then stops wrk with the rest.
  timeout $(( $(seconds "$dur") + 30 )) $(pin load) wrk -t"$THREADS" -c"$conns" -d"$dur" --timeout 5s --latency \
    "${headers[@]}" ${script:+-s "$script"} "http://127.0.0.1:$port$path" >"$out" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait "$pid"
  forget_pid "$pid"
}

RUNS="$RESULTS/runs.tsv"
record_run() { printf '%s\n' "$*" | tr ' ' '\t' >>"$RUNS"; }

redis_key_memory() {  # after clients100k: "keys avg_memory_usage bytes_per_key_used_memory"
  local base=$1 keys sample avg used
  keys=$(redis-cli -p "$REDIS_PORT" DBSIZE)
  sample=$(redis-cli -p "$REDIS_PORT" --scan --pattern 'sluice:*' | head -n 1000)
  avg=$(printf '%s\n' "$sample" | awk 'NF { print "MEMORY USAGE " $0 " SAMPLES 0" }' |
        redis-cli -p "$REDIS_PORT" | awk '$1 ~ /^[0-9]+$/ { s += $1; n++ } END { printf "%.1f", n ? s / n : 0 }')
  used=$(redis-cli -p "$REDIS_PORT" INFO memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }')
  echo "$keys $avg $(awk -v u="$used" -v b="$base" -v k="$keys" 'BEGIN { printf "%.1f", k ? (u - b) / k : 0 }')"
}

sluice_log_problems() {  # warn/error/critical lines of sluice's log, and anything not in its log format
  awk -v tag="$1" '
    $2 ~ /^(warn|warning|error|err|critical)$/ || $0 !~ /^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T/ {
      if (n++ < 20) print tag ": sluice log: " $0 }' "$SLUICE_LOG" >>"$RESULTS/anomalies.txt"
}

run_scenario() {  # run_scenario NAME CONNS
  local name=$1 conns=$2 round
  say "scenario $name, $conns connections: ${ROUNDS} x (nginx, sluice) ${DURATION} each"
  redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
  local base_mem
  base_mem=$(redis-cli -p "$REDIS_PORT" INFO memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }')
  start_sluice "$name"
  # the reference: nginx as a plain proxy, or with limit_req (clients100k_limit_req)
  local nginx_port=$NGINX_PORT
  [ "$name" = clients100k_limit_req ] && nginx_port=$NGINX_LR_PORT
  [ "$name" = logged ] && nginx_port=$NGINX_LOG_PORT
  # warm both (connection pools, caches, the Lua script), not measured
  run_wrk "$nginx_port" "$conns" "$WARMUP" "$W/warm.out" "$name"
  run_wrk "$SLUICE_PORT" "$conns" "$WARMUP" "$W/warm.out" "$name"
  local crashed=0
  for round in $(seq 1 "$ROUNDS"); do
    sleep 1
    local out="$RESULTS/wrk/$name-$conns-nginx-$round.txt" d0 d1 a0 a1 q0 q1
    local p0 p1 k0 k1 b0 b1 x0 x1
    d0=$(listen_drops); read -r a0 q0 <<<"$(upstream_counts)"
    p0=$(cpu_ticks $(nginx_pids "$NGINX_PID")); k0=$(cpu_ticks "$REDIS_PID"); b0=$(backlog_drops)
    x0=$(ctx_switches $(nginx_pids "$NGINX_PID"))
    run_wrk "$nginx_port" "$conns" "$DURATION" "$out" "$name"
    p1=$(cpu_ticks $(nginx_pids "$NGINX_PID")); k1=$(cpu_ticks "$REDIS_PID"); b1=$(backlog_drops)
    x1=$(ctx_switches $(nginx_pids "$NGINX_PID"))
    d1=$(listen_drops); read -r a1 q1 <<<"$(upstream_counts)"
    record_run "$name" "$conns" nginx "$round" $(parse_wrk "$out") 0 0 $((q1 - q0 - 1)) 0 0 0 \
      "$(rss_kb $(nginx_pids "$NGINX_PID"))" 0 $((d1 - d0)) $((a1 - a0 - 1)) $((p1 - p0)) $((k1 - k0)) $((b1 - b0)) 0 $((x1 - x0))
    sleep 1
    if [ "$crashed" = 1 ]; then continue; fi
    out="$RESULTS/wrk/$name-$conns-sluice-$round.txt"
    local before_c before_e after_c after_e
    local u0r u1r
    before_c=$(sluice_counts); before_e=$(redis_evals); read -r a0 q0 <<<"$(upstream_counts)"; d0=$(listen_drops)
    p0=$(cpu_ticks "$SLUICE_PID"); k0=$(cpu_ticks "$REDIS_PID"); b0=$(backlog_drops); u0r=$(redis_cpu_usec)
    x0=$(ctx_switches "$SLUICE_PID")
    run_wrk "$SLUICE_PORT" "$conns" "$DURATION" "$out" "$name"
    p1=$(cpu_ticks "$SLUICE_PID"); k1=$(cpu_ticks "$REDIS_PID"); b1=$(backlog_drops); u1r=$(redis_cpu_usec)
    x1=$(ctx_switches "$SLUICE_PID")
    d1=$(listen_drops)
    if ! kill -0 "$SLUICE_PID" 2>/dev/null; then
      crashed=1
      stop_sluice
      say "SLUICE DIED during $name@$conns round $round (exit status $STOP_RC); log tail:"
      tail -20 "$SLUICE_LOG" >&2
      echo "$name@$conns round $round: sluice died, exit status $STOP_RC" >>"$RESULTS/anomalies.txt"
      record_run "$name" "$conns" sluice "$round" $(parse_wrk "$out") 0 0 0 0 0 1 0 0 $((d1 - d0)) 0 0 0 0 0 0
      continue
    fi
    sleep 0.3  # let the last answers be counted
    after_c=$(sluice_counts); after_e=$(redis_evals); read -r a1 q1 <<<"$(upstream_counts)"
    read -r r0 l0 e0 <<<"$before_c"; read -r r1 l1 e1 <<<"$after_c"
    read -r c0 u0 <<<"$before_e"; read -r c1 u1 <<<"$after_e"
    record_run "$name" "$conns" sluice "$round" $(parse_wrk "$out") \
      $((r1 - r0)) $((c1 - c0)) $((q1 - q0 - 1)) $((l1 - l0)) $((e1 - e0)) 0 \
      "$(rss_kb "$SLUICE_PID")" $((u1 - u0)) $((d1 - d0)) $((a1 - a0 - 1)) $((p1 - p0)) $((k1 - k0)) $((b1 - b0)) \
      $((u1r - u0r)) $((x1 - x0))
  done
  [ "$crashed" = 0 ] && metrics >"$RESULTS/metrics/$name-$conns.txt"
  if [ "$name" = clients100k ] && [ "$crashed" = 0 ]; then
    echo "$conns $(redis_key_memory "$base_mem")" >>"$RESULTS/redis_keys.txt"
  fi
  if [ "$crashed" = 0 ]; then
    stop_sluice
    [ "$STOP_RC" = 0 ] || { say "sluice exited with status $STOP_RC after $name@$conns"; echo "$name@$conns: sluice exited with status $STOP_RC on SIGTERM" >>"$RESULTS/anomalies.txt"; }
  fi
  sluice_log_problems "$name@$conns"
  cp "$SLUICE_LOG" "$RESULTS/logs/" 2>/dev/null
}

# The floor a decision is measured against: Redis's CPU per plain `SET key value PXAT t` over
# 100,000 keys, pipelined 16 deep from 50 connections (a decision has to write its key once).
# Appends "µs_per_set" to set_floor.txt; the keys are flushed afterwards.
measure_set_floor() {
  local n=400000 c0 c1 at
  at=$(( ($(date +%s) + 3600) * 1000 ))
  redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
  c0=$(redis_cpu_usec)
  $(pin load) redis-benchmark -p "$REDIS_PORT" -q -n "$n" -r 100000 -c 50 -P 16 \
    SET 'sluice:floor:__rand_int__' 1700000000000000 PXAT "$at" >"$W/floor.out" 2>&1 || say "redis-benchmark failed"
  c1=$(redis_cpu_usec)
  redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
  awk -v c=$((c1 - c0)) -v n="$n" 'BEGIN { printf "%.3f\n", c / n }' >>"$RESULTS/set_floor.txt"
  say "SET PXAT floor: $(tail -1 "$RESULTS/set_floor.txt") µs of Redis CPU per SET"
}

IDLE_RESULT=""
idle_one() {  # idle_one TARGET PORT PIDS...: sets IDLE_RESULT to "opened before_kb after_kb active"
  local target=$1 port=$2; shift 2
  local before after line opened active=""
  run_wrk "$port" 64 "$WARMUP" "$W/warm.out" none
  sleep 2
  before=$(rss_kb "$@")
  $(pin load) python3 "$HERE/idle_conns.py" --port "$port" --count "$IDLE_CONNS" --hold 120 >"$W/idle-$target.out" 2>&1 &
  local client=$!
  PIDS+=("$client")
  local i=0
  while ! grep -q '^ready' "$W/idle-$target.out" 2>/dev/null && kill -0 "$client" 2>/dev/null && [ $i -lt 900 ]; do
    sleep 0.1; i=$((i + 1))
  done
  sleep 2
  after=$(rss_kb "$@")
  line=$(grep '^ready' "$W/idle-$target.out")
  opened=$(sed -n 's/.*opened=\([0-9]*\).*/\1/p' <<<"$line")
  if [ "$target" = sluice ]; then
    active=$(metrics | awk '/^sluice_connections_active/ { s += $NF } END { print s + 0 }')
  else
    active=$(curl -s --max-time 5 "http://127.0.0.1:$port/__status" | awk 'NR == 1 { print $3 - 1 }')
  fi
  say "idle $target: $line; RSS ${before} KB -> ${after} KB; open connections seen by the proxy: $active"
  echo "$target: $line" >>"$RESULTS/idle.txt"
  stop_pid "$client" 5
  IDLE_RESULT="${opened:-0} $before $after ${active:-0}"
}

NGINX_PID=""
start_nginx_proxy() {
  $(pin proxy) "$NGINX" -e "$W/nginx-proxy/error.log" -p "$W/nginx-proxy" -c "$W/nginx-proxy/nginx.conf" &
  NGINX_PID=$!
  PIDS+=("$NGINX_PID")
  wait_http "http://127.0.0.1:$NGINX_PORT/" 10 "$NGINX_PID" || { cat "$W/nginx-proxy/error.log" >&2; die "nginx proxy did not start"; }
}

run_idle() {
  say "scenario idle10k: $IDLE_CONNS idle keep-alive connections, RSS before and after"
  start_sluice idle10k
  local s n
  idle_one sluice "$SLUICE_PORT" "$SLUICE_PID"; s=$IDLE_RESULT
  # a fresh nginx too: memory its workers freed after the 1000-connection runs would hide the growth
  stop_pid "$NGINX_PID" 10
  start_nginx_proxy
  idle_one nginx "$NGINX_PORT" $(nginx_pids "$NGINX_PID"); n=$IDLE_RESULT
  stop_sluice
  [ "$STOP_RC" = 0 ] || echo "idle10k: sluice exited with status $STOP_RC on SIGTERM" >>"$RESULTS/anomalies.txt"
  sluice_log_problems idle10k
  cp "$SLUICE_LOG" "$RESULTS/logs/" 2>/dev/null
  echo "sluice $s" >"$RESULTS/idle.tsv"
  echo "nginx $n" >>"$RESULTS/idle.tsv"
}

# ---------------------------------------------------------------------------------------------
# Main.

install_tools
[ -x "$SLUICE" ] || die "no sluice binary at $SLUICE"

# Enough descriptors for 10000 idle connections plus the upstream side.
hard=$(ulimit -Hn)
if [ "$hard" = unlimited ] || [ "$hard" -ge 65536 ]; then ulimit -n 65536; else ulimit -n "$hard"; fi
NOFILE=$(ulimit -n)
if [ "$NOFILE" -lt $((IDLE_CONNS + 1000)) ]; then
  IDLE_CONNS=$((NOFILE - 1000))
  say "open-file limit $NOFILE: idle test uses $IDLE_CONNS connections"
fi

W=$(mktemp -d /tmp/sluice-loadtest.XXXXXX)
chmod 755 "$W"
mkdir -p "$RESULTS"
rm -rf "$RESULTS/wrk" "$RESULTS/logs" "$RESULTS/configs" "$RESULTS/metrics"
rm -f "$RESULTS/set_floor.txt" "$RESULTS/runs.tsv" "$RESULTS/redis_keys.txt" "$RESULTS/idle.tsv" "$RESULTS/idle.txt" "$RESULTS/anomalies.txt"
mkdir -p "$RESULTS/wrk" "$RESULTS/logs" "$RESULTS/configs" "$RESULTS/metrics"
: >"$RESULTS/anomalies.txt"

read -r REDIS_PORT UP_PORT NGINX_PORT SLUICE_PORT ADMIN_PORT NGINX_LR_PORT NGINX_LOG_PORT <<<"$(free_ports 7)"
say "ports: redis $REDIS_PORT, upstream $UP_PORT, nginx proxy $NGINX_PORT, sluice $SLUICE_PORT (admin $ADMIN_PORT)"

$(pin redis) redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --daemonize no \
  --dir "$W" --logfile "$W/redis.log" --maxclients 1000 --maxmemory 4gb --maxmemory-policy noeviction &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
for _ in $(seq 50); do [ "$(redis-cli -p "$REDIS_PORT" PING 2>/dev/null)" = PONG ] && break; sleep 0.1; done
[ "$(redis-cli -p "$REDIS_PORT" PING 2>/dev/null)" = PONG ] || die "redis-server did not start"

write_nginx_confs
cp "$W/nginx-up/nginx.conf" "$RESULTS/configs/nginx-upstream.conf"
cp "$W/nginx-proxy/nginx.conf" "$RESULTS/configs/nginx-proxy.conf"
$(pin upstream) "$NGINX" -e "$W/nginx-up/error.log" -p "$W/nginx-up" -c "$W/nginx-up/nginx.conf" &
UP_PID=$!
PIDS+=("$UP_PID")
wait_http "http://127.0.0.1:$UP_PORT/" 10 "$UP_PID" || { cat "$W/nginx-up/error.log" >&2; die "upstream nginx did not start"; }
start_nginx_proxy

started=$(date -u +%s)
measure_set_floor
for item in $SCENARIOS; do
  case "$item" in
    idle10k) run_idle ;;
    *@*) run_scenario "${item%@*}" "${item#*@}" ;;
    *) die "scenario '$item': write NAME@CONNECTIONS or idle10k" ;;
  esac
done
measure_set_floor
grep -iE 'error|alert|crit' "$W/nginx-proxy/error.log" | head -20 | sed 's/^/nginx proxy log: /' >>"$RESULTS/anomalies.txt"
grep -iE 'error|alert|crit' "$W/nginx-up/error.log" | head -20 | sed 's/^/nginx upstream log: /' >>"$RESULTS/anomalies.txt"

# Machine and versions for the report.
{
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "elapsed=$(( $(date -u +%s) - started ))s"
  echo "nproc=$(nproc)"
  echo "cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
  echo "memory=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
  echo "kernel=$(uname -sr)"
  echo "os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "load=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "nginx=$("$NGINX" -v 2>&1 | sed 's/.*: //')"
  echo "wrk=$(wrk -v 2>&1 | head -1 | awk '{ print $1, $2 }')"
  echo "redis=$(redis-server --version | awk '{ print $3 }' | sed 's/v=//')"
  echo "sluice=$("$SLUICE" --version 2>&1 | head -1) ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo "gnuplot=$(gnuplot --version 2>/dev/null || echo none)"
  echo "settings=DURATION=$DURATION ROUNDS=$ROUNDS WARMUP=$WARMUP THREADS=$THREADS WORKERS=$WORKERS UPSTREAM_WORKERS=$UPSTREAM_WORKERS IDLE_CONNS=$IDLE_CONNS"
  echo "pinning=load ${CPUS_LOAD:-any}, proxy ${CPUS_PROXY:-any}, upstream ${CPUS_UPSTREAM:-any}, redis ${CPUS_REDIS:-any}"
} >"$RESULTS/machine.txt"

python3 "$HERE/report.py" "$RESULTS" || die "report.py failed"
if command -v gnuplot >/dev/null && [ -s "$RESULTS/plot.dat" ]; then
  term="pngcairo size 1200,900 font ',10'"
  gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo || term="png size 1200,900"
  gnuplot -e "term=\"$term\"; out=\"$RESULTS/plot.png\"; data=\"$RESULTS/plot.dat\"" "$HERE/plot.gp" ||
    say "gnuplot failed"
fi
say "report: $RESULTS/report.md${RESULTS:+, plot: $RESULTS/plot.png}"
