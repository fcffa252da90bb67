#!/usr/bin/env bash
# The Python client's tests: the package installed with pip (as a user installs it), type-checked
# with mypy --strict, then pytest end to end against a real daemon (`dsh stdio` starts it, in a
# private home) and the mock provider (`dsh mock`), plus the examples run as scripts.
# Environment: DSH_BIN, the dsh binary (default: target/debug/dsh under the repository root).
# Installs the pinned test tools (PyPI pytest, pytest-asyncio, mypy) into clients/python/.deps on
# first use (idempotent; registries only), and the package itself on every run.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
deps="$here/.deps/py"
dsh="${DSH_BIN:-$root/target/debug/dsh}"
case "$dsh" in /*) ;; *) dsh="$root/$dsh" ;; esac

python_deps=("pytest==9.2.0" "pytest-asyncio==1.5.0" "mypy==2.4.1")
marker="$deps/.installed-$(echo "${python_deps[*]}" | sha256sum | cut -c1-12)"
if [[ ! -f "$marker" ]]; then
  echo "installing pytest, pytest-asyncio and mypy into $deps" >&2
  rm -rf "$deps"
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-input \
    --target "$deps" "${python_deps[@]}" >&2
  touch "$marker"
fi
# The package as `pip install ./clients/python` installs it (no runtime dependency to fetch).
package="$here/.deps/package"
rm -rf "$package"
PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-input \
  --no-deps --target "$package" "$here" >&2
rm -rf "$here/build" "$here"/*.egg-info

echo "mypy --strict: the package (as installed, py.typed) and the examples"
(cd "$here" && PYTHONPATH="$deps" MYPYPATH="$package" python3 -m mypy --strict --no-error-summary \
  --cache-dir "$here/.deps/mypy-cache" "$package/dsh_client" examples)
echo "mypy: no issues"

# Run from tests/ so that the package imported is the installed one, not the source tree.
cd "$here/tests"
DSH_BIN="$dsh" PYTHONPATH="$package:$deps" python3 -m pytest -c "$here/pytest.ini" --rootdir "$here" \
  -q -p no:cacheprovider "$@"
