#!/usr/bin/env bash
# HTTP/2: sluice against nginx, both terminating TLS with the same certificate and offering
# h2 by ALPN, forwarding over HTTP/1.1 to the same plain nginx upstream, same worker count,
# side by side in one run (issue 26).
#   loadtest/h2.sh              2 rounds x 10 s per measurement (about 2 minutes)
#   QUICK=1 loadtest/h2.sh      1 round x 3 s
# Scenarios (h2load, CONNS connections, default 64):
#   h2_one_stream   one request at a time per connection (-m 1): the per-request cost
#   h2_streams      STREAMS requests at once per connection (-m STREAMS, default 8, on
#                   CONNS/8 connections): multiplexing
# p99 is computed from h2load's per-request log. Writes loadtest/results/h2.md. Needs what
# loadtest/run.sh installs (nginx) and h2load (Debian's nghttp2-client, which make test installs).
# Env: SLUICE (default build/sluice), WORKERS (2), CONNS (64), STREAMS (8), DURATION (10s), ROUNDS (2).
set -euo pipefail
NAME=h2 TOOL=h2load
STREAMS=${STREAMS:-8}
. "$(dirname "$0")/tls_proxies.sh"
start_proxies "    listen 127.0.0.1:$NGINX_PORT ssl http2 backlog=4096;
    http2_max_concurrent_streams 128;" \
  "    - address: \"127.0.0.1:$TLS_PORT\"
      tls: {cert: $CERT, key: $KEY}"
for p in $NGINX_PORT $TLS_PORT; do
  curl -sk --http2 -o /dev/null -w '%{http_version}' "https://127.0.0.1:$p/" | grep -q '^2' ||
    die "port $p does not answer over HTTP/2"
done

# h2load output and its per-request log -> "rps p99_ms errors"
parse_h2load() {  # parse_h2load OUTPUT LOG
  local rps bad p99
  rps=$(awk '/^finished in/ { sub(/,$/, "", $4); print $4 + 0 }' "$1")
  bad=$(awk '/^requests:/ { print $10 + $12 + $14 }' "$1")
  # log lines: start (µs since epoch), status, time for the request (µs)
  p99=$(awk '{ print $3 }' "$2" | sort -n | awk '{ v[NR] = $1 } END { i = int(NR * 0.99 + 0.5); if (i < 1) i = 1; if (NR) printf "%.2f", v[i] / 1000; else print 0 }')
  bad=$(( bad + $(awk '$2 != 200' "$2" | wc -l) ))
  echo "${rps:-0} $p99 $bad"
}
measure() {  # measure TARGET SCENARIO -> "rps p99 errors cpu_us_per_req"
  local target=$1 scenario=$2 port pids out log
  if [ "$target" = nginx ]; then port=$NGINX_PORT; pids="$NGINX_PROXY_PID $(ps -o pid= --ppid "$NGINX_PROXY_PID" | tr '\n' ' ')"
  else port=$TLS_PORT; pids=$SLUICE_PID; fi
  local clients=$CONNS streams=1
  if [ "$scenario" = h2_streams ]; then streams=$STREAMS; clients=$(( CONNS / STREAMS > 0 ? CONNS / STREAMS : 1 )); fi
  out="$W/$target-$scenario.out"; log="$W/$target-$scenario.log"
  rm -f "$log"
  local c0; c0=$(cpu_ticks $pids)
  timeout $(( ${DURATION%s} + 30 )) h2load -t2 -c"$clients" -m"$streams" -D"${DURATION%s}" --log-file="$log" \
    "https://127.0.0.1:$port/" >"$out" 2>&1
  local c1; c1=$(cpu_ticks $pids)
  read -r rps p99 bad < <(parse_h2load "$out" "$log")
  local reqs; reqs=$(awk '/^requests:/ { print $8 }' "$out")
  echo "$rps $p99 $bad $(cpu_per_request $((c1 - c0)) "$reqs")"
}

SCENARIOS="h2_one_stream h2_streams"
run_rounds "$SCENARIOS"
streams=$(curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | awk '/^sluice_requests_total/ { n += $2 } END { print n + 0 }')
mkdir -p "$RESULTS"
{
  echo "# HTTP/2 over TLS: sluice against nginx (loadtest/h2.sh)"
  echo
  echo "$(nproc) cores, $WORKERS workers each; h2_one_stream: $CONNS connections, one stream at a time each;"
  echo "h2_streams: $(( CONNS / STREAMS > 0 ? CONNS / STREAMS : 1 )) connections x $STREAMS streams; $ROUNDS x $DURATION per measurement, alternating;"
  echo "h2load (2 threads); same ECDSA P-256 certificate, ALPN h2; upstream: plain nginx over HTTP/1.1 keep-alive."
  echo "$(openssl version), $("$NGINX" -v 2>&1 | sed 's/.*: //'), $(h2load --version | head -1)."
  echo
  results_table "$SCENARIOS"
  echo
  echo "sluice counted $streams requests (sluice_requests_total) over the whole run."
} | tee "$RESULTS/h2.md"
