# shellcheck shell=bash
# Sourced by loadtest/decide_cost.sh and loadtest/decide_instructions.sh: sluice's decide
# function in a Redis, the functions it is measured against, and a worker's calls of it.

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# redis_answers PORT SECONDS LOG: waits up to SECONDS for the Redis on PORT to answer PING;
# fails with LOG (what the server wrote) when it does not.
redis_answers() {
  local _
  for _ in $(seq $(($2 * 10))); do redis-cli -p "$1" PING >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "redis-server did not answer:" >&2
  cat "$3" >&2
  return 1
}

# decide_library PORT SLUICE DIR: lets sluice load its decide library into the Redis on PORT
# (it does so on connecting; the function's name says which code it is) and prints the
# function's name. Fails with sluice's log when none appears.
decide_library() {
  local port=$1 sluice=$2 dir=$3 pid name="" _
  cat >"$dir/sluice.yaml" <<EOF
server: {listen: ["127.0.0.1:$(free_port)"]}
store: {type: redis, redis: {address: "127.0.0.1:$port"}}
upstreams: {app: {servers: ["127.0.0.1:9"]}}
routes:
  - {name: bench, match: {path_prefix: /}, upstream: app,
     limits: [{name: tb, algorithm: token_bucket, rate: 1, per: 1m, burst: 1000000}]}
EOF
  "$sluice" --config "$dir/sluice.yaml" >"$dir/sluice.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do  # (30 s: a Redis under valgrind is slow)
    name=$(redis-cli -p "$port" FUNCTION LIST | tr -d '\r' | grep -o 'sluice_decide_[0-9a-f]*' | head -1 || true)
    [ -n "$name" ] && break
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  [ -n "$name" ] || { echo "sluice did not load its library; its log:" >&2; cat "$dir/sluice.log" >&2; return 1; }
  echo "$name"
}

# bench_functions PORT: loads the two functions a decision is measured against.
# bench_empty: the same call with nothing decided (TIME, and a reply of the same shape: the
# integers packed into one string, as lua/decide.lua answers). bench_get_set: the least a
# decision that reads its key and then writes it costs in a function: for each key a GET,
# then a SET of a value like a bucket's (16 digits) with PXAT, and the same reply. What the
# decide function spends beyond it is its own logic; what it costs beyond the SET floor is
# the second command and the function's call.
bench_functions() {
  redis-cli -p "$1" -x FUNCTION LOAD REPLACE >/dev/null <<'EOF'
#!lua name=bench_functions
local function reply_of(now, count)
  local reply = { now }
  for i = 1, count do
    local m = #reply
    reply[m + 1], reply[m + 2], reply[m + 3], reply[m + 4] = 1, 999999, 0, 60000
  end
  return struct.pack('<' .. string.rep('i8', #reply), unpack(reply))
end
local function time()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
redis.register_function('bench_empty', function(keys, args)
  return reply_of(time(), #keys)
end)
redis.register_function('bench_get_set', function(keys, args)
  local now = time()
  for i = 1, #keys do
    redis.call('GET', keys[i])
    local tat = now + 60000000
    redis.call('SET', keys[i], string.format('%d', tat), 'PXAT', string.format('%d', math.ceil(tat / 1000)))
  end
  return reply_of(now, #keys)
end)
EOF
}

# decide_call PORT CONNS PLAN FUNCTION B KEYSPACE N [PREFIX...]: N calls of FUNCTION with B
# requests each against PLAN, keys drawn from KEYSPACE (1: one key), from CONNS connections
# with one call each in flight (redis-benchmark, run under PREFIX, e.g. taskset). As sluice
# sends a batch of one plan: without the requests' plan numbers; NUMBERED=1 adds them (the
# form of a batch of several plans), for the bench functions too. A concurrency plan goes
# numbered, each request with its owner token "t<i>-<random>" (over one key the random part
# is always 0: each call takes the same B slots again, renewing their leases).
decide_call() {
  local port=$1 conns=$2 plan=$3 f=$4 b=$5 space=$6 n=$7 keys="" ones="" i key
  shift 7
  key='sluice:{bench:__rand_int__}:tb'
  [ "$space" = 1 ] && key='sluice:{bench:one}:tb'
  for i in $(seq "$b"); do keys="$keys $key"; done
  case $plan in
    concurrency*) for i in $(seq "$b"); do ones="$ones 1 t$i-__rand_int__"; done ;;
    *) if [ -n "${NUMBERED:-}" ]; then for i in $(seq "$b"); do ones="$ones 1"; done; fi ;;
  esac
  # shellcheck disable=SC2086
  "$@" redis-benchmark -p "$port" -q -n "$n" -r "$space" -c "$conns" FCALL "$f" "$b" $keys 1 "$plan" $ones
}
