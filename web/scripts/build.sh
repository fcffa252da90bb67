#!/usr/bin/env bash
# Builds the browser viewer's bundle into web/dist (committed; the dsh binary embeds it).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d node_modules ] || npm ci --no-audit --no-fund
npx tsc --noEmit -p .
node scripts/build.mjs "$@"
