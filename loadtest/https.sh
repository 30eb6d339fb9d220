#!/usr/bin/env bash
# HTTPS: sluice against nginx, both terminating TLS with the same certificate and forwarding
# to the same plain nginx upstream, same worker count, side by side in one run.
#   loadtest/https.sh              2 rounds x 10 s per measurement (about 2 minutes)
#   QUICK=1 loadtest/https.sh      1 round x 3 s
# Scenarios (wrk, CONNS connections, default 64):
#   handshakes  every request on a new connection (Connection: close): TLS handshakes per second
#   keepalive   requests on kept-alive TLS connections
#   plain_close every request on a new plain-HTTP connection: the same churn without TLS, to
#               tell what TLS costs from what accepting and closing connections costs
# Writes loadtest/results/https.md. Needs what loadtest/run.sh installs (nginx, wrk).
# Env: SLUICE (default build/sluice), WORKERS (2), CONNS (64), DURATION (10s), ROUNDS (2).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
SLUICE=${SLUICE:-$REPO/build/sluice}
WORKERS=${WORKERS:-2}
CONNS=${CONNS:-64}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-2}
if [ -n "${QUICK:-}" ]; then DURATION=3s; ROUNDS=1; fi
RESULTS=${RESULTS:-$HERE/results}
say() { printf '%s\n' "https: $*" >&2; }
die() { say "error: $*"; exit 1; }

NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || die "nginx is missing (loadtest/run.sh installs it)"
command -v wrk >/dev/null || die "wrk is missing (loadtest/run.sh installs it)"
[ -x "$SLUICE" ] || die "no sluice binary at $SLUICE (make build)"

W=$(mktemp -d /tmp/sluice-https-XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] && say "work directory kept: $W" || rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { local i; for i in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
cpu_ticks() { local pid; for pid in "$@"; do cat "/proc/$pid/stat" 2>/dev/null; done | awk '{ sub(/^.*\) /, ""); t += $12 + $13 } END { print t + 0 }'; }
TICK=$(getconf CLK_TCK)

UP_PORT=$(free_port); NGINX_PORT=$(free_port); PLAIN_PORT=$(free_port); TLS_PORT=$(free_port); ADMIN_PORT=$(free_port); NGINX_PLAIN_PORT=$(free_port)
bash "$REPO/scripts/dev_tls.sh" "$W/tls" >/dev/null
CERT=$W/tls/localhost.pem KEY=$W/tls/localhost.key
user_line=""; [ "$(id -u)" -eq 0 ] && user_line="user root;"
for d in up proxy; do
  mkdir -p "$W/$d/tmp"
  common="$user_line
daemon off;
pid $W/$d/nginx.pid;
error_log $W/$d/error.log warn;
events { worker_connections 16384; }"
  temp="client_body_temp_path $W/$d/tmp/b; proxy_temp_path $W/$d/tmp/p; fastcgi_temp_path $W/$d/tmp/f; uwsgi_temp_path $W/$d/tmp/u; scgi_temp_path $W/$d/tmp/s;"
  if [ $d = up ]; then
    cat >"$W/up/nginx.conf" <<EOF
$common
worker_processes 1;
http { access_log off; $temp keepalive_requests 1000000;
  server { listen 127.0.0.1:$UP_PORT backlog=4096; location / { return 200 "ok\n"; } } }
EOF
  else
    cat >"$W/proxy/nginx.conf" <<EOF
$common
worker_processes $WORKERS;
http { access_log off; $temp keepalive_requests 1000000; keepalive_timeout 300s;
  upstream app { server 127.0.0.1:$UP_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$NGINX_PORT ssl backlog=4096;
    listen 127.0.0.1:$NGINX_PLAIN_PORT backlog=4096;
    ssl_certificate $CERT;
    ssl_certificate_key $KEY;
    ssl_protocols TLSv1.2 TLSv1.3;
    location / {
      proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme; proxy_set_header Via "1.1 nginx";
    }
  }
}
EOF
  fi
  "$NGINX" -c "$W/$d/nginx.conf" -p "$W/$d" &
  PIDS+=($!)
done
NGINX_PROXY_PID=${PIDS[1]}

cat >"$W/sluice.yaml" <<EOF
server:
  listen:
    - "127.0.0.1:$PLAIN_PORT"
    - address: "127.0.0.1:$TLS_PORT"
      tls: {cert: $CERT, key: $KEY}
  workers: $WORKERS
  idle_timeout: 300s
admin: {listen: "127.0.0.1:$ADMIN_PORT"}
store: {type: memory}
logging: {access_log: "off", summary_interval: 0s}
upstreams:
  app: {servers: ["127.0.0.1:$UP_PORT"], max_idle: 64}
routes:
  - name: all
    match: {path_prefix: /}
    upstream: app
EOF
"$SLUICE" --check -c "$W/sluice.yaml" >/dev/null || die "generated sluice config refused"
"$SLUICE" -c "$W/sluice.yaml" >"$W/sluice.log" 2>&1 &
SLUICE_PID=$!
PIDS+=("$SLUICE_PID")
for p in $UP_PORT $NGINX_PORT $NGINX_PLAIN_PORT $PLAIN_PORT $TLS_PORT; do wait_port "$p" || die "port $p does not accept"; done
curl -sk "https://127.0.0.1:$NGINX_PORT/" | grep -q ok || die "nginx over TLS does not answer"
curl -sk "https://127.0.0.1:$TLS_PORT/" | grep -q ok || die "sluice over TLS does not answer"

# wrk output -> "rps p99_ms errors"
parse_wrk() {
  awk 'function ms(v) { if (v ~ /us$/) return v * 0.001; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v + 0 }
       $1 == "99%" { p99 = ms($2) } /^Requests\/sec:/ { rps = $2 }
       /Non-2xx/ { bad += $NF } /Socket errors:/ { gsub(",", ""); bad += $4 + $6 + $8 + $10 }
       END { printf "%.0f %.2f %d\n", rps, p99, bad }' "$1"
}
measure() {  # measure TARGET SCENARIO -> "rps p99 errors cpu_us_per_req"
  local target=$1 scenario=$2 port pids out scheme=https
  if [ "$target" = nginx ]; then port=$NGINX_PORT; pids="$NGINX_PROXY_PID $(ps -o pid= --ppid "$NGINX_PROXY_PID" | tr '\n' ' ')"
  else port=$TLS_PORT; pids=$SLUICE_PID; fi
  if [ "$scenario" = plain_close ]; then
    scheme=http
    if [ "$target" = nginx ]; then port=$NGINX_PLAIN_PORT; else port=$PLAIN_PORT; fi
  fi
  local extra=()
  [ "$scenario" != keepalive ] && extra=(-H "Connection: close")
  out="$W/$target-$scenario.out"
  local c0; c0=$(cpu_ticks $pids)
  timeout $(( ${DURATION%s} + 30 )) wrk -t2 -c"$CONNS" -d"$DURATION" --timeout 5s --latency "${extra[@]}" \
    "$scheme://127.0.0.1:$port/" >"$out" 2>&1
  local c1; c1=$(cpu_ticks $pids)
  read -r rps p99 bad < <(parse_wrk "$out")
  local reqs; reqs=$(awk '/requests in/ { print $1 }' "$out")
  echo "$rps $p99 $bad $(awk -v t=$((c1 - c0)) -v hz="$TICK" -v n="$reqs" 'BEGIN { printf "%.1f", n ? t / hz * 1e6 / n : 0 }')"
}

declare -A sum_rps sum_cpu last_p99 errors
SCENARIOS="handshakes keepalive plain_close"
for scenario in $SCENARIOS; do
  say "$scenario: warm-up"
  measure nginx "$scenario" >/dev/null; measure sluice "$scenario" >/dev/null
  for round in $(seq "$ROUNDS"); do
    for target in nginx sluice; do
      read -r rps p99 bad cpu < <(measure "$target" "$scenario")
      say "$scenario round $round $target: $rps req/s, p99 $p99 ms, $bad errors, $cpu µs CPU/req"
      k="$scenario/$target"
      sum_rps[$k]=$(( ${sum_rps[$k]:-0} + rps ))
      sum_cpu[$k]=$(awk -v a="${sum_cpu[$k]:-0}" -v b="$cpu" 'BEGIN { print a + b }')
      last_p99[$k]=$p99
      errors[$k]=$(( ${errors[$k]:-0} + bad ))
    done
  done
done
handshakes=$(curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | awk '/^sluice_tls_handshakes_total/ { print $2 }')
failures=$(curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | awk '/^sluice_tls_handshake_failures_total/ && $2 > 0 { sub(/.*reason="/, "", $1); sub(/".*/, "", $1); printf "%s%s %d", sep, $1, $2; sep = ", " } END { if (!sep) printf "none" }')

mkdir -p "$RESULTS"
{
  echo "# HTTPS: sluice against nginx (loadtest/https.sh)"
  echo
  echo "$(nproc) cores, $WORKERS workers each, $CONNS connections, $ROUNDS x $DURATION per measurement, alternating;"
  echo "same ECDSA P-256 certificate; upstream: plain nginx. $(openssl version), $("$NGINX" -v 2>&1 | sed 's/.*: //')."
  echo
  echo "| scenario | nginx req/s | sluice req/s | ratio | nginx p99 ms | sluice p99 ms | CPU µs/req nginx / sluice | errors nginx / sluice |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  for scenario in $SCENARIOS; do
    n=$(( ${sum_rps[$scenario/nginx]} / ROUNDS )); s=$(( ${sum_rps[$scenario/sluice]} / ROUNDS ))
    printf '| %s | %d | %d | %.2f | %s | %s | %.1f / %.1f | %d / %d |\n' "$scenario" "$n" "$s" \
      "$(awk -v a="$s" -v b="$n" 'BEGIN { print b ? a / b : 0 }')" "${last_p99[$scenario/nginx]}" "${last_p99[$scenario/sluice]}" \
      "$(awk -v a="${sum_cpu[$scenario/nginx]}" -v r="$ROUNDS" 'BEGIN { print a / r }')" \
      "$(awk -v a="${sum_cpu[$scenario/sluice]}" -v r="$ROUNDS" 'BEGIN { print a / r }')" \
      "${errors[$scenario/nginx]}" "${errors[$scenario/sluice]}"
  done
  echo
  echo "sluice counted $handshakes completed handshakes over the whole run; failed, by reason: $failures"
  echo "(wrk ends each measurement with connections in mid-handshake: they count as closed)."
} | tee "$RESULTS/https.md"
