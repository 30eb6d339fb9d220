#!/usr/bin/env bash
# What one decision costs Redis, counted in instructions rather than CPU time: Redis under
# valgrind's callgrind, sluice's decide function (loaded by sluice itself) called with
# redis-benchmark as a worker calls it (a batch of B requests per FCALL, one token bucket
# each, over 1 key or 100,000 keys), next to a function that only GETs each key and SETs it
# again (the least a decision that reads its key and then writes it can cost) and a plain
# pipelined `SET key value PXAT t` over 100,000 keys (issue 24's floor). Instruction counts
# do not move with the machine's other load (CPU time moves by 10-20 % between runs of
# loadtest/decide_cost.sh), so this is the measure for a change to the Lua code; they leave
# out the kernel's share (the network), which decide_cost.sh includes.
#
#   loadtest/decide_instructions.sh          (about 3 minutes)
#   BATCHES="8 32" KEYSPACES="1 100000" CALLS=1500 SLUICE=path (default build/sluice)
#
# Prints a table (markdown) on stdout; needs redis-server, redis-cli, redis-benchmark and
# valgrind (installed when missing, like loadtest/instructions.sh does).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SLUICE=${SLUICE:-$ROOT/build/sluice}
BATCHES=${BATCHES:-"8 32"}
KEYSPACES=${KEYSPACES:-"1 100000"}
CALLS=${CALLS:-1500}

command -v callgrind_control >/dev/null || {
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq valgrind >/dev/null
}
[ -x "$SLUICE" ] || { echo "decide_instructions: no $SLUICE (make build)" >&2; exit 1; }

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

W=$(mktemp -d /tmp/sluice-decide-instructions.XXXXXX)
PORT=$(free_port)
VALGRIND_PID=""
SLUICE_PID=""
cleanup() {
  [ -n "$SLUICE_PID" ] && kill "$SLUICE_PID" 2>/dev/null || true
  redis-cli -p "$PORT" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  [ -n "$VALGRIND_PID" ] && { wait "$VALGRIND_PID" 2>/dev/null || true; }
  rm -rf "$W"
}
trap cleanup EXIT

# --hz 1: Redis's timer (expiring keys, statistics) runs once a second of wall time, which
# under valgrind would otherwise add its work to every measurement.
valgrind --tool=callgrind --callgrind-out-file="$W/cg.out" \
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --hz 1 --dir "$W" >"$W/valgrind.log" 2>&1 &
VALGRIND_PID=$!
up=""
for _ in $(seq 150); do redis-cli -p "$PORT" PING >/dev/null 2>&1 && { up=1; break; }; sleep 0.2; done
[ -n "$up" ] || { echo "decide_instructions: redis-server did not start under valgrind:" >&2; cat "$W/valgrind.log" >&2; exit 1; }

cat >"$W/sluice.yaml" <<EOF
server: {listen: ["127.0.0.1:$(free_port)"]}
store: {type: redis, redis: {address: "127.0.0.1:$PORT"}}
upstreams: {app: {servers: ["127.0.0.1:9"]}}
routes:
  - {name: bench, match: {path_prefix: /}, upstream: app,
     limits: [{name: tb, algorithm: token_bucket, rate: 1, per: 1m, burst: 1000000}]}
EOF
"$SLUICE" --config "$W/sluice.yaml" >"$W/sluice.log" 2>&1 &
SLUICE_PID=$!
FUNCTION=""
for _ in $(seq 150); do
  FUNCTION=$(redis-cli -p "$PORT" FUNCTION LIST | tr -d '\r' | grep -o 'sluice_decide_[0-9a-f]*' | head -1 || true)
  [ -n "$FUNCTION" ] && break
  sleep 0.2
done
kill "$SLUICE_PID" 2>/dev/null || true
wait "$SLUICE_PID" 2>/dev/null || true
SLUICE_PID=""
[ -n "$FUNCTION" ] || { echo "decide_instructions: sluice did not load its library; its log:" >&2; cat "$W/sluice.log" >&2; exit 1; }

# The same function as loadtest/decide_cost.sh's bench_get_set.
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

PLAN="token_bucket 0 1 60000000 1000000"
# counted CMD...: Redis's instructions while CMD runs (counters zeroed before, dumped after:
# callgrind writes each dump to cg.out.N, N counting up)
counted() {
  callgrind_control -z "$VALGRIND_PID" >/dev/null 2>&1
  "$@" >"$W/bench.out" 2>&1 || { echo "decide_instructions: $1 failed:" >&2; cat "$W/bench.out" >&2; exit 1; }
  if grep -q ERR "$W/bench.out"; then echo "decide_instructions: $(grep -m1 ERR "$W/bench.out")" >&2; exit 1; fi
  callgrind_control -d "$VALGRIND_PID" >/dev/null 2>&1
  local last
  last=$(find "$W" -maxdepth 1 -name 'cg.out.*' -printf '%f\n' | sed 's/^cg\.out\.//' | sort -n | tail -1)
  awk '/^summary:/ { print $2; exit }' "$W/cg.out.$last"
}
# call FUNCTION B KEYSPACE N: N calls of B requests, keys drawn from KEYSPACE (1: one key)
call() {
  local f=$1 b=$2 space=$3 n=$4 keys="" ones="" i key
  key='sluice:{bench:__rand_int__}:tb'
  [ "$space" = 1 ] && key='sluice:{bench:one}:tb'
  for i in $(seq "$b"); do keys="$keys $key"; ones="$ones 1"; done
  # shellcheck disable=SC2086
  redis-benchmark -p "$PORT" -q -n "$n" -r "$space" -c 8 FCALL "$f" "$b" $keys 1 "$PLAN" $ones
}

# The floor: a pipelined SET PXAT over 100,000 keys that all exist (as loadtest/run.sh's).
at=$(( ($(date +%s) + 3600) * 1000 ))
set_floor() { redis-benchmark -p "$PORT" -q -n "$1" -r 100000 -c 8 -P 16 SET 'sluice:floor:__rand_int__' 1700000000000000 PXAT "$at"; }
set_floor 300000 >/dev/null 2>&1
floor=$(awk -v i="$(counted set_floor 50000)" 'BEGIN { printf "%.0f", i / 50000 }')
redis-cli -p "$PORT" FLUSHALL >/dev/null

echo "Redis instructions per decision (callgrind), 8 connections with one call each in flight;"
echo "floor: a pipelined SET PXAT over 100,000 keys executes $floor instructions."
echo
echo "| keys | batch | decide | x floor | GET and SET only | x floor | decide less that |"
echo "|---|---|---|---|---|---|---|"
for space in $KEYSPACES; do
  for b in $BATCHES; do
    # The keys afresh, nearly every one there before measuring (as decide_cost.sh makes them).
    redis-cli -p "$PORT" FLUSHALL >/dev/null
    call "$FUNCTION" 8 "$space" $(( space > 1 ? space / 2 : 200 )) >/dev/null 2>&1
    d=$(counted call "$FUNCTION" "$b" "$space" "$CALLS")
    g=$(counted call bench_get_set "$b" "$space" "$CALLS")
    awk -v s="$space" -v b="$b" -v d="$d" -v g="$g" -v n=$((CALLS * b)) -v f="$floor" \
      'BEGIN { printf "| %s | %s | %.0f | %.2f | %.0f | %.2f | %.0f |\n", s, b, d / n, d / n / f, g / n, g / n / f, (d - g) / n }'
  done
done
