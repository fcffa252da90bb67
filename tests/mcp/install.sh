#!/usr/bin/env bash
# Installs the real MCP servers dsh's MCP tests (tests/cli/mcp.rs) run, from the package
# registries, pinned: npm `@modelcontextprotocol/server-everything` and `server-filesystem`
# (package-lock.json) into tests/mcp/node_modules, and PyPI `mcp` (for fixture.py) into
# tests/mcp/.deps/py. Idempotent.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
if [[ ! -d node_modules/@modelcontextprotocol/server-everything || ! -d node_modules/@modelcontextprotocol/server-filesystem ]]; then
  echo "installing the npm MCP servers (package-lock.json) into $here/node_modules" >&2
  npm ci --silent --no-audit --no-fund >&2
fi
python_deps=("mcp==1.23.1")
deps="$here/.deps/py"
marker="$deps/.installed-$(echo "${python_deps[*]}" | sha256sum | cut -c1-12)"
if [[ ! -f "$marker" ]]; then
  echo "installing the Python MCP SDK into $deps" >&2
  rm -rf "$deps"
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-input \
    --target "$deps" "${python_deps[@]}" >&2
  touch "$marker"
fi
