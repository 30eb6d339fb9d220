#!/bin/bash
# Health check for the sluice container (installed as /usr/local/bin/sluice-healthcheck).
# GETs /healthz on the admin port and exits 0 on a 200, 1 otherwise.
#
#   sluice-healthcheck [HOST:PORT]      default 127.0.0.1:9901 (admin.listen)
#
# Bash only (its /dev/tcp), so the slim runtime image needs no curl. Docker's --timeout
# bounds the connect; the read of the status line gives up after 3 seconds by itself.
set -u
addr=${1:-127.0.0.1:9901}
host=${addr%:*}
host=${host#[}
host=${host%]}
port=${addr##*:}

exec 3<>"/dev/tcp/${host}/${port}" || exit 1
printf 'GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$addr" >&3 || exit 1
IFS= read -r -t 3 status <&3 || exit 1
exec 3<&-
case $status in
  "HTTP/1.1 200 "* | "HTTP/1.0 200 "*) exit 0 ;;
  *) echo "sluice-healthcheck: ${addr}/healthz answered: ${status%$'\r'}" >&2; exit 1 ;;
esac
