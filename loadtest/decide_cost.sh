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
# shellcheck source=loadtest/decide_functions.sh
. "$HERE/decide_functions.sh"

W=$(mktemp -d /tmp/sluice-decide-cost.XXXXXX)
PORT=$(free_port)
cleanup() {
  redis-cli -p "$PORT" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT

$(pin redis) redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --maxmemory 4gb --maxmemory-policy noeviction --daemonize yes --logfile "$W/redis.log" --dir "$W" >/dev/null
redis_answers "$PORT" 5 "$W/redis.log" || exit 1

FUNCTION=$(decide_library "$PORT" "$SLUICE" "$W") || { echo "decide_cost: no decide function" >&2; exit 1; }
bench_functions "$PORT"

# A token a minute, a burst of 1,000,000: a key of 100,000 sees a few dozen requests; the one
# key is emptied again before each measurement, which never takes it past 910,000 (checked).
PLAN="token_bucket 0 1 60000000 1000000"
[ "${KEPT:-}" = 1 ] && PLAN="$PLAN,kept"
cpu_usec() { redis-cli -p "$PORT" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.0f\n", s * 1000000 }'; }
# call FUNCTION B KEYSPACE N: N calls of B requests, keys drawn from KEYSPACE (1: one key)
call() {
  # shellcheck disable=SC2046
  decide_call "$PORT" "$CONNS" "$PLAN" "$@" $(pin load) >"$W/bench.out" 2>&1 ||
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
