#!/usr/bin/env bash
# Formats and lint-fixes the whole repository: Prettier (.prettierrc.json) over every
# TypeScript and JavaScript file, then ESLint's automatic fixes (eslint.config.js).
# Run it from the repository root (`npm run fix`), review the diff, commit it alone.
# What ESLint cannot fix by itself is listed at the end (`npm run lint` shows it again).
set -euo pipefail
cd "$(dirname "$0")/.."
npx prettier --write --log-level warn '**/*.{ts,mts,mjs,js}'
npx eslint --fix . || {
  echo
  echo "ESLint fixed what it could; the findings above need a person (npm run lint)."
  exit 1
}
