-- Tests that need no daemon: usage formatting, transcript rendering from log events, the
-- generated protocol file, configuration, the errors for a missing binary or a bridge that
-- fails, and that nothing in the plugin waits for the daemon.
local dsh = require("dsh")
local usage = require("dsh.usage")
local transcript = require("dsh.transcript")
local config = require("dsh.config")

test("usage: thousands separators and short numbers", function()
  H.eq("0", usage.thousands(0))
  H.eq("999", usage.thousands(999))
  H.eq("1,000", usage.thousands(1000))
  H.eq("12,345,678", usage.thousands(12345678))
  H.eq("12k", usage.short(12345))
  H.eq("1.2k", usage.short(1234))
  H.eq("2.5M", usage.short(2500000))
end)

test("usage: a step's annotation and its color by hit ratio", function()
  local u = { promptTokens = 12345, cacheHitTokens = 11264, cacheMissTokens = 1081, completionTokens = 52, reasoningTokens = 0 }
  H.eq("12,345 prompt · 11,264 cached · 1,081 new · 52 out · 91% hit", usage.format(u))
  H.eq("DshUsageGood", usage.hl_for(usage.hit_percent(u)))
  H.eq("DshUsageFair", usage.hl_for(50))
  H.eq("DshUsagePoor", usage.hl_for(3))
  H.eq("0% hit", usage.format({ promptTokens = 0, cacheHitTokens = 0, cacheMissTokens = 0, completionTokens = 0 }):match("%d+%% hit"))
end)

test("sessions: an unreadable log is listed with its error, not as a session", function()
  local view = require("dsh.view")
  local line = view.session_line({ sessionId = "broken", workspace = "/w", createdMs = 0, updatedMs = 0, turns = 0, steps = 0, running = false, error = "session log /x/broken.jsonl: line 2: not a log event" })
  H.truthy(line:find("^! unreadable · broken · session log /x/broken.jsonl: line 2") ~= nil, line)
  local fine = view.session_line({ sessionId = "ok", workspace = "/w", createdMs = 0, updatedMs = 0, turns = 1, steps = 2, running = false, title = "hello" })
  H.truthy(fine:find("hello · 1 turn, 2 steps") ~= nil, fine)
end)

test("usage: the cause of a collapse comes from the log", function()
  local row = { step = 5, dropped = true, hitPercent = 4, causes = { { kind = "systemChanged", seq = 812 } }, explanation = "" }
  H.eq("system prompt changed at seq 812", usage.cause(row))
  row.explanation = "system prompt changed at seq 812"
  local chunks = usage.virt_text({ promptTokens = 100, cacheHitTokens = 4, cacheMissTokens = 96, completionTokens = 1 }, row)
  H.eq("DshUsagePoor", chunks[1][2])
  H.contains(chunks[2][1], "system prompt changed at seq 812")
  H.eq("resume with a changed header at seq 3", usage.cause({ causes = { { kind = "resume", seq = 3, changed = true } } }))
end)

test("usage: status line shows the live step and totals", function()
  local s = usage.statusline({ step = 4, running = true, totals = { promptTokens = 31000, cacheHitTokens = 28000, cacheMissTokens = 3000, completionTokens = 812 } })
  H.eq("dsh · ▶ step 4 · 31k prompt · 28k cached · 812 out · 90% hit", s)
end)

test("usage: money is rounded to the millionth, trailing zeros cut to two decimals, as `dsh usage` prints it", function()
  -- The CLI's own examples (server/cli/src/text.rs).
  H.eq("$0.000335", usage.money(0.0003353, "USD"))
  H.eq("$0.14", usage.money(0.14, "USD"))
  H.eq("0.0028 CNY", usage.money(0.0028, "CNY"))
  H.eq("$0.00", usage.money(0, "USD"))
  H.eq("12.50 EUR", usage.money(12.5, "EUR"))
  H.eq("$0.000001", usage.money(0.0000005000001, "USD"))
  -- An exact tie rounds to the even digit, as Rust's `{:.6}` does.
  H.eq("$0.007812", usage.money(0.0078125, "USD"))
  H.eq("$0.023438", usage.money(0.0234375, "USD"))
  H.eq(nil, usage.cost(nil))
end)

test("usage: the CLI's hand-computed usage table, in the plugin's figures", function()
  -- server/cli/src/text.rs: at $0.0028 / $0.14 / $0.28 per million, step 1 = (10,000 × 0.14 +
  -- 500 × 0.28) / 10⁶ = $0.00154; step 2 = (9,984 × 0.0028 + 516 × 0.14 + 300 × 0.28) / 10⁶ =
  -- $0.000184; the cache saved 9,984 × (0.14 − 0.0028) / 10⁶ = $0.00137.
  local price = { cacheHit = 0.0028, cacheMiss = 0.14, output = 0.28, currency = "USD" }
  local function row(step, prompt, hit, out)
    local u = { promptTokens = prompt, cacheHitTokens = hit, cacheMissTokens = prompt - hit, completionTokens = out, reasoningTokens = 0 }
    local amount = (hit * price.cacheHit + (prompt - hit) * price.cacheMiss + out * price.output) / 1e6
    local saved = (prompt * price.cacheMiss + out * price.output) / 1e6 - amount
    return { step = step, turn = 1, seq = step * 10, usage = u, hitPercent = usage.hit_percent(u), dropped = false, causes = {}, explanation = "", profile = "deepseek", model = "deepseek-v4-flash", cost = { amount = amount, saved = saved, currency = "USD" } }
  end
  local rows = { row(1, 10000, 0, 500), row(2, 10500, 9984, 300) }
  local cost = { amount = rows[1].cost.amount + rows[2].cost.amount, saved = rows[1].cost.saved + rows[2].cost.saved, currency = "USD" }
  local result = { rows = rows, totals = { promptTokens = 20500, cacheHitTokens = 9984, cacheMissTokens = 10516, completionTokens = 800, reasoningTokens = 0 }, cost = cost, prices = { { profile = "deepseek", model = "deepseek-v4-flash", price = price } }, contextWindow = 1048576 }
  local view = require("dsh.view")
  H.eq({
    "# Usage — session s1",
    "",
    "step   1  turn  1  seq    10  10,000 prompt · 0 cached · 10,000 new · 500 out · 0% hit · $0.00154 cost",
    "step   2  turn  1  seq    20  10,500 prompt · 9,984 cached · 516 new · 300 out · 95% hit · $0.000184 cost",
    "",
    "total  20,500 prompt · 9,984 cached · 10,516 new · 800 out · 49% hit · $0.001724 cost",
    "cost $0.001724 · the cache saved $0.00137 (the same tokens at the cache-miss price: $0.003094)",
    "prices of deepseek/deepseek-v4-flash per million tokens: cache hit $0.0028, cache miss $0.14, output $0.28",
  }, view.usage_lines("s1", result))
  H.eq("dsh · step 2 · 21k prompt · 10.0k cached · 800 out · 49% hit · $0.001724", usage.statusline({ step = 2, totals = result.totals, cost = cost }))
  -- Without a price: no cost, never $0.
  rows[2].cost = nil
  local lines = view.usage_lines("s1", { rows = rows, totals = result.totals, prices = {} })
  H.eq("step   2  turn  1  seq    20  10,500 prompt · 9,984 cached · 516 new · 300 out · 95% hit", lines[4])
  H.eq("total  20,500 prompt · 9,984 cached · 10,516 new · 800 out · 49% hit", lines[6])
  H.eq("cost unknown: no price configured for a model of this session (see `dsh config`)", lines[7])
  H.eq(7, #lines)
  local chunks = usage.virt_text(rows[2].usage, rows[2])
  H.eq(nil, chunks[1][1]:find("cost", 1, true))
end)

test("sessions: each session's line shows its total cost and its profile/model", function()
  local view = require("dsh.view")
  local s = { sessionId = "ok", workspace = "/w", createdMs = 0, updatedMs = 0, turns = 1, steps = 2, running = false, title = "hello", profile = "deepseek", model = "deepseek-v4-flash", cost = { amount = 0.001724, saved = 0.00137, currency = "USD" } }
  H.contains(view.session_line(s), " · $0.001724 · deepseek/deepseek-v4-flash · ok")
  s.cost = nil
  local line = view.session_line(s)
  H.eq(nil, line:find("$", 1, true), line)
  H.contains(line, " · deepseek/deepseek-v4-flash · ok")
end)

-- A synthetic log, shaped like the daemon's (see protocol.generated.ts `LogEvent`).
local function events(session)
  local list = {
    { "session/meta", { formatVersion = 1, sessionId = session, workspace = "/tmp/ws" } },
    { "turn/start", { turn = 1 } },
    { "user/message", { text = "write hello.txt" } },
    { "step/start", { step = 1, turn = 1 } },
    { "assistant/chunk", { step = 1, delta = { kind = "reasoning", text = "The user wants\na file." } } },
    { "assistant/chunk", { step = 1, delta = { kind = "text", text = "Writing " } } },
    { "assistant/chunk", { step = 1, delta = { kind = "text", text = "it now." } } },
    { "assistant/chunk", { step = 1, delta = { kind = "toolCall", index = 0, id = "c1", name = "write_file" } } },
    { "assistant/chunk", { step = 1, delta = { kind = "toolArgs", index = 0, fragment = '{"path":"hello.txt",' } } },
    { "assistant/chunk", { step = 1, delta = { kind = "toolArgs", index = 0, fragment = '"content":"hi"}' } } },
    { "assistant/message", { step = 1, message = { content = "Writing it now.", reasoningContent = "The user wants\na file.", toolCalls = { { id = "c1", name = "write_file", arguments = '{"path":"hello.txt","content":"hi"}' } } } } },
    { "step/end", { step = 1, finishReason = "tool_calls", usage = { promptTokens = 1000, cacheHitTokens = 0, cacheMissTokens = 1000, completionTokens = 20, reasoningTokens = 5 } } },
    { "tool/call", { step = 1, callId = "c1", name = "write_file" } },
    { "approval/request", { approvalId = "a1", callId = "c1", tool = "write_file", summary = "write hello.txt (2 bytes)" } },
    { "approval/decision", { approvalId = "a1", decision = "allow" } },
    { "tool/result", { callId = "c1", name = "write_file", content = "wrote 2 bytes", isError = false } },
    { "steering/message", { text = "also add a newline" } },
    -- The daemon says which steering and notes joined a step (`joined`, third here).
    { "step/start", { step = 2, turn = 1 }, { 16 } },
    { "assistant/message", { step = 2, message = { content = "Done.", toolCalls = {} } } },
    { "step/end", { step = 2, finishReason = "stop", usage = { promptTokens = 1100, cacheHitTokens = 1024, cacheMissTokens = 76, completionTokens = 3, reasoningTokens = 0 } } },
    { "turn/end", { turn = 1, reason = "completed" } },
  }
  local out = {}
  for i, e in ipairs(list) do
    out[i] = { sessionId = session, seq = i - 1, time = 0, type = e[1], data = e[2], joined = e[3] }
  end
  return out
end

local buf_text = H.buf_text

local usage_marks = H.usage_marks

test("transcript: a command approved unconfined is marked; a confined one is not", function()
  local t = transcript.get_or_create("unit-unconfined")
  local list = {
    { "session/meta", { formatVersion = 0, sessionId = "unit-unconfined", workspace = "/tmp/ws" } },
    { "turn/start", { turn = 1 } },
    { "step/start", { step = 1, turn = 1 } },
    { "assistant/message", { step = 1, message = { content = "", toolCalls = { { id = "c1", name = "run_command", arguments = '{"command":"ls"}' }, { id = "c2", name = "run_command", arguments = '{"command":"touch /x"}' } } } } },
    { "approval/request", { approvalId = "a1", callId = "c1", tool = "run_command", summary = "run_command: ls", sandbox = "workspace-write" } },
    { "approval/decision", { approvalId = "a1", decision = "allow" } },
    { "tool/call", { step = 1, callId = "c1", name = "run_command" } },
    { "tool/result", { callId = "c1", name = "run_command", content = "a\n[exit code 0]" } },
    { "approval/request", { approvalId = "a2", callId = "c2", tool = "run_command", summary = "run_command: touch /x", sandbox = "workspace-write" } },
    { "approval/decision", { approvalId = "a2", decision = "allowUnconfined" } },
    { "tool/call", { step = 1, callId = "c2", name = "run_command", unconfined = true } },
    { "tool/result", { callId = "c2", name = "run_command", content = "[exit code 0]" } },
  }
  for i, e in ipairs(list) do
    t:on_event({ sessionId = "unit-unconfined", seq = i - 1, time = 0, type = e[1], data = e[2] })
  end
  local text = buf_text(t.buf)
  H.contains(text, "? run_command wants approval: run_command: ls [sandbox: workspace-write]")
  H.eq(1, select(2, text:gsub("ran unconfined", "")), "only the second run is marked")
  H.contains(text, "⚠ run_command ran unconfined (no sandbox)")
  local marks = table.concat(vim.tbl_map(function(m)
    return m[4].virt_text and m[4].virt_text[1][1] or ""
  end, vim.api.nvim_buf_get_extmarks(t.buf, transcript.ns, 0, -1, { details = true })), "|")
  H.contains(marks, "allowed once, unconfined")
  H.eq({ "Allow", "Deny", "Allow always", "Allow once, unconfined" }, dsh.approval_choices({ sandbox = "workspace-write" }))
  H.eq({ "Allow", "Deny", "Allow always" }, dsh.approval_choices({ sandbox = "full (unconfined)" }))
  H.eq({ "Allow", "Deny", "Allow always" }, dsh.approval_choices({}))
  vim.api.nvim_buf_delete(t.buf, { force = true })
end)

test("transcript: a budget reached is one line before the turn's end, in the CLI's words", function()
  H.eq("step budget reached: 1 of 1 steps", transcript.limit_text({ limit = "maxSteps", value = 1, spent = 1 }))
  H.eq("token budget reached: 12,345 of 10,000 tokens", transcript.limit_text({ limit = "maxTokens", value = 10000, spent = 12345 }))
  H.eq("cost budget reached: $0.001234 of $0.001", transcript.limit_text({ limit = "maxCost", value = 0.001, spent = 0.001234 }))
  H.eq("timeout reached: 2.0 s of 2 s", transcript.limit_text({ limit = "timeout", value = 2, spent = 2.003 }))
  H.eq("newBudget reached: 3 of 2", transcript.limit_text({ limit = "newBudget", value = 2, spent = 3 }))
  local t = transcript.get_or_create("unit-limit")
  local list = {
    { "session/meta", { formatVersion = 0, sessionId = "unit-limit", workspace = "/tmp/ws" } },
    { "turn/start", { turn = 1 } },
    { "step/start", { step = 1, turn = 1 } },
    { "step/end", { step = 1, finishReason = "tool_calls", usage = { promptTokens = 10, cacheHitTokens = 0, cacheMissTokens = 10, completionTokens = 2, reasoningTokens = 0 } } },
    { "turn/limit", { limit = "maxSteps", value = 1, spent = 1 } },
    { "turn/end", { turn = 1, reason = "limit" } },
  }
  for i, e in ipairs(list) do
    t:on_event({ sessionId = "unit-limit", seq = i - 1, time = 0, type = e[1], data = e[2] })
  end
  local text = buf_text(t.buf)
  H.contains(text, "⊘ step budget reached: 1 of 1 steps")
  H.contains(text, "━━ turn 1 limit")
  H.eq(false, t.running)
  vim.api.nvim_buf_delete(t.buf, { force = true })
end)

test("transcript: a plan shows under the header, each update replacing it, in the CLI's marks", function()
  H.eq({ "plan cleared" }, transcript.plan_lines({ plan = {} }))
  H.eq(
    { "plan (1 of 4 completed): Found it.", "  [x] Read", "  [>] Fix", "  [ ] Test", "  [later] New" },
    transcript.plan_lines({ explanation = "Found it.", plan = {
      { step = "Read", status = "completed" }, { step = "Fix", status = "in_progress" },
      { step = "Test", status = "pending" }, { step = "New", status = "later" } } })
  )
  local t = transcript.get_or_create("unit-plan")
  local list = {
    { "session/meta", { formatVersion = 0, sessionId = "unit-plan", workspace = "/tmp/ws" } },
    { "turn/start", { turn = 1 } },
    { "plan/update", { callId = "p1", plan = { { step = "A", status = "in_progress" } } } },
    { "plan/update", { callId = "p2", plan = { { step = "A", status = "completed" }, { step = "B", status = "in_progress" } } } },
  }
  local lines_before
  for i, e in ipairs(list) do
    if i == 3 then
      lines_before = vim.api.nvim_buf_line_count(t.buf)
    end
    t:on_event({ sessionId = "unit-plan", seq = i - 1, time = 0, type = e[1], data = e[2] })
  end
  H.eq(lines_before, vim.api.nvim_buf_line_count(t.buf), "a plan adds no buffer line")
  H.eq(3, t.plan.seq)
  local marks = vim.api.nvim_buf_get_extmarks(t.buf, transcript.plan_ns, 0, -1, { details = true })
  H.eq(1, #marks, "one plan shown")
  H.eq(t.header_line, marks[1][2])
  local shown = {}
  for _, chunks in ipairs(marks[1][4].virt_lines) do
    table.insert(shown, chunks[1][1])
  end
  H.eq({ "plan (1 of 2 completed)", "  [x] A", "  [>] B" }, shown)
  vim.api.nvim_buf_delete(t.buf, { force = true })
end)

test("transcript: a sub-agent's line under its step opens the child; :Dsh sessions nests children", function()
  local t = transcript.get_or_create("unit-parent")
  local list = {
    { "session/meta", { formatVersion = 0, sessionId = "unit-parent", workspace = "/tmp/ws" } },
    { "turn/start", { turn = 1 } },
    { "step/start", { step = 1, turn = 1 } },
    { "task/spawn", { callId = "c1", sessionId = "unit-child", context = "fresh", description = "look\naround", depth = 1 } },
  }
  for i, e in ipairs(list) do
    t:on_event({ sessionId = "unit-parent", seq = i - 1, time = 0, type = e[1], data = e[2] })
  end
  local lines = vim.api.nvim_buf_get_lines(t.buf, 0, -1, false)
  local at
  for i, line in ipairs(lines) do
    if line:find("⇢ sub-agent", 1, true) then
      at = i - 1
    end
  end
  H.eq("  ⇢ sub-agent unit-child (fresh, depth 1): look around", lines[at + 1])
  H.eq("unit-child", t:child_at(at))
  H.eq(nil, t:child_at(at - 1))
  H.eq({ "unit-child" }, t.children)
  -- `<CR>` is mapped in the transcript's buffer.
  local mapped = false
  for _, map in ipairs(vim.api.nvim_buf_get_keymap(t.buf, "n")) do
    mapped = mapped or map.lhs == "<CR>"
  end
  H.truthy(mapped, "<CR> mapped in the transcript")
  vim.api.nvim_buf_delete(t.buf, { force = true })

  local view = require("dsh.view")
  local function s(id, updated, parent)
    return { sessionId = id, workspace = "/w", createdMs = 0, updatedMs = updated, turns = 1, steps = 1, running = false, title = id, parent = parent and { sessionId = parent, toolCallId = "c", depth = 1 } or nil }
  end
  local nested = view.nest_sessions({ s("old", 1), s("kid", 9, "old"), s("new", 5), s("grandkid", 10, "kid"), s("orphan", 3, "gone"), s("kid2", 2, "old") })
  local order, nests = {}, {}
  for _, n in ipairs(nested) do
    table.insert(order, n.sessionId)
    table.insert(nests, n.nest)
  end
  H.eq({ "new", "orphan", "old", "kid", "grandkid", "kid2" }, order)
  H.eq({ 0, 0, 0, 1, 2, 1 }, nests)
  H.contains(view.session_line(nested[4]), "  ↳ kid · ")
  H.eq(1, view.session_line(nested[1]):find("new · ", 1, true))
end)

test("transcript: renders streamed text, folded reasoning, tool calls, approvals, steering", function()
  local t = transcript.get_or_create("unit-1")
  for _, ev in ipairs(events("unit-1")) do
    t:on_event(ev)
  end
  local text = buf_text(t.buf)
  H.contains(text, "dsh session unit-1")
  H.contains(text, "❯ write hello.txt")
  H.contains(text, "  │ The user wants\n  │ a file.")
  H.contains(text, "  Writing it now.")
  H.contains(text, '⚙ write_file {"path":"hello.txt","content":"hi"}')
  H.contains(text, "? write_file wants approval: write hello.txt (2 bytes)")
  H.contains(text, "✓ write_file → wrote 2 bytes")
  H.contains(text, "↪ steer: also add a newline")
  H.contains(text, "── step 2")
  H.contains(text, "  Done.")
  H.contains(text, "━━ turn 1 completed")
  -- The streamed message is not rendered twice.
  H.eq(1, select(2, text:gsub("Writing it now", "")))
  -- Reasoning lines are folded.
  vim.api.nvim_set_current_buf(t.buf)
  transcript.setup_window(0)
  local lines = vim.api.nvim_buf_get_lines(t.buf, 0, -1, false)
  for i, l in ipairs(lines) do
    if l:find("The user wants", 1, true) then
      H.truthy(vim.fn.foldclosed(i) ~= -1, "reasoning line is folded")
    end
  end
  -- Steering says where it landed.
  local landed = false
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(t.buf, transcript.ns, 0, -1, { details = true })) do
    for _, chunk in ipairs(m[4].virt_text or {}) do
      if chunk[1]:find("joined step 2", 1, true) then
        landed = true
      end
    end
  end
  H.truthy(landed, "steering is marked as joining step 2")
  -- Each step carries its usage on its header line, colored by hit ratio.
  local marks = usage_marks(t.buf)
  H.eq(2, #marks)
  H.eq("1,000 prompt · 0 cached · 1,000 new · 20 out · 0% hit", marks[1].text)
  H.eq("DshUsagePoor", marks[1].hl)
  H.eq("── step 1", lines[marks[1].line + 1])
  H.eq("1,100 prompt · 1,024 cached · 76 new · 3 out · 93% hit", marks[2].text)
  H.eq("DshUsageGood", marks[2].hl)
  -- Replayed (duplicate) events are ignored.
  local before = buf_text(t.buf)
  for _, ev in ipairs(events("unit-1")) do
    t:on_event(ev)
  end
  H.eq(before, buf_text(t.buf))
  H.eq(1, t:step_at(marks[1].line + 2))
  vim.api.nvim_buf_delete(t.buf, { force = true })
end)

test("transcript: a session/usage row replaces the annotation and names the collapse", function()
  local t = transcript.get_or_create("unit-2")
  for _, ev in ipairs(events("unit-2")) do
    t:on_event(ev)
  end
  t:apply_usage({
    rows = {
      { step = 1, turn = 1, seq = 3, hitPercent = 0, dropped = false, causes = { { kind = "firstRequest", seq = 1 } }, explanation = "first request", usage = { promptTokens = 1000, cacheHitTokens = 0, cacheMissTokens = 1000, completionTokens = 20, reasoningTokens = 5 } },
      { step = 2, turn = 1, seq = 17, hitPercent = 12.5, dropped = true, causes = { { kind = "systemChanged", seq = 812 } }, explanation = "system prompt changed at seq 812", usage = { promptTokens = 1100, cacheHitTokens = 137, cacheMissTokens = 963, completionTokens = 3, reasoningTokens = 0 } },
    },
    totals = { promptTokens = 2100, cacheHitTokens = 137, cacheMissTokens = 1963, completionTokens = 23, reasoningTokens = 5 },
  })
  local marks = usage_marks(t.buf)
  H.eq("1,100 prompt · 137 cached · 963 new · 3 out · 13% hit  ▼ system prompt changed at seq 812", marks[2].text)
  H.eq("DshUsagePoor", marks[2].hl)
  vim.api.nvim_set_current_buf(t.buf)
  H.contains(require("dsh").statusline(), "step 2 · 2.1k prompt")
  vim.api.nvim_buf_delete(t.buf, { force = true })
end)

test("protocol.lua (generated by the protocol crate) loads and names every method the plugin calls", function()
  -- Its freshness is the protocol crate's test (`cargo test -p dsh-protocol`).
  local p = require("dsh.protocol")
  H.eq("number", type(p.PROTOCOL_VERSION))
  H.eq("session/subscribe", p.methods.SessionSubscribe)
  H.eq("session/event", p.methods.SessionEvent)
  H.eq(1002, p.error_codes.sessionBusy)
  H.truthy(#p.event_kinds >= 20, "event kinds listed")
  H.eq({ kind = "session/meta", payload = "SessionMeta" }, p.event_kinds[1])
  local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
  for _, file in ipairs(vim.fn.glob(root .. "/lua/dsh/*.lua", false, true)) do
    local text = table.concat(vim.fn.readfile(file), "\n")
    for name in text:gmatch("methods%.(%u%w*)") do
      H.truthy(p.methods[name], ("%s uses methods.%s"):format(vim.fn.fnamemodify(file, ":t"), name))
    end
  end
end)

test("the plugin never blocks on the daemon: no vim.wait outside :checkhealth", function()
  local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
  for _, file in ipairs(vim.fn.glob(root .. "/lua/dsh/*.lua", false, true)) do
    local name = vim.fn.fnamemodify(file, ":t")
    local text = table.concat(vim.fn.readfile(file), "\n")
    if name ~= "health.lua" then
      H.eq(nil, text:find("vim.wait(", 1, true), name .. " calls vim.wait")
      H.eq(nil, text:find(":wait(", 1, true), name .. " waits on a process")
    end
  end
end)

test("config: vim.g.dsh builds the stdio command; no setup() needed", function()
  local saved = vim.g.dsh
  vim.g.dsh = { path = "/nonexistent/dsh", home = "/tmp/h", base_url = "http://127.0.0.1:1", model = "m", in_process = true }
  H.eq({ "/nonexistent/dsh", "--home", "/tmp/h", "--base-url", "http://127.0.0.1:1", "--model", "m", "stdio", "--in-process" }, config.stdio_cmd())
  vim.g.dsh = saved
end)

test("errors: a missing binary says how to fix it", function()
  local saved = vim.g.dsh
  vim.g.dsh = { path = "/nonexistent/dsh" }
  local msgs = {}
  local notify = vim.notify
  vim.notify = function(m)
    table.insert(msgs, m)
  end
  local called = false
  require("dsh").with_client(function()
    called = true
  end)
  vim.notify = notify
  vim.g.dsh = saved
  H.eq(false, called)
  H.contains(msgs[1] or "", "`/nonexistent/dsh` was not found")
  H.contains(msgs[1] or "", "vim.g.dsh = { path =")
end)

test("errors: a bridge that dies says so, with its stderr and the fix", function()
  local client = require("dsh.client")
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, "p")
  local fake = dir .. "/dsh"
  vim.fn.writefile({ "#!/bin/sh", "echo 'error: cannot bind socket: permission denied' >&2", "exit 3" }, fake)
  vim.fn.setfperm(fake, "rwxr-xr-x")
  local done, c, err = false, nil, nil
  client.start(vim.tbl_extend("force", config.get(), { path = fake }), function(cl, e)
    done, c, err = true, cl, e
  end)
  H.wait_for(function()
    return done
  end, 5000, "start to give up")
  H.eq(nil, c)
  H.contains(err, "cannot bind socket: permission denied")
  H.contains(err, "Fix:")
end)

test("errors: a bridge that never answers initialize is given up on, not waited for", function()
  local client = require("dsh.client")
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, "p")
  local fake = dir .. "/dsh"
  vim.fn.writefile({ "#!/bin/sh", "echo 'daemon starting' >&2", "exec sleep 30" }, fake)
  vim.fn.setfperm(fake, "rwxr-xr-x")
  local saved = client.initialize_timeout_ms
  client.initialize_timeout_ms = 300
  local done, c, err = false, nil, nil
  local start = vim.uv.hrtime()
  client.start(vim.tbl_extend("force", config.get(), { path = fake }), function(cl, e)
    done, c, err = true, cl, e
  end)
  client.initialize_timeout_ms = saved
  H.eq(false, done, "start returned before any answer")
  H.truthy((vim.uv.hrtime() - start) / 1e6 < 200, "start did not wait")
  H.wait_for(function()
    return done
  end, 5000, "the initialize timeout")
  H.eq(nil, c)
  H.contains(err, "dsh: the daemon did not answer `initialize`: dsh: initialize timed out")
  H.contains(err, "Fix:")
end)

test("errors: no API key names the fix", function()
  local saved = vim.env.DEEPSEEK_API_KEY
  vim.env.DEEPSEEK_API_KEY = nil
  H.contains(config.api_key_problem() or "", "export DEEPSEEK_API_KEY")
  H.contains(require("dsh").error_text({ code = 1007, message = "provider not configured" }), "DEEPSEEK_API_KEY")
  vim.env.DEEPSEEK_API_KEY = saved
end)

test(":Dsh completes its subcommands", function()
  local names = vim.fn.getcompletion("Dsh ", "cmdline")
  for _, n in ipairs({ "open", "prompt", "steer", "cancel", "fork", "rewind", "saw", "diff", "sessions", "compact" }) do
    H.truthy(vim.tbl_contains(names, n), "completion has " .. n)
  end
  H.eq({ "sessions", "saw", "steer", "stop" }, (function()
    local s = vim.fn.getcompletion("Dsh s", "cmdline")
    table.sort(s, function(a, b)
      local order = { sessions = 1, saw = 2, steer = 3, stop = 4 }
      return order[a] < order[b]
    end)
    return s
  end)())
end)

test("transcript: renders a log written by the real agent (tests/data/write_file.jsonl)", function()
  local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h")
  local t = transcript.get_or_create("fixture")
  for _, line in ipairs(vim.fn.readfile(root .. "/data/write_file.jsonl")) do
    local ev = vim.json.decode(line, { luanil = { object = true, array = true } })
    ev.sessionId = "fixture"
    t:on_event(ev)
  end
  local lines = vim.api.nvim_buf_get_lines(t.buf, 0, -1, false)
  local text = table.concat(lines, "\n")
  H.contains(text, "  I will write.")
  H.contains(text, '⚙ write_file {"content":"hi\\n","path":"hello.txt"}')
  H.contains(text, "✓ write_file → created hello.txt (3 bytes)")
  H.contains(text, "  Done writing.")
  -- An empty reasoning chunk opens no block.
  for _, l in ipairs(lines) do
    H.truthy(l ~= "  │ ", "no empty reasoning line")
  end
  local marks = H.usage_marks(t.buf)
  H.eq("2,094 prompt · 0 cached · 2,094 new · 37 out · 0% hit", marks[1].text)
  H.eq("2,161 prompt · 2,112 cached · 49 new · 5 out · 98% hit", marks[2].text)
  vim.api.nvim_buf_delete(t.buf, { force = true })
end)

test(":Dsh rewind's question names every file the dry run changes, those it cannot restore and those someone else changed", function()
  local commands = require("dsh.commands")
  local many = {}
  for i = 1, 14 do
    table.insert(many, ("f%d"):format(i))
  end
  local plan = { sessionId = "s1", restored = { "a.txt" }, created = { "b.txt" }, deleted = many, conflicts = { "a.txt" }, notRestorable = { "big.bin" }, dryRun = true }
  H.eq(
    table.concat({
      "Rewind the files and the conversation to before step 3?",
      "restore (1): a.txt",
      "recreate (1): b.txt",
      "delete (14): f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12 and 2 more",
      "not restorable (over the size cap) (1): big.bin",
      "changed since the agent's last checkpoint by someone else, and overwritten (1): a.txt",
      "The conversation continues in a new session forked before step 3; this one stays as history.",
    }, "\n"),
    commands.rewind_question(3, plan)
  )
  H.eq({ "no file changed" }, commands.rewind_changes({ restored = {}, created = {}, deleted = {}, notRestorable = {} }, true))
  H.eq({ "restored (1): a.txt", "the checkpoint is incomplete: disk full" }, commands.rewind_changes({ restored = { "a.txt" }, created = {}, deleted = {}, notRestorable = {}, incomplete = "disk full" }, true))
end)

test("doc/dsh.txt: help tags build without duplicates", function()
  local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, "p")
  vim.fn.writefile(vim.fn.readfile(root .. "/doc/dsh.txt"), dir .. "/dsh.txt")
  vim.cmd("helptags " .. vim.fn.fnameescape(dir))
  local tags = table.concat(vim.fn.readfile(dir .. "/tags"), "\n")
  for _, tag in ipairs({ "g:dsh", ":Dsh", ":Dsh-saw", ":Dsh-diff", ":Dsh-fork", ":Dsh-rewind", "dsh-usage", "dsh-statusline" }) do
    H.contains(tags, tag .. "\t")
  end
end)

test(":checkhealth dsh reports a missing binary with the fix", function()
  local saved = vim.g.dsh
  vim.g.dsh = { path = "/nonexistent/dsh" }
  vim.cmd("silent checkhealth dsh")
  local text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
  vim.g.dsh = saved
  H.contains(text, "not found or not executable")
  H.contains(text, "vim.g.dsh = { path")
  vim.cmd("bwipeout!")
end)

test("client: split lines, a notification before its subscribe answer, 53-bit subscription ids", function()
  local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h")
  local c = require("dsh.client").Client.spawn({ vim.v.progpath, "-u", "NONE", "-i", "NONE", "-n", "-l", root .. "/fake_dsh.lua" })
  local init, err = H.request(c, "initialize", { protocolVersion = 1 }, 5000)
  H.eq(nil, err)
  H.eq("fake", init.serverInfo.version)
  local got, key = {}, nil
  c:subscribe("s", 0, function(ev)
    table.insert(got, ev.data.text)
  end, function(e, k)
    key = k
  end)
  H.wait_for(function()
    return #got == 2
  end, 5000, "two events")
  H.eq({ "early", "late" }, got)
  H.eq("4503599627370497", key)
  local done
  c:request("session/unsubscribe", { c.sub_ids[key] }, function(_, r)
    done = r
  end)
  H.wait_for(function()
    return done ~= nil
  end, 5000, "unsubscribe answer")
  H.eq(true, done, "the id went back exactly")
  local _, ferr = H.request(c, "fail", {}, 5000)
  H.eq(1002, ferr.code)
  -- An error with a null id reaches no callback: it is shown to the user, not dropped.
  local from = #H.messages
  local answered = false
  c:request("garbled", {}, function()
    answered = true
  end)
  local shown = H.wait_for(function()
    return H.messages[from + 1]
  end, 5000, "the null-id error shown")
  H.contains(shown, "dsh: the daemon refused a request it could not read (code -32600): invalid request: request line exceeds 4194304 bytes")
  H.eq(false, answered)
  local exited
  table.insert(c.on_exit_handlers, function(_, reason)
    exited = reason
  end)
  local pending_err
  c:request("exit", {}, function(e)
    pending_err = e
  end)
  H.wait_for(function()
    return exited
  end, 5000, "exit")
  H.contains(exited, "code 7")
  H.contains(exited, "fake: exiting on request")
  H.contains(pending_err.message, "exited")
end)

-- Workspace notes from a fixture typed with the generated annotations (protocol.lua): a
-- `workspace` note is the daemon's next piece (issue 13, item 3), so its rendering is pinned here;
-- `instructions` notes are covered against the daemon (e2e_spec).

---@type dsh.ContextMessage
local edited_note = {
  text = "src/a.rs changed on disk since you read it:\n\n--- src/a.rs (as you read it)\n+++ src/a.rs (now)\n@@ -1 +1 @@\n-fn a() {}\n+fn a() -> u8 { 1 }",
  source = "workspace",
  files = { { path = "src/a.rs", change = "edited", sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" } },
}
---@type dsh.ContextMessage
local mixed_note = {
  text = "src/b.rs was deleted.\nsrc/c is now a directory.\nsrc/d.rs changed on disk.",
  source = "workspace",
  files = { { path = "src/b.rs", change = "deleted" }, { path = "src/a.rs", change = "edited" }, { path = "src/c", change = "replaced" }, { path = "src/d.rs", change = "edited" } },
}

---@return dsh.SessionEvent[]
local function note_events(session)
  local usage_ = { promptTokens = 1000, cacheHitTokens = 900, cacheMissTokens = 100, completionTokens = 10, reasoningTokens = 0 }
  local list = {
    { "session/meta", { formatVersion = 0, sessionId = session, workspace = "/w" } },
    { "turn/start", { turn = 1 } },
    { "context/message", { text = "Today's date is 2026-12-01.", source = "date" } },
    { "user/message", { text = "Read src/a.rs." } },
    { "step/start", { step = 1, turn = 1 }, { 2 } },
    { "assistant/message", { step = 1, message = { content = "", reasoningContent = "Read it\nfirst.", toolCalls = { { id = "c1", name = "read_file", arguments = '{"path":"src/a.rs"}' } } } } },
    { "tool/call", { step = 1, callId = "c1", name = "read_file" } },
    { "tool/result", { callId = "c1", name = "read_file", content = "fn a() {}", isError = false } },
    { "step/end", { step = 1, finishReason = "tool_calls", usage = usage_ } },
    { "step/start", { step = 2, turn = 1 } },
    { "assistant/message", { step = 2, message = { content = "It defines a()." } } },
    { "step/end", { step = 2, finishReason = "stop", usage = usage_ } },
    { "turn/end", { turn = 1, reason = "completed" } },
    -- Between the turns the user's editor saves src/a.rs: the next step starts with a note.
    { "turn/start", { turn = 2 } },
    { "user/message", { text = "And now?" } },
    { "context/message", edited_note },
    { "step/start", { step = 3, turn = 2 }, { 15 } },
    { "assistant/message", { step = 3, message = { content = "", toolCalls = { { id = "c2", name = "list_dir", arguments = '{"path":"src"}' } } } } },
    -- Logged while step 3 runs: it joins the next request, step 4's.
    { "context/message", mixed_note },
    { "tool/call", { step = 3, callId = "c2", name = "list_dir" } },
    { "tool/result", { callId = "c2", name = "list_dir", content = "a.rs\nc/\nd.rs", isError = false } },
    { "step/end", { step = 3, finishReason = "tool_calls", usage = usage_ } },
    { "step/start", { step = 4, turn = 2 }, { 18 } },
    { "assistant/message", { step = 4, message = { content = "a() returns 1 now." } } },
    { "step/end", { step = 4, finishReason = "stop", usage = usage_ } },
    { "turn/end", { turn = 2, reason = "completed" } },
  }
  local out = {}
  for i, e in ipairs(list) do
    out[i] = { sessionId = session, seq = i - 1, time = 0, type = e[1], data = e[2], joined = e[3] }
  end
  return out
end

--- The 1-based line numbers of `needle` (plain) in the buffer.
local function lines_with(buf, needle)
  local found = {}
  for i, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if l:find(needle, 1, true) then
      table.insert(found, i)
    end
  end
  return found
end

test("notes: the one line of a workspace or instructions note", function()
  H.eq("src/a.rs changed on disk: joins the next request as a note", transcript.note_headline(edited_note))
  H.eq("src/b.rs deleted on disk; src/a.rs, src/d.rs changed on disk; src/c replaced on disk: joins the next request as a note", transcript.note_headline(mixed_note))
  H.eq("new.rs added on disk: joins the next request as a note", transcript.note_headline({ text = "", source = "workspace", files = { { path = "new.rs", change = "added" } } }))
  H.eq("a file changed on disk: joins the next request as a note", transcript.note_headline({ text = "", source = "workspace" }))
  H.eq("AGENTS.md changed: joins the next request as a note", transcript.note_headline({ text = "", source = "instructions", files = { { path = "AGENTS.md", change = "edited" } } }))
  H.eq("AGENTS.md deleted: joins the next request as a note", transcript.note_headline({ text = "", source = "instructions", files = { { path = "AGENTS.md", change = "deleted" } } }))
  H.eq("AGENTS.md, .dsh/instructions.md added: joins the next request as a note", transcript.note_headline({ text = "", source = "instructions", files = { { path = "AGENTS.md", change = "added" }, { path = ".dsh/instructions.md", change = "added" } } }))
  -- The date, and sources the plugin does not know, are shown whole as before.
  H.eq(nil, transcript.note_headline({ text = "", source = "date" }))
  H.eq(nil, transcript.note_headline({ text = "", source = "hook" }))
  H.eq(nil, transcript.note_headline({ text = "" }))
end)

test("notes: a workspace note shows once, before the step it joined, its text folded under it", function()
  local t = transcript.get_or_create("unit-notes")
  local events_ = note_events("unit-notes")
  -- Shown in a window while the events arrive: folds are computed as lines are inserted.
  vim.api.nvim_set_current_buf(t.buf)
  transcript.setup_window(0)
  for _, ev in ipairs(events_) do
    t:on_event(ev)
  end
  local buf = t.buf
  local first = lines_with(buf, "· src/a.rs changed on disk: joins the next request as a note")
  local second = lines_with(buf, "· " .. transcript.note_headline(mixed_note))
  H.eq(1, #first, "the first note once")
  H.eq(1, #second, "the second note once")
  local function line_of(needle)
    return H.truthy(lines_with(buf, needle)[1], needle)
  end
  -- The first after turn 1 and turn 2's prompt, before step 3; the second, logged while step 3
  -- ran, where it was logged (the transcript only appends), before step 4, marked as joining it.
  H.truthy(line_of("━━ turn 1 completed") < first[1] and line_of("❯ And now?") < first[1] and first[1] < line_of("── step 3"), "first note's place")
  H.truthy(line_of("⚙ list_dir") < second[1] and second[1] < line_of("── step 4"), "second note's place")
  -- Under each line, the whole text the model reads, and nothing else before the step.
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  local text_lines = vim.split(edited_note.text, "\n", { plain = true })
  for i, l in ipairs(text_lines) do
    H.eq("    │ " .. l, lines[first[1] + i])
  end
  H.eq("── step 3", lines[first[1] + #text_lines + 1])
  -- Each says which step it joined.
  local joined = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, transcript.ns, 0, -1, { details = true })) do
    for _, chunk in ipairs(m[4].virt_text or {}) do
      local n = chunk[1]:match("joined step (%d+)")
      if n then
        joined[m[2] + 1] = tonumber(n)
      end
    end
  end
  H.eq({ [first[1]] = 3, [second[1]] = 4 }, joined)
  -- The date note keeps its plain rendering.
  H.eq(1, #lines_with(buf, "· context (date): Today's date is 2026-12-01."))
  -- Folded: the text under a note's line, the line itself open; the fold names the note. With
  -- `reasoning_fold` off (a window set up again), reasoning opens and notes stay folded.
  for _, reasoning_fold in ipairs({ true, false }) do
    if not reasoning_fold then
      vim.g.dsh = { reasoning_fold = false }
      transcript.setup_window(0)
    end
    H.eq(-1, vim.fn.foldclosed(first[1]), "the note's line is not folded")
    H.eq(first[1] + 1, vim.fn.foldclosed(first[1] + 1), "its text is folded")
    H.eq(first[1] + #text_lines, vim.fn.foldclosedend(first[1] + 1), "all of it")
    H.contains(vim.fn.foldtextresult(first[1] + 1), ("▸ the note the model reads (%d lines, zo to open)"):format(#text_lines))
    H.truthy(vim.fn.foldclosed(second[1] + 1) ~= -1, "the second note's text is folded")
    local reasoning = line_of("│ Read it")
    H.eq(reasoning_fold, vim.fn.foldclosed(reasoning) ~= -1, "reasoning folded: " .. tostring(reasoning_fold))
  end
  vim.g.dsh = nil
  -- A replay (overlapping) renders nothing twice.
  local before = H.buf_text(buf)
  for _, ev in ipairs(events_) do
    t:on_event(ev)
  end
  H.eq(before, H.buf_text(buf))
  vim.api.nvim_buf_delete(buf, { force = true })
end)

test("notes: a note not yet joined has no step mark", function()
  local t = transcript.get_or_create("unit-notes-2")
  for i, ev in ipairs(note_events("unit-notes-2")) do
    if i <= 16 then
      t:on_event(ev)
    end
  end
  H.eq(1, #lines_with(t.buf, "· src/a.rs changed on disk: joins the next request as a note"))
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(t.buf, transcript.ns, 0, -1, { details = true })) do
    for _, chunk in ipairs(m[4].virt_text or {}) do
      H.eq(nil, chunk[1]:find("joined step", 1, true), "no mark yet")
    end
  end
  vim.api.nvim_buf_delete(t.buf, { force = true })
end)

-- MCP tools and waits, from a fixture log: `fx__echo` streamed, `fx__fail` (an isError result)
-- and the built-in `read_file` in one message, `mcp/wait` before each step (not in the generated
-- protocol yet: a hand-written shape), and an event kind the plugin does not know.
---@return dsh.SessionEvent[]
local function mcp_events(session)
  local usage_ = { promptTokens = 1000, cacheHitTokens = 900, cacheMissTokens = 100, completionTokens = 10, reasoningTokens = 0 }
  local list = {
    { "session/meta", { formatVersion = 0, sessionId = session, workspace = "/w" } },
    { "turn/start", { turn = 1 } },
    { "user/message", { text = "Echo hi through fx." } },
    { "mcp/wait", { servers = { "fx" }, reason = "starting" } },
    { "step/start", { step = 1, turn = 1 } },
    { "assistant/chunk", { step = 1, delta = { kind = "toolCall", index = 0, id = "c1", name = "fx__echo" } } },
    { "assistant/chunk", { step = 1, delta = { kind = "toolArgs", index = 0, fragment = '{"text":"hi"}' } } },
    { "assistant/message", { step = 1, message = { content = "", toolCalls = { { id = "c1", name = "fx__echo", arguments = '{"text":"hi"}' } } } } },
    { "step/end", { step = 1, finishReason = "tool_calls", usage = usage_ } },
    { "approval/request", { approvalId = "a1", callId = "c1", tool = "fx__echo", summary = 'MCP server fx: echo {"text": "hi"}' } },
    { "approval/decision", { approvalId = "a1", decision = "allow" } },
    { "tool/call", { step = 1, callId = "c1", name = "fx__echo" } },
    { "tool/result", { callId = "c1", name = "fx__echo", content = "echo: hi", isError = false } },
    -- Two servers said their tools changed; a field the plugin does not know is ignored.
    { "mcp/wait", { servers = { "fx", "gy" }, reason = "toolsChanged", waitedMs = 12 } },
    { "mcp/unknown-kind", { servers = { "zz" }, reason = "starting" } },
    { "step/start", { step = 2, turn = 1 } },
    { "assistant/message", { step = 2, message = { content = "", toolCalls = { { id = "c2", name = "fx__fail", arguments = "{}" }, { id = "c3", name = "read_file", arguments = '{"path":"a.txt"}' } } } } },
    { "step/end", { step = 2, finishReason = "tool_calls", usage = usage_ } },
    { "tool/call", { step = 2, callId = "c2", name = "fx__fail" } },
    { "tool/result", { callId = "c2", name = "fx__fail", content = "it failed", isError = true } },
    { "tool/call", { step = 2, callId = "c3", name = "read_file" } },
    { "tool/result", { callId = "c3", name = "read_file", content = "A", isError = false } },
    { "step/start", { step = 3, turn = 1 } },
    { "assistant/message", { step = 3, message = { content = "Echoed." } } },
    { "step/end", { step = 3, finishReason = "stop", usage = usage_ } },
    { "turn/end", { turn = 1, reason = "completed" } },
  }
  local out = {}
  for i, e in ipairs(list) do
    out[i] = { sessionId = session, seq = i - 1, time = 0, type = e[1], data = e[2], joined = e[3] }
  end
  return out
end

test("mcp: a tool's request name splits at the first __ into its server and its own name", function()
  H.eq({ "fx", "echo" }, { transcript.mcp_tool("fx__echo") })
  H.eq({ "my-db", "run__query" }, { transcript.mcp_tool("my-db__run__query") })
  H.eq({ "S3", "list_buckets" }, { transcript.mcp_tool("S3__list_buckets") })
  H.eq("fx › echo", transcript.tool_label("fx__echo"))
  for _, built_in in ipairs({ "read_file", "write_file", "edit_file", "run_command", "list_dir", "glob", "grep" }) do
    H.eq(nil, transcript.mcp_tool(built_in), built_in)
    H.eq(built_in, transcript.tool_label(built_in))
  end
  -- Not a server name: empty, with `_`, longer than 32; nor a tool name: empty.
  for _, odd in ipairs({ "__echo", "my_db__q", ("a"):rep(33) .. "__q", "fx__", "fx_echo" }) do
    H.eq(nil, transcript.mcp_tool(odd), odd)
    H.eq(odd, transcript.tool_label(odd))
  end
  H.eq(("a"):rep(32), transcript.mcp_tool(("a"):rep(32) .. "__q"))
end)

test("mcp: the wait line, both reasons, one and two servers, read tolerantly", function()
  H.eq("waiting for MCP server fx to start", transcript.mcp_wait_text({ servers = { "fx" }, reason = "starting" }))
  H.eq("waiting for MCP servers fx, gy to start", transcript.mcp_wait_text({ servers = { "fx", "gy" }, reason = "starting" }))
  H.eq("waiting for MCP server fx to list its changed tools", transcript.mcp_wait_text({ servers = { "fx" }, reason = "toolsChanged" }))
  H.eq("waiting for MCP servers fx, gy to list their changed tools", transcript.mcp_wait_text({ servers = { "fx", "gy" }, reason = "toolsChanged" }))
  H.eq("waiting for MCP server fx (restarting)", transcript.mcp_wait_text({ servers = { "fx" }, reason = "restarting", extra = true }))
  H.eq("waiting for MCP servers to start", transcript.mcp_wait_text({ reason = "starting" }))
  H.eq("waiting for MCP servers fx, gy", transcript.mcp_wait_text({ servers = { "fx", 3, "gy" }, reason = vim.NIL }))
end)

test("mcp: the approval prompt names an MCP tool with its server, a built-in one as before", function()
  H.eq('dsh: fx › echo wants to run — MCP server fx: echo {"text": "hi"}', dsh.approval_prompt({ approvalId = "a", callId = "c", tool = "fx__echo", summary = 'MCP server fx: echo {"text": "hi"}' }))
  H.eq("dsh: run_command wants to run — run_command: ls [sandbox: workspace-write]", dsh.approval_prompt({ approvalId = "a", callId = "c", tool = "run_command", summary = "run_command: ls", sandbox = "workspace-write" }))
end)

test("mcp: calls show as `server › tool`, built-in ones as before; the waits as one line each, live and on replay", function()
  local t = transcript.get_or_create("unit-mcp")
  local list = mcp_events("unit-mcp")
  local buf = t.buf
  local live = {}
  for _, ev in ipairs(list) do
    t:on_event(ev)
    if ev.type == "mcp/wait" then
      -- Live: the line is there as the event arrives, before the step that waited starts.
      local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
      table.insert(live, lines[#lines])
    end
  end
  H.eq({ "  ◌ waiting for MCP server fx to start", "  ◌ waiting for MCP servers fx, gy to list their changed tools" }, live)
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  local function only(needle)
    local found = lines_with(buf, needle)
    H.eq(1, #found, needle)
    return found[1]
  end
  -- Each wait after what came before it and right before the step that waited.
  local wait1, wait2 = only("◌ waiting for MCP server fx to start"), only("◌ waiting for MCP servers fx, gy to list their changed tools")
  H.eq("❯ Echo hi through fx.", lines[wait1 - 1])
  H.eq("── step 1", lines[wait1 + 1])
  H.eq("── step 2", lines[wait2 + 1])
  H.eq(nil, H.buf_text(buf):find("zz", 1, true), "the unknown kind left nothing")
  -- The calls: streamed, and whole; the approval; the results, an isError one as an error.
  H.eq('  ⚙ fx › echo {"text":"hi"}', lines[only("⚙ fx › echo")])
  H.eq("  ⚙ fx › fail {}", lines[only("⚙ fx › fail")])
  H.eq('  ⚙ read_file {"path":"a.txt"}', lines[only("⚙ read_file")])
  H.eq('  ? fx › echo wants approval: MCP server fx: echo {"text": "hi"}', lines[only("? fx › echo wants approval")])
  H.eq("  ✓ fx › echo → echo: hi", lines[only("✓ fx › echo")])
  H.eq("  ✗ fx › fail → it failed", lines[only("✗ fx › fail")])
  H.eq("  ✓ read_file → A", lines[only("✓ read_file")])
  H.eq(nil, H.buf_text(buf):find("__", 1, true), "no request name shown")
  -- The `fx ›` of each MCP line is highlighted as the server; nothing on built-in lines.
  local marked = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, transcript.ns, 0, -1, { details = true })) do
    if m[4].hl_group == "DshMcpServer" then
      local line = lines[m[2] + 1]
      table.insert(marked, line:sub(m[3] + 1, m[4].end_col))
      H.eq(nil, line:find("read_file", 1, true), line)
    end
  end
  H.eq({ "fx ›", "fx ›", "fx ›", "fx ›", "fx ›" }, marked)
  -- The failed result keeps the error highlight of a built-in failure.
  local err_line = only("✗ fx › fail") - 1
  local hls = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, transcript.ns, { err_line, 0 }, { err_line, -1 }, { details = true })) do
    table.insert(hls, m[4].line_hl_group or m[4].hl_group)
  end
  H.truthy(vim.tbl_contains(hls, "DshError"), vim.inspect(hls))
  -- A replay (overlapping) renders nothing twice; a fresh buffer from seq 0 renders the same.
  local before = H.buf_text(buf)
  for _, ev in ipairs(list) do
    t:on_event(ev)
  end
  H.eq(before, H.buf_text(buf))
  vim.api.nvim_buf_delete(buf, { force = true })
  local again = transcript.get_or_create("unit-mcp")
  for _, ev in ipairs(list) do
    again:on_event(ev)
  end
  H.eq(before, H.buf_text(again.buf))
  vim.api.nvim_buf_delete(again.buf, { force = true })
end)

test("completion asks the daemon for a session's prompt commands once at a time, then once more", function()
  local commands = require("dsh.commands")
  local asked, answer = 0, nil
  local saved = dsh._client
  dsh._client = {
    closed = false,
    request = function(_, method, params, cb)
      H.eq("session/commands", method)
      H.eq("s9", params.sessionId)
      asked = asked + 1
      answer = cb
    end,
  }
  local ok, err = pcall(function()
    for _ = 1, 100 do
      commands.refresh_prompt_commands("s9")
    end
    H.eq(1, asked, "one session/commands out, however often completion asks")
    answer(nil, { commands = { { name = "review" } } })
    H.eq(2, asked, "asked again once, for what changed meanwhile")
    H.eq({ { name = "review" } }, commands._prompt_commands.s9)
    answer(nil, { commands = {} })
    H.eq(2, asked, "nothing asked meanwhile: no third")
    H.eq({}, commands._prompt_commands.s9)
    -- An error answer frees the slot too.
    commands.refresh_prompt_commands("s9")
    answer({ code = -32000, message = "gone" }, nil)
    commands.refresh_prompt_commands("s9")
    H.eq(4, asked)
  end)
  dsh._client = saved
  commands._commands_listing = {}
  commands._prompt_commands.s9 = nil
  assert(ok, err)
end)

test("completion asks the daemon for a workspace's sessions once at a time, then once more", function()
  local asked, answer = 0, nil
  local saved = dsh._client
  dsh._client = {
    closed = false,
    request = function(_, method, params, cb)
      H.eq("session/list", method)
      H.eq("/w", params.workspace)
      asked = asked + 1
      answer = cb
    end,
  }
  local ok, err = pcall(function()
    for _ = 1, 100 do
      dsh.known_sessions("/w")
    end
    H.eq(1, asked, "one session/list out, however often completion asks")
    answer(nil, { sessions = { { sessionId = "s1" } } })
    H.eq(2, asked, "asked again once, for what changed meanwhile")
    H.eq({ "s1" }, dsh._known_sessions["/w"])
    answer(nil, { sessions = { { sessionId = "s1" }, { sessionId = "s2" } } })
    H.eq(2, asked, "nothing asked meanwhile: no third")
    H.eq({ "s1", "s2" }, dsh._known_sessions["/w"])
  end)
  dsh._client = saved
  dsh._listing = {}
  dsh._known_sessions["/w"] = nil
  assert(ok, err)
end)

test("checkpoints and rewinds: one line each, as `dsh prompt` prints them", function()
  local t = transcript.get_or_create("unit-rewind")
  local list = {
    { "session/meta", { formatVersion = 0, sessionId = "unit-rewind", workspace = "/w" } },
    { "workspace/rewind", { fromSession = "parent", toStep = 1, checkpoint = ("cd"):rep(32), before = ("ab"):rep(32), restored = { "a.txt", "b.txt" }, created = { "c.txt" }, deleted = { "new.txt" }, forced = true, conversation = true, files = true } },
    { "turn/start", { turn = 1 } },
    { "user/message", { text = "Again." } },
    { "step/start", { step = 1, turn = 1 } },
    { "assistant/message", { step = 1, message = { content = "", toolCalls = { { id = "c1", name = "write_file", arguments = "{}" } } } } },
    { "workspace/checkpoint", { step = 1, reason = "step", root = ("ef"):rep(32), files = 4, changed = { "a.txt" }, tooLarge = { { path = "big", size = 9 } } } },
    { "workspace/checkpoint", { reason = "turnEnd", root = ("ef"):rep(32), files = 4, incomplete = "disk full" } },
  }
  for i, e in ipairs(list) do
    t:on_event({ sessionId = "unit-rewind", seq = i - 1, time = 0, type = e[1], data = e[2] })
  end
  local buf = t.buf
  H.eq(1, #lines_with(buf, "⟲ rewound files and conversation of parent to just before step 1: 2 restored, 1 created, 1 deleted (forced)"))
  H.eq(1, #lines_with(buf, "◇ checkpoint before step 1's tools: 4 files, 1 changed, 1 over the size cap"))
  H.eq(1, #lines_with(buf, "◇ checkpoint at the turn's end: 4 files, 0 changed (incomplete: disk full)"))
  H.eq("checkpoint before a rewind: 0 files, 0 changed", transcript.checkpoint_text({ reason = "rewind", root = "x", files = 0 }))
  H.eq("⟲ rewound conversation of p to just before step 2", transcript.rewind_text({ fromSession = "p", toStep = 2, conversation = true, files = false }))
  vim.api.nvim_buf_delete(buf, { force = true })
end)

test("hook runs: one line each, as `dsh prompt` prints them; a block or a failure stands out", function()
  local t = transcript.get_or_create("unit-hooks")
  local list = {
    { "session/meta", { formatVersion = 0, sessionId = "unit-hooks", workspace = "/w" } },
    { "hook/run", { hook = "greet", source = "/u/c.toml:1", event = "SessionStart", outcome = "ok", exitCode = 0, durationMs = 12, stdoutBytes = 3 } },
    { "turn/start", { turn = 1 } },
    { "user/message", { text = "Clean up." } },
    { "step/start", { step = 1, turn = 1 } },
    { "assistant/message", { step = 1, message = { content = "", toolCalls = { { id = "c1", name = "run_command", arguments = "{}" } } } } },
    { "hook/run", { hook = "guard", source = "/u/c.toml:4", event = "PreToolUse", callId = "c1", tool = "run_command", outcome = "blocked", exitCode = 2, durationMs = 5, stderr = "\nno rm here\n", stdoutBytes = 0 } },
    { "hook/run", { hook = "loud", source = "/u/c.toml:9", event = "PostToolUse", callId = "c1", tool = "run_command", outcome = "failed", error = "timed out after 1 s; it and every process of its group were killed", durationMs = 1000, stdoutBytes = 9000000, stdoutTruncated = true, invalidUtf8 = true } },
  }
  for i, e in ipairs(list) do
    t:on_event({ sessionId = "unit-hooks", seq = i - 1, time = 0, type = e[1], data = e[2] })
  end
  local buf = t.buf
  H.eq(1, #lines_with(buf, "hook greet (SessionStart) ok, 12 ms"))
  H.eq(1, #lines_with(buf, "⛔ hook guard (PreToolUse, run_command) blocked: no rm here"))
  H.eq(1, #lines_with(buf, "⚠ hook loud (PostToolUse, run_command) failed: timed out after 1 s; it and every process of its group were killed [its output was cut] [invalid UTF-8 was replaced]"))
  vim.api.nvim_buf_delete(buf, { force = true })
end)

test("a sub-agent: its task/spawn is one line under the step that spawned it", function()
  local t = transcript.get_or_create("unit-task")
  local list = {
    { "session/meta", { formatVersion = 0, sessionId = "unit-task", workspace = "/w" } },
    { "turn/start", { turn = 1 } },
    { "user/message", { text = "Delegate." } },
    { "step/start", { step = 1, turn = 1 } },
    { "assistant/message", { step = 1, message = { content = "", toolCalls = { { id = "c1", name = "task", arguments = "{}" } } } } },
    { "tool/call", { step = 1, callId = "c1", name = "task" } },
    { "task/spawn", { callId = "c1", sessionId = "child-1", context = "fork", description = "read\nthe code", depth = 1 } },
  }
  for i, e in ipairs(list) do
    t:on_event({ sessionId = "unit-task", seq = i - 1, time = 0, type = e[1], data = e[2] })
  end
  local buf = t.buf
  H.eq(1, #lines_with(buf, "⇢ sub-agent child-1 (fork, depth 1): read the code"))
  vim.api.nvim_buf_delete(buf, { force = true })
end)

test("images: the `[image: …]` words — its name (else a short hash), media type and size for people", function()
  local words = require("dsh.words")
  H.eq("0 bytes", words.human_size(0))
  H.eq("1 byte", words.human_size(1))
  H.eq("1023 bytes", words.human_size(1023))
  H.eq("1.0 KiB", words.human_size(1024))
  H.eq("39.1 KiB", words.human_size(40000))
  H.eq("2.9 MiB", words.human_size(3000000))
  local sha = ("ab"):rep(32)
  H.eq("[image: shot.png, image/png, 39.1 KiB]", words.image_text({ sha256 = sha, size = 40000, mediaType = "image/png", name = "shot.png" }))
  H.eq("[image: abababababab, image/gif, 200 bytes]", words.image_text({ sha256 = sha, size = 200, mediaType = "image/gif" }))
  -- A name is one line, whatever it holds.
  H.eq("[image: a b.png, image/webp, 12 bytes]", words.image_text({ sha256 = sha, size = 12, mediaType = "image/webp", name = "a\nb.png" }))
end)

test("images: a prompt's and a tool result's images are one highlighted line each; <CR> and :Dsh image open them", function()
  local words = require("dsh.words")
  local image = require("dsh.image")
  local t = transcript.get_or_create("unit-images")
  local png = { sha256 = ("1"):rep(64), size = 40000, mediaType = "image/png", name = "shot.png" }
  local gif = { sha256 = ("2"):rep(64), size = 300, mediaType = "image/gif" }
  local read = { sha256 = ("3"):rep(64), size = 5000, mediaType = "image/jpeg", name = "diagram.jpg" }
  local list = {
    { "session/meta", { formatVersion = 0, sessionId = "unit-images", workspace = "/tmp/ws" } },
    { "turn/start", { turn = 1 } },
    { "user/message", { text = "compare\nthese", images = { png, gif } } },
    { "step/start", { step = 1, turn = 1 } },
    { "tool/result", { callId = "c1", name = "read_file", content = "diagram.jpg: an image", isError = false, images = { read } } },
    { "user/message", { text = "no image here" } },
  }
  for i, e in ipairs(list) do
    t:on_event({ sessionId = "unit-images", seq = i - 1, time = 0, type = e[1], data = e[2] })
  end
  local lines = vim.api.nvim_buf_get_lines(t.buf, 0, -1, false)
  local text = table.concat(lines, "\n")
  H.contains(text, "❯ compare\n  these\n  [image: shot.png, image/png, 39.1 KiB]\n  [image: 222222222222, image/gif, 300 bytes]\n── step 1")
  H.contains(text, "  ✓ read_file → diagram.jpg: an image\n    [image: diagram.jpg, image/jpeg, 4.9 KiB]\n❯ no image here")
  H.eq({ png, gif, read }, t.images)
  local at = {}
  for i, line in ipairs(lines) do
    if line:find("[image: ", 1, true) then
      table.insert(at, i - 1)
      -- Highlighted as an image line.
      local marks = vim.api.nvim_buf_get_extmarks(t.buf, transcript.ns, { i - 1, 0 }, { i - 1, -1 }, { details = true })
      H.eq("DshImage", marks[1] and marks[1][4].line_hl_group, "the highlight of line " .. i)
    end
  end
  H.eq(3, #at)
  H.eq(png, t:image_at(at[1]))
  H.eq(read, t:image_at(at[3]))
  H.eq(nil, t:image_at(at[1] - 1))
  -- <CR> on an image line, and :Dsh image (under the cursor, by number) open that image.
  local opened = {}
  local open = image.open
  image.open = function(session_id, ref)
    table.insert(opened, { session_id, ref })
  end
  local ok, err = pcall(function()
    vim.api.nvim_set_current_buf(t.buf)
    require("dsh")._last = t
    vim.api.nvim_win_set_cursor(0, { at[2] + 1, 0 })
    vim.cmd.normal(vim.keycode("<CR>"))
    H.eq({ { "unit-images", gif } }, opened)
    vim.api.nvim_win_set_cursor(0, { at[3] + 1, 0 })
    vim.cmd("Dsh image")
    vim.cmd("Dsh image 1")
    H.eq({ { "unit-images", gif }, { "unit-images", read }, { "unit-images", png } }, opened)
    H.eq({ "1", "2", "3" }, vim.fn.getcompletion("Dsh image ", "cmdline"))
    local said = #H.messages
    vim.cmd("Dsh image 4")
    H.eq("dsh: this session's messages carry 3 image(s), not 4", H.messages[said + 1])
    H.eq(3, #opened)
    -- Elsewhere <CR> is Vim's own (it moves down a line).
    vim.api.nvim_win_set_cursor(0, { 1, 0 })
    vim.cmd.normal(vim.keycode("<CR>"))
    H.eq(2, vim.api.nvim_win_get_cursor(0)[1])
    H.eq(3, #opened)
  end)
  image.open = open
  vim.api.nvim_buf_delete(t.buf, { force = true })
  assert(ok, err)
  H.eq("[image: shot.png, image/png, 39.1 KiB]", words.image_text(png))
end)

test("images: an image is written to a private file (0600 in a 0700 directory) named with its media type's extension", function()
  local image = require("dsh.image")
  local bytes = "\137PNG\r\n\26\n\0\0\0\rIHDR" .. ("\0\255"):rep(100)
  local ref = { sha256 = ("ab12"):rep(16), size = #bytes, mediaType = "image/png", name = "../../etc/my shot.jpg" }
  H.eq("my_shot-ab12ab12ab12.png", image.file_name(ref))
  H.eq("ab12ab12ab12.webp", image.file_name({ sha256 = ("ab12"):rep(16), size = 1, mediaType = "image/webp" }))
  H.eq(nil, image.file_name({ sha256 = ("ab12"):rep(16), size = 1, mediaType = "text/html" }))
  local path = H.truthy(image.write(ref, bytes))
  local dir = vim.fs.dirname(path)
  H.eq(image.dir(), dir)
  H.eq("my_shot-ab12ab12ab12.png", vim.fs.basename(path))
  H.eq(tonumber("600", 8), bit.band(vim.uv.fs_stat(path).mode, tonumber("777", 8)), "the file's mode")
  H.eq(tonumber("700", 8), bit.band(vim.uv.fs_stat(dir).mode, tonumber("777", 8)), "the directory's mode")
  local f = assert(io.open(path, "rb"))
  H.eq(bytes, f:read("a"))
  f:close()
  -- Written again (opened twice): the same file, whole, nothing left beside it.
  H.eq(path, image.write(ref, bytes))
  H.eq({ vim.fs.basename(path) }, vim.fn.readdir(dir))
  -- The directory went away (a tmp cleaner): made again, private.
  vim.fn.delete(dir, "rf")
  local again = H.truthy(image.write(ref, bytes))
  H.truthy(vim.fs.dirname(again) ~= dir, "a new directory")
  H.eq(tonumber("700", 8), bit.band(vim.uv.fs_stat(vim.fs.dirname(again)).mode, tonumber("777", 8)))
  -- What is at its name is no longer private: made anew, elsewhere, and what is there is left
  -- alone. Open to others (0755):
  local current = vim.fs.dirname(again)
  vim.uv.fs_chmod(current, tonumber("755", 8))
  local fresh = H.truthy(image.dir())
  H.truthy(fresh ~= current, "a new directory for one opened to others")
  H.eq(tonumber("700", 8), bit.band(vim.uv.fs_lstat(fresh).mode, tonumber("777", 8)))
  H.eq(tonumber("755", 8), bit.band(vim.uv.fs_lstat(current).mode, tonumber("777", 8)), "the other left alone")
  vim.fn.delete(current, "rf")
  -- A link to a directory (0700, the user's own) put at its name:
  local target = vim.fn.tempname()
  vim.fn.mkdir(target, "p", tonumber("700", 8))
  vim.fn.delete(fresh, "rf")
  H.truthy(vim.uv.fs_symlink(target, fresh))
  local other = H.truthy(image.write(ref, bytes))
  H.truthy(vim.fs.dirname(other) ~= fresh, "a new directory, not the link")
  H.eq({}, vim.fn.readdir(target), "nothing written through the link")
  H.eq("directory", vim.uv.fs_lstat(vim.fs.dirname(other)).type)
  H.truthy(image.is_private_dir(vim.fs.dirname(other)))
  H.eq(false, image.is_private_dir(fresh))
  vim.uv.fs_unlink(fresh)
  vim.fn.delete(target, "rf")
  local again2 = other
  -- No viewer: said, not thrown.
  local ui_open = vim.ui.open
  vim.ui.open = function()
    return nil, "vim.ui.open: no handler found (tried: xdg-open)"
  end
  local ok, why = image.show(again2)
  vim.ui.open = ui_open
  H.eq(nil, ok)
  H.eq("vim.ui.open: no handler found (tried: xdg-open)", why)
end)

test("images: a prompt's images and text must fit one request line (4 MiB): the base64 lengths, the text as JSON and 64 KiB for the rest", function()
  local image = require("dsh.image")
  H.eq(4194304, image.max_line_bytes)
  local room = image.max_line_bytes - image.envelope_bytes
  -- The largest image (3,000,000 bytes, 4,000,000 as base64) fits with a short text.
  H.eq(nil, image.too_long({ { data = ("A"):rep(4000000), name = "a.png" } }, "what is this?"))
  -- Two of a little over half that do not.
  local two = { { data = ("A"):rep(2100000) }, { data = ("B"):rep(2100000) } }
  H.eq(nil, image.too_long({ two[1] }, ""))
  local err = H.truthy(image.too_long(two, "compare"))
  H.eq("the images of one prompt and its text take 4200009 bytes as base64 and JSON, more than one API request line holds (4194304 bytes): give them over several prompts", err)
  -- At the edge: the text counts as JSON (quotes, escapes).
  local data = ("A"):rep(room - 2)
  H.eq(nil, image.too_long({ { data = data } }, ""))
  H.truthy(image.too_long({ { data = data } }, "x"))
  H.truthy(image.too_long({ { data = ("A"):rep(room - 3) } }, "\n"), "a newline is two bytes in JSON")
  H.eq(nil, image.too_long({ { data = ("A"):rep(room - 3) } }, "x"))
end)

test("images: :Dsh prompt --image=FILE / --image FILE, then the text; the files read as base64 attachments", function()
  local commands = require("dsh.commands")
  H.eq({ images = {}, text = "just text", ended = false }, commands.parse_prompt("just text"))
  H.eq({ images = { "a.png", "b c.gif" }, text = "compare them --image=x", ended = false }, commands.parse_prompt("--image=a.png --image b\\ c.gif compare them --image=x"))
  H.eq({ images = { "a.png" }, text = "--image=x is a flag", ended = true }, commands.parse_prompt("--image=a.png -- --image=x is a flag"))
  H.eq({ images = {}, text = "--images are nice", ended = false }, commands.parse_prompt("--images are nice"))
  H.eq({ images = { "a.png" }, text = "", ended = false }, commands.parse_prompt("--image=a.png"))
  local _, err = commands.parse_prompt("--image")
  H.eq("`--image` needs a file: `:Dsh prompt --image=FILE text`", err)
  H.eq(nil, (commands.parse_prompt("--image= text")))

  local image = require("dsh.image")
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir .. "/sub dir", "p")
  local bytes = "GIF89a" .. ("\0\1\2\255"):rep(50)
  local f = assert(io.open(dir .. "/sub dir/a.gif", "wb"))
  f:write(bytes)
  f:close()
  local a = H.truthy(image.attachment(dir .. "/sub dir/a.gif"))
  H.eq({ data = vim.base64.encode(bytes), name = "a.gif" }, a)
  H.eq(bytes, vim.base64.decode(a.data))
  -- What cannot be sent is refused here, naming the file; what it is, the daemon says.
  local _, missing = image.attachment(dir .. "/nope.png")
  H.contains(missing, "cannot attach " .. dir .. "/nope.png: ENOENT")
  local _, isdir = image.attachment(dir .. "/sub dir")
  H.eq(("cannot attach %s/sub dir: it is a directory, not a file"):format(dir), isdir)
  local fd = assert(vim.uv.fs_open(dir .. "/big.png", "w", tonumber("600", 8)))
  vim.uv.fs_ftruncate(fd, image.max_bytes + 1)
  vim.uv.fs_close(fd)
  local _, big = image.attachment(dir .. "/big.png")
  H.eq(("%s/big.png is 3000001 bytes, over the limit of 3000000 bytes for an image"):format(dir), big)

  -- Completion: `--image=` for a dash, then directories and images by their extension.
  local cwd = vim.fn.getcwd()
  vim.fn.writefile({ "x" }, dir .. "/notes.txt")
  vim.fn.writefile({ "x" }, dir .. "/shot.PNG")
  vim.cmd.cd(dir)
  local ok, cerr = pcall(function()
    H.eq({ "--image=" }, vim.fn.getcompletion("Dsh prompt -", "cmdline"))
    H.eq({ "--image=big.png", "--image=shot.PNG", "--image=sub\\ dir/" }, vim.fn.getcompletion("Dsh prompt --image=", "cmdline"))
    H.eq({ "big.png", "shot.PNG", "sub\\ dir/" }, vim.fn.getcompletion("Dsh prompt --image ", "cmdline"))
    H.eq({ "--image=sub\\ dir/a.gif" }, vim.fn.getcompletion("Dsh prompt --image=shot.PNG --image=sub\\ dir/", "cmdline"))
    -- Inside the text nothing is completed.
    H.eq({}, vim.fn.getcompletion("Dsh prompt look at --image=", "cmdline"))
    H.eq({}, vim.fn.getcompletion("Dsh prompt look -", "cmdline"))
  end)
  vim.cmd.cd(cwd)
  vim.fn.delete(dir, "rf")
  assert(ok, cerr)
end)

test("images: the private directory is removed when Neovim exits", function()
  local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
  local out = vim.system({
    vim.v.progpath, "--headless", "-u", "NONE", "-i", "NONE", "-n",
    "--cmd", "set rtp^=" .. vim.fn.fnameescape(root),
    "-c", [[lua io.stdout:write(require("dsh.image").write({ sha256 = ("ab"):rep(32), size = 3, mediaType = "image/gif" }, "GIF") .. "\n")]],
    "-c", "qa!",
  }, { text = true }):wait(20000)
  H.eq(0, out.code, out.stderr)
  local path = H.truthy(vim.trim(out.stdout):match("(/%S+%.gif)$"), out.stdout)
  H.truthy(vim.startswith(vim.fs.basename(vim.fs.dirname(path)), "dsh-nvim-images-"), path)
  H.eq(nil, vim.uv.fs_stat(vim.fs.dirname(path)), "the directory is gone")
end)
