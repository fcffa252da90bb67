--- Usage formatting: `prompt · cached · new · out · hit % · cost` for a step, its highlight by hit
--- ratio, the cause of a cache collapse, money as `dsh usage` prints it, and the status line
--- summary. Pure functions, no state.
local M = {}

--- `("%.6f"):format(x)`, except that a value exactly halfway rounds to the even digit, as Rust's
--- `{:.6}` does, where LuaJIT rounds it away from zero: 0.0078125 is `0.007812`. Without this a
--- cost on such a tie would read one millionth apart from `dsh usage`.
---@param x number
---@return string
local function fixed6(x)
  local rounded = ("%.6f"):format(x)
  -- The exact decimal value of the double (a tie has only seven fractional digits).
  local exact = ("%.99f"):format(x)
  local cut = exact:find(".", 1, true) + 6
  if not exact:sub(cut + 1):match("^50*$") then
    return rounded
  end
  local truncated = exact:sub(1, cut)
  return tonumber(truncated:sub(-1)) % 2 == 0 and truncated or rounded
end

--- An amount of money as `dsh usage` prints it (the CLI's `money()`): rounded to the millionth,
--- trailing zeros cut down to two decimals; dollars with `$` in front, any other currency named
--- after the number. `$0.000335`, `$0.14`, `0.0028 CNY`.
---@param amount number
---@param currency string
---@return string
function M.money(amount, currency)
  local digits = fixed6(amount)
  local keep = (digits:find(".", 1, true) or #digits) + 2
  while digits:sub(-1) == "0" and #digits > keep do
    digits = digits:sub(1, -2)
  end
  if currency == "USD" then
    return "$" .. digits
  end
  return digits .. " " .. currency
end

--- A cost as money, or nil when no price is known (never `$0` for an unknown price).
---@param cost? dsh.Cost
---@return string?
function M.cost(cost)
  if cost == nil or cost == vim.NIL then
    return nil
  end
  return M.money(cost.amount, cost.currency)
end

--- `cost $0.001724 · the cache saved $0.00137`.
---@param cost dsh.Cost
---@return string
function M.cost_saved(cost)
  return ("cost %s · the cache saved %s"):format(M.money(cost.amount, cost.currency), M.money(cost.saved, cost.currency))
end

--- `prices of deepseek/deepseek-v4-flash per million tokens: cache hit $0.0028, cache miss
--- $0.14, output $0.28` — the prices a usage view used, as `dsh usage` names them.
---@param used dsh.PriceUsed
---@return string
function M.prices(used)
  local p = used.price
  return ("prices of %s/%s per million tokens: cache hit %s, cache miss %s, output %s"):format(
    used.profile,
    used.model,
    M.money(p.cacheHit, p.currency),
    M.money(p.cacheMiss, p.currency),
    M.money(p.output, p.currency)
  )
end

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

--- The step annotation: `1,234 prompt · 1,024 cached · 210 new · 52 out · 83% hit`, then
--- ` · $0.000335 cost` when the step's price is known. `hit` defaults to the ratio computed from
--- `usage` (what `session/usage` reports as `hitPercent`).
---@param usage dsh.Usage
---@param hit? number
---@param cost? dsh.Cost
---@return string
function M.format(usage, hit, cost)
  hit = hit or M.hit_percent(usage)
  local text = ("%s prompt · %s cached · %s new · %s out · %s hit"):format(
    M.thousands(usage.promptTokens),
    M.thousands(usage.cacheHitTokens),
    M.thousands(usage.cacheMissTokens),
    M.thousands(usage.completionTokens),
    M.percent(hit)
  )
  local money = M.cost(cost)
  if money then
    text = text .. " · " .. money .. " cost"
  end
  return text
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
    local folded = c.kind == "systemChanged" and c.foldedInstructions and " (the instruction notes folded in)" or ""
    if c.kind == "toolsChanged" and c.skills then
      folded = " (the skills changed)"
    end
    table.insert(words, ("%s at seq %d%s"):format(name, c.seq, folded))
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
  local chunks = { { "  " .. M.format(usage, hit, row and row.usage and row.cost or nil), M.hl_for(hit) } }
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

--- The status line text for a session: live step, the totals and what they cost.
---@param state { step?: integer, running?: boolean, totals?: dsh.Usage, cost?: dsh.Cost }
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
    local money = M.cost(state.cost)
    if money then
      table.insert(parts, money)
    end
  end
  return table.concat(parts, " · ")
end

return M
