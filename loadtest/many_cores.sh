#!/usr/bin/env bash
# The issue 24 layout on a machine with 16 or more cores: loadtest/run.sh twice, each role
# pinned to cores of its own (taskset), with 4 and then 8 proxy workers.
#
#   4 workers: wrk on 0-3 (4 threads), proxy on 4-7, upstream nginx on 8-11 (4 workers), Redis on 12
#   8 workers: wrk on 0-3 (4 threads), proxy on 4-11, upstream nginx on 12-14 (3 workers), Redis on 15
#
#   loadtest/many_cores.sh          results in loadtest/results/many_cores_w4 and _w8
#   RESULTS_BASE=DIR  SCENARIOS_W4="..."  SCENARIOS_W8="..."  (other run.sh settings pass through)
#   LAYOUTS="4 8"                   which of the two layouts to run
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BASE=${RESULTS_BASE:-$HERE/results}
[ "$(nproc)" -ge 16 ] || { echo "many_cores: needs 16 cores, this machine has $(nproc)" >&2; exit 1; }

export DURATION=${DURATION:-5s} ROUNDS=${ROUNDS:-2} WARMUP=${WARMUP:-1s} THREADS=4 CPUS_LOAD=0-3
W4=${SCENARIOS_W4:-"none@64 token_bucket@64 sliding_window@64 clients100k@64 clients100k_memory@64 clients100k_limit_req@64 clients100k@256 clients100k@1000"}
W8=${SCENARIOS_W8:-"none@64 clients100k@64 none@256 clients100k@256 clients100k_memory@256"}
rc=0
for layout in ${LAYOUTS:-4 8}; do
  case $layout in
    4) RESULTS=$BASE/many_cores_w4 WORKERS=4 UPSTREAM_WORKERS=4 CPUS_PROXY=4-7 CPUS_UPSTREAM=8-11 \
         CPUS_REDIS=12 SCENARIOS=$W4 "$HERE/run.sh" || rc=1 ;;
    8) RESULTS=$BASE/many_cores_w8 WORKERS=8 UPSTREAM_WORKERS=3 CPUS_PROXY=4-11 CPUS_UPSTREAM=12-14 \
         CPUS_REDIS=15 SCENARIOS=$W8 "$HERE/run.sh" || rc=1 ;;
    *) echo "many_cores: no layout $layout (4 or 8)" >&2; rc=1 ;;
  esac
done
exit $rc
