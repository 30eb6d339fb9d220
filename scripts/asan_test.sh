#!/usr/bin/env bash
# Runs every ctest test against a sanitizer build (make asan) and fails on any report:
# a sanitizer aborts the process it finds a fault in (-fno-sanitize-recover=all), and every
# report is also written under $REPORTS, which must stay empty.
set -euo pipefail
build=${1:-build-asan}
REPORTS=$(mktemp -d /tmp/sluice-sanitizer.XXXXXX)
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:log_path=$REPORTS/asan:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$REPORTS/ubsan"
export LSAN_OPTIONS="suppressions=$(pwd)/scripts/lsan.supp:print_suppressions=0"
export SLUICE_SANITIZER=1
status=0
(cd "$build" && ctest --output-on-failure --timeout 900 -j2) || status=$?
if compgen -G "$REPORTS/*" >/dev/null; then
  echo "asan: sanitizer reports:" >&2
  for f in "$REPORTS"/*; do echo "== $f" >&2; head -60 "$f" >&2; done
  status=1
fi
rm -rf "$REPORTS"
exit $status
