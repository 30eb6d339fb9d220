#!/usr/bin/env bash
# What one decision costs Redis, without a proxy in the way: sluice's own decide function
# (loaded into a fresh Redis by sluice itself, so it is exactly the code sluice runs) called
# with redis-benchmark as a worker would call it, a batch of B requests per FCALL, each
# against one token bucket, over 1 key or 100,000 keys. Redis's CPU (INFO cpu) per decision,
# next to what the same calls cost with nothing decided (a function that only returns a
# reply of the same shape: the cost of a call and of its arguments), what a function that only
# GETs each key and SETs it again costs (the least a read-then-write decision can cost) and a
# plain pipelined `SET key value PXAT t` over 100,000 keys (issue 24's floor). It shows where
# the time of a decision goes and how much larger batches would save.
#
#   loadtest/decide_cost.sh                  (about a minute)
#   BATCHES="1 8 32 64" KEYSPACES="1 100000" CALLS=20000 CONNS=8
#   CPUS_REDIS=12 CPUS_LOAD=0-3              (taskset lists; unset: anywhere)
#   SLUICE=path                              (default build/sluice)
#   KEPT=1                                   the buckets of a route with plans (their values
#                                            carry the interval: lua/token_bucket.lua)
#
# Prints a table (markdown) on stdout; needs redis-server, redis-cli, redis-benchmark.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SLUICE=${SLUICE:-$ROOT/build/sluice}
BATCHES=${BATCHES:-"1 4 8 16 32 64"}
KEYSPACES=${KEYSPACES:-"1 100000"}
CALLS=${CALLS:-20000}    # calls per measurement (decisions: CALLS x B, at least 100,000)
CONNS=${CONNS:-8}        # connections calling at once, one call in flight each (as sluice's workers)

pin() {
  local cpus=""
  case "$1" in load) cpus=${CPUS_LOAD:-} ;; redis) cpus=${CPUS_REDIS:-} ;; esac
  [ -n "$cpus" ] && printf 'taskset -c %s' "$cpus"
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

W=$(mktemp -d /tmp/sluice-decide-cost.XXXXXX)
PORT=$(free_port)
SLUICE_PID=""
cleanup() {
  [ -n "$SLUICE_PID" ] && kill "$SLUICE_PID" 2>/dev/null || true
  redis-cli -p "$PORT" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT

$(pin redis) redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --maxmemory 4gb --maxmemory-policy noeviction --daemonize yes --logfile "$W/redis.log" --dir "$W" >/dev/null
up=""
for _ in $(seq 50); do redis-cli -p "$PORT" PING >/dev/null 2>&1 && { up=1; break; }; sleep 0.1; done
[ -n "$up" ] || { echo "decide_cost: redis-server did not answer:" >&2; cat "$W/redis.log" >&2; exit 1; }

# sluice loads its decide library on connecting; its name says which code it is.
proxy_port=$(free_port)
cat >"$W/sluice.yaml" <<EOF
server: {listen: ["127.0.0.1:$proxy_port"]}
store: {type: redis, redis: {address: "127.0.0.1:$PORT"}}
upstreams: {app: {servers: ["127.0.0.1:9"]}}
routes:
  - {name: bench, match: {path_prefix: /}, upstream: app,
     limits: [{name: tb, algorithm: token_bucket, rate: 1, per: 1m, burst: 1000000}]}
EOF
"$SLUICE" --config "$W/sluice.yaml" >"$W/sluice.log" 2>&1 &
SLUICE_PID=$!
FUNCTION=""
for _ in $(seq 100); do
  FUNCTION=$(redis-cli -p "$PORT" FUNCTION LIST | tr -d '\r' | grep -o 'sluice_decide_[0-9a-f]*' | head -1 || true)
  [ -n "$FUNCTION" ] && break
  sleep 0.1
done
kill "$SLUICE_PID" 2>/dev/null || true
wait "$SLUICE_PID" 2>/dev/null || true
SLUICE_PID=""
[ -n "$FUNCTION" ] || { echo "decide_cost: sluice did not load its library; its log:" >&2; cat "$W/sluice.log" >&2; exit 1; }

# The same call with nothing decided: TIME, and a reply of the same shape (the integers
# packed into one string, as lua/decide.lua answers).
redis-cli -p "$PORT" -x FUNCTION LOAD REPLACE >/dev/null <<'EOF'
#!lua name=bench_empty
redis.register_function('bench_empty', function(keys, args)
  local t = redis.call('TIME')
  local reply = { tonumber(t[1]) * 1000000 + tonumber(t[2]) }
  for i = 1, #keys do
    local m = #reply
    reply[m + 1], reply[m + 2], reply[m + 3], reply[m + 4] = 1, 999999, 0, 60000
  end
  return struct.pack('<' .. string.rep('i8', #reply), unpack(reply))
end)
EOF
# The least a decision that reads its key and then writes it costs in a function: for each key
# a GET, then a SET of a value like a bucket's (16 digits) with PXAT, and the same reply. What
# the decide function spends beyond this is its own logic; what this costs beyond the floor is
# the second command and the function's call.
redis-cli -p "$PORT" -x FUNCTION LOAD REPLACE >/dev/null <<'EOF'
#!lua name=bench_get_set
redis.register_function('bench_get_set', function(keys, args)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local reply = { now }
  for i = 1, #keys do
    redis.call('GET', keys[i])
    local tat = now + 60000000
    redis.call('SET', keys[i], string.format('%d', tat), 'PXAT', string.format('%d', math.ceil(tat / 1000)))
    local m = #reply
    reply[m + 1], reply[m + 2], reply[m + 3], reply[m + 4] = 1, 999999, 0, 60000
  end
  return struct.pack('<' .. string.rep('i8', #reply), unpack(reply))
end)
EOF

# A token a minute, a burst of 1,000,000: a key of 100,000 sees a few dozen requests; the one
# key is emptied again before each measurement, which never takes it past 910,000 (checked).
PLAN="token_bucket 0 1 60000000 1000000"
[ "${KEPT:-}" = 1 ] && PLAN="$PLAN,kept"
cpu_usec() { redis-cli -p "$PORT" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.0f\n", s * 1000000 }'; }
# call FUNCTION B KEYSPACE N: N calls of B requests, keys drawn from KEYSPACE (1: one key)
call() {
  local f=$1 b=$2 space=$3 n=$4 keys="" ones="" i key
  key='sluice:{bench:__rand_int__}:tb'
  [ "$space" = 1 ] && key='sluice:{bench:one}:tb'
  for i in $(seq "$b"); do keys="$keys $key"; ones="$ones 1"; done
  # shellcheck disable=SC2086
  $(pin load) redis-benchmark -p "$PORT" -q -n "$n" -r "$space" -c "$CONNS" \
    FCALL "$f" "$b" $keys 1 "$PLAN" $ones >"$W/bench.out" 2>&1 ||
    { echo "decide_cost: redis-benchmark failed:" >&2; cat "$W/bench.out" >&2; exit 1; }
  if grep -q ERR "$W/bench.out"; then echo "decide_cost: $(grep -m1 ERR "$W/bench.out")" >&2; exit 1; fi
}
# per_decision FUNCTION B KEYSPACE: µs of Redis CPU per decision
per_decision() {
  local n=$(( CALLS > 100000 / $2 ? CALLS : 100000 / $2 )) c0 c1
  [ "$3" = 1 ] && [ $(( n * $2 )) -gt 900000 ] && n=$(( 900000 / $2 ))
  c0=$(cpu_usec); call "$1" "$2" "$3" "$n"; c1=$(cpu_usec)
  awk -v c=$((c1 - c0)) -v d=$((n * $2)) 'BEGIN { printf "%.2f", c / d }'
}

# The floor: a pipelined SET PXAT over 100,000 keys (as loadtest/run.sh measures it).
redis-cli -p "$PORT" FLUSHALL >/dev/null
at=$(( ($(date +%s) + 3600) * 1000 ))
c0=$(cpu_usec)
$(pin load) redis-benchmark -p "$PORT" -q -n 400000 -r 100000 -c 50 -P 16 \
  SET 'sluice:floor:__rand_int__' 1700000000000000 PXAT "$at" >/dev/null 2>&1
c1=$(cpu_usec)
floor=$(awk -v c=$((c1 - c0)) 'BEGIN { printf "%.2f", c / 400000 }')
redis-cli -p "$PORT" FLUSHALL >/dev/null

echo "Redis CPU per decision (µs), $CONNS connections with one call each in flight${KEPT:+, buckets of a route with plans};"
echo "floor: a pipelined SET PXAT over 100,000 keys costs $floor µs."
echo
echo "| keys | batch | decide | x floor | call and arguments only | decide less that | GET and SET only (x floor) |"
echo "|---|---|---|---|---|---|---|"
# The keys afresh, nearly every one there before measuring (a per-client bucket's keys mostly
# exist): decisions for 4 per key.
fresh_keys() {
  redis-cli -p "$PORT" FLUSHALL >/dev/null
  call "$FUNCTION" 8 "$1" $(( $1 > 1 ? $1 / 2 : 1000 ))
}
# What was measured was decided, not refused: the bucket still admits.
still_admits() {
  local key='sluice:{bench:one}:tb' allowed
  [ "$1" = 1 ] || key='sluice:{bench:1}:tb'
  # The reply packs its integers (little-endian int64, lua/decide.lua): "allowed" is the second.
  allowed=$(redis-cli -p "$PORT" --raw FCALL "$FUNCTION" 1 "$key" 1 "$PLAN" 1 | head -c 16 | od -An -t d8 -j 8 -N 8 | tr -d ' \n')
  [ "$allowed" = 1 ] || { echo "decide_cost: the bucket refused ($1 keys): the figures would be refusals" >&2; exit 1; }
}
for space in $KEYSPACES; do
  for b in $BATCHES; do
    fresh_keys "$space"
    d=$(per_decision "$FUNCTION" "$b" "$space")
    still_admits "$space"
    e=$(per_decision bench_empty "$b" "$space")
    g=$(per_decision bench_get_set "$b" "$space")
    awk -v s="$space" -v b="$b" -v d="$d" -v e="$e" -v g="$g" -v f="$floor" \
      'BEGIN { printf "| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f (%.2f) |\n", s, b, d, d / f, e, d - e, g, g / f }'
  done
done
