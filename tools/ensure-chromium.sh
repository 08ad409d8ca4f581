#!/usr/bin/env bash
# The dashboard's browser tests drive Debian's Chromium (playwright-core cannot download
# a browser here). Installs it when missing and we may (root with apt-get); otherwise
# says what to do. `npm test` runs this first.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium for the browser tests (apt-get)..." >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  exit 0
fi
echo "chromium is missing: install it (Debian: sudo apt-get install -y chromium) for the dashboard's browser tests" >&2
exit 1
