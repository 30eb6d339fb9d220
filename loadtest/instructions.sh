#!/usr/bin/env bash
# Instructions sluice executes per request, counted with callgrind: they do not move with the
# machine's neighbours as CPU time does, so a change of a few per cent shows. One sluice
# worker under `valgrind --tool=callgrind` (instrumentation off until a 2 s warm-up has run),
# an nginx upstream answering "ok", a redis-server, and wrk keeping CONNS connections busy for
# DURATION; prints the instructions of the whole process divided by the requests wrk counted,
# and the heap allocations (operator new) per request.
#
#   loadtest/instructions.sh                       (every scenario, 4 connections, 15 s each)
#   SCENARIOS="none token_bucket" CONNS=12 DURATION=15s SLUICE=path loadtest/instructions.sh
#   COUNT=syscalls SCENARIOS="nginx none token_bucket" CONNS=12 loadtest/instructions.sh
#   COUNT=cpu SCENARIOS="nginx none token_bucket" CONNS=12 loadtest/instructions.sh
#
# COUNT=syscalls counts system calls instead (and needs perf, Debian's linux-perf): the same
# processes and load without valgrind, `perf stat` on the proxy's tracepoints while wrk runs;
# prints system calls per request, the receives, sends, epoll_wait and epoll_ctl among them,
# and context switches. Like instructions, and unlike CPU time, they do not move with the
# machine's neighbours.
# COUNT=cpu samples where the proxy's CPU time goes (`perf record -e cpu-clock`, no valgrind):
# prints its CPU time per request, the kernel's part of it (system calls, TCP, waking other
# processes), the part spent switching to it after it slept (finish_task_switch), and its own
# code's; `perf report -i DIR/SCENARIO/perf.data` shows the rest. CPU time moves with the
# neighbours (10-20 % between runs here): alternate builds, compare shares.
#
# Scenarios: none (no limits), token_bucket (one Redis key), sliding_window (one Redis key,
# limit 1,000,000 a second), sliding_window_weighted (the same with `cost: header:x-cost`, which
# wrk does not send: requests of cost 1 on a weighted window), concurrency (one Redis
# concurrency key, never full: a slot taken and given back per request), clients100k (a Redis token bucket
# per client, 100,000 clients behind a trusted X-Forwarded-For, as loadtest/run.sh),
# clients100k_memory (the same on the memory store), nginx (the reference: nginx as a reverse
# proxy with one worker and run.sh's forwarding, under callgrind the same way; not in the
# default list), nginx_limit_req (the same nginx with its own per-node limiter keyed on the
# client, as run.sh's clients100k_limit_req: the reference for clients100k_memory, issue 24's
# goal 5), https and h2 (no limits, over TLS: kept-alive HTTPS connections from wrk, and
# HTTP/2 from h2load with one stream at a time per connection; a P-256 certificate made by
# scripts/dev_tls.sh), nginx_https and nginx_h2 (the same nginx with `listen ... ssl` and
# `ssl http2`, the same certificate: their references). HEADERS=browser: every request
# carries the fields a browser sends (12 with Host: User-Agent, Accept, Accept-Language,
# Accept-Encoding, Referer, Cookie, Sec-Fetch-*, ...; about 560 bytes of head) instead of
# wrk's Host alone. Needs valgrind, nginx, redis-server, wrk (loadtest/run.sh installs the
# last three). The profiles stay in OUT (default a temporary
# directory, printed) for callgrind_annotate.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SLUICE=${SLUICE:-$ROOT/build/sluice}
SCENARIOS=${SCENARIOS:-"none token_bucket clients100k clients100k_memory"}
CONNS=${CONNS:-4}
DURATION=${DURATION:-15s}
OUT=${OUT:-$(mktemp -d /tmp/sluice-instructions.XXXXXX)}
mkdir -p "$OUT"
HEADERS=${HEADERS:-}
WRK_HEADERS=()
case $HEADERS in
  "") ;;
  browser)
    # shellcheck source=loadtest/browser_headers.sh
    . "$HERE/browser_headers.sh"
    WRK_HEADERS=("${BROWSER_HEADERS[@]}") ;;
  *) echo "instructions: HEADERS is empty or browser, not '$HEADERS'" >&2; exit 2 ;;
esac
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
COUNT=${COUNT:-instructions}
case $COUNT in
  instructions) TOOLS="valgrind callgrind_annotate" ;;
  syscalls|cpu) TOOLS="perf" ;;
  *) echo "instructions: COUNT is instructions, syscalls or cpu, not '$COUNT'" >&2; exit 2 ;;
esac
for tool in $TOOLS redis-server redis-cli wrk curl python3; do
  command -v "$tool" >/dev/null || { echo "instructions: $tool is missing" >&2; exit 1; }
done
case " $SCENARIOS " in
  *" h2 "*|*" nginx_h2 "*) command -v h2load >/dev/null || { echo "instructions: h2load is missing (nghttp2-client)" >&2; exit 1; } ;;
esac
[ -x "$NGINX" ] || { echo "instructions: nginx is missing" >&2; exit 1; }
[ -x "$SLUICE" ] || { echo "instructions: no sluice binary at $SLUICE (make build)" >&2; exit 1; }

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

REDIS_PORT=$(free_port)
UP_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --save "" --appendonly no >"$OUT/redis.log" 2>&1 &
PIDS+=($!)
mkdir -p "$OUT/up/tmp"
cat >"$OUT/up/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $OUT/up/nginx.pid;
error_log $OUT/up/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $OUT/up/tmp/body; proxy_temp_path $OUT/up/tmp/proxy;
  fastcgi_temp_path $OUT/up/tmp/fastcgi; uwsgi_temp_path $OUT/up/tmp/uwsgi; scgi_temp_path $OUT/up/tmp/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  default_type text/plain;
  server { listen 127.0.0.1:$UP_PORT; location / { return 200 "ok\n"; } }
}
EOF
"$NGINX" -c "$OUT/up/nginx.conf" &
PIDS+=($!)
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" PING >/dev/null 2>&1 && break; sleep 0.1; done

# profile DIR WHAT READY_URL LOAD_URL STOP_SIGNAL WRK_SCRIPT COMMAND...: runs COMMAND under
# callgrind (counting off), waits until READY_URL answers, warms up for 2 s, counts while wrk
# keeps CONNS connections busy against LOAD_URL for DURATION, stops it with STOP_SIGNAL;
# sets `requests` (wrk's count) and `total` (instructions counted).
# With COUNT=syscalls, COMMAND runs as it is and `perf stat` counts its system calls (by
# kind) and context switches while wrk runs; `counts` is left in DIR/perf.txt.
SYSCALL_KINDS="recvfrom recvmsg read readv sendto sendmsg write writev epoll_wait epoll_ctl"
# load DURATION URL SCRIPT: CONNS connections busy for DURATION (wrk; h2load with one stream
# per connection where H2LOAD is set), its report on stdout; `served FILE` reads the requests
# it counted from that report.
load() {
  if [ -n "${H2LOAD:-}" ]; then
    h2load -t1 -c"$CONNS" -m1 -D"${1%s}" "$2"
  else
    # shellcheck disable=SC2086
    wrk -t1 -c"$CONNS" -d"$1" "${WRK_HEADERS[@]}" $3 "$2"
  fi
}
served() {
  if [ -n "${H2LOAD:-}" ]; then awk '/^requests:/ { print $8 }' "$1"
  else awk '/requests in/ { print $1 }' "$1"; fi
}
profile() {
  local dir=$1 what=$2 ready_url=$3 load_url=$4 stop=$5 script=$6
  shift 6
  if [ "$COUNT" != instructions ]; then
    "$@" >"$dir/$what.log" 2>&1 &
    local pid=$! ready=0 events="raw_syscalls:sys_enter,context-switches" kind
    PIDS+=("$pid")
    for kind in $SYSCALL_KINDS; do events="$events,syscalls:sys_enter_$kind"; done
    for _ in $(seq 100); do curl -sfk "$ready_url" >/dev/null 2>&1 && { ready=1; break; }; sleep 0.1; done
    [ "$ready" = 1 ] || { echo "instructions: $what did not get ready ($scenario)" >&2; tail -5 "$dir/$what.log" >&2; exit 1; }
    load 2s "$load_url" "$script" >/dev/null
    if [ "$COUNT" = cpu ]; then
      perf record -q -e cpu-clock -F 4000 -p "$pid" -o "$dir/perf.data" -- sleep "$DURATION" 2>/dev/null &
    else
      perf stat -x, -e "$events" -p "$pid" -o "$dir/perf.txt" -- sleep "$DURATION" &
    fi
    local perf_pid=$!
    load "$DURATION" "$load_url" "$script" >"$dir/wrk.txt"
    wait "$perf_pid"
    kill -"$stop" "$pid"
    wait "$pid" 2>/dev/null || true
    requests=$(served "$dir/wrk.txt")
    return
  fi
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$dir/callgrind.out" "$@" >"$dir/$what.log" 2>&1 &
  local pid=$! ready=0
  PIDS+=("$pid")
  for _ in $(seq 200); do curl -sfk "$ready_url" >/dev/null 2>&1 && { ready=1; break; }; sleep 0.2; done
  [ "$ready" = 1 ] || { echo "instructions: $what did not get ready ($scenario)" >&2; tail -5 "$dir/$what.log" >&2; exit 1; }
  load 2s "$load_url" "$script" >/dev/null
  callgrind_control -i on "$pid" >/dev/null 2>&1
  load "$DURATION" "$load_url" "$script" >"$dir/wrk.txt"
  callgrind_control -i off "$pid" >/dev/null 2>&1
  kill -"$stop" "$pid"
  wait "$pid" 2>/dev/null || true
  requests=$(served "$dir/wrk.txt")
  total=$(callgrind_annotate "$dir"/callgrind.out* 2>/dev/null | awk '/PROGRAM TOTALS/ && !done { gsub(",", "", $1); print $1; done = 1 }')
}

# syscall_row LABEL: a table row from DIR/perf.txt and `requests` (COUNT=syscalls)
syscall_row() {
  awk -F, -v l="$1" -v c="$CONNS" -v n="$requests" '
    $3 == "raw_syscalls:sys_enter" { all = $1 }
    $3 == "context-switches" { cs = $1 }
    $3 ~ /sys_enter_(recvfrom|recvmsg|read|readv)$/ { rx += $1 }
    $3 ~ /sys_enter_(sendto|sendmsg|write|writev)$/ { tx += $1 }
    $3 ~ /sys_enter_epoll_wait$/ { ew = $1 }
    $3 ~ /sys_enter_epoll_ctl$/ { ec = $1 }
    END { printf "| %s | %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", l, c, n, all / n, rx / n, tx / n, ew / n, ec / n, cs / n }' \
    "$dir/perf.txt"
}

# cpu_row LABEL: a table row from DIR/perf.data and `requests` (COUNT=cpu)
cpu_row() {
  local total kernel switching
  total=$(perf report -i "$dir/perf.data" --stdio --sort dso 2>/dev/null | awk '/Event count/ { print $NF; exit }')
  kernel=$(perf report -i "$dir/perf.data" --stdio --sort dso 2>/dev/null | awk '/\[kernel\.kallsyms\]/ { sub("%", "", $1); print $1; exit }')
  switching=$(perf report -i "$dir/perf.data" --stdio --sort sym 2>/dev/null | awk '/finish_task_switch/ { sub("%", "", $1); s += $1 } END { print s + 0 }')
  awk -v l="$1" -v c="$CONNS" -v n="$requests" -v t="${total:-0}" -v k="${kernel:-0}" -v s="$switching" '
    BEGIN { us = t / 1000 / n
            printf "| %s | %s | %d | %.1f | %.1f | %.1f | %.1f |\n", l, c, n, us, us * k / 100, us * s / 100, us * (100 - k) / 100 }'
}

if [ "$COUNT" = cpu ]; then
  echo "| scenario | connections | requests | CPU µs per request | kernel | of it switching to the proxy | user space |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
elif [ "$COUNT" = syscalls ]; then
  echo "| scenario | connections | requests | system calls per request | receives | sends | epoll_wait | epoll_ctl | context switches |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
else
  echo "| scenario | connections | requests | instructions per request | allocations per request |"
  echo "|---|---:|---:|---:|---:|"
fi
TLS_DIR=""
for scenario in $SCENARIOS; do
  trusted="" limits="" script="" tls="" scheme=http H2LOAD=""
  store="
  type: redis
  redis:
    address: \"127.0.0.1:$REDIS_PORT\""
  bucket="
    limits:
      - { name: per_client, algorithm: token_bucket, rate: 1000000, per: 1s, burst: 1000000, key: [client_ip] }"
  clients="
    limits:
      - { name: per_client, algorithm: token_bucket, rate: 1, per: 1m, burst: 1000000, key: [client_ip] }"
  case "$scenario" in
    none|nginx) ;;
    nginx_limit_req) script="-s $HERE/clients.lua" ;;
    token_bucket) limits=$bucket ;;
    concurrency) limits="
    limits:
      - { name: in_flight, algorithm: concurrency, limit: 100000 }" ;;
    sliding_window) limits="
    limits:
      - { name: per_client, algorithm: sliding_window, limit: 1000000, window: 1s, key: [client_ip] }" ;;
    sliding_window_weighted) limits="
    limits:
      - { name: per_client, algorithm: sliding_window, limit: 1000000, window: 1s, key: [client_ip], cost: \"header:x-cost\" }" ;;
    clients100k) trusted='"127.0.0.1/32"' limits=$clients script="-s $HERE/clients.lua" ;;
    clients100k_memory) trusted='"127.0.0.1/32"' limits=$clients script="-s $HERE/clients.lua" store="
  type: memory" ;;
    https|nginx_https) tls=1 ;;
    h2|nginx_h2) tls=1 H2LOAD=1 ;;
    *) echo "instructions: unknown scenario $scenario" >&2; exit 1 ;;
  esac
  if [ -n "$tls" ]; then
    scheme=https
    if [ -z "$TLS_DIR" ]; then
      TLS_DIR=$OUT/tls
      bash "$ROOT/scripts/dev_tls.sh" "$TLS_DIR" >/dev/null
    fi
  fi
  redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
  port=$(free_port) admin=$(free_port) dir="$OUT/$scenario"
  mkdir -p "$dir"
  if [[ $scenario == nginx* ]]; then
    # The reference: nginx as a reverse proxy (one worker, no master process), forwarding as
    # in loadtest/run.sh. It allocates from its own pools: no allocations column.
    zone="" limit="" listen=""
    [ "$scenario" = nginx_https ] && listen=" ssl"
    [ "$scenario" = nginx_h2 ] && listen=" ssl http2"
    [ -n "$tls" ] && listen="$listen;
    ssl_certificate $TLS_DIR/localhost.pem;
    ssl_certificate_key $TLS_DIR/localhost.key;
    ssl_protocols TLSv1.2 TLSv1.3"
    if [ "$scenario" = nginx_limit_req ]; then
      # As run.sh's clients100k_limit_req: 1 per minute, a burst of 1000000 (nothing refused)
      zone="limit_req_zone \$http_x_forwarded_for zone=clients:64m rate=1r/m;"
      limit="limit_req zone=clients burst=1000000 nodelay; limit_req_status 429;"
    fi
    mkdir -p "$dir/tmp"
    cat >"$dir/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body; proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi; uwsgi_temp_path $dir/tmp/uwsgi; scgi_temp_path $dir/tmp/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  upstream app { server 127.0.0.1:$UP_PORT; keepalive 64; keepalive_requests 1000000; keepalive_timeout 300s; }
  $zone
  server {
    listen 127.0.0.1:$port$listen;
    location / {
      $limit
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
      proxy_set_header Via "1.1 nginx";
    }
  }
}
EOF
    # (TERM: with the limit_req zone, a graceful QUIT under valgrind did not end; counting has
    # stopped by then either way)
    profile "$dir" nginx "$scheme://127.0.0.1:$port/" "$scheme://127.0.0.1:$port/" TERM "$script" "$NGINX" -c "$dir/nginx.conf"
    label="nginx (reference)"
    [ "$scenario" = nginx_limit_req ] && label="nginx limit_req, 100,000 clients (reference)"
    [ "$scenario" = nginx_https ] && label="nginx over HTTPS (reference)"
    [ "$scenario" = nginx_h2 ] && label="nginx over HTTP/2 (reference)"
    if [ "$COUNT" = syscalls ]; then
      syscall_row "$label${HEADERS:+, $HEADERS headers}"
      continue
    fi
    if [ "$COUNT" = cpu ]; then
      cpu_row "$label${HEADERS:+, $HEADERS headers}"
      continue
    fi
    awk -v c="$CONNS" -v n="$requests" -v t="$total" -v h="${HEADERS:+, $HEADERS headers}" -v l="$label" \
      'BEGIN { printf "| %s%s | %s | %d | %.0f | - |\n", l, h, c, n, t / n }'
    continue
  fi
  listen="\"127.0.0.1:$port\""
  [ -n "$tls" ] && listen="{address: \"127.0.0.1:$port\", tls: {cert: $TLS_DIR/localhost.pem, key: $TLS_DIR/localhost.key}}"
  cat >"$dir/sluice.yaml" <<EOF
server:
  listen: [$listen]
  workers: 1
admin:
  listen: "127.0.0.1:$admin"
client_ip:
  trusted_proxies: [$trusted]
store:$store
upstreams:
  app:
    servers: ["127.0.0.1:$UP_PORT"]
routes:
  - name: api
    match: { path_prefix: / }
    upstream: app$limits
logging:
  level: warn
  access_log: "off"
  summary_interval: 0
EOF
  profile "$dir" sluice "http://127.0.0.1:$admin/readyz" "$scheme://127.0.0.1:$port/" TERM "$script" \
    "$SLUICE" -c "$dir/sluice.yaml"
  if [ "$COUNT" = syscalls ]; then
    syscall_row "$scenario${HEADERS:+, $HEADERS headers}"
    continue
  fi
  if [ "$COUNT" = cpu ]; then
    cpu_row "$scenario${HEADERS:+, $HEADERS headers}"
    continue
  fi
  # Calls of operator new(unsigned long), summed over every call site.
  allocations=$(python3 - "$dir/callgrind.out" <<'PY'
import re, sys
names, total, callee = {}, 0, None
for line in open(sys.argv[1]):
    m = re.match(r'^(c?fn)=\((\d+)\)(?: (.*))?$', line.rstrip('\n'))
    if m:
        kind, key, name = m.groups()
        if name:
            names[key] = name
        if kind == 'cfn':
            callee = key
        continue
    m = re.match(r'^calls=(\d+)', line)
    if m and callee and names.get(callee, '').startswith('operator new(unsigned long)'):
        total += int(m.group(1))
print(total)
PY
)
  awk -v s="$scenario${HEADERS:+, $HEADERS headers}" -v c="$CONNS" -v n="$requests" -v t="$total" -v a="$allocations" \
    'BEGIN { printf "| %s | %s | %d | %.0f | %.1f |\n", s, c, n, t / n, a / n }'
done
echo "profiles: $OUT" >&2
