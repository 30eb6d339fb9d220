#!/usr/bin/env bash
# The classic burst demo: N concurrent requests at a limited route, each status printed in
# the order the requests were numbered, so the 429s are visible at a glance.
# Usage: loadtest/burst.sh [URL] [N]   (default: http://127.0.0.1:8080/login 20; run `make run` first)
set -euo pipefail
url=${1:-http://127.0.0.1:8080/login}
n=${2:-20}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for i in $(seq 1 "$n"); do
  curl -s -o /dev/null -w '%{http_code} %header{retry-after}\n' -X POST "$url" >"$out/$i" &
done
wait

allowed=0 limited=0
for i in $(seq 1 "$n"); do
  read -r status retry <"$out/$i" || true
  case "$status" in
    2*) allowed=$((allowed + 1)); printf '%2d  %s\n' "$i" "$status" ;;
    429) limited=$((limited + 1)); printf '%2d  %s  Retry-After: %s\n' "$i" "$status" "$retry" ;;
    *) printf '%2d  %s\n' "$i" "$status" ;;
  esac
done
echo "$allowed forwarded, $limited limited (429) of $n concurrent requests to $url"
