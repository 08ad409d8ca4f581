#!/usr/bin/env bash
# Chaos scenario 12 (a failover) routes every client through Debian's HAProxy. Installs it
# when missing and we may (root with apt-get); otherwise says what to do. `npm test` runs
# this before the tests (the scenario's quick version is one of them).
set -euo pipefail
if command -v haproxy >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's haproxy for the failover scenario (apt-get)..." >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends haproxy >/dev/null
  exit 0
fi
echo "haproxy is missing: install it (Debian: sudo apt-get install -y haproxy) for the failover scenario's test" >&2
exit 1
