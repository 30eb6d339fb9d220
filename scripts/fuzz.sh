#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs them.
#   scripts/fuzz.sh smoke      each target for FUZZ_SMOKE_SECONDS (12), from its seed corpus
#   scripts/fuzz.sh run        each target for FUZZ_SECONDS (600)
#   scripts/fuzz.sh build      only build
#   FUZZ_TARGETS="body_reader head_scan" limits the targets.
# A target is tests/fuzz/NAME_fuzz.cpp plus the sources listed for it below; its seeds are in
# tests/fuzz/corpus/NAME/. Findings (crash-*, timeout-*, leak-*, oom-*) go to
# build-fuzz/findings/NAME/; reproduce one with: build-fuzz/NAME_fuzz FILE
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-smoke}
out=${FUZZ_BUILD:-build-fuzz}
mkdir -p "$out"

declare -A sources=(
  [body_reader]="src/http/body_reader.cpp"
  [request_target]="src/http/request_target.cpp"
  [head_scan]="src/http/head_scan.cpp src/http/header_rules.cpp src/http/field_list.cpp"
  [response_head]="src/http/field_list.cpp src/http/head_scan.cpp src/http/header_rules.cpp"
  [request_head]="src/http/request_head.cpp src/http/head_scan.cpp src/http/header_rules.cpp src/http/field_list.cpp src/http/request_target.cpp src/http/body_reader.cpp"
  [redis_reply]="src/redis/redis_reply.cpp src/limit/decide_reply.cpp"
  [topology_parse]="src/redis/topology_parse.cpp src/redis/redis_reply.cpp src/config/endpoint.cpp src/net/cidr.cpp"
  [config_loader]="$(echo src/config/*.cpp) src/net/cidr.cpp src/tls/pem.cpp src/time/time_zone.cpp src/time/calendar.cpp src/auth/jwt.cpp src/auth/json.cpp src/http/request_target.cpp"
  [pem]="src/tls/pem.cpp"
  [time_zone]="src/time/time_zone.cpp src/time/calendar.cpp"
  [query_string]="src/observe/query_string.cpp"
  [access_format]="src/config/access_format.cpp src/observe/access_log.cpp src/observe/json_text.cpp src/observe/log_time.cpp"
  [h2_codec]="src/http/h2_codec.cpp src/alloc/library_memory.cpp"
  [key_values]="src/limit/key_values.cpp src/net/cidr.cpp"
  [json]="src/auth/json.cpp"
  [plan_map]="$(echo src/config/*.cpp) src/net/cidr.cpp src/tls/pem.cpp src/time/time_zone.cpp src/time/calendar.cpp src/auth/jwt.cpp src/auth/json.cpp src/http/request_target.cpp"
  [jwt]="src/auth/jwt.cpp src/auth/json.cpp"
  [reported_cost]="src/http/reported_cost.cpp src/http/body_reader.cpp src/http/field_list.cpp"
)
declare -A libs=(
  [redis_reply]="$(pkg-config --libs hiredis)"
  [topology_parse]="$(pkg-config --libs hiredis)"
  [config_loader]="-lyaml-cpp -lspdlog -lfmt -lssl -lcrypto"
  [plan_map]="-lyaml-cpp -lspdlog -lfmt -lssl -lcrypto"
  [pem]="-lssl -lcrypto"
  [access_format]="-lspdlog -lfmt"
  [h2_codec]="-lnghttp2 -lcrypto"
  [jwt]="-lssl -lcrypto"
)
declare -A cflags=(
  [redis_reply]="$(pkg-config --cflags hiredis | sed 's|-I/usr/include/hiredis||')"
  [topology_parse]="$(pkg-config --cflags hiredis | sed 's|-I/usr/include/hiredis||')"
  [config_loader]="-DSPDLOG_FMT_EXTERNAL -DSPDLOG_SHARED_LIB -DSPDLOG_COMPILED_LIB"
  [plan_map]="-DSPDLOG_FMT_EXTERNAL -DSPDLOG_SHARED_LIB -DSPDLOG_COMPILED_LIB"
  [access_format]="-DSPDLOG_FMT_EXTERNAL -DSPDLOG_SHARED_LIB -DSPDLOG_COMPILED_LIB"
)
targets=${FUZZ_TARGETS:-"body_reader request_target head_scan request_head response_head redis_reply topology_parse config_loader pem time_zone query_string access_format h2_codec key_values json jwt plan_map reported_cost"}
CXX=${FUZZ_CXX:-clang++-14}
flags="-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Isrc"

for t in $targets; do
  bin="$out/${t}_fuzz"
  srcs="tests/fuzz/${t}_fuzz.cpp ${sources[$t]}"
  # Rebuilt when any of its sources or the headers under src/ changed.
  if [ ! -x "$bin" ] || [ -n "$(find $srcs src -newer "$bin" \( -name '*.cpp' -o -name '*.hpp' \) -print -quit)" ]; then
    echo "fuzz: building $t"
    # shellcheck disable=SC2086
    $CXX $flags ${cflags[$t]:-} $srcs ${libs[$t]:-} -o "$bin"
  fi
done
[ "$mode" = build ] && exit 0

seconds=${FUZZ_SECONDS:-600}
[ "$mode" = smoke ] && seconds=${FUZZ_SMOKE_SECONDS:-12}
status=0
for t in $targets; do
  findings="$out/findings/$t"
  work="$out/corpus/$t"  # grows during runs; the seeds stay as they are
  mkdir -p "$findings" "$work"
  echo "fuzz: $t for ${seconds}s"
  if ! "$out/${t}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$findings/" "$work" "tests/fuzz/corpus/$t" >"$out/$t.log" 2>&1; then
    echo "fuzz: $t FOUND A PROBLEM (see $out/$t.log and $findings/):" >&2
    grep -E "ERROR|SUMMARY|Test unit written" "$out/$t.log" | head -20 >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$out/$t.log" | sed "s/^/fuzz: $t: /"
  fi
done
exit $status
