-- The issue-7 scenario in the real editor: the plugin's commands against a real dsh daemon
-- (a private home) and the mock provider (`dsh mock --port 0`), driven as a user would.
local dsh = require("dsh")
local transcript = require("dsh.transcript")
local usage = require("dsh.usage")
local methods = require("dsh.protocol").methods

local E = {}
local bin = os.getenv("DSH_BIN") or "target/debug/dsh"

--- The repository's MCP test servers (tests/mcp, installed by tests/mcp/install.sh).
local mcp_dir = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h:h:h") .. "/tests/mcp"

--- `[mcp.servers.fx]`: tests/mcp/fixture.py on the PyPI `mcp` SDK (tools echo, fail, …), disabled
--- in the user's file; `fail` runs without asking.
local function mcp_fixture_config()
  return table.concat({
    "[mcp.servers.fx]",
    'command = "python3"',
    -- TOML literal strings: a path is taken as it is.
    ("args = ['%s/fixture.py', \"tools\"]"):format(mcp_dir),
    ("env = { PYTHONPATH = '%s/.deps/py' }"):format(mcp_dir),
    "enabled = false",
    "",
    "[approvals]",
    'fx__fail = "auto"',
  }, "\n")
end

local function setup()
  if E.ready then
    return
  end
  if E.error then
    error(E.error, 0)
  end
  local function fail(msg)
    E.error = msg
    error(msg, 0)
  end
  if vim.fn.executable(bin) ~= 1 then
    fail(("DSH_BIN `%s` is not an executable: build it with `cargo build -p dsh`"):format(bin))
  end
  local help = vim.system({ bin, "--help" }, { text = true }):wait()
  if not (help.stdout or ""):find("stdio", 1, true) then
    fail(("`%s` has no `stdio` subcommand (the daemon has not landed in this build)"):format(bin))
  end
  -- The mock provider on a free port; its first stdout line names the URL.
  local url
  E.mock = vim.system({ bin, "mock", "--port", "0" }, {
    text = true,
    stdout = function(_, data)
      if data and not url then
        url = data:match("(http://127%.0%.0%.1:%d+)")
      end
    end,
  })
  H.wait_for(function()
    return url
  end, 10000, "the mock to listen")
  E.url = url
  -- Where the sessions run: the default profile at the mock's URL, pinned per session (the
  -- ad-hoc profile `deepseek@URL`).
  E.profile = "deepseek@" .. url:gsub("/+$", "")
  -- A short private home (the daemon's socket lives there) and an empty workspace.
  E.home = vim.fn.trim(vim.fn.system({ "mktemp", "-d", "/tmp/dsh-nvim.XXXXXX" }))
  E.ws = E.home .. "/ws"
  vim.fn.mkdir(E.ws, "p")
  E.ws = vim.fn.resolve(E.ws)
  vim.cmd.cd(E.ws)
  vim.env.DEEPSEEK_API_KEY = "sk-test"
  -- The user's configuration file, private to the run (`$DSH_CONFIG`, read by the daemon at every
  -- step): the MCP fixture server `fx`, off unless a workspace turns it on (the MCP test's does).
  E.config = E.home .. "/config.toml"
  vim.fn.writefile(vim.split(mcp_fixture_config(), "\n", { plain = true }), E.config)
  vim.env.DSH_CONFIG = E.config
  vim.g.dsh = {
    path = bin,
    home = E.home .. "/home",
    base_url = url,
    in_process = os.getenv("DSH_NVIM_IN_PROCESS") == "1",
  }
  E.ready = true
end

--- Queue mock replies (`POST /_fake/script`), one per model request.
local function script(replies)
  local out = vim.system({ "curl", "-sS", "-X", "POST", "-H", "content-type: application/json", E.url .. "/_fake/script", "-d", vim.json.encode(replies) }, { text = true }):wait()
  H.eq(0, out.code, "curl /_fake/script: " .. (out.stderr or ""))
end

--- How many model requests the mock has received.
local function mock_requests()
  local out = vim.system({ "curl", "-sS", E.url .. "/_fake/requests" }, { text = true }):wait()
  local ok, list = pcall(vim.json.decode, out.stdout or "")
  return ok and type(list) == "table" and #list or 0
end

--- A request through the plugin's connection; the test waits for the answer (the plugin does
--- not). Errors fail the test.
local function call(method, params)
  local done, result, err = false, nil, nil
  dsh.request(method, params, function(e, r)
    done, result, err = true, r, e
    return true
  end)
  H.wait_for(function()
    return done
  end, 10000, "the answer to " .. method)
  H.eq(nil, err, method)
  return result
end

--- Wait for the transcript a command opens (commands answer once the daemon did).
local function wait_current(pred, what)
  return H.wait_for(function()
    local t = dsh.current()
    return t and (not pred or pred(t)) and t
  end, 10000, what or "a transcript")
end

local function text_of(t)
  return table.concat(vim.api.nvim_buf_get_lines(t.buf, 0, -1, false), "\n")
end

local function wait_text(t, needle, timeout)
  return H.wait_for(function()
    return text_of(t):find(needle, 1, true)
  end, timeout or 15000, ("%q in the transcript; it holds:\n%s"):format(needle, text_of(t)))
end

local function turns_ended(t)
  return select(2, text_of(t):gsub("━━ turn %d+ %a+", ""))
end

--- A step's cost as docs/config.md defines it, computed here from its usage and the prices the
--- daemon said it used (`result.prices`): hits, misses and output at their prices per million
--- tokens. Returns the amount and the currency; nil when no price covers the step.
local function expected_cost(row, result)
  for _, used in ipairs(result.prices or {}) do
    if used.profile == (row.profile or "deepseek") and used.model == row.model then
      local u, p = row.usage, used.price
      local amount = (u.cacheHitTokens * p.cacheHit + (u.promptTokens - u.cacheHitTokens) * p.cacheMiss + u.completionTokens * p.output) / 1e6
      return amount, p.currency
    end
  end
  return nil
end

--- Every step's annotation equals `session/usage` (numbers, cost and the named cause).
local function check_usage_matches(t)
  local result = H.truthy(call(methods.SessionUsage, { sessionId = t.session_id }), "session/usage")
  t:apply_usage(result)
  local marks = {}
  for _, m in ipairs(H.usage_marks(t.buf)) do
    marks[m.line] = m.text
  end
  local n = 0
  for _, row in ipairs(result.rows) do
    if row.usage then
      n = n + 1
      local st = H.truthy(t.steps[row.step], "step " .. row.step .. " in the transcript")
      local text = H.truthy(marks[st.line], "annotation on step " .. row.step)
      local expected = usage.format(row.usage, row.hitPercent)
      H.eq(expected, text:sub(1, #expected), "step " .. row.step .. " annotation")
      -- Its cost: the usage at the prices the daemon used, right after the numbers.
      local amount, currency = expected_cost(row, result)
      H.truthy(amount, "the prices of step " .. row.step .. " in " .. vim.inspect(result.prices))
      H.truthy(math.abs(row.cost.amount - amount) < 1e-12, ("step %d: the daemon says %s, the usage at the prices %s"):format(row.step, row.cost.amount, amount))
      local cost = " · " .. usage.money(amount, currency) .. " cost"
      H.eq(expected .. cost, text:sub(1, #expected + #cost), "step " .. row.step .. " annotation with its cost")
      if row.dropped and row.explanation ~= "" then
        H.contains(text, row.explanation)
      end
    end
  end
  return n, result
end

test("e2e: open a session, prompt, stream the answer, usage annotation equals session/usage", function()
  setup()
  script({ { content = "Hello from the mock, streamed in pieces." } })
  vim.cmd("Dsh open")
  local t = wait_current()
  E.t = t
  H.eq(t.buf, vim.api.nvim_get_current_buf())
  H.contains(vim.api.nvim_buf_get_name(t.buf), "dsh://session/" .. t.session_id)
  wait_text(t, "workspace " .. E.ws)
  vim.cmd("Dsh prompt say hello")
  wait_text(t, "━━ turn 1 completed")
  H.contains(text_of(t), "❯ say hello")
  H.contains(text_of(t), "Hello from the mock, streamed in pieces.")
  H.truthy(t.chunked[1], "the answer arrived as assistant/chunk events")
  H.wait_for(function()
    return t.steps[1] and t.steps[1].row and t.steps[1].row.usage
  end, 5000, "the session/usage refresh")
  H.eq(1, check_usage_matches(t))
  H.contains(dsh.statusline(), "step 1")
end)

test("e2e: :Dsh open <Tab> completes this workspace's session ids without waiting", function()
  setup()
  local t = H.truthy(E.t, "the session from the first test")
  -- The first <Tab> may offer what the daemon listed at connect time; a later one the new id.
  H.wait_for(function()
    return vim.tbl_contains(vim.fn.getcompletion("Dsh open ", "cmdline"), t.session_id)
  end, 10000, "the session id among the completions")
  H.eq({ t.session_id }, vim.fn.getcompletion("Dsh open " .. t.session_id:sub(1, -2), "cmdline"))
end)

test("e2e: approve a write with vim.ui.select (Allow)", function()
  setup()
  local t = H.truthy(E.t, "the session from the first test")
  local asked = {}
  local select = vim.ui.select
  vim.ui.select = function(items, opts, on_choice)
    table.insert(asked, { items = items, prompt = opts.prompt })
    vim.schedule(function()
      on_choice("Allow")
    end)
  end
  script({
    { content = "Writing the file.", tool_calls = { { name = "write_file", arguments = { path = "hello.txt", content = "hi\n" } } } },
    { content = "Wrote hello.txt." },
  })
  vim.cmd("Dsh prompt write hello.txt")
  local ok, err = pcall(wait_text, t, "━━ turn 2 completed")
  vim.ui.select = select
  assert(ok, err)
  H.eq(1, #asked, "one approval asked")
  H.eq({ "Allow", "Deny", "Allow always" }, asked[1].items)
  H.contains(asked[1].prompt, "write_file")
  H.eq({ "hi" }, vim.fn.readfile(E.ws .. "/hello.txt"))
  H.contains(text_of(t), "? write_file wants approval")
  H.contains(text_of(t), "Wrote hello.txt.")
end)

test("e2e: steer mid-turn; the transcript shows the step it joined", function()
  setup()
  local t = E.t
  script({
    { content = "Looking around first.", tool_calls = { { name = "list_dir", arguments = { path = "." } } }, delay_ms = 1500 },
    { content = "Steered: using the other API." },
  })
  local before = t.cur_step or 0
  vim.cmd("Dsh prompt look around")
  -- The first step of this turn is waiting on the slow mock reply: steer now.
  local first = H.wait_for(function()
    return t.running and (t.cur_step or 0) > before and t.cur_step
  end, 10000, "the turn to start a step")
  vim.cmd("Dsh steer use the other API")
  wait_text(t, "━━ turn 3 completed")
  H.contains(text_of(t), "↪ steer: use the other API")
  H.contains(text_of(t), "Steered: using the other API.")
  local joined
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(t.buf, transcript.ns, 0, -1, { details = true })) do
    for _, chunk in ipairs(m[4].virt_text or {}) do
      joined = joined or chunk[1]:match("joined step (%d+)")
    end
  end
  H.eq(first + 1, tonumber(joined), "the steer joined the next step")
  -- It is in that step's request, as the model saw it.
  local req = H.truthy(call(methods.SessionRequest, { sessionId = t.session_id, step = first + 1 }))
  local found = false
  for _, m in ipairs(req.messages) do
    if (m.message.content or ""):find("use the other API", 1, true) then
      found = true
    end
  end
  H.truthy(found, "the steering text is in step " .. (first + 1) .. "'s request")
end)

test("e2e: cancel a running turn", function()
  setup()
  local t = E.t
  script({ { content = "This takes a long time.", delay_ms = 4000 } })
  local sent = mock_requests()
  vim.cmd("Dsh prompt take your time")
  -- Cancel once the slow request is at the mock (so it consumed its scripted reply).
  H.wait_for(function()
    return t.running and mock_requests() > sent
  end, 10000, "the turn's request to reach the mock")
  vim.cmd("Dsh cancel")
  wait_text(t, "━━ turn 4 cancelled", 10000)
  H.eq(false, t.running)
end)

--- The 1-based line numbers of the lines equal to `line`, and the lines of the transcript.
local function lines_equal(t, line)
  local lines = vim.api.nvim_buf_get_lines(t.buf, 0, -1, false)
  local found = {}
  for i, l in ipairs(lines) do
    if l == line then
      table.insert(found, i)
    end
  end
  return found, lines
end

--- The step a note line (1-based) is marked as having joined.
local function joined_step(t, line)
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(t.buf, transcript.ns, { line - 1, 0 }, { line - 1, -1 }, { details = true })) do
    for _, chunk in ipairs(m[4].virt_text or {}) do
      local n = chunk[1]:match("joined step (%d+)")
      if n then
        return tonumber(n)
      end
    end
  end
end

--- Checks that `headline` shows exactly once, after the previous turn's end and its own turn's
--- prompt, right before the step it joined (only its folded text between), marked with that
--- step; returns the step.
local function check_note(t, headline, prev_turn_end, prompt)
  local found, lines = lines_equal(t, "· " .. headline)
  H.eq(1, #found, headline .. " once in:\n" .. text_of(t))
  local at = found[1]
  local function last_before(needle)
    local n
    for i = 1, at - 1 do
      if lines[i] == needle then
        n = i
      end
    end
    return n
  end
  H.truthy(last_before(prev_turn_end), prev_turn_end .. " before the note")
  H.truthy(last_before("❯ " .. prompt), "the turn's prompt before the note")
  local after = at + 1
  while lines[after] and lines[after]:find("^    │ ") do
    H.eq(at + 1, vim.fn.foldclosed(after), "the note's text is folded under its line")
    after = after + 1
  end
  H.truthy(after > at + 1, "the note's text under its line")
  local step = tonumber(H.truthy((lines[after] or ""):match("^── step (%d+)$"), "the step it joined right after: " .. tostring(lines[after])))
  H.eq(step, joined_step(t, at), "marked with the step it joined")
  return step, at
end

test("e2e: AGENTS.md added, edited, deleted between turns: one note line each, before the step it joined", function()
  setup()
  local t = E.t
  -- The transcript's window, as `:Dsh open` set it up, computes the folds as lines arrive.
  H.eq(t.buf, vim.api.nvim_get_current_buf(), "the transcript is in the current window")
  H.eq("expr", vim.wo.foldmethod)
  -- The workspace starts without instructions; each change joins the next request as a logged
  -- note (the default `append` policy) instead of rewriting the system prompt.
  local agents = E.ws .. "/AGENTS.md"
  vim.fn.writefile({ "# Notes", "", "- Answer briefly." }, agents)
  script({ { content = "Noted." } })
  vim.cmd("Dsh prompt note it")
  wait_text(t, "━━ turn 5 completed")
  check_note(t, "AGENTS.md added: joins the next request as a note", "━━ turn 4 cancelled", "note it")

  vim.fn.writefile({ "# Notes", "", "- Answer briefly.", "- Name files in full." }, agents)
  script({ { content = "Noted again." } })
  vim.cmd("Dsh prompt and the edit?")
  wait_text(t, "━━ turn 6 completed")
  local headline = "AGENTS.md changed: joins the next request as a note"
  local step, at = check_note(t, headline, "━━ turn 5 completed", "and the edit?")
  -- The fold holds what the model read: the note in that step's request, at the same words.
  local req = call(methods.SessionRequest, { sessionId = t.session_id, step = step })
  local note
  for _, m in ipairs(req.messages) do
    if (m.message.content or ""):find("Name files in full.", 1, true) then
      note = m.message.content
    end
  end
  H.truthy(note, "the edit is in step " .. step .. "'s request")
  local shown = {}
  for _, l in ipairs(vim.api.nvim_buf_get_lines(t.buf, at, at + #vim.split(note, "\n"), false)) do
    table.insert(shown, (l:gsub("^    │ ", "")))
  end
  H.eq(note, table.concat(shown, "\n"))
  -- The cache held: the system prompt was not rewritten.
  H.wait_for(function()
    local row = t.steps[step] and t.steps[step].row
    return row and row.step == step and row.usage
  end, 5000, "the usage row of step " .. step)
  H.eq(false, t.steps[step].row.dropped, "step " .. step .. " kept the cache: " .. vim.inspect(t.steps[step].row))

  vim.fn.delete(agents)
  script({ { content = "Forgotten." } })
  vim.cmd("Dsh prompt and now?")
  wait_text(t, "━━ turn 7 completed")
  check_note(t, "AGENTS.md deleted: joins the next request as a note", "━━ turn 6 completed", "and now?")
  H.eq(1, #lines_equal(t, "· " .. headline), "the edit's note still once")
end)

test("e2e: :Dsh compact compacts; the next step's annotation names the compaction", function()
  setup()
  local t = E.t
  script({ { content = "Summary: the user asked for a greeting and a file; both are done." } })
  local n = #H.messages
  vim.cmd("Dsh compact")
  local msg = H.wait_for(function()
    return H.messages[n + 1]
  end, 15000, "the compaction's answer")
  H.eq(nil, msg:find("Method not found", 1, true), "the daemon serves session/compact")
  H.contains(msg, "dsh: ")
  wait_text(t, "⇲ compacting")
  wait_text(t, "⇲ surface seq")
  -- The next request starts from the rewritten surface: its annotation names the compaction.
  script({ { content = "After compaction." } })
  vim.cmd("Dsh prompt and now?")
  wait_text(t, "After compaction.")
  local step = t.cur_step
  H.wait_for(function()
    local row = t.steps[step] and t.steps[step].row
    return row and row.step == step and row.usage
  end, 10000, "the usage row of step " .. step)
  local row = t.steps[step].row
  local causes = {}
  for _, c in ipairs(row.causes) do
    table.insert(causes, c.kind)
  end
  H.truthy(vim.tbl_contains(causes, "compaction"), "compaction among the causes: " .. vim.inspect(row))
  H.contains(row.explanation, "compaction")
  local shown
  for _, m in ipairs(H.usage_marks(t.buf)) do
    if m.line == t.steps[step].line then
      shown = m.text
    end
  end
  H.contains(shown, row.explanation)
end)

test("e2e: every step's annotation still equals session/usage", function()
  setup()
  local n = check_usage_matches(E.t)
  H.truthy(n >= 4, "at least 4 finished steps, got " .. n)
end)

test("e2e: :Dsh saw shows what the model saw, read-only", function()
  setup()
  local t = E.t
  vim.api.nvim_set_current_buf(t.buf)
  vim.cmd("Dsh saw 2")
  -- The command returned without waiting for the daemon: nothing is shown yet.
  H.eq(t.buf, vim.api.nvim_get_current_buf(), "the view waits for the answer, the editor does not")
  local buf = H.wait_for(function()
    local b = vim.api.nvim_get_current_buf()
    return vim.api.nvim_buf_get_name(b):find("dsh://saw/", 1, true) and b
  end, 10000, "the saw view")
  H.contains(vim.api.nvim_buf_get_name(buf), "dsh://saw/" .. t.session_id .. "/step-2")
  H.eq(false, vim.bo[buf].modifiable)
  local text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
  local req = call(methods.SessionRequest, { sessionId = t.session_id, step = 2 })
  for _, needle in ipairs({ "# What the model saw — step 2", "## System prompt", "## Tools", "## Messages", "## Wire body", req.wire.sha256, "[seq " .. req.messages[1].seq .. "]" }) do
    H.contains(text, needle)
  end
  if os.getenv("DSH_TEST_DUMP") then
    vim.fn.writefile(vim.split(text, "\n"), os.getenv("DSH_TEST_DUMP"))
  end
  -- The body shown is the exact wire body: its sha256 is the logged one.
  H.eq(req.wire.sha256, vim.fn.sha256(req.wire.body))
  H.contains(text, req.wire.body)
  vim.cmd("close")
end)

test("e2e: :Dsh diff opens the step's request against the previous one in diff mode", function()
  setup()
  local t = E.t
  vim.api.nvim_set_current_buf(t.buf)
  local tabs = #vim.api.nvim_list_tabpages()
  vim.cmd("Dsh diff 3")
  H.wait_for(function()
    return #vim.api.nvim_list_tabpages() == tabs + 1
  end, 10000, "the diff tab")
  local wins = vim.api.nvim_tabpage_list_wins(0)
  H.eq(2, #wins)
  local names = {}
  for _, w in ipairs(wins) do
    H.truthy(vim.wo[w].diff, "window in diff mode")
    table.insert(names, vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(w)))
  end
  H.contains(names[1], "step-2")
  H.contains(names[2], "step-3")
  local right = table.concat(vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf(wins[2]), 0, -1, false), "\n")
  H.contains(right, "step 3")
  vim.cmd("tabclose")
end)

test("e2e: fork at a step opens the fork as a new session", function()
  setup()
  local t = E.t
  vim.api.nvim_set_current_buf(t.buf)
  local at = t.steps[2].seq
  vim.cmd("Dsh fork 2")
  local f = wait_current(function(c)
    return c.session_id ~= t.session_id
  end, "the fork's transcript")
  H.eq(f.buf, vim.api.nvim_get_current_buf())
  wait_text(f, ("forked from %s at seq %d"):format(t.session_id, at))
  wait_text(f, "Hello from the mock")
  H.eq(nil, text_of(f):find("Wrote hello.txt.", 1, true), "the fork stops before step 2's answer")
  E.fork = f.session_id
end)

test("e2e: after a daemon restart, :Dsh sessions lists the sessions and reopens one from seq 0", function()
  setup()
  local t = E.t
  local before = text_of(t)
  local n = #H.messages
  vim.cmd("Dsh stop")
  H.eq(nil, dsh._client)
  H.wait_for(function()
    return vim.tbl_contains(vim.list_slice(H.messages, n + 1), "dsh: daemon stopped")
  end, 10000, "the daemon to stop")
  -- Close the transcript so reopening it replays the whole log.
  vim.api.nvim_buf_delete(t.buf, { force = true })
  local items
  local select = vim.ui.select
  vim.ui.select = function(list, opts, on_choice)
    items = {}
    for _, s in ipairs(list) do
      table.insert(items, opts.format_item(s))
    end
    for _, s in ipairs(list) do
      if s.sessionId == t.session_id then
        return on_choice(s)
      end
    end
    on_choice(nil)
  end
  local ok, err = pcall(function()
    vim.cmd("Dsh sessions")
    H.wait_for(function()
      return items
    end, 10000, "the session list")
  end)
  vim.ui.select = select
  assert(ok, err)
  H.eq(2, #items)
  H.contains(items, t.session_id)
  H.contains(items, E.fork)
  H.contains(items, "say hello")
  local r = wait_current(function(c)
    return c.session_id == t.session_id
  end, "the reopened transcript")
  wait_text(r, "━━ turn 4 cancelled")
  H.contains(text_of(r), "Hello from the mock, streamed in pieces.")
  H.contains(text_of(r), "Wrote hello.txt.")
  H.wait_for(function()
    return r.steps[1] and r.steps[1].row and r.steps[1].row.usage
  end, 5000, "usage after the replay")
  check_usage_matches(r)
  -- The replay renders what the live run rendered (annotations aside), the notes included,
  -- each still marked with the step it joined.
  H.eq(before, text_of(r))
  for _, what in ipairs({ "added", "changed", "deleted" }) do
    local found = lines_equal(r, ("· AGENTS.md %s: joins the next request as a note"):format(what))
    H.eq(1, #found, what .. " once after reopening")
    H.truthy(joined_step(r, found[1]), "the " .. what .. " note marked with its step after reopening")
  end
end)

test("e2e: a command allowed once unconfined escapes the sandbox; the transcript marks it", function()
  setup()
  local marker = E.home .. "/outside-marker"
  local touch = { name = "run_command", arguments = { command = "touch " .. marker } }
  script({ { content = "Touching it twice.", tool_calls = { touch, touch } }, { content = "Touched." } })
  local previous = dsh.current()
  vim.cmd("Dsh open")
  local t = wait_current(function(c)
    return c ~= previous
  end, "a new session's transcript")
  local asked = {}
  local ui_select = vim.ui.select
  vim.ui.select = function(items, opts, on_choice)
    table.insert(asked, { items = items, prompt = opts.prompt })
    vim.schedule(function()
      on_choice(#asked == 1 and "Allow" or "Allow once, unconfined")
    end)
  end
  vim.cmd("Dsh prompt touch the marker outside the workspace")
  local ok, err = pcall(wait_text, t, "━━ turn 1 completed")
  vim.ui.select = ui_select
  assert(ok, err)
  H.eq(2, #asked, "two approvals asked")
  H.eq({ "Allow", "Deny", "Allow always", "Allow once, unconfined" }, asked[1].items)
  H.contains(asked[1].prompt, "[sandbox: workspace-write]")
  local text = text_of(t)
  H.contains(text, "write outside the workspace denied: " .. marker)
  H.eq(1, select(2, text:gsub("ran unconfined", "")), "only the second run is marked:\n" .. text)
  H.eq(1, vim.fn.filereadable(marker), "the unconfined run wrote outside the workspace")
end)

test("e2e: :checkhealth dsh finds the binary, its version, the daemon and the key", function()
  setup()
  vim.cmd("silent checkhealth dsh")
  local text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
  vim.cmd("bwipeout!")
  H.contains(text, "found " .. vim.fn.exepath(bin))
  H.contains(text, "version: dsh")
  H.contains(text, "initialize: dsh")
  H.contains(text, "daemon pid")
  H.contains(text, "DEEPSEEK_API_KEY is set")
  H.contains(text, "command sandbox workspace-write")
  H.eq(nil, text:find("ERROR", 1, true), "no error in:\n" .. text)
end)

--- The rows of `dsh usage`'s text table: step → the cost column; and its other lines.
local function cli_usage(session_id)
  local out = vim.system({ bin, "--home", E.home .. "/home", "usage", session_id }, { text = true }):wait()
  H.eq(0, out.code, "dsh usage: " .. (out.stderr or ""))
  local costs, lines = {}, vim.split(out.stdout, "\n", { trimempty = true })
  for _, line in ipairs(lines) do
    local step, cost = line:match("^%s*%d+%s+(%d+)%s+%d+%s+%d+%s+%d+%s+%d+%s+[%d.]+%%%s+(%S+)")
    if step then
      costs[tonumber(step)] = cost
    end
  end
  return costs, lines
end

test("e2e: cost — annotations, :Dsh usage, :Dsh sessions and the status line show what `dsh usage` prints", function()
  setup()
  local id = E.t.session_id
  vim.cmd("Dsh open " .. id)
  local t = wait_current(function(c)
    return c.session_id == id
  end, "the first session's transcript")
  local n, result = check_usage_matches(t)
  H.truthy(n >= 4, "at least 4 finished steps, got " .. n)
  H.eq(1, #result.prices, "one profile and model: " .. vim.inspect(result.prices))
  H.eq(E.profile, result.prices[1].profile)
  H.eq("deepseek-v4-flash", result.prices[1].model)
  local currency = result.prices[1].price.currency
  local total, saved = 0, 0
  for _, row in ipairs(result.rows) do
    if row.usage then
      local amount = expected_cost(row, result)
      total = total + amount
      local p = result.prices[1].price
      saved = saved + (row.usage.promptTokens * p.cacheMiss + row.usage.completionTokens * p.output) / 1e6 - amount
    end
  end
  H.truthy(saved > 0, "the cache saved something: " .. saved)
  local total_text = usage.money(total, currency)
  -- The status line: the session's totals and their cost.
  H.contains(dsh.statusline(), " · " .. total_text)
  -- :Dsh usage: each step's cost, the session's, what the cache saved, the prices.
  vim.cmd("Dsh usage")
  local buf = H.wait_for(function()
    local b = vim.api.nvim_get_current_buf()
    return vim.api.nvim_buf_get_name(b):find("dsh://usage/", 1, true) and b
  end, 10000, "the usage view")
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  local text = table.concat(lines, "\n")
  vim.cmd("close")
  local by_step = {}
  for _, line in ipairs(lines) do
    local step = line:match("^step%s+(%d+)")
    if step then
      by_step[tonumber(step)] = line
    end
  end
  -- The same figures as `dsh usage` prints, and as the usage at the prices gives.
  local cli_costs, cli_lines = cli_usage(id)
  for _, row in ipairs(result.rows) do
    if row.usage then
      local want = usage.money(expected_cost(row, result), currency)
      H.eq(want, cli_costs[row.step], "step " .. row.step .. ": dsh usage's cost")
      H.contains(H.truthy(by_step[row.step], "step " .. row.step .. " in :Dsh usage"), " · " .. want .. " cost")
    end
  end
  H.contains(text, "\ntotal  " .. usage.format(result.totals) .. " · " .. total_text .. " cost")
  local p = result.prices[1].price
  H.contains(text, ("cost %s · the cache saved %s (the same tokens at the cache-miss price: %s)"):format(total_text, usage.money(saved, currency), usage.money(total + saved, currency)))
  H.contains(text, ("prices of %s/deepseek-v4-flash per million tokens: cache hit %s, cache miss %s, output %s"):format(E.profile, usage.money(p.cacheHit, currency), usage.money(p.cacheMiss, currency), usage.money(p.output, currency)))
  for _, line in ipairs(cli_lines) do
    if line:find("^cost ") or line:find("^prices of ") then
      H.contains(text, line)
    end
  end
  -- :Dsh sessions: each session's total cost and its profile/model.
  local items
  local select = vim.ui.select
  vim.ui.select = function(list, opts, on_choice)
    items = {}
    for _, s in ipairs(list) do
      items[s.sessionId] = opts.format_item(s)
    end
    on_choice(nil)
  end
  local ok, err = pcall(function()
    vim.cmd("Dsh sessions")
    H.wait_for(function()
      return items
    end, 10000, "the session list")
  end)
  vim.ui.select = select
  assert(ok, err)
  H.contains(H.truthy(items[id], "the session in the list"), " · " .. total_text .. " · " .. E.profile .. "/deepseek-v4-flash · ")
end)

test("e2e: cost — a model without a price shows no cost, never zero", function()
  setup()
  -- A workspace whose configuration adds a model the mock serves, without a price.
  local ws = E.home .. "/unpriced"
  vim.fn.mkdir(ws .. "/.dsh", "p")
  vim.fn.writefile({ "[providers.deepseek.models.deepseek-chat]", "context_window = 131072", "thinking = false" }, ws .. "/.dsh/config.toml")
  ws = vim.fn.resolve(ws)
  local created = call(methods.SessionCreate, { workspace = ws, model = "deepseek-chat", config = { baseUrl = E.url } })
  vim.cmd("Dsh open " .. created.sessionId)
  local t = wait_current(function(c)
    return c.session_id == created.sessionId
  end, "the unpriced session's transcript")
  script({ { content = "Hi." } })
  vim.cmd("Dsh prompt hello")
  wait_text(t, "━━ turn 1 completed")
  H.wait_for(function()
    return t.steps[1] and t.steps[1].row and t.steps[1].row.usage
  end, 5000, "the session/usage refresh")
  local result = call(methods.SessionUsage, { sessionId = t.session_id })
  H.eq(nil, result.cost)
  H.eq(nil, result.rows[1].cost)
  local marks = H.usage_marks(t.buf)
  H.eq(1, #marks)
  H.eq(usage.format(result.rows[1].usage, result.rows[1].hitPercent), marks[1].text:sub(1, #usage.format(result.rows[1].usage, result.rows[1].hitPercent)))
  H.eq(nil, marks[1].text:find("cost", 1, true), marks[1].text)
  H.eq(nil, dsh.statusline():find("$", 1, true), dsh.statusline())
  local text = table.concat(require("dsh.view").usage_lines(t.session_id, result), "\n")
  H.contains(text, "cost unknown: no price configured")
  H.eq(nil, text:find("$", 1, true), text)
  local listed = call(methods.SessionList, { workspace = ws }).sessions[1]
  H.eq(nil, listed.cost)
  local line = require("dsh.view").session_line(listed)
  H.eq(nil, line:find("$", 1, true), line)
  H.contains(line, " · " .. E.profile .. "/deepseek-chat · ")
end)

test("e2e: MCP — a turn calling fx__echo and fx__fail through the fixture server shows `fx › echo`, asks naming it, and the failure as an error", function()
  setup()
  if vim.fn.isdirectory(mcp_dir .. "/.deps/py/mcp") == 0 then
    -- test.sh installs it; run alone without it, say so (and fail when it is required).
    assert(not os.getenv("DSH_MCP_REQUIRED"), "the MCP fixture server is not installed (tests/mcp/install.sh)")
    io.stdout:write("      SKIPPED: the MCP fixture server is not installed (tests/mcp/install.sh)\n")
    return
  end
  -- A workspace that turns the user's server on for its sessions.
  local ws = E.home .. "/mcp-ws"
  vim.fn.mkdir(ws .. "/.dsh", "p")
  vim.fn.writefile({ "[mcp.servers.fx]", "enabled = true" }, ws .. "/.dsh/config.toml")
  vim.fn.writefile({ "A" }, ws .. "/a.txt")
  ws = vim.fn.resolve(ws)
  local created = call(methods.SessionCreate, { workspace = ws, config = { baseUrl = E.url } })
  vim.cmd("Dsh open " .. created.sessionId)
  local t = wait_current(function(c)
    return c.session_id == created.sessionId
  end, "the MCP session's transcript")
  local asked = {}
  local select = vim.ui.select
  vim.ui.select = function(items, opts, on_choice)
    table.insert(asked, { items = items, prompt = opts.prompt })
    vim.schedule(function()
      on_choice("Allow")
    end)
  end
  script({
    { tool_calls = { { name = "fx__echo", arguments = { text = "hi" } }, { name = "fx__fail", arguments = vim.empty_dict() }, { name = "read_file", arguments = { path = "a.txt" } } } },
    { content = "Echoed." },
  })
  vim.cmd("Dsh prompt echo hi through fx")
  local ok, err = pcall(wait_text, t, "━━ turn 1 completed", 60000)
  vim.ui.select = select
  assert(ok, err)
  -- One question: fx's echo (its server's policy asks); fail is automatic, read_file needs none.
  H.eq(1, #asked, "one approval asked: " .. vim.inspect(asked))
  H.truthy(vim.startswith(asked[1].prompt, "dsh: fx › echo wants to run — MCP server fx: echo "), asked[1].prompt)
  local text = text_of(t)
  H.contains(text, '  ⚙ fx › echo {"text":"hi"}')
  H.contains(text, "  ⚙ fx › fail {}")
  H.contains(text, "  ? fx › echo wants approval: MCP server fx: echo ")
  H.contains(text, "  ✓ fx › echo → echo: hi")
  H.contains(text, "  ✗ fx › fail → it failed")
  H.contains(text, '  ⚙ read_file {"path":"a.txt"}')
  H.contains(text, "  ✓ read_file → ")
  H.eq(nil, text:find("fx__", 1, true), "the request names are not shown")
  -- The log as the daemon wrote it: the calls' request names, and every wait it logged shown.
  local page = call(methods.SessionEvents, { sessionId = t.session_id, fromSeq = 0, limit = 1000 })
  local names = {}
  for _, ev in ipairs(page.events) do
    if ev.type == "tool/result" then
      table.insert(names, ev.data.name .. (ev.data.isError and " ✗" or " ✓"))
    elseif ev.type == "mcp/wait" then
      H.contains(text, "◌ " .. transcript.mcp_wait_text(ev.data))
    end
  end
  H.eq({ "fx__echo ✓", "fx__fail ✗", "read_file ✓" }, names)
end)

--- The plan's virtual lines under a transcript's header, as text.
local function plan_virt(t)
  local lines = {}
  for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(t.buf, transcript.plan_ns, 0, -1, { details = true })) do
    for _, chunks in ipairs(mark[4].virt_lines or {}) do
      local line = {}
      for _, chunk in ipairs(chunks) do
        table.insert(line, chunk[1])
      end
      table.insert(lines, table.concat(line))
    end
  end
  return lines
end

test("e2e: plan — update_plan twice around a refused call: the header shows the last plan, :Dsh plan says it", function()
  setup()
  local created = call(methods.SessionCreate, { workspace = E.ws, config = { baseUrl = E.url } })
  vim.cmd("Dsh open " .. created.sessionId)
  local t = wait_current(function(c)
    return c.session_id == created.sessionId
  end, "the plan session's transcript")
  wait_text(t, "workspace ")
  H.eq({}, plan_virt(t), "no plan before the model sets one")
  local function plan_call(plan, explanation)
    return { content = "", tool_calls = { { name = "update_plan", arguments = { plan = plan, explanation = explanation } } } }
  end
  script({
    plan_call({ { step = "Look", status = "in_progress" }, { step = "Answer", status = "pending" } }, "Two steps."),
    plan_call({ { step = "Look", status = "in_progress" }, { step = "Answer", status = "in_progress" } }),
    plan_call({ { step = "Look", status = "completed" }, { step = "Answer", status = "in_progress" } }),
    { content = "Planned." },
  })
  vim.cmd("Dsh prompt plan it")
  wait_text(t, "━━ turn 1 completed", 30000)
  H.eq({ "plan (1 of 2 completed)", "  [x] Look", "  [>] Answer" }, plan_virt(t))
  -- The plan sits under the header: the turn's lines start where they did.
  local marks = vim.api.nvim_buf_get_extmarks(t.buf, transcript.plan_ns, 0, -1, {})
  H.eq(t.header_line, marks[1][2])
  -- The refused call is an error the model read.
  H.contains(text_of(t), "at most one step may be in_progress")
  -- :Dsh plan asks the daemon (session/plan).
  local said = {}
  local notify = vim.notify
  vim.notify = function(msg)
    table.insert(said, msg)
  end
  vim.cmd("Dsh plan")
  local ok, err = pcall(H.wait_for, function()
    return #said > 0
  end, 10000, ":Dsh plan's answer")
  vim.notify = notify
  assert(ok, err)
  H.eq("plan (1 of 2 completed)\n  [x] Look\n  [>] Answer", said[1])
end)

test("e2e: a sub-agent — the plan in the header, the child under its step; <CR> opens the child's transcript, :Dsh sessions nests it", function()
  setup()
  local created = call(methods.SessionCreate, { workspace = E.ws, config = { baseUrl = E.url } })
  vim.cmd("Dsh open " .. created.sessionId)
  local t = wait_current(function(c)
    return c.session_id == created.sessionId
  end, "the parent's transcript")
  wait_text(t, "workspace ")
  -- One step calls update_plan and task; the child's one request answers; the parent ends.
  script({
    { content = "", tool_calls = {
      { name = "update_plan", arguments = { plan = { { step = "Delegate", status = "in_progress" }, { step = "Report", status = "pending" } } } },
      { name = "task", arguments = { description = "look around", prompt = "CHILD: look around", context = "fresh" } },
    } },
    { content = "CHILD-ANSWER: nothing here." },
    { content = "The child answered." },
  })
  vim.cmd("Dsh prompt delegate it")
  wait_text(t, "━━ turn 1 completed", 30000)
  H.eq({ "plan (0 of 2 completed)", "  [>] Delegate", "  [ ] Report" }, plan_virt(t))
  -- The child's line, under step 1's header and before step 2's.
  local lines = vim.api.nvim_buf_get_lines(t.buf, 0, -1, false)
  local at
  for i, line in ipairs(lines) do
    if line:find("⇢ sub-agent", 1, true) then
      at = i - 1
    end
  end
  H.truthy(at, "a sub-agent line in:\n" .. text_of(t))
  local child = H.truthy(t:child_at(at), "the line names its child")
  H.contains(lines[at + 1], ("⇢ sub-agent %s (fresh, depth 1): look around"):format(child))
  H.truthy(t.steps[1].line < at and at < t.steps[2].line, "the child sits under step 1")
  -- The child's session names its parent (session/list), and :Dsh sessions lists it under it.
  local listed = call(methods.SessionList, { workspace = E.ws })
  local parent_of = {}
  for _, s in ipairs(listed.sessions) do
    parent_of[s.sessionId] = s.parent and s.parent.sessionId
  end
  H.eq(created.sessionId, parent_of[child])
  local select = vim.ui.select
  local shown
  vim.ui.select = function(items, opts, on_choice)
    shown = {}
    for _, item in ipairs(items) do
      table.insert(shown, opts.format_item(item))
    end
    on_choice(nil)
  end
  vim.cmd("Dsh sessions")
  local ok, err = pcall(H.wait_for, function()
    return shown
  end, 10000, ":Dsh sessions' list")
  vim.ui.select = select
  assert(ok, err)
  local parent_row, child_row
  for i, line in ipairs(shown) do
    if line:find(created.sessionId, 1, true) then
      parent_row = i
    elseif line:find(child, 1, true) then
      child_row = i
    end
  end
  H.eq(parent_row + 1, child_row, "the child right under its parent:\n" .. table.concat(shown, "\n"))
  H.contains(shown[child_row], "  ↳ CHILD: look around")
  -- <CR> on the line opens the child's own transcript in the window.
  vim.api.nvim_win_set_cursor(0, { at + 1, 0 })
  vim.api.nvim_feedkeys(vim.keycode("<CR>"), "mx", false)
  local c = wait_current(function(cur)
    return cur.session_id == child
  end, "the child's transcript")
  wait_text(c, "CHILD-ANSWER: nothing here.")
  H.eq(c.buf, vim.api.nvim_get_current_buf())
  -- Back in the parent, :Dsh child 1 opens it too.
  vim.cmd("Dsh open " .. created.sessionId)
  wait_current(function(cur)
    return cur.session_id == created.sessionId
  end, "the parent again")
  vim.cmd("Dsh child 1")
  wait_current(function(cur)
    return cur.session_id == child
  end, "the child by :Dsh child 1")
end)

test("e2e: :Dsh rewind lists the files, asks, refuses a file edited by hand until overwritten, and continues in the fork", function()
  setup()
  local notes, extra = E.ws .. "/notes.txt", E.ws .. "/extra.txt"
  vim.fn.writefile({ "by hand" }, notes)
  local before = dsh.current()
  vim.cmd("Dsh open")
  local t = wait_current(function(c)
    return c ~= before
  end, "a new session's transcript")
  local select = vim.ui.select
  vim.ui.select = function(_, _, on_choice)
    vim.schedule(function()
      on_choice("Allow")
    end)
  end
  script({
    { content = "Rewriting the notes.", tool_calls = { { name = "write_file", arguments = { path = "notes.txt", content = "by the agent\n" } } } },
    { tool_calls = { { name = "write_file", arguments = { path = "extra.txt", content = "new\n" } } } },
    { content = "Done." },
  })
  vim.cmd("Dsh prompt rewrite the notes")
  local ok, err = pcall(wait_text, t, "━━ turn 1 completed")
  vim.ui.select = select
  assert(ok, err)
  H.eq({ "by the agent" }, vim.fn.readfile(notes))

  -- Each question `vim.fn.confirm` is asked, and the answer from the script.
  local asked, answers = {}, {}
  local confirm = vim.fn.confirm
  vim.fn.confirm = function(msg, buttons)
    table.insert(asked, { msg = msg, buttons = buttons })
    local answer = table.remove(answers, 1)
    if type(answer) == "function" then
      return answer()
    end
    return answer
  end
  local function said(text, from)
    return H.wait_for(function()
      for i = from + 1, #H.messages do
        if H.messages[i]:find(text, 1, true) then
          return H.messages[i]
        end
      end
    end, 30000, ("the message %q"):format(text))
  end
  ok, err = pcall(function()
    -- The step under the cursor; cancelled: nothing changes. notes.txt has unsaved changes in a
    -- buffer: the question says so.
    local unsaved = vim.fn.bufadd(notes)
    vim.fn.bufload(unsaved)
    vim.api.nvim_buf_set_lines(unsaved, 0, -1, false, { "unsaved" })
    vim.api.nvim_set_current_buf(t.buf)
    vim.api.nvim_win_set_cursor(0, { t.steps[1].line + 1, 0 })
    local n = #H.messages
    answers = { 2 }
    vim.cmd("Dsh rewind")
    said("dsh: rewind cancelled", n)
    vim.api.nvim_buf_delete(unsaved, { force = true })
    H.contains(asked[1].msg, "unsaved in a buffer (1): notes.txt; the rewind changes them on disk")
    H.eq("&Rewind\n&Cancel", asked[1].buttons)
    H.contains(asked[1].msg, "Rewind the files and the conversation to before step 1?")
    H.contains(asked[1].msg, "restore (1): notes.txt\ndelete (1): extra.txt")
    H.eq({ "by the agent" }, vim.fn.readfile(notes))
    H.eq(1, vim.fn.filereadable(extra))
    -- Edited by hand while the question is open: refused, asked again, declined.
    n = #H.messages
    answers = {
      function()
        vim.fn.writefile({ "edited by hand" }, notes)
        return 1
      end,
      2,
    }
    vim.cmd("Dsh rewind 1")
    said("dsh: rewind cancelled", n)
    H.eq(3, #asked)
    H.eq("&Overwrite\n&Cancel", asked[3].buttons)
    H.contains(asked[3].msg, "someone other than the agent changed: notes.txt")
    H.eq({ "edited by hand" }, vim.fn.readfile(notes))
    -- The dry run now names the file; overwriting it rewinds, and the fork continues.
    n = #H.messages
    answers = { 1 }
    vim.cmd("Dsh rewind 1")
    local message = said("dsh: rewound " .. t.session_id .. " to before step 1", n)
    H.eq("&Overwrite and rewind\n&Cancel", asked[4].buttons)
    H.contains(asked[4].msg, "overwritten (1): notes.txt")
    H.contains(message, "restored (1): notes.txt; deleted (1): extra.txt; the conversation continues in ")
    H.eq({ "by hand" }, vim.fn.readfile(notes))
    H.eq(0, vim.fn.filereadable(extra))
  end)
  vim.fn.confirm = confirm
  assert(ok, err)
  local f = wait_current(function(c)
    return c ~= t
  end, "the fork's transcript")
  H.eq(f.buf, vim.api.nvim_get_current_buf(), "the window shows the session that continues")
  wait_text(f, "❯ rewrite the notes")
  H.eq(nil, text_of(f):find("Rewriting the notes.", 1, true), "the fork ends before step 1")
  script({ { content = "Starting over." } })
  vim.cmd("Dsh prompt only the notes, then")
  wait_text(f, "Starting over.")
  H.contains(text_of(t), "Rewriting the notes.")
end)

test("e2e: :Dsh prompt /<Tab> completes the workspace's prompt commands; the expansion names its command", function()
  setup()
  vim.fn.mkdir(E.ws .. "/.dsh/commands", "p")
  vim.fn.writefile({ "---", "description: Reviews a file", "---", "Review $ARGUMENTS now." }, E.ws .. "/.dsh/commands/review.md")
  local created = call(methods.SessionCreate, { workspace = E.ws, config = { baseUrl = E.url } })
  vim.cmd("Dsh open " .. created.sessionId)
  local t = wait_current(function(c)
    return c.session_id == created.sessionId
  end, "the command session's transcript")
  wait_text(t, "workspace ")
  -- The first <Tab> offers what the daemon last listed; a later one has the file.
  H.wait_for(function()
    return vim.tbl_contains(vim.fn.getcompletion("Dsh prompt /re", "cmdline"), "/review")
  end, 10000, "/review among the completions")
  H.eq({}, vim.fn.getcompletion("Dsh prompt /zz", "cmdline"))
  script({ { content = "Reviewed." } })
  vim.cmd("Dsh prompt /review notes.txt")
  wait_text(t, "❯ /review (.dsh/commands/review.md)", 30000)
  wait_text(t, "Review notes.txt now.")
  wait_text(t, "━━ turn 1 completed", 30000)
  vim.fn.delete(E.ws .. "/.dsh/commands", "rf")
end)

--- The mock's recorded requests (`GET /_fake/requests`), bodies included.
local function mock_request_list()
  local out = vim.system({ "curl", "-sS", E.url .. "/_fake/requests" }, { text = true }):wait()
  return vim.json.decode(out.stdout)
end

--- A PNG of `length` bytes outside the workspace: a real signature and header, then noise that
--- does not compress.
local function png_file(name, length, seed)
  local bytes = { "\137PNG\r\n\26\n\0\0\0\rIHDR\0\0\0\16\0\0\0\16\8\6\0\0\0" }
  local n, state = #bytes[1], seed * 2654435761 % 4294967296 + 1
  while n < length do
    state = (state * 1664525 + 1013904223) % 4294967296
    table.insert(bytes, string.char(math.floor(state / 16777216)))
    n = n + 1
  end
  local path = E.home .. "/" .. name
  local f = assert(io.open(path, "wb"))
  f:write(table.concat(bytes))
  f:close()
  return path, table.concat(bytes)
end

--- A session on the profile `vision` at the mock, whose model `mock-vision` reads images (in the
--- user's file: a workspace's may not say where requests go), opened in the current window.
local function vision_session()
  if not E.vision then
    local lines = vim.fn.readfile(E.config)
    vim.list_extend(lines, {
      "",
      "[providers.vision]",
      'kind = "openai-compatible"',
      ('base_url = "%s"'):format(E.url),
      'api_key_env = "DEEPSEEK_API_KEY"',
      'model = "mock-vision"',
      "",
      "[providers.vision.models.mock-vision]",
      "context_window = 131072",
      "max_output = 4096",
      "thinking = false",
      "images = true",
    })
    vim.fn.writefile(lines, E.config)
    E.vision = true
  end
  local created = call(methods.SessionCreate, { workspace = E.ws, config = { profile = "vision" } })
  vim.cmd("Dsh open " .. created.sessionId)
  local t = wait_current(function(c)
    return c.session_id == created.sessionId
  end, "the vision session's transcript")
  wait_text(t, "workspace ")
  return t
end

local function mode_of(path)
  return bit.band(H.truthy(vim.uv.fs_stat(path), path).mode, tonumber("777", 8))
end

local function said(needle, from)
  return H.wait_for(function()
    for i = from + 1, #H.messages do
      if tostring(H.messages[i]):find(needle, 1, true) then
        return H.messages[i]
      end
    end
  end, 10000, ("a notification saying %q; said: %s"):format(needle, vim.inspect(vim.list_slice(H.messages, from + 1))))
end

test("e2e: images — :Dsh prompt --image=FILE on a mock-vision session: the request carries it, the transcript shows [image: …], <CR> writes it byte for byte, privately, and opens it", function()
  setup()
  local t = vision_session()
  local png, bytes = png_file("my shot.png", 40000, 1)
  local before = #mock_request_list()
  script({ { content = "A screenshot of noise." } })
  vim.cmd("Dsh prompt --image=" .. vim.fn.fnameescape(png) .. " what is this?")
  wait_text(t, "━━ turn 1 completed", 30000)
  H.contains(text_of(t), "❯ what is this?\n  [image: my shot.png, image/png, 39.1 KiB]\n")
  H.contains(text_of(t), "A screenshot of noise.")

  -- The request the mock received carries the image after the text, as a data URL.
  local requests = mock_request_list()
  H.eq(before + 1, #requests)
  local body = vim.json.decode(requests[#requests].body)
  H.eq("mock-vision", body.model)
  local content = body.messages[#body.messages].content
  H.eq({ type = "text", text = "what is this?" }, content[1])
  H.eq("data:image/png;base64," .. vim.base64.encode(bytes), content[2].image_url.url)

  -- The log names it by its hash (the file's sha256), its size and media type, and its name.
  local sha = vim.trim(vim.system({ "sha256sum", png }, { text = true }):wait().stdout):match("^(%x+)")
  H.eq({ { sha256 = sha, size = 40000, mediaType = "image/png", name = "my shot.png" } }, t.images)
  -- What the model saw names it, after the prompt's text.
  local saw = require("dsh.view").render_request(t.session_id, call(methods.SessionRequest, { sessionId = t.session_id, step = 1 }), { wire = false })
  H.contains(saw, "what is this?\n[image: my shot.png, image/png, 39.1 KiB] sha256 " .. sha)

  -- <CR> on its line: fetched from the daemon, written privately, byte for byte, and opened.
  local opened = {}
  local ui_open = vim.ui.open
  vim.ui.open = function(path)
    table.insert(opened, path)
    return {}, nil
  end
  local ok, err = pcall(function()
    local lines = vim.api.nvim_buf_get_lines(t.buf, 0, -1, false)
    local at
    for i, line in ipairs(lines) do
      if line:find("[image: my shot.png", 1, true) then
        at = i
      end
    end
    vim.api.nvim_set_current_buf(t.buf)
    vim.api.nvim_win_set_cursor(0, { H.truthy(at, "the image's line"), 0 })
    vim.cmd.normal(vim.keycode("<CR>"))
    H.wait_for(function()
      return #opened == 1
    end, 10000, "vim.ui.open")
    local path = opened[1]
    H.truthy(vim.endswith(path, ".png"), path)
    local f = assert(io.open(path, "rb"))
    local written = f:read("a")
    f:close()
    H.truthy(written == bytes, ("the file is the image, byte for byte (%d bytes written, %d sent)"):format(#written, #bytes))
    H.eq(tonumber("600", 8), mode_of(path), "the file's mode")
    H.eq(tonumber("700", 8), mode_of(vim.fs.dirname(path)), "its directory's mode")
    H.eq(nil, path:find(E.ws, 1, true), "not in the workspace")
    -- `:Dsh image 1` opens the same image (written again, the same bytes).
    vim.cmd("Dsh image 1")
    H.wait_for(function()
      return #opened == 2
    end, 10000, "vim.ui.open again")
    H.eq(path, opened[2])

    -- `--image` without text asks for it; the next turn's request carries both images, the
    -- second after its own text, and the transcript numbers them in order.
    local gif = E.home .. "/second.gif"
    local gif_bytes = "GIF89a" .. ("\1\2\3\0"):rep(100)
    local f2 = assert(io.open(gif, "wb"))
    f2:write(gif_bytes)
    f2:close()
    local asked
    local input = vim.ui.input
    vim.ui.input = function(opts, on_confirm)
      asked = opts.prompt
      vim.schedule(function()
        on_confirm("and this one?")
      end)
    end
    script({ { content = "A GIF." } })
    vim.cmd("Dsh prompt --image " .. vim.fn.fnameescape(gif))
    local waited, werr = pcall(wait_text, t, "━━ turn 2 completed", 30000)
    vim.ui.input = input
    assert(waited, werr)
    H.eq("dsh prompt (1 image): ", asked)
    H.contains(text_of(t), "❯ and this one?\n  [image: second.gif, image/gif, 406 bytes]\n")
    local raw = mock_request_list()[before + 2].body
    local second = vim.json.decode(raw)
    local parts = second.messages[#second.messages].content
    H.eq({ type = "text", text = "and this one?" }, parts[1])
    H.eq("data:image/gif;base64," .. vim.base64.encode(gif_bytes), parts[2].image_url.url)
    local _, urls = raw:gsub("data:image/", "")
    H.eq(2, urls, "both images in the second request")
    H.eq({ "my shot.png", "second.gif" }, vim.tbl_map(function(ref)
      return ref.name
    end, t.images))
    vim.cmd("Dsh image 2")
    H.wait_for(function()
      return #opened == 3
    end, 10000, "vim.ui.open for the GIF")
    H.truthy(vim.endswith(opened[3], ".gif"), opened[3])
    local f3 = assert(io.open(opened[3], "rb"))
    H.truthy(f3:read("a") == gif_bytes, "the GIF, byte for byte")
    f3:close()

    -- No viewer: said, naming the image and where it was saved.
    vim.ui.open = function()
      return nil, "vim.ui.open: no handler found (tried: xdg-open)"
    end
    local from = #H.messages
    vim.cmd("Dsh image 1")
    local msg = said("dsh: cannot open [image: my shot.png, image/png, 39.1 KiB]: vim.ui.open: no handler found (tried: xdg-open)", from)
    H.contains(msg, "It is saved at " .. path)

    -- The object gone from the store: the daemon's objectNotFound, said naming the image.
    local objects = vim.fn.glob(E.home .. "/home/workspaces/*/checkpoints/objects/" .. sha:sub(1, 2) .. "/" .. sha, false, true)
    H.eq(1, #objects, "the image in the workspace's object store")
    vim.fn.delete(objects[1])
    from = #H.messages
    vim.cmd("Dsh image 1")
    msg = said("dsh: cannot show [image: my shot.png, image/png, 39.1 KiB]: ", from)
    H.contains(msg, sha)
  end)
  vim.ui.open = ui_open
  assert(ok, err)
end)

test("e2e: images — refusals: a model that reads no images and a file that is no image (the daemon's words, nothing logged), a file over the limit (unsent)", function()
  setup()
  local png = png_file("small.png", 500, 2)
  -- The default profile's model (DeepSeek's) reads no images.
  local created = call(methods.SessionCreate, { workspace = E.ws, config = { baseUrl = E.url } })
  vim.cmd("Dsh open " .. created.sessionId)
  local t = wait_current(function(c)
    return c.session_id == created.sessionId
  end, "the DeepSeek session's transcript")
  local requests = #mock_request_list()
  local from = #H.messages
  vim.cmd("Dsh prompt --image " .. vim.fn.fnameescape(png) .. " look")
  local msg = said("does not read images", from)
  H.contains(msg, "model deepseek-v4-flash")
  H.contains(msg, "nothing was logged")
  -- A file that is no image, whatever its name, on a model that reads images.
  local v = vision_session()
  vim.fn.writefile({ "not a picture" }, E.home .. "/fake.png")
  from = #H.messages
  vim.cmd("Dsh prompt --image=" .. E.home .. "/fake.png look")
  msg = said("fake.png is not an image a model reads", from)
  -- A file over the limit is refused here, unread and unsent.
  local fd = assert(vim.uv.fs_open(E.home .. "/huge.png", "w", tonumber("600", 8)))
  vim.uv.fs_ftruncate(fd, 3000001)
  vim.uv.fs_close(fd)
  from = #H.messages
  vim.cmd("Dsh prompt --image=" .. E.home .. "/huge.png look")
  said("huge.png is 3000001 bytes, over the limit of 3000000 bytes for an image", from)
  -- Nothing reached the model; neither session logged a prompt.
  H.eq(requests, #mock_request_list())
  for _, id in ipairs({ t.session_id, v.session_id }) do
    local page = call(methods.SessionEvents, { sessionId = id, fromSeq = 0, limit = 1000 })
    for _, ev in ipairs(page.events) do
      H.truthy(ev.type ~= "user/message" and ev.type ~= "turn/start", id .. " logged " .. ev.type)
    end
  end
end)

test("e2e: images — :Dsh prompt --image on a new session: a model that reads none is refused before the session is created (no log left), the daemon's words shown", function()
  setup()
  local png = png_file("new.png", 500, 3)
  local function listed()
    return vim.tbl_map(function(s)
      return s.sessionId
    end, call(methods.SessionList, { workspace = E.ws }).sessions)
  end
  local before = listed()
  local requests = #mock_request_list()
  -- No transcript to prompt: `:Dsh prompt` creates a session (the default profile, DeepSeek's,
  -- whose model reads no images).
  vim.cmd("enew")
  dsh._last = nil
  H.eq(nil, dsh.current(), "no current transcript")
  local from = #H.messages
  vim.cmd("Dsh prompt --image=" .. vim.fn.fnameescape(png) .. " look")
  local msg = said("does not read images", from)
  H.contains(msg, "deepseek-v4-flash")
  H.eq(before, listed(), "session/list, unchanged")
  H.eq(nil, dsh.current(), "no transcript opened")
  H.eq(requests, #mock_request_list())
end)

test("e2e: images — a prompt's images over one request line are refused before sending (no session made, nothing logged); an error with a null id is shown", function()
  setup()
  local a = png_file("big-a.png", 2000000, 4)
  local b = png_file("big-b.png", 2000000, 5)
  local t = vision_session()
  local requests = #mock_request_list()
  local from = #H.messages
  vim.cmd(("Dsh prompt --image=%s --image=%s compare"):format(vim.fn.fnameescape(a), vim.fn.fnameescape(b)))
  local msg = said("give them over several prompts", from)
  H.contains(msg, "dsh: the images of one prompt and its text take ")
  H.contains(msg, "more than one API request line holds (4194304 bytes)")
  -- Also when it would make a session for them: refused before it.
  local sessions = #call(methods.SessionList, { workspace = E.ws }).sessions
  vim.cmd("enew")
  dsh._last = nil
  from = #H.messages
  vim.cmd(("Dsh prompt --image=%s --image=%s compare"):format(vim.fn.fnameescape(a), vim.fn.fnameescape(b)))
  said("give them over several prompts", from)
  H.eq(sessions, #call(methods.SessionList, { workspace = E.ws }).sessions, "no session made")
  -- One of them fits (about 2.7 MB of base64).
  vim.api.nvim_set_current_buf(t.buf)
  script({ { content = "One noise image." } })
  vim.cmd("Dsh prompt --image=" .. vim.fn.fnameescape(a) .. " and this?")
  wait_text(t, "━━ turn 1 completed", 30000)
  H.eq(requests + 1, #mock_request_list(), "only the one that fits reached the model")
  local page = call(methods.SessionEvents, { sessionId = t.session_id, fromSeq = 0, limit = 1000 })
  local prompts = 0
  for _, ev in ipairs(page.events) do
    if ev.type == "user/message" then
      prompts = prompts + 1
    end
  end
  H.eq(1, prompts, "one prompt logged")

  -- A line over the limit sent anyway (an API client would): the daemon answers with an error
  -- whose id is null; the plugin shows it rather than dropping it.
  from = #H.messages
  dsh._client:request(methods.SessionPrompt, { sessionId = t.session_id, text = ("x"):rep(4194304) })
  msg = said("dsh: the daemon refused a request it could not read", from)
  H.contains(msg, "4194304")
  -- The connection still works.
  H.truthy(call(methods.SessionEvents, { sessionId = t.session_id, fromSeq = 0, limit = 1 }))
end)

test("e2e: teardown (daemon shutdown, mock stopped)", function()
  if not E.ready then
    return
  end
  local stopped = false
  dsh.disconnect(true, function()
    stopped = true
  end)
  H.wait_for(function()
    return stopped
  end, 10000, "the daemon to stop")
  if E.mock then
    E.mock:kill("sigterm")
  end
  vim.fn.delete(E.home, "rf")
end)
