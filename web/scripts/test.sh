#!/usr/bin/env bash
# The browser viewer's whole test (`dsh web`), from a fresh machine: Debian's Chromium (installed
# when missing; playwright-core drives it, no browser is downloaded), the npm packages, the
# typecheck, the committed bundle checked fresh (web/dist is what the dsh binary embeds), the
# dsh binary, then the end-to-end test in headless Chromium against a real daemon and the mock
# (it writes the README's screenshots to docs/media), then the bench: first render of a
# 2,000-step session's page beside `dsh usage` on it.
# Prints `N passed, N failed` and exits non-zero on any failure.
#
# Environment: DSH_BIN (default: the workspace's target/debug/dsh, built when missing),
# SKIP_BENCH=1 (no bench).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="$(cd "$here/.." && pwd)"
cd "$here"
step() { printf '\n== web: %s\n' "$*"; }

if ! command -v chromium >/dev/null 2>&1; then
  step "apt-get install chromium"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi

stamp="node_modules/.dsh-ci-stamp"
want="$(sha256sum package-lock.json | cut -d' ' -f1) $(node --version)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  step "npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" >"$stamp"
fi

step "typecheck"
npx tsc --noEmit -p .
step "the committed bundle is fresh"
node scripts/build.mjs --check

if [[ -z "${DSH_BIN:-}" ]]; then
  step "cargo build -p dsh"
  (cd "$repo" && cargo build -p dsh --locked)
  DSH_BIN="${CARGO_TARGET_DIR:-$repo/target}/debug/dsh"
fi
export DSH_BIN

step "end to end in headless Chromium (real daemon, mock provider)"
WEB_SCREENSHOTS="$repo/docs/media" node test/e2e.mjs

if [[ -z "${SKIP_BENCH:-}" ]]; then
  step "bench: a 2,000-step session's page beside dsh usage"
  (cd "$repo" && WEB_BENCH_SCREENSHOT="$repo/docs/media/web-chart-2000.png" cargo bench --profile dev --locked -p dsh --bench web)
fi
