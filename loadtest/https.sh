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
NAME=https TOOL=wrk
. "$(dirname "$0")/tls_proxies.sh"
take_port PLAIN_PORT; take_port NGINX_PLAIN_PORT
start_proxies "    listen 127.0.0.1:$NGINX_PORT ssl backlog=4096;
    listen 127.0.0.1:$NGINX_PLAIN_PORT backlog=4096;" \
  "    - \"127.0.0.1:$PLAIN_PORT\"
    - address: \"127.0.0.1:$TLS_PORT\"
      tls: {cert: $CERT, key: $KEY}"
for p in $NGINX_PLAIN_PORT $PLAIN_PORT; do wait_port "$p" || die "port $p does not accept"; done
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
  echo "$rps $p99 $bad $(cpu_per_request $((c1 - c0)) "$reqs")"
}

SCENARIOS="handshakes keepalive plain_close"
run_rounds "$SCENARIOS"
handshakes=$(curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | awk '/^sluice_tls_handshakes_total/ { print $2 }')
failures=$(curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | awk '/^sluice_tls_handshake_failures_total/ && $2 > 0 { sub(/.*reason="/, "", $1); sub(/".*/, "", $1); printf "%s%s %d", sep, $1, $2; sep = ", " } END { if (!sep) printf "none" }')

mkdir -p "$RESULTS"
{
  echo "# HTTPS: sluice against nginx (loadtest/https.sh)"
  echo
  echo "$(nproc) cores, $WORKERS workers each, $CONNS connections, $ROUNDS x $DURATION per measurement, alternating;"
  echo "same ECDSA P-256 certificate; upstream: plain nginx. $(openssl version), $("$NGINX" -v 2>&1 | sed 's/.*: //')."
  echo
  results_table "$SCENARIOS"
  echo
  echo "sluice counted $handshakes completed handshakes over the whole run; failed, by reason: $failures"
  echo "(wrk ends each measurement with connections in mid-handshake: they count as closed)."
} | tee "$RESULTS/https.md"
