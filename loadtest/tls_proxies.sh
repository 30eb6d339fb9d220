# Sourced by loadtest/https.sh and loadtest/h2.sh: sluice and nginx, both terminating TLS with
# the same throwaway certificate and forwarding to the same plain nginx upstream, with the
# same worker count. Before sourcing: NAME (messages, work directory), TOOL (the load
# client, which must be installed). Gives: say, die, the work directory W (removed on exit,
# with every process in PIDS stopped, unless KEEP is set), take_port, wait_port, cpu_ticks,
# TICK, SLUICE, WORKERS, CONNS, DURATION, ROUNDS, RESULTS, NGINX, the ports UP_PORT,
# NGINX_PORT, TLS_PORT, ADMIN_PORT, the certificate CERT and KEY, and
#   start_proxies NGINX_LISTEN SLUICE_LISTEN
# which writes and starts the upstream, the nginx proxy (NGINX_LISTEN: its listen lines)
# and sluice (SLUICE_LISTEN: the YAML items of server.listen), sets NGINX_PROXY_PID and
# SLUICE_PID, and waits until the upstream, NGINX_PORT and TLS_PORT accept; and, for the
# measurements (the sourcing script defines `measure TARGET SCENARIO`, which prints
# "req/s p99_ms errors cpu_us_per_request"):
#   cpu_per_request TICKS REQUESTS    µs of CPU per request
#   run_rounds SCENARIOS              a warm-up, then ROUNDS rounds alternating nginx and
#                                     sluice per scenario, summed into sum_rps, sum_cpu,
#                                     errors (last_p99: the last round's p99)
#   results_table SCENARIOS           the markdown table of those sums
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
SLUICE=${SLUICE:-$REPO/build/sluice}
WORKERS=${WORKERS:-2}
CONNS=${CONNS:-64}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-2}
if [ -n "${QUICK:-}" ]; then DURATION=3s; ROUNDS=1; fi
RESULTS=${RESULTS:-$HERE/results}
say() { printf '%s\n' "$NAME: $*" >&2; }
die() { say "error: $*"; exit 1; }

NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || die "nginx is missing (loadtest/run.sh installs it)"
command -v "$TOOL" >/dev/null || die "$TOOL is missing (loadtest/run.sh installs wrk; h2load comes with nghttp2-client)"
[ -x "$SLUICE" ] || die "no sluice binary at $SLUICE (make build)"

W=$(mktemp -d "/tmp/sluice-$NAME-XXXXXX")
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] && say "work directory kept: $W" || rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# take_port VAR: a free port into VAR, never one this run took already (the kernel may give
# the same port twice in a row: each is free again once the probe closes).
TAKEN_PORTS=" "
take_port() {
  local p
  while :; do
    p=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    case "$TAKEN_PORTS" in *" $p "*) ;; *) TAKEN_PORTS="$TAKEN_PORTS$p "; printf -v "$1" '%s' "$p"; return ;; esac
  done
}
wait_port() { local i; for i in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
cpu_ticks() { local pid; for pid in "$@"; do cat "/proc/$pid/stat" 2>/dev/null; done | awk '{ sub(/^.*\) /, ""); t += $12 + $13 } END { print t + 0 }'; }
TICK=$(getconf CLK_TCK)

take_port UP_PORT; take_port NGINX_PORT; take_port TLS_PORT; take_port ADMIN_PORT
bash "$REPO/scripts/dev_tls.sh" "$W/tls" >/dev/null
CERT=$W/tls/localhost.pem KEY=$W/tls/localhost.key

start_proxies() {  # start_proxies NGINX_LISTEN SLUICE_LISTEN
  local nginx_listen=$1 sluice_listen=$2 user_line="" d common temp p
  [ "$(id -u)" -eq 0 ] && user_line="user root;"
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
$nginx_listen
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
$sluice_listen
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
  for p in $UP_PORT $NGINX_PORT $TLS_PORT; do wait_port "$p" || die "port $p does not accept"; done
}

cpu_per_request() { awk -v t="$1" -v hz="$TICK" -v n="$2" 'BEGIN { printf "%.1f", n ? t / hz * 1e6 / n : 0 }'; }

declare -A sum_rps sum_cpu last_p99 errors
run_rounds() {
  local scenario round target rps p99 bad cpu k
  for scenario in $1; do
    say "$scenario: warm-up"
    measure nginx "$scenario" >/dev/null; measure sluice "$scenario" >/dev/null
    for round in $(seq "$ROUNDS"); do
      for target in nginx sluice; do
        read -r rps p99 bad cpu < <(measure "$target" "$scenario")
        say "$scenario round $round $target: $rps req/s, p99 $p99 ms, $bad errors, $cpu µs CPU/req"
        k="$scenario/$target"
        sum_rps[$k]=$(awk -v a="${sum_rps[$k]:-0}" -v b="$rps" 'BEGIN { printf "%.0f", a + b }')
        sum_cpu[$k]=$(awk -v a="${sum_cpu[$k]:-0}" -v b="$cpu" 'BEGIN { print a + b }')
        last_p99[$k]=$p99
        errors[$k]=$(( ${errors[$k]:-0} + bad ))
      done
    done
  done
}

results_table() {
  local scenario n s
  echo "| scenario | nginx req/s | sluice req/s | ratio | nginx p99 ms | sluice p99 ms | CPU µs/req nginx / sluice | errors nginx / sluice |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  for scenario in $1; do
    n=$(awk -v a="${sum_rps[$scenario/nginx]}" -v r="$ROUNDS" 'BEGIN { printf "%d", a / r }')
    s=$(awk -v a="${sum_rps[$scenario/sluice]}" -v r="$ROUNDS" 'BEGIN { printf "%d", a / r }')
    printf '| %s | %d | %d | %.2f | %s | %s | %.1f / %.1f | %d / %d |\n' "$scenario" "$n" "$s" \
      "$(awk -v a="$s" -v b="$n" 'BEGIN { print b ? a / b : 0 }')" "${last_p99[$scenario/nginx]}" "${last_p99[$scenario/sluice]}" \
      "$(awk -v a="${sum_cpu[$scenario/nginx]}" -v r="$ROUNDS" 'BEGIN { print a / r }')" \
      "$(awk -v a="${sum_cpu[$scenario/sluice]}" -v r="$ROUNDS" 'BEGIN { print a / r }')" \
      "${errors[$scenario/nginx]}" "${errors[$scenario/sluice]}"
  done
}
