#!/usr/bin/env bash
# A development certificate for the HTTPS listener of conf/sluice.yaml (127.0.0.1:8443):
# a throwaway CA and a certificate for localhost, 127.0.0.1 and ::1 that it signed, in DIR
# (default conf/dev-tls, not committed). Made again when missing or within 7 days of expiry.
#   curl --cacert conf/dev-tls/ca.pem https://localhost:8443/hello
# Never use these for anything but trying sluice out on one machine.
set -euo pipefail
dir=${1:-conf/dev-tls}
mkdir -p "$dir"
if [ -s "$dir/localhost.pem" ] && [ -s "$dir/localhost.key" ] && [ -s "$dir/ca.pem" ] &&
   openssl x509 -in "$dir/localhost.pem" -noout -checkend $((7 * 86400)) >/dev/null 2>&1; then
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
quiet() { "$@" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }; }
quiet openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
  -subj "/CN=sluice development CA (do not trust elsewhere)" \
  -keyout "$work/ca.key" -out "$work/ca.pem"
quiet openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
  -keyout "$work/localhost.key" -out "$work/localhost.csr"
printf '%s\n' "basicConstraints=CA:FALSE" "extendedKeyUsage=serverAuth" \
  "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1" > "$work/ext"
quiet openssl x509 -req -in "$work/localhost.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
  -CAcreateserial -days 365 -extfile "$work/ext" -out "$work/localhost.pem"
chmod 600 "$work/localhost.key"
# The CA's key is not kept: nothing else can be signed with it.
mv "$work/ca.pem" "$work/localhost.pem" "$work/localhost.key" "$dir/"
echo "dev_tls: made a development certificate for localhost in $dir (CA: $dir/ca.pem)"
