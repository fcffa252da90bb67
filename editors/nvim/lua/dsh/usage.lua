--- Usage formatting: `prompt · cached · new · out · hit %` for a step, its highlight by hit ratio,
--- the cause of a cache collapse, and the status line summary. Pure functions, no state.
local M = {}

--- `12345` → `12,345`.
---@param n number?
---@return string
function M.thousands(n)
  n = math.floor(tonumber(n) or 0)
  local s = tostring(math.abs(n))
  local out = s:reverse():gsub("(%d%d%d)", "%1,"):reverse()
  if out:sub(1, 1) == "," then
    out = out:sub(2)
  end
  return (n < 0 and "-" or "") .. out
end

--- `12345` → `12.3k`, for the compact status line.
---@param n number?
---@return string
function M.short(n)
  n = tonumber(n) or 0
  if n >= 1e6 then
    return ("%.1fM"):format(n / 1e6)
  elseif n >= 1e4 then
    return ("%.0fk"):format(n / 1e3)
  elseif n >= 1e3 then
    return ("%.1fk"):format(n / 1e3)
  end
  return tostring(math.floor(n))
end

--- The hit ratio in percent: `cacheHitTokens / promptTokens` (0 when there was no prompt).
---@param usage dsh.Usage
---@return number
function M.hit_percent(usage)
  local prompt = tonumber(usage.promptTokens) or 0
  if prompt <= 0 then
    return 0
  end
  return 100 * (tonumber(usage.cacheHitTokens) or 0) / prompt
end

--- A percentage as shown: whole percent, rounded half up.
---@param pct number
---@return string
function M.percent(pct)
  return ("%d%%"):format(math.floor(pct + 0.5))
end

--- The step annotation: `1,234 prompt · 1,024 cached · 210 new · 52 out · 83% hit`.
--- `hit` defaults to the ratio computed from `usage` (what `session/usage` reports as
--- `hitPercent`).
---@param usage dsh.Usage
---@param hit? number
---@return string
function M.format(usage, hit)
  hit = hit or M.hit_percent(usage)
  return ("%s prompt · %s cached · %s new · %s out · %s hit"):format(
    M.thousands(usage.promptTokens),
    M.thousands(usage.cacheHitTokens),
    M.thousands(usage.cacheMissTokens),
    M.thousands(usage.completionTokens),
    M.percent(hit)
  )
end

--- The highlight group for a hit ratio: good (≥ 80 %), fair (≥ 40 %), poor.
---@param hit number
---@return string
function M.hl_for(hit)
  if hit >= 80 then
    return "DshUsageGood"
  elseif hit >= 40 then
    return "DshUsageFair"
  end
  return "DshUsagePoor"
end

--- The cause of a collapse, as words: the daemon's `explanation` when present, else the
--- logged causes named here.
---@param row dsh.UsageEntry
---@return string?
function M.cause(row)
  if row.explanation and row.explanation ~= "" then
    return row.explanation
  end
  local words = {}
  for _, c in ipairs(row.causes or {}) do
    local name = ({
      firstRequest = "first request",
      resume = c.changed and "resume with a changed header" or "resume",
      fallback = "header snapshot",
      systemChanged = "system prompt changed",
      toolsChanged = "tools changed",
      configChanged = "config changed",
      compaction = "compaction",
      trim = "trim",
    })[c.kind] or c.kind
    table.insert(words, ("%s at seq %d"):format(name, c.seq))
  end
  if #words == 0 then
    return nil
  end
  return table.concat(words, ", ")
end

--- Virtual text chunks for a step: the numbers in the ratio's color, then the cause of a drop.
---@param usage dsh.Usage
---@param row? dsh.UsageEntry the `session/usage` row, once known
---@return string[][]
function M.virt_text(usage, row)
  local hit = row and row.hitPercent or M.hit_percent(usage)
  local chunks = { { "  " .. M.format(usage, hit), M.hl_for(hit) } }
  if row then
    local cause = M.cause(row)
    if row.dropped and cause then
      table.insert(chunks, { "  ▼ " .. cause, "DshUsageCause" })
    elseif cause and #(row.causes or {}) > 0 and row.step > 1 then
      table.insert(chunks, { "  · " .. cause, "DshDim" })
    end
  end
  return chunks
end

--- The status line text for a session: live step and the totals.
---@param state { step?: integer, running?: boolean, totals?: dsh.Usage }
---@return string
function M.statusline(state)
  local parts = { "dsh" }
  if state.step then
    table.insert(parts, (state.running and "▶ step %d" or "step %d"):format(state.step))
  end
  local t = state.totals
  if t and (t.promptTokens or 0) > 0 then
    table.insert(parts, ("%s prompt · %s cached · %s out · %s hit"):format(
      M.short(t.promptTokens),
      M.short(t.cacheHitTokens),
      M.short(t.completionTokens),
      M.percent(M.hit_percent(t))
    ))
  end
  return table.concat(parts, " · ")
end

return M
