#!/usr/bin/env bash
# The classic burst demo: N concurrent requests at a limited route, each status printed in
# the order the requests were numbered (with the limit that refused it), so the 429s are
# visible at a glance.
# Usage: loadtest/burst.sh [URL] [N]   (default: http://127.0.0.1:8080/login 20; run `make run` first)
#
# Every run starts from a full quota: first it resets this client's limits on the route
# through the admin port (DELETE /limits, as support staff would), so that what earlier runs
# used of the route's other limits (the demo login route also allows 30 per rolling minute)
# does not change the outcome. With `make run`'s defaults each run forwards exactly 10 and
# answers 10 with 429 from the `burst` limit. Settings (environment):
#   ADMIN   the admin address (default http://127.0.0.1:9901; empty: no reset, the counts
#           then carry over from run to run)
#   ROUTE   the route the URL reaches (default login)
#   CLIENT  the client address sluice sees for this machine (default 127.0.0.1)
#   TOKEN   the admin token, when admin.token is set
set -euo pipefail
url=${1:-http://127.0.0.1:8080/login}
n=${2:-20}
admin=${ADMIN-http://127.0.0.1:9901}
route=${ROUTE:-login}
client=${CLIENT:-127.0.0.1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

if [ -n "$admin" ]; then
  auth=()
  [ -n "${TOKEN:-}" ] && auth=(-H "Authorization: Bearer $TOKEN")
  status=$(curl -s -o "$out/reset" -w '%{http_code}' "${auth[@]}" -X DELETE \
    "$admin/limits?route=$route&client=$client" || true)
  if [ "$status" = 200 ]; then
    echo "reset $client's limits on route $route ($admin/limits), so this run starts full"
  else
    echo "could not reset $client's limits on route $route at $admin (status ${status:-none}):" \
      "earlier runs' counts carry over" >&2
  fi
fi

for i in $(seq 1 "$n"); do
  curl -s -o "$out/$i.body" -w '%{http_code} %header{retry-after}\n' -X POST "$url" >"$out/$i" &
done
wait

allowed=0 limited=0
for i in $(seq 1 "$n"); do
  read -r status retry <"$out/$i" || true
  case "$status" in
    2*) allowed=$((allowed + 1)); printf '%2d  %s\n' "$i" "$status" ;;
    429)
      limited=$((limited + 1))
      limit=$(sed -n 's/.*"limit":"\([^"]*\)".*/\1/p' "$out/$i.body")
      printf '%2d  %s  Retry-After: %s  limit: %s\n' "$i" "$status" "$retry" "${limit:-?}" ;;
    *) printf '%2d  %s\n' "$i" "$status" ;;
  esac
done
echo "$allowed forwarded, $limited limited (429) of $n concurrent requests to $url"
