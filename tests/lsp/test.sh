#!/usr/bin/env bash
# The LSP front's tests with a real LSP client from the package registry: PyPI `pytest-lsp`
# drives `dsh lsp` over stdio against a daemon and the mock provider (test_lsp.py).
# Environment: DSH_BIN, the dsh binary (default: target/debug/dsh under the repository root).
# Installs the pinned client into tests/lsp/.deps on first use (idempotent; registries only).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
deps="$here/.deps/py"
dsh="${DSH_BIN:-$root/target/debug/dsh}"
case "$dsh" in /*) ;; *) dsh="$root/$dsh" ;; esac

python_deps=("pytest-lsp==1.0.1" "pygls==2.1.1" "lsprotocol==2025.0.0" "pytest==9.2.0" "pytest-asyncio==1.5.0")
marker="$deps/.installed-$(echo "${python_deps[*]}" | sha256sum | cut -c1-12)"
if [[ ! -f "$marker" ]]; then
  echo "installing pytest-lsp into $deps" >&2
  rm -rf "$deps"
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-input \
    --target "$deps" "${python_deps[@]}" >&2
  touch "$marker"
fi
cd "$here"
DSH_BIN="$dsh" PYTHONPATH="$deps" exec python3 -m pytest -q -p no:cacheprovider "$here/test_lsp.py" "$@"
