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
#   loadtest/decide_instructions.sh          (about 5 minutes)
#   BATCHES="8 32" KEYSPACES="1 100000" CALLS=1500 SLUICE=path (default build/sluice)
#   PLAN="sliding_window 0 1 10000000 1000000"   (another limit: lua/decide.lua's plan text;
#                                                 default a token bucket, as run.sh's clients100k;
#   PLAN="concurrency 0 1 1000000 30000000"       a concurrency limit's requests carry owner tokens)
#   NUMBERED=1   (each request's plan number sent, as a batch of several plans is: a library
#                 before sluice's fifteenth part of issue 24 needs them)
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

# shellcheck source=loadtest/decide_functions.sh
. "$HERE/decide_functions.sh"

W=$(mktemp -d /tmp/sluice-decide-instructions.XXXXXX)
PORT=$(free_port)
VALGRIND_PID=""
cleanup() {
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
redis_answers "$PORT" 30 "$W/valgrind.log" || exit 1

FUNCTION=$(decide_library "$PORT" "$SLUICE" "$W") || { echo "decide_instructions: no decide function" >&2; exit 1; }
bench_functions "$PORT"

PLAN=${PLAN:-"token_bucket 0 1 60000000 1000000"}
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
call() { decide_call "$PORT" 8 "$PLAN" "$@"; }

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
    # (a limit other than a token bucket leaves keys of another type: GET would refuse them)
    case $PLAN in token_bucket*) ;; *) redis-cli -p "$PORT" FLUSHALL >/dev/null ;; esac
    g=$(counted call bench_get_set "$b" "$space" "$CALLS")
    awk -v s="$space" -v b="$b" -v d="$d" -v g="$g" -v n=$((CALLS * b)) -v f="$floor" \
      'BEGIN { printf "| %s | %s | %.0f | %.2f | %.0f | %.2f | %.0f |\n", s, b, d / n, d / n / f, g / n, g / n / f, (d - g) / n }'
  done
done
