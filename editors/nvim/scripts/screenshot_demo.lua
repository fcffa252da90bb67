-- The screenshot scene, run inside Neovim in tmux by scripts/screenshot.sh: a short session
-- against the mock (read, approved write, steering, compaction and the cache drop it causes),
-- with the edited file on the left and the transcript on the right. Writes $DSH_SHOT_DONE when
-- the scene is ready to capture.
local mock = os.getenv("DSH_SHOT_MOCK")
local done_file = os.getenv("DSH_SHOT_DONE")

vim.o.termguicolors = true
vim.o.laststatus = 2
vim.o.showmode = false
vim.o.ruler = false
vim.o.shortmess = vim.o.shortmess .. "IF"
vim.o.fillchars = "vert:│,eob: ,fold: "
vim.cmd("syntax on")
vim.cmd("filetype plugin on")

local function script(replies)
  vim.system({ "curl", "-sS", "-X", "POST", mock .. "/_fake/script", "-d", vim.json.encode(replies) }):wait()
end

-- Approvals in the scene are answered "Allow" (the prompt itself is vim.ui.select).
vim.ui.select = function(items, _, on_choice)
  vim.defer_fn(function()
    on_choice(items[1])
  end, 300)
end

local co
local function wait(cond)
  local function poll()
    if cond() then
      coroutine.resume(co)
    else
      vim.defer_fn(poll, 50)
    end
  end
  vim.defer_fn(poll, 50)
  coroutine.yield()
end
local function sleep(ms)
  vim.defer_fn(function()
    coroutine.resume(co)
  end, ms)
  coroutine.yield()
end

local function turn_done(t, n)
  return function()
    local text = table.concat(vim.api.nvim_buf_get_lines(t.buf, 0, -1, false), "\n")
    return text:find(("━━ turn %d %%a+"):format(n)) ~= nil
  end
end

co = coroutine.create(function()
  vim.cmd("edit src/cli.py")
  vim.cmd("Dsh open")
  local dsh = require("dsh")
  local t = dsh.current()
  vim.cmd("wincmd H")
  vim.cmd("vertical resize 58")
  vim.cmd("wincmd l")

  script({
    {
      reasoning = "The user wants a --verbose flag.\nRead the CLI entry point first, then add the flag with argparse.",
      content = "Let me look at the entry point first.",
      tool_calls = { { name = "read_file", arguments = { path = "src/cli.py" } } },
    },
    {
      content = "I'll add `--verbose` and wire it to the log level.",
      tool_calls = { { name = "edit_file", arguments = { path = "src/cli.py", old_string = 'parser.add_argument("path")', new_string = 'parser.add_argument("path")\n    parser.add_argument("-v", "--verbose", action="store_true")' } } },
    },
    { content = "Done: `-v/--verbose` now switches logging to DEBUG." },
  })
  vim.cmd("Dsh prompt Add a --verbose flag to the CLI")
  wait(turn_done(t, 1))
  vim.cmd("checktime")

  script({
    { content = "Running the test suite.", tool_calls = { { name = "list_dir", arguments = { path = "tests" } } }, delay_ms = 1200 },
    { content = "Using pytest -q as asked.", tool_calls = { { name = "run_command", arguments = { command = "python -m pytest -q" } } } },
    { content = "All 3 tests pass." },
  })
  vim.cmd("Dsh prompt Run the tests")
  wait(function()
    return t.running and (t.cur_step or 0) >= 4
  end)
  sleep(200)
  vim.cmd("Dsh steer use pytest -q")
  wait(turn_done(t, 2))

  script({
    { content = "Summary: added a --verbose flag to src/cli.py (argparse, DEBUG logging); tests pass." },
    { content = "The CLI now takes `-v/--verbose`; everything else is unchanged." },
  })
  vim.cmd("Dsh compact")
  sleep(1500)
  vim.cmd("Dsh prompt Summarize the change in one line")
  wait(turn_done(t, 3))
  sleep(800)

  -- Show the whole turn 1 at the top of the transcript window when it fits, else the end.
  vim.cmd("normal! G")
  vim.cmd("redraw!")
  sleep(500)
  if done_file then
    vim.fn.writefile({ "done" }, done_file)
  end
end)
coroutine.resume(co)
