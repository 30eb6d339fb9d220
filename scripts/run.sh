#!/usr/bin/env bash
# `make run`: sluice on its defaults, with a throwaway local Redis and a demo backend
# started only when nothing answers at the configured addresses. Ctrl-C stops all of it.
set -euo pipefail
bin=${1:-build/sluice}
config=${2:-conf/sluice.yaml}

# The addresses `make run` looks after, read from the config (defaults as in conf/sluice.yaml).
redis_addr=$(sed -n '/^store:/,/^[a-z]/ s/^ *address: *"\{0,1\}\([^"#]*\)"\{0,1\}.*/\1/p' "$config" | head -n1 | tr -d ' ')
redis_addr=${redis_addr:-127.0.0.1:6379}
backend_addr=$(sed -n '/^upstreams:/,/^[a-z]/ s/^ *servers: *\[ *"\{0,1\}\([^]",]*\).*/\1/p' "$config" | head -n1 | tr -d ' ')
backend_addr=${backend_addr:-127.0.0.1:8081}

# The HTTPS listener of conf/sluice.yaml uses a development certificate made here.
bash scripts/dev_tls.sh

children=()   # redis-server and the demo backend, when this script started them
sluice_pid=""
cleanup() {
  # Ctrl-C reaches sluice directly (same process group); let it finish its graceful stop.
  [ -n "$sluice_pid" ] && wait "$sluice_pid" 2>/dev/null
  for pid in "${children[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap '[ -n "$sluice_pid" ] && kill -TERM "$sluice_pid" 2>/dev/null; exit 143' TERM

listening() {  # host:port answers a TCP connect
  (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null
}

if [[ $redis_addr != unix:* ]] && ! listening "$redis_addr"; then
  echo "make run: no Redis at $redis_addr; starting a throwaway redis-server there"
  # noeviction with a maxmemory: what a limiter's Redis should have (README "Redis memory and
  # eviction"); sluice warns at start-up about a Redis without them.
  redis-server --bind "${redis_addr%:*}" --port "${redis_addr##*:}" --save "" --appendonly no \
    --maxmemory 256mb --maxmemory-policy noeviction --daemonize no --loglevel warning &
  children+=($!)
fi
if ! listening "$backend_addr"; then
  echo "make run: nothing listens on $backend_addr; starting the demo backend there"
  python3 scripts/demo_backend.py --listen "$backend_addr" &
  children+=($!)
fi
for _ in $(seq 50); do listening "$backend_addr" && break; sleep 0.1; done
# (sluice reads the Redis's memory settings as it starts: a Redis still starting would only
# get a "not checked" warning)
if [[ $redis_addr != unix:* ]]; then
  for _ in $(seq 50); do listening "$redis_addr" && break; sleep 0.1; done
fi

echo "make run: sluice -c $config (Ctrl-C stops everything)"
"$bin" -c "$config" &
sluice_pid=$!
wait "$sluice_pid"
