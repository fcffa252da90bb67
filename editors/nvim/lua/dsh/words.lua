--- The one-line texts the transcript shows for what is not a message: a workspace note's
--- headline, an MCP tool's label, a step's wait for MCP servers, a budget reached, a plan, an
--- image a message carries. Pure:
--- no buffer, no `vim.api`.

local M = {}

--- How a note names what happened to a file (`files[].change`).
local CHANGE_WORDS = { edited = "changed", added = "added", deleted = "deleted", replaced = "replaced" }

--- The one line the transcript shows for a workspace note: for an `instructions` note
--- "AGENTS.md changed: joins the next request as a note", for a `workspace` note
--- "src/a.rs changed on disk: joins the next request as a note" — the files' paths grouped by
--- what happened to them, in the note's order. Nil for the notes shown whole: the date, and any
--- source this plugin does not know.
---@param data dsh.ContextMessage
---@return string?
function M.note_headline(data)
  if data.source ~= "instructions" and data.source ~= "workspace" then
    return nil
  end
  local where = data.source == "workspace" and " on disk" or ""
  local order, groups = {}, {}
  for _, f in ipairs(data.files or {}) do
    if not groups[f.change] then
      groups[f.change] = {}
      table.insert(order, f.change)
    end
    table.insert(groups[f.change], f.path)
  end
  local parts = {}
  for _, change in ipairs(order) do
    table.insert(parts, ("%s %s%s"):format(table.concat(groups[change], ", "), CHANGE_WORDS[change] or change, where))
  end
  local what = #parts > 0 and table.concat(parts, "; ") or (data.source == "workspace" and "a file changed on disk" or "the instructions changed")
  return what .. ": joins the next request as a note"
end

--- The server and the server's own tool name of an MCP tool's request name `SERVER__TOOL`
--- (docs/mcp.md: a server name is 1 to 32 letters, digits or `-`, never `_`, so the first `__`
--- ends it, and no built-in tool has a `__`); nil for a built-in tool.
---@param name string
---@return string? server, string? tool
function M.mcp_tool(name)
  local server, tool = (name or ""):match("^([%w%-]+)__(.+)$")
  if not server or #server > 32 then
    return nil
  end
  return server, tool
end

--- How the transcript names a tool: `fx › echo` for the tool `echo` of MCP server `fx`
--- (`fx__echo` on the wire), a built-in tool by its name.
---@param name string
---@return string
function M.tool_label(name)
  local server, tool = M.mcp_tool(name)
  return server and (server .. " › " .. tool) or name
end

--- The one line the transcript shows for an `mcp/wait` event (not model-visible: a step waited
--- for MCP servers before its request): "waiting for MCP server fx to start", "waiting for MCP
--- servers fx, gy to list their changed tools". A reason newer than this plugin is named.
---@param data dsh.McpWait
---@return string
function M.mcp_wait_text(data)
  local servers = {}
  for _, s in ipairs(type(data.servers) == "table" and data.servers or {}) do
    if type(s) == "string" then
      table.insert(servers, (s:gsub("%s", " ")))
    end
  end
  local many = #servers ~= 1
  local who = #servers > 0 and ("MCP server%s %s"):format(many and "s" or "", table.concat(servers, ", ")) or "MCP servers"
  local reason = type(data.reason) == "string" and data.reason or ""
  if reason == "starting" then
    return ("waiting for %s to start"):format(who)
  elseif reason == "toolsChanged" then
    return ("waiting for %s to list %s changed tools"):format(who, many and "their" or "its")
  end
  return ("waiting for %s%s"):format(who, reason ~= "" and (" (" .. reason:gsub("%s", " ") .. ")") or "")
end

--- A number as the log gave it: `2`, not `2.0`.
---@param n number
---@return string
local function num(n)
  if n == math.floor(n) and math.abs(n) < 1e15 then
    return ("%d"):format(n)
  end
  return tostring(n)
end

--- The one line the transcript shows for a `turn/limit` event (a budget of the turn was reached;
--- the turn stops), the words `dsh prompt` prints: "step budget reached: 2 of 2 steps", "cost
--- budget reached: $0.0012 of $0.001", "timeout reached: 30.0 s of 30 s". A budget newer than
--- this plugin is named as it came.
---@param data dsh.TurnLimit
---@return string
function M.limit_text(data)
  local usage = require("dsh.usage")
  local spent, value = tonumber(data.spent) or 0, tonumber(data.value) or 0
  if data.limit == "maxSteps" then
    return ("step budget reached: %s of %s steps"):format(num(spent), num(value))
  elseif data.limit == "maxTokens" then
    return ("token budget reached: %s of %s tokens"):format(usage.thousands(spent), usage.thousands(value))
  elseif data.limit == "maxCost" then
    return ("cost budget reached: %s of %s"):format(usage.money(spent, "USD"), usage.money(value, "USD"))
  elseif data.limit == "timeout" then
    return ("timeout reached: %.1f s of %s s"):format(spent, num(value))
  end
  return ("%s reached: %s of %s"):format(tostring(data.limit):gsub("%s", " "), num(spent), num(value))
end

local PLAN_MARKS = { completed = "[x]", in_progress = "[>]", pending = "[ ]" }

--- A plan (`plan/update`, or `session/plan`'s answer) as `dsh prompt` prints it: a headline with
--- the count of completed steps and the model's explanation, then one line per step, `[x]`
--- completed, `[>]` in progress, `[ ]` pending (a status newer than this plugin as it came).
---@param plan { plan: dsh.PlanEntry[], explanation?: string }
---@return string[]
function M.plan_lines(plan)
  local entries = plan.plan or {}
  if #entries == 0 then
    return { "plan cleared" }
  end
  local done = 0
  for _, e in ipairs(entries) do
    if e.status == "completed" then
      done = done + 1
    end
  end
  local why = plan.explanation and (": " .. plan.explanation:gsub("%s", " ")) or ""
  local lines = { ("plan (%d of %d completed)%s"):format(done, #entries, why) }
  for _, e in ipairs(entries) do
    local mark = PLAN_MARKS[e.status] or ("[" .. tostring(e.status) .. "]")
    table.insert(lines, ("  %s %s"):format(mark, (tostring(e.step):gsub("%s", " "))))
  end
  return lines
end

--- `text`'s lines, each after `prefix` (the first after `first_prefix`), at most `max` of them
--- and then a line saying how many more there are.
---@param text string?
---@param prefix string
---@param first_prefix string
---@param max? integer
---@return string[]
function M.lines_of(text, prefix, first_prefix, max)
  local out = {}
  local pieces = vim.split(text or "", "\n", { plain = true })
  for i, piece in ipairs(pieces) do
    if max and i > max then
      table.insert(out, prefix .. ("… %d more line%s"):format(#pieces - max, #pieces - max == 1 and "" or "s"))
      break
    end
    table.insert(out, (i == 1 and first_prefix or prefix) .. piece)
  end
  return out
end

local function count(list)
  return type(list) == "table" and #list or 0
end

--- The one line the transcript shows for a `workspace/checkpoint` event (the workspace's files
--- were recorded, docs/rewind.md), the words `dsh prompt` prints: "checkpoint before step 3's
--- tools: 12 files, 2 changed".
---@param data dsh.WorkspaceCheckpoint
---@return string
function M.checkpoint_text(data)
  local when
  if type(data.step) == "number" then
    when = ("before step %d's tools"):format(data.step)
  elseif data.reason == "rewind" then
    when = "before a rewind"
  else
    when = "at the turn's end"
  end
  local text = ("checkpoint %s: %d files, %d changed"):format(when, tonumber(data.files) or 0, count(data.changed))
  if count(data.tooLarge) > 0 then
    text = text .. (", %d over the size cap"):format(count(data.tooLarge))
  end
  if type(data.incomplete) == "string" then
    text = text .. " (incomplete: " .. data.incomplete:gsub("%s", " ") .. ")"
  end
  return text
end

--- The one line the transcript shows for a `workspace/rewind` event: "⟲ rewound files and
--- conversation of S to just before step 1: 2 restored, 1 created, 1 deleted".
---@param data dsh.WorkspaceRewind
---@return string
function M.rewind_text(data)
  local what = (data.files and data.conversation) and "files and conversation" or (data.files and "files" or "conversation")
  local to = type(data.toStep) == "number" and ("to just before step %d"):format(data.toStep) or "to a checkpoint"
  local text = ("⟲ rewound %s of %s %s"):format(what, tostring(data.fromSession), to)
  if data.files then
    text = text .. (": %d restored, %d created, %d deleted"):format(count(data.restored), count(data.created), count(data.deleted))
    if data.forced then
      text = text .. " (forced)"
    end
  end
  return text
end

--- The one line the transcript shows for a `hook/run` event (a hook of the user's configuration
--- ran, docs/hooks.md), the words `dsh prompt` prints: "⛔ hook guard (PreToolUse, run_command)
--- blocked: no rm here".
---@param data dsh.HookRun
---@return string
function M.hook_text(data)
  local about = type(data.tool) == "string" and (data.event .. ", " .. data.tool) or data.event
  local head = ("hook %s (%s)"):format(tostring(data.hook), about)
  local reason = ""
  for line in (type(data.stderr) == "string" and data.stderr or ""):gmatch("[^\n]+") do
    if line:match("%S") then
      reason = line
      break
    end
  end
  local text
  if data.outcome == "ok" then
    text = ("%s ok, %d ms"):format(head, tonumber(data.durationMs) or 0)
  elseif data.outcome == "blocked" then
    text = reason == "" and ("⛔ " .. head .. " blocked") or ("⛔ " .. head .. " blocked: " .. reason)
  else
    text = "⚠ " .. head .. " failed: " .. (type(data.error) == "string" and data.error or "it failed")
  end
  if data.stdoutTruncated then
    text = text .. " [its output was cut]"
  end
  if data.stderrTruncated then
    text = text .. " [its error output was cut]"
  end
  if data.invalidUtf8 then
    text = text .. " [invalid UTF-8 was replaced]"
  end
  return text
end

--- A size in bytes for people: `512 bytes`, `39.1 KiB`, `2.9 MiB` (binary units, one decimal).
---@param n number
---@return string
function M.human_size(n)
  n = tonumber(n) or 0
  if n < 1024 then
    return ("%d byte%s"):format(n, n == 1 and "" or "s")
  elseif n < 1024 * 1024 then
    return ("%.1f KiB"):format(n / 1024)
  end
  return ("%.1f MiB"):format(n / (1024 * 1024))
end

--- The line the transcript shows for an image a message carries (its reference in the log,
--- docs/log.md "Images"): `[image: shot.png, image/png, 39.1 KiB]` — its name, else the first
--- 12 digits of its hash; its media type; its size.
---@param ref dsh.ImageRef
---@return string
function M.image_text(ref)
  local name = type(ref.name) == "string" and ref.name ~= "" and ref.name:gsub("[%c]", " ") or (tostring(ref.sha256 or "?")):sub(1, 12)
  return ("[image: %s, %s, %s]"):format(name, tostring(ref.mediaType or "?"), M.human_size(ref.size))
end

return M
