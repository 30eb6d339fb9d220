#!/usr/bin/env bash
# Pack what loadtest/run.sh and loadtest/cluster_scale.py need, for a machine that has no
# package registry (a lent many-core server): this machine's sluice build, nginx, wrk, Redis
# (server, cli, benchmark) and curl, every shared library they load, and this machine's
# dynamic loader. Each program gets a wrapper in DIR/bin that starts it through the carried
# loader with the carried libraries, so nothing of the other machine's own libraries is used.
#
#   loadtest/bundle.sh [DIR]        DIR defaults to .bench (ignored by git; carry it)
#   SLUICE=build/sluice             the build to pack (Release); SLUICE_B=... packs a second
#                                   one as sluice-b, for before/after runs in one go
#
# On the other machine:  PATH=$PWD/.bench/bin:$PATH SLUICE=$PWD/.bench/bin/sluice loadtest/run.sh
# (nginx also needs /var/log/nginx and /var/lib/nginx to exist: it opens them before its
# configuration is read.)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
DIR=${1:-$ROOT/.bench}
SLUICE=${SLUICE:-$ROOT/build/sluice}

rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/real" "$DIR/lib"

pack() {  # pack NAME PATH: the program, its libraries and a wrapper named NAME
  local name=$1 path
  path=$(readlink -f "$2")
  [ -x "$path" ] || { echo "bundle: $2 not found" >&2; exit 1; }
  cp "$path" "$DIR/real/$name"
  ldd "$path" | awk '/=> \// { print $3 } /^\t\/.*ld-linux/ { print $1 }' | while read -r lib; do
    cp -n "$(readlink -f "$lib")" "$DIR/lib/$(basename "$lib")"
  done
  cat >"$DIR/bin/$name" <<EOF
#!/bin/sh
d=\$(cd "\$(dirname "\$0")/.." && pwd)
exec "\$d/lib/ld-linux-x86-64.so.2" --library-path "\$d/lib" "\$d/real/$name" "\$@"
EOF
  chmod +x "$DIR/bin/$name"
}

pack sluice "$SLUICE"
[ -n "${SLUICE_B:-}" ] && pack sluice-b "$SLUICE_B"
pack nginx "$(command -v nginx || echo /usr/sbin/nginx)"
for p in wrk redis-server redis-cli redis-benchmark curl; do pack "$p" "$(command -v "$p")"; done
du -sh "$DIR" >&2
