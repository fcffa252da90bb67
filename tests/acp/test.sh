#!/usr/bin/env bash
# The ACP front's tests with the real ACP SDKs from the package registries, each spawning
# `dsh acp` against the mock provider:
#   - PyPI `agent-client-protocol` (client.py, the Python SDK) and
#   - npm `@agentclientprotocol/sdk` (client.mjs, the TypeScript SDK, run by node);
# every frame the front sends in both runs is validated against the ACP v1 JSON Schema shipped
# in the npm package (schema/v1/schema.json).
# Environment: DSH_BIN, the dsh binary (default: target/debug/dsh under the repository root).
# Installs the pinned SDKs into tests/acp/node_modules and tests/acp/.deps, and the MCP test
# servers (tests/mcp/install.sh), on first use (idempotent; registries only).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
deps="$here/.deps/py"
dsh="${DSH_BIN:-$root/target/debug/dsh}"
case "$dsh" in /*) ;; *) dsh="$root/$dsh" ;; esac

cd "$here"
if [[ ! -d node_modules/@agentclientprotocol/sdk ]]; then
  echo "installing the npm ACP SDK (package-lock.json) into $here/node_modules" >&2
  npm ci --silent --no-audit --no-fund >&2
fi
python_deps=("agent-client-protocol==0.12.1" "jsonschema==4.26.0")
marker="$deps/.installed-$(echo "${python_deps[*]}" | sha256sum | cut -c1-12)"
if [[ ! -f "$marker" ]]; then
  echo "installing the Python ACP SDK and jsonschema into $deps" >&2
  rm -rf "$deps"
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-input \
    --target "$deps" "${python_deps[@]}" >&2
  touch "$marker"
fi
# The MCP servers the editor hands over in the MCP scenarios (npm server-everything, the PyPI
# fixture's SDK).
"$root/tests/mcp/install.sh"
schema="$here/node_modules/@agentclientprotocol/sdk/schema/v1/schema.json"
PYTHONPATH="$deps" exec python3 "$here/client.py" "$dsh" "$schema" "$here/client.mjs"
