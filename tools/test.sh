#!/usr/bin/env bash
# npm test: every check, each a separate step with its own verdict, then a summary.
# The build must pass (the rest runs on dist/); a failing lint, format check or type
# check does not stop the tests from running, so one run shows every failure.
# Arguments go to vitest: `npm test -- --reporter=dot --reporter=json
# --outputFile=/tmp/vitest-times.json` keeps a report for tools/test-times.mjs.
set -uo pipefail
cd "$(dirname "$0")/.."

# The tests run on Node 22 (LTS): the `node` package the workspace installs (tools/bench
# needs it for its peers), whichever Node runs npm. Node 20, which some machines still
# have, is past its end of life.
if [ -x node_modules/node/bin/node ]; then
  PATH="$PWD/node_modules/node/bin:$PATH"
  export PATH
fi
echo "==> npm test: on Node $(node --version)"

failed=()
step() {
  local name=$1
  shift
  echo
  echo "==> npm test: ${name}: $*"
  if "$@"; then
    echo "==> npm test: ${name}: ok"
  else
    echo "==> npm test: ${name}: FAILED"
    failed+=("$name")
  fi
}

step chromium bash tools/ensure-chromium.sh
step haproxy bash tools/ensure-haproxy.sh
# The three static checks run side by side (each mostly waits on one core, and they
# share nothing); each prints its output and verdict when all three are done. The format
# check reads no build output, so it runs beside the build, whose one TypeScript process
# leaves the other core idle.
checks=$(mktemp -d)
trap 'rm -rf "$checks"' EXIT
background() {
  local name=$1
  shift
  {
    echo "==> npm test: ${name}: $*"
    if "$@"; then echo ok >"$checks/$name.verdict"; else echo FAILED >"$checks/$name.verdict"; fi
  } >"$checks/$name.log" 2>&1 &
}
background format npx prettier --check --log-level warn '**/*.{ts,mts,mjs,js}'
# Every package's build in one TypeScript process (tools/build.mjs says why).
step build node tools/build.mjs
if [[ " ${failed[*]} " == *" build "* ]]; then
  wait
  echo "==> npm test: the build failed; nothing else can run"
  exit 1
fi
background typecheck npx tsc -p tsconfig.json
background lint npx eslint .
wait
for name in typecheck lint format; do
  echo
  cat "$checks/$name.log"
  verdict=$(cat "$checks/$name.verdict" 2>/dev/null || echo FAILED)
  echo "==> npm test: ${name}: ${verdict}"
  [[ $verdict == ok ]] || failed+=("$name")
done
step vitest npx vitest run "$@"

echo
if ((${#failed[@]} > 0)); then
  echo "==> npm test: FAILED: ${failed[*]}"
  exit 1
fi
echo "==> npm test: every step passed"
