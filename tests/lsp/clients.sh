#!/usr/bin/env bash
# Editors' own LSP clients attach `dsh lsp` and show the hover of a line an agent wrote: a turn
# against the mock writes a file; headless Neovim's built-in client (no dsh plugin) reads the
# hover of its second line, which must name step 1; then again beside another language server
# attached to the same buffer, both answering the hover; then Emacs's lsp-mode (Debian's
# emacs-nox and elpa-lsp-mode, installed here when missing) does the same with dsh registered as
# an add-on server, as docs/lsp.md sets it up.
#   tests/lsp/clients.sh DSH NVIM
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

# Emacs: lsp-mode with dsh as an add-on server beside the mode's own (the pygls stand-in).
if ! command -v emacs >/dev/null || ! compgen -G "/usr/share/emacs/site-lisp/elpa-src/lsp-mode-*" >/dev/null; then
  echo "installing Emacs and lsp-mode (Debian: emacs-nox, elpa-lsp-mode, elpa-markdown-mode)" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    emacs-nox elpa-lsp-mode elpa-markdown-mode >&2
fi
PYTHONPATH="$here/.deps/py" DSH="$dsh" MOCK_URL="$url" DSH_HOME="$work/home" WORKSPACE="$work/ws" \
  FILE="$work/ws/greet.py" LINE=1 EXPECTED="step 1 wrote this line" OTHER="python3 $here/other_server.py" \
  timeout 120 emacs --batch -l "$here/emacs_hover.el" >"$work/emacs.txt" 2>&1 || {
    status=$?
    echo "Emacs's lsp-mode did not get both hovers (exit $status):" >&2
    cat "$work/emacs.txt" >&2
    exit 1
  }
echo "Emacs's lsp-mode with dsh as an add-on server, beside the buffer's own:"
grep -E '^(attached|dsh|other):' "$work/emacs.txt" | sed 's/^/  /'
