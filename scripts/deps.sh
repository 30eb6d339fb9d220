#!/usr/bin/env bash
# Installs what building, running and testing sluice needs (Debian bookworm packages).
# Idempotent: does nothing when everything is already there.
set -euo pipefail

packages=(
  build-essential cmake make pkg-config ccache
  libboost1.81-dev libhiredis-dev libyaml-cpp-dev libspdlog-dev libssl-dev catch2
  libnghttp2-dev           # HTTP/2 to clients (src/http/h2_codec.cpp)
  openssl                  # tests: throwaway CAs and certificates for the TLS tests
  redis-server python3 curl
  tzdata                   # fixed_window calendar windows: time_zone reads /usr/share/zoneinfo
  python3-websockets       # tests/integration/test_websocket.py: a real WebSocket client and server
  nghttp2-client python3-h2 python3-grpcio  # tests/integration/test_http2.py: real HTTP/2 and gRPC clients
  nginx-light              # tests/integration/test_check_action.py: nginx auth_request in front of sluice
  clang-14 libclang-rt-14-dev  # scripts/fuzz.sh: libFuzzer targets with ASan + UBSan
  chromium                 # tests/integration/test_stats_page.py: the /stats page in a real browser
  docker-compose systemd   # tests/integration/test_containers.py: `docker-compose config`,
                           # `systemd-analyze verify` (no Docker engine is needed for either)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "deps: ${missing[*]} must be installed with apt, which needs root: run this as root" \
         "(or install sudo), or install them yourself and run it again" >&2
    exit 1
  fi
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
