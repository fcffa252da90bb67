--- Read-only scratch views: "what the model saw" for a step, the diff of two steps' requests,
--- the usage table, and a session's one-line description.
local usage = require("dsh.usage")
local words = require("dsh.words")

local M = {}

local function split(text)
  return vim.split(text or "", "\n", { plain = true })
end

local function add(out, text)
  vim.list_extend(out, split(text))
end

--- A rebuilt request rendered for people. `wire = false` leaves out the raw body (for diffs,
--- where the readable parts say what changed).
---@param session_id string
---@param r dsh.SessionRequestResult
---@param opts? { wire?: boolean }
---@return string[]
function M.render_request(session_id, r, opts)
  opts = opts or {}
  local out = {}
  add(out, ("# What the model saw — step %d (turn %d)"):format(r.step, r.turn))
  add(out, "")
  add(out, ("session   %s"):format(session_id))
  add(out, ("boundary  seq %d (the step's step/start)"):format(r.boundarySeq))
  local he = {}
  for _, s in ipairs(r.headerEvents or {}) do
    table.insert(he, tostring(s))
  end
  add(out, ("header    %s"):format(#he > 0 and ("logged at seq " .. table.concat(he, ", ")) or "carried forward"))
  if opts.wire ~= false then
    add(out, ("sha256    %s"):format(r.wire.sha256))
    add(out, ("bytes     %s (%s)"):format(usage.thousands(r.wire.bytes), r.wire.adapter))
    if r.sent then
      local same = r.sent.sha256 == r.wire.sha256
      add(out, ("sent      %s %s"):format(r.sent.sha256, same and "✓ matches the rebuild" or "✗ DIFFERS from the rebuild"))
    else
      add(out, "sent      (not recorded: the step did not get that far)")
    end
    if r.usage then
      add(out, ("usage     %s"):format(usage.format(r.usage)))
    end
  end

  local h = r.header or {}
  local c = h.config or {}
  add(out, "")
  add(out, "## Header")
  add(out, "")
  local cfg = { ("model %s"):format(c.model or "?"), ("max_tokens %s"):format(tostring(c.maxTokens)), ("thinking %s"):format(tostring(c.thinking)) }
  if c.reasoningEffort then
    table.insert(cfg, "reasoning_effort " .. c.reasoningEffort)
  end
  if c.temperature then
    table.insert(cfg, "temperature " .. tostring(c.temperature))
  end
  if c.topP then
    table.insert(cfg, "top_p " .. tostring(c.topP))
  end
  add(out, table.concat(cfg, " · "))
  add(out, "")
  add(out, "## System prompt")
  add(out, "")
  add(out, h.system or "(none)")
  add(out, "")
  add(out, ("## Tools (%d)"):format(#(h.tools or {})))
  add(out, "")
  for _, tool in ipairs(h.tools or {}) do
    add(out, ("- %s: %s"):format(tool.name, (tool.description or ""):gsub("\n", " ")))
    add(out, "  parameters: " .. vim.json.encode(tool.parameters))
  end
  add(out, "")
  add(out, ("## Messages (%d)"):format(#(r.messages or {})))
  for _, sm in ipairs(r.messages or {}) do
    local m = sm.message
    add(out, "")
    if m.role == "tool" then
      add(out, ("### [seq %d] tool (%s)"):format(sm.seq, m.callId))
    else
      add(out, ("### [seq %d] %s"):format(sm.seq, m.role))
    end
    if m.reasoningContent and m.reasoningContent ~= "" then
      add(out, "reasoning: " .. m.reasoningContent)
    end
    if m.content and m.content ~= "" then
      add(out, m.content)
    end
    -- The images the model saw after the text, by reference (`:Dsh image` opens them).
    for _, ref in ipairs(m.images or {}) do
      add(out, ("%s sha256 %s"):format(words.image_text(ref), ref.sha256))
    end
    for _, call in ipairs(m.toolCalls or {}) do
      add(out, ("→ %s %s (%s)"):format(call.name, call.arguments, call.id))
    end
  end
  if opts.wire ~= false then
    add(out, "")
    add(out, ("## Wire body (%s, %s bytes, sha256 %s)"):format(r.wire.adapter, usage.thousands(r.wire.bytes), r.wire.sha256))
    add(out, "")
    add(out, r.wire.body)
  end
  return out
end

--- A read-only scratch buffer named `name` holding `lines` (replaced when it exists).
---@param name string
---@param lines string[]
---@param ft? string
---@return integer buf
function M.scratch(name, lines, ft)
  local buf = vim.fn.bufnr(name)
  if buf == -1 then
    buf = vim.api.nvim_create_buf(true, true)
    vim.api.nvim_buf_set_name(buf, name)
  end
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].swapfile = false
  vim.bo[buf].modifiable = true
  vim.bo[buf].readonly = false
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].readonly = true
  if ft then
    vim.bo[buf].filetype = ft
  end
  return buf
end

--- `:Dsh saw`: show a step's request in a split.
---@param session_id string
---@param r dsh.SessionRequestResult
---@return integer buf
function M.show_request(session_id, r)
  local name = ("dsh://saw/%s/step-%d"):format(session_id, r.step)
  local buf = M.scratch(name, M.render_request(session_id, r), "markdown")
  vim.cmd("split")
  vim.api.nvim_win_set_buf(0, buf)
  vim.wo.wrap = true
  vim.wo.conceallevel = 0
  return buf
end

--- `:Dsh diff`: the previous step's request and this one's, side by side in diff mode, in a
--- new tab.
---@param session_id string
---@param prev? dsh.SessionRequestResult
---@param cur dsh.SessionRequestResult
---@return integer left, integer right
function M.show_diff(session_id, prev, cur)
  local left_lines = prev and M.render_request(session_id, prev, { wire = false }) or { "(no step before step " .. cur.step .. ")" }
  local left = M.scratch(("dsh://saw/%s/step-%d.diff-base"):format(session_id, prev and prev.step or 0), left_lines, "markdown")
  local right = M.scratch(("dsh://saw/%s/step-%d.diff"):format(session_id, cur.step), M.render_request(session_id, cur, { wire = false }), "markdown")
  vim.cmd("tabnew")
  vim.api.nvim_win_set_buf(0, left)
  vim.cmd("diffthis")
  vim.cmd("rightbelow vsplit")
  vim.api.nvim_win_set_buf(0, right)
  vim.cmd("diffthis")
  vim.wo.wrap = true
  return left, right
end

--- A listing's sessions newest first, each sub-agent's session (`parent`) right under its
--- parent's, newest first among its siblings; a child whose parent is not listed stands at the
--- top level. Each gets `nest` (0 at the top level, 1 under it, …), which `session_line` indents by.
---@param sessions dsh.SessionSummary[]
---@return (dsh.SessionSummary|{ nest: integer })[]
function M.nest_sessions(sessions)
  local listed, under = {}, {}
  for _, s in ipairs(sessions) do
    listed[s.sessionId] = true
  end
  local newest = function(a, b)
    return (a.updatedMs or 0) > (b.updatedMs or 0)
  end
  local top = {}
  for _, s in ipairs(sessions) do
    local parent = s.parent and s.parent.sessionId
    if parent and listed[parent] and parent ~= s.sessionId then
      under[parent] = under[parent] or {}
      table.insert(under[parent], s)
    else
      table.insert(top, s)
    end
  end
  local out, seen = {}, {}
  local function add(list, nest)
    table.sort(list, newest)
    for _, s in ipairs(list) do
      if not seen[s] then
        seen[s] = true
        s.nest = nest
        table.insert(out, s)
        add(under[s.sessionId] or {}, nest + 1)
      end
    end
  end
  add(top, 0)
  -- Parents that name each other (a log edited by hand) are not lost.
  add(sessions, 0)
  return out
end

--- One line describing a session in a listing.
---@param s dsh.SessionSummary
---@return string
function M.session_line(s)
  if s.error then
    -- A log the daemon cannot read is listed, never hidden.
    return ("! unreadable · %s · %s"):format(s.sessionId, s.error)
  end
  local parts = {
    ("  "):rep(s.nest or 0) .. ((s.nest or 0) > 0 and "↳ " or "") .. ((s.title and s.title ~= "") and s.title or "(no prompt yet)"),
    ("%d turn%s, %d step%s"):format(s.turns, s.turns == 1 and "" or "s", s.steps, s.steps == 1 and "" or "s"),
    os.date("%Y-%m-%d %H:%M", math.floor((s.updatedMs or 0) / 1000)),
  }
  if s.running then
    table.insert(parts, "running")
  end
  if s.forkedFrom then
    table.insert(parts, ("fork of %s@%d"):format(s.forkedFrom.sessionId:sub(1, 8), s.forkedFrom.seq))
  end
  if s.lastUsage then
    table.insert(parts, usage.percent(usage.hit_percent(s.lastUsage)) .. " hit")
  end
  -- Its total cost (none when a step ran on a model without a price) and what it runs on.
  local cost = usage.cost(s.cost)
  if cost then
    table.insert(parts, cost)
  end
  if s.model then
    table.insert(parts, (s.profile and (s.profile .. "/") or "") .. s.model)
  end
  table.insert(parts, s.sessionId)
  return table.concat(parts, " · ")
end

--- The lines of the usage table: each step's numbers and cost, the totals, the session's cost
--- and what the cache saved, and the prices used — the figures `dsh usage` prints.
---@param session_id string
---@param result dsh.SessionUsageResult
---@return string[]
function M.usage_lines(session_id, result)
  local lines = { ("# Usage — session %s"):format(session_id), "" }
  local any = false
  for _, row in ipairs(result.rows or {}) do
    any = any or row.usage ~= nil
    local text = row.usage and usage.format(row.usage, row.hitPercent, row.cost) or "(did not finish)"
    local line = ("step %3d  turn %2d  seq %5d  %s"):format(row.step, row.turn, row.seq, text)
    if row.dropped then
      line = line .. "  ▼ " .. (usage.cause(row) or "cache dropped")
    end
    table.insert(lines, line)
  end
  table.insert(lines, "")
  table.insert(lines, "total  " .. usage.format(result.totals, nil, result.cost))
  if result.cost then
    local c = result.cost
    table.insert(lines, ("%s (the same tokens at the cache-miss price: %s)"):format(usage.cost_saved(c), usage.money(c.amount + c.saved, c.currency)))
  elseif any then
    table.insert(lines, "cost unknown: no price configured for a model of this session (see `dsh config`)")
  end
  for _, used in ipairs(result.prices or {}) do
    table.insert(lines, usage.prices(used))
  end
  return lines
end

--- `:Dsh usage`: the usage table.
---@param session_id string
---@param result dsh.SessionUsageResult
function M.show_usage(session_id, result)
  local lines = M.usage_lines(session_id, result)
  local buf = M.scratch("dsh://usage/" .. session_id, lines)
  vim.cmd("split")
  vim.api.nvim_win_set_buf(0, buf)
end

return M
