#!/usr/bin/env bash
# Formats and lint-fixes the whole repository: Prettier (.prettierrc.json) over every
# TypeScript and JavaScript file, ESLint's automatic fixes (eslint.config.js), then Prettier
# again (a fix such as removing an assertion can leave a line Prettier wraps differently).
# Run it from the repository root (`npm run fix`), review the diff, commit it alone.
# What ESLint cannot fix by itself is listed at the end (`npm run lint` shows it again).
set -uo pipefail
cd "$(dirname "$0")/.."
files='**/*.{ts,mts,mjs,js}'
npx prettier --write --log-level warn "$files" || exit 1
npx eslint --fix .
lint=$?
npx prettier --write --log-level warn "$files" || exit 1
if ((lint != 0)); then
  echo
  echo "ESLint fixed what it could; the findings above need a person (npm run lint)."
fi
exit "$lint"
