-- The screenshot scene, run inside Neovim in tmux by scripts/screenshot.sh: a short session
-- against the mock (read, approved write, steering, an AGENTS.md edit joining as a note),
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
vim.o.number = true
vim.o.cmdheight = 0
vim.g.dsh = vim.tbl_extend("force", vim.g.dsh or {}, { result_lines = 3 })
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
  vim.o.splitright = true
  vim.cmd("edit src/cli.py")
  vim.cmd("Dsh open")
  local dsh = require("dsh")
  -- `:Dsh open` returns at once; the transcript opens when the daemon answered.
  wait(function()
    return dsh.current() ~= nil
  end)
  local t = dsh.current()
  vim.cmd("wincmd h")
  vim.wo.wrap = false
  vim.cmd("vertical resize 50")
  vim.cmd("wincmd l")

  script({
    {
      reasoning = "The user wants a --verbose flag.\nRead the CLI entry point first, then add the flag with argparse\nand map it to the log level.",
      content = "Let me look at the entry point first.",
      tool_calls = { { name = "read_file", arguments = { path = "src/cli.py", start_line = 8, end_line = 10 } } },
    },
    {
      content = "I'll add `--verbose` and wire it to the log level.",
      tool_calls = { { name = "edit_file", arguments = { path = "src/cli.py", old_string = 'parser.add_argument("path")', new_string = 'parser.add_argument("path")\n    parser.add_argument("-v", "--verbose", action="store_true")' } } },
    },
    { content = "Done: `-v/--verbose` is parsed; next, wire it to logging." },
  })
  vim.cmd("Dsh prompt Add a --verbose flag to the CLI")
  wait(turn_done(t, 1))
  vim.cmd("checktime")

  script({
    { content = "Running the test suite.", tool_calls = { { name = "run_command", arguments = { command = "python3 -m pytest -q" } } }, delay_ms = 1500 },
    { content = "Switching to unittest, as asked.", tool_calls = { { name = "run_command", arguments = { command = "python3 -m unittest -q 2>&1 | tail -1" } } } },
    { content = "All tests pass." },
  })
  vim.cmd("Dsh prompt Run the tests")
  wait(function()
    return t.running and (t.cur_step or 0) >= 4
  end)
  sleep(300)
  vim.cmd("Dsh steer use unittest, not pytest")
  wait(turn_done(t, 2))

  -- An edited AGENTS.md joins the next request as a note: one line marked with the step it
  -- joined, its text folded under it, and the cache holds.
  local f = io.open("AGENTS.md", "a")
  f:write("- Log at DEBUG when --verbose is given.\n")
  f:close()
  script({ { content = "`-v/--verbose` sets the log level to DEBUG; the tests pass." } })
  vim.cmd("Dsh prompt Summarize the change in one line")
  wait(turn_done(t, 3))
  sleep(800)

  vim.cmd("normal! G")
  vim.cmd("redraw!")
  sleep(500)
  if done_file then
    vim.fn.writefile({ "done" }, done_file)
  end
end)
coroutine.resume(co)
