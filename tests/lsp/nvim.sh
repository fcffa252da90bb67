#!/usr/bin/env bash
# Headless Neovim's built-in LSP client (no dsh plugin) attaches `dsh lsp` and shows the hover
# of a line an agent wrote: a turn against the mock writes a file, then nvim_hover.lua reads
# the hover of its second line, which must name step 1; then again beside another language server
# attached to the same buffer, both answering the hover.
#   tests/lsp/nvim.sh DSH NVIM
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dsh="$1"
nvim="$2"
work="$(mktemp -d /tmp/dsh-lsp-nvim.XXXXXX)"
cleanup() {
  DSH_HOME="$work/home" DEEPSEEK_API_KEY=sk-test "$dsh" shutdown >/dev/null 2>&1 || true
  [[ -n "${mock_pid:-}" ]] && kill "$mock_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$dsh" mock --port 0 >"$work/mock.out" 2>&1 &
mock_pid=$!
for _ in $(seq 100); do grep -q 'http://' "$work/mock.out" && break; sleep 0.1; done
url="$(grep -o 'http://127.0.0.1:[0-9]*' "$work/mock.out" | head -1)"
mkdir -p "$work/ws"
args='{"path":"greet.py","content":"def greet(name):\n    return f\"hello {name}\"\n"}'
DSH_HOME="$work/home" DEEPSEEK_API_KEY=sk-test "$dsh" --base-url "$url" prompt --yes \
  --workspace "$work/ws" "write a greeter [[fake:tool write_file $args]]" >/dev/null 2>&1
DSH_HOME="$work/home" "$nvim" --headless -u NONE -i NONE -n -l "$here/nvim_hover.lua" \
  "$dsh" "$url" "$work/home" "$work/ws" "$work/ws/greet.py" 1 "step 1 wrote this line" >"$work/hover.txt"
echo "headless Neovim's built-in client attached dsh lsp; its hover:"
sed 's/^/  /' "$work/hover.txt"
# Beside the user's own language server (a pygls stand-in from tests/lsp/.deps, which test.sh installs): both attach
# to the buffer and both answer the hover, as docs/lsp.md sets Neovim up.
PYTHONPATH="$here/.deps/py" DSH_OTHER_SERVER="python3 $here/other_server.py" DSH_HOME="$work/home" "$nvim" --headless -u NONE -i NONE -n \
  -l "$here/nvim_hover.lua" "$dsh" "$url" "$work/home" "$work/ws" "$work/ws/greet.py" 1 "step 1 wrote this line" >"$work/both.txt"
echo "beside another language server on the same buffer:"
sed 's/^/  /' "$work/both.txt"
