--- The transcript buffer of one session: renders the session's log events as they stream
--- (assistant text, folded reasoning, tool calls with arguments and results — an MCP server's
--- tools as `server › tool` —, approvals, steering, workspace notes with their text folded, waits
--- for MCP servers, errors; an image a prompt or a tool result carries as one `[image: …]` line
--- that `<CR>` opens) and carries each step's usage as extmark
--- virtual text on the step's header line. The current plan (the last `plan/update`) shows as
--- virtual lines under the header, replaced as the model updates it.
--- Rendering only appends; a step's annotation is refreshed from `session/usage` so its numbers
--- and the cause of a cache drop are the daemon's.
local usage = require("dsh.usage")
local words = require("dsh.words")

local M = {}

M.ns = vim.api.nvim_create_namespace("dsh_transcript")
M.plan_ns = vim.api.nvim_create_namespace("dsh_plan")
M.usage_ns = vim.api.nvim_create_namespace("dsh_usage")

---@type table<integer, dsh.Transcript> by buffer
M.by_buf = {}
---@type table<string, dsh.Transcript> by session id
M.by_session = {}

---@class dsh.StepState
---@field step integer
---@field turn integer
---@field seq integer seq of its `step/start`
---@field line integer 0-based line of its header
---@field usage? dsh.Usage
---@field row? dsh.UsageEntry
---@field mark? integer

---@class dsh.Transcript
---@field session_id string
---@field buf integer
---@field sub? string subscription key
---@field last_seq integer
---@field steps table<integer, dsh.StepState>
---@field step_order integer[]
---@field cur_step? integer
---@field running boolean
---@field turn? integer
---@field totals? dsh.Usage
---@field cost? dsh.Cost what the finished steps cost (nil: a step without a known price)
---@field prices? dsh.PriceUsed[] the prices that cost was computed from
---@field stream? { step: integer, kind: string, index?: integer }
---@field tool_lines table<string, integer>
---@field chunked table<integer, boolean>
---@field reasoning table<integer, boolean> 0-based lines of reasoning (folded)
---@field note_text table<integer, boolean> 0-based lines of a note's text under its line (folded)
---@field joinable table<integer, integer> line of each steering message and note (by seq) not yet joined to a request
---@field approvals table<string, dsh.ApprovalRequest> pending approvals by id
---@field approval_lines table<string, integer>
---@field child_lines table<integer, string> the child session of each `⇢ sub-agent` line (0-based)
---@field children string[] the sub-agent sessions its `task` calls started, in order
---@field image_lines table<integer, dsh.ImageRef> the image of each `[image: …]` line (0-based)
---@field images dsh.ImageRef[] the images its messages carry, in the transcript's order
---@field meta? dsh.SessionMeta
---@field header_line? integer 0-based last line of the header (the plan shows under it)
---@field plan? { seq: integer, update: dsh.PlanUpdate } the current plan: the last `plan/update`
---@field usage_pending? boolean a `session/usage` refresh is scheduled
---@field refresh_usage? fun(t: dsh.Transcript) set by the owner: fetch `session/usage`
---@field on_wipe? fun(t: dsh.Transcript) set by the owner: the buffer is going away
---@field on_change fun(t: dsh.Transcript)[]
---@field on_approval? fun(t: dsh.Transcript, req: dsh.ApprovalRequest)
---@field empty boolean
local Transcript = {}
Transcript.__index = Transcript
M.Transcript = Transcript

local function define_highlights()
  local links = {
    DshTitle = "Title",
    DshTurn = "NonText",
    DshStep = "Special",
    DshUser = "Statement",
    DshSteer = "WarningMsg",
    DshContext = "Comment",
    DshNote = "DiagnosticInfo",
    DshReasoning = "Comment",
    DshAssistant = "Normal",
    DshTool = "Function",
    DshToolArgs = "String",
    DshToolResult = "Comment",
    DshError = "ErrorMsg",
    DshApproval = "Question",
    DshMcpServer = "Label",
    DshDim = "NonText",
    DshUsageGood = "DiagnosticOk",
    DshUsageFair = "DiagnosticWarn",
    DshUsagePoor = "DiagnosticError",
    DshUsageCause = "DiagnosticError",
    DshLanded = "DiagnosticHint",
    DshImage = "Underlined",
  }
  for group, target in pairs(links) do
    vim.api.nvim_set_hl(0, group, { link = target, default = true })
  end
end
define_highlights()
vim.api.nvim_create_autocmd("ColorScheme", {
  group = vim.api.nvim_create_augroup("dsh_highlights", { clear = true }),
  callback = define_highlights,
})

--- The buffer name of a session's transcript.
---@param session_id string
function M.bufname(session_id)
  return "dsh://session/" .. session_id
end

--- Fold expression for transcript windows: a note's text always folds under its line;
--- reasoning folds when `fold_reasoning` is 1 (the window's `reasoning_fold`, see `setup_window`).
---@param fold_reasoning? integer
function M.foldexpr(fold_reasoning)
  local t = M.by_buf[vim.api.nvim_get_current_buf()]
  local line = vim.v.lnum - 1
  if t and (t.note_text[line] or (t.reasoning[line] and fold_reasoning == 1)) then
    return "1"
  end
  return "0"
end

function M.foldtext()
  local n = vim.v.foldend - vim.v.foldstart + 1
  local t = M.by_buf[vim.api.nvim_get_current_buf()]
  local what = (t and t.note_text[vim.v.foldstart - 1]) and "the note the model reads" or "reasoning"
  return ("  ▸ %s (%d line%s, zo to open)"):format(what, n, n == 1 and "" or "s")
end

M.note_headline = words.note_headline
M.mcp_tool = words.mcp_tool
M.tool_label = words.tool_label
M.mcp_wait_text = words.mcp_wait_text
M.limit_text = words.limit_text
M.plan_lines = words.plan_lines
M.checkpoint_text = words.checkpoint_text
M.rewind_text = words.rewind_text
M.hook_text = words.hook_text

--- Create (or find) the transcript for a session. Does not subscribe.
---@param session_id string
---@return dsh.Transcript
function M.get_or_create(session_id)
  local existing = M.by_session[session_id]
  if existing and vim.api.nvim_buf_is_valid(existing.buf) then
    return existing
  end
  local buf = vim.api.nvim_create_buf(true, true)
  local name = M.bufname(session_id)
  local old = vim.fn.bufnr(name)
  if old ~= -1 and old ~= buf then
    pcall(vim.api.nvim_buf_delete, old, { force = true })
  end
  vim.api.nvim_buf_set_name(buf, name)
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "hide"
  vim.bo[buf].swapfile = false
  vim.bo[buf].modifiable = false
  vim.bo[buf].filetype = "dsh"
  local t = setmetatable({
    session_id = session_id,
    buf = buf,
    last_seq = -1,
    steps = {},
    step_order = {},
    running = false,
    tool_lines = {},
    chunked = {},
    reasoning = {},
    note_text = {},
    joinable = {},
    approvals = {},
    approval_lines = {},
    child_lines = {},
    children = {},
    image_lines = {},
    images = {},
    on_change = {},
    empty = true,
  }, Transcript)
  M.by_buf[buf] = t
  M.by_session[session_id] = t
  -- `<CR>` on a `⇢ sub-agent` line opens the child's transcript in the window, on an
  -- `[image: …]` line the image (outside the editor); elsewhere it is Vim's own.
  vim.keymap.set("n", "<CR>", function()
    local line = vim.api.nvim_win_get_cursor(0)[1] - 1
    local child = t:child_at(line)
    local image = t:image_at(line)
    if child then
      require("dsh").open(child, { win = vim.api.nvim_get_current_win() })
    elseif image then
      require("dsh.image").open(t.session_id, image)
    else
      vim.cmd.normal({ args = { vim.v.count1 .. vim.keycode("<CR>") }, bang = true })
    end
  end, { buffer = buf, desc = "dsh: open the sub-agent or the image on this line" })
  vim.api.nvim_create_autocmd("BufWipeout", {
    buffer = buf,
    once = true,
    callback = function()
      M.by_buf[buf] = nil
      if M.by_session[session_id] == t then
        M.by_session[session_id] = nil
      end
      if t.on_wipe then
        t.on_wipe(t)
      end
    end,
  })
  return t
end

--- Window-local options for a window showing a transcript.
---@param win integer
function M.setup_window(win)
  local cfg = require("dsh.config").get()
  vim.wo[win].wrap = true
  vim.wo[win].linebreak = true
  vim.wo[win].breakindent = true
  vim.wo[win].breakindentopt = "shift:2"
  vim.wo[win].number = false
  vim.wo[win].relativenumber = false
  vim.wo[win].signcolumn = "no"
  vim.wo[win].list = false
  vim.wo[win].foldmethod = "expr"
  vim.wo[win].foldexpr = ("v:lua.require'dsh.transcript'.foldexpr(%d)"):format(cfg.reasoning_fold and 1 or 0)
  vim.wo[win].foldtext = "v:lua.require'dsh.transcript'.foldtext()"
  vim.wo[win].foldlevel = 0
  vim.wo[win].foldenable = true
  vim.wo[win].fillchars = "fold: "
end

-- Buffer writing ------------------------------------------------------------------------------

function Transcript:_line_count()
  return vim.api.nvim_buf_line_count(self.buf)
end

--- Run `fn` with the buffer modifiable, then keep following windows at the end.
function Transcript:_edit(fn)
  local buf = self.buf
  if not vim.api.nvim_buf_is_valid(buf) then
    return
  end
  local before = self:_line_count()
  local followers = {}
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    if vim.api.nvim_win_get_cursor(win)[1] >= before then
      table.insert(followers, win)
    end
  end
  vim.bo[buf].modifiable = true
  local ok, err = pcall(fn)
  vim.bo[buf].modifiable = false
  if not ok then
    vim.notify("dsh: transcript: " .. tostring(err), vim.log.levels.ERROR)
  end
  local after = self:_line_count()
  if require("dsh.config").get().follow then
    for _, win in ipairs(followers) do
      pcall(vim.api.nvim_win_set_cursor, win, { after, 0 })
    end
  end
end

--- Append lines; returns the 0-based index of the first.
---@param lines string[]
---@param hl? string highlight for the whole lines
---@param fold? table<integer, boolean> lines that fold (`reasoning`, `note_text`): marked before
---  they are written, since a window computes a new line's fold when it is inserted
---@return integer
function Transcript:append(lines, hl, fold)
  local first
  self:_edit(function()
    first = self.empty and 0 or self:_line_count()
    for l = first, first + #lines - 1 do
      if fold then
        fold[l] = true
      end
    end
    if self.empty then
      vim.api.nvim_buf_set_lines(self.buf, 0, -1, false, lines)
      self.empty = false
    else
      vim.api.nvim_buf_set_lines(self.buf, first, first, false, lines)
    end
    if hl then
      for i = 0, #lines - 1 do
        vim.api.nvim_buf_set_extmark(self.buf, M.ns, first + i, 0, { line_hl_group = hl, priority = 50 })
      end
    end
  end)
  self.stream = nil
  return first
end

--- Append text to the end of line `line` (newlines start new lines with `prefix`).
---@param line integer 0-based; must be the last line for multi-line text
---@param text string
---@param prefix string
---@param hl? string
---@param fold? table<integer, boolean> marks the new lines as folding (see `append`)
---@return integer last line written
function Transcript:_extend(line, text, prefix, hl, fold)
  local last = line
  self:_edit(function()
    local pieces = vim.split(text, "\n", { plain = true })
    local cur = vim.api.nvim_buf_get_lines(self.buf, line, line + 1, false)[1] or ""
    vim.api.nvim_buf_set_lines(self.buf, line, line + 1, false, { cur .. pieces[1] })
    local extra = {}
    for i = 2, #pieces do
      table.insert(extra, prefix .. pieces[i])
      if fold then
        fold[line + i - 1] = true
      end
    end
    if #extra > 0 then
      vim.api.nvim_buf_set_lines(self.buf, line + 1, line + 1, false, extra)
      last = line + #extra
    end
    if hl then
      for l = line + 1, last do
        vim.api.nvim_buf_set_extmark(self.buf, M.ns, l, 0, { line_hl_group = hl, priority = 50 })
      end
    end
  end)
  return last
end

--- Highlight the `server ›` of an MCP tool's label written after `prefix` on line `line`.
---@param line integer 0-based
---@param prefix string the line's text before the label
---@param name string the tool's request name
function Transcript:_mark_server(line, prefix, name)
  local server = M.mcp_tool(name)
  if server and vim.api.nvim_buf_is_valid(self.buf) then
    vim.api.nvim_buf_set_extmark(self.buf, M.ns, line, #prefix, { end_col = #prefix + #server + #" ›", hl_group = "DshMcpServer", priority = 60 })
  end
end

local lines_of = words.lines_of

function Transcript:_changed()
  for _, fn in ipairs(self.on_change) do
    pcall(fn, self)
  end
end

-- Streaming -----------------------------------------------------------------------------------

local REASONING_PREFIX = "  │ "
local TEXT_PREFIX = "  "

--- Stream a chunk of an assistant message.
---@param step integer
---@param delta dsh.ChunkDelta
function Transcript:_chunk(step, delta)
  self.chunked[step] = true
  local s = self.stream
  if delta.kind == "text" or delta.kind == "reasoning" then
    if (delta.text or "") == "" then
      return
    end
    local prefix = delta.kind == "reasoning" and REASONING_PREFIX or TEXT_PREFIX
    local hl = delta.kind == "reasoning" and "DshReasoning" or nil
    local fold = delta.kind == "reasoning" and self.reasoning or nil
    if not (s and s.step == step and s.kind == delta.kind) then
      local first = self:append({ prefix }, hl, fold)
      s = { step = step, kind = delta.kind, line = first }
    end
    local last = self:_extend(s.line, delta.text, prefix, hl, fold)
    s.line = last
    self.stream = s
  elseif delta.kind == "toolCall" then
    local line = self:append({ ("  ⚙ %s "):format(M.tool_label(delta.name)) }, "DshTool")
    self:_mark_server(line, "  ⚙ ", delta.name)
    self.tool_lines[step .. ":" .. delta.index] = line
    self.stream = { step = step, kind = "tool", index = delta.index, line = line }
  elseif delta.kind == "toolArgs" then
    local line = self.tool_lines[step .. ":" .. delta.index]
    if line then
      -- Argument JSON has no raw newlines; a fragment only extends its call's line (set as
      -- text, so the line's marks — its highlight, its server's — stay on it).
      self:_edit(function()
        local cur = vim.api.nvim_buf_get_lines(self.buf, line, line + 1, false)[1] or ""
        local frag = delta.fragment:gsub("\n", " ")
        vim.api.nvim_buf_set_text(self.buf, line, #cur, line, #cur, { frag })
      end)
    end
  end
end

--- Render a whole assistant message (when the log holds no chunks for its step).
---@param step integer
---@param msg dsh.AssistantMessage
function Transcript:_message(step, msg)
  if msg.reasoningContent and msg.reasoningContent ~= "" then
    self:append(lines_of(msg.reasoningContent, REASONING_PREFIX, REASONING_PREFIX), "DshReasoning", self.reasoning)
  end
  if msg.content and msg.content ~= "" then
    self:append(lines_of(msg.content, TEXT_PREFIX, TEXT_PREFIX))
  end
  for i, call in ipairs(msg.toolCalls or {}) do
    local line = self:append({ ("  ⚙ %s %s"):format(M.tool_label(call.name), (call.arguments or ""):gsub("\n", " ")) }, "DshTool")
    self:_mark_server(line, "  ⚙ ", call.name)
    self.tool_lines[step .. ":" .. (i - 1)] = line
  end
end

-- Usage annotations ---------------------------------------------------------------------------

---@param st dsh.StepState
function Transcript:_annotate(st)
  if not (st.usage and vim.api.nvim_buf_is_valid(self.buf)) then
    return
  end
  st.mark = vim.api.nvim_buf_set_extmark(self.buf, M.usage_ns, st.line, 0, {
    id = st.mark,
    virt_text = usage.virt_text(st.usage, st.row),
    virt_text_pos = "eol",
    hl_mode = "combine",
  })
end

--- Apply a `session/usage` result: each row's numbers and explanation replace the annotation
--- computed from the `step/end` event.
---@param result dsh.SessionUsageResult
function Transcript:apply_usage(result)
  for _, row in ipairs(result.rows or {}) do
    local st = self.steps[row.step]
    -- A row without usage (the step was running when the daemon answered) must not replace
    -- the numbers the `step/end` event already gave.
    if st and (row.usage or not st.usage) then
      st.row = row
      st.usage = row.usage
      self:_annotate(st)
    end
  end
  self.totals = result.totals
  self.cost = result.cost
  self.prices = result.prices
  self:_changed()
end

--- Ask for `session/usage` soon (coalescing bursts, e.g. a replay).
function Transcript:schedule_usage_refresh()
  if self.usage_pending then
    return
  end
  self.usage_pending = true
  vim.defer_fn(function()
    self.usage_pending = false
    if self.refresh_usage then
      self.refresh_usage(self)
    end
  end, 30)
end

-- Events --------------------------------------------------------------------------------------

local handlers = {}

---@param data dsh.SessionMeta
handlers["session/meta"] = function(self, data)
  self.meta = data
  local lines = { ("dsh session %s"):format(self.session_id), ("workspace %s"):format(data.workspace or "?") }
  if data.forkedFrom then
    table.insert(lines, ("forked from %s at seq %d"):format(data.forkedFrom.sessionId, data.forkedFrom.seq))
  end
  self.header_line = self:append(lines, "DshTitle") + #lines - 1
  self:_show_plan()
end

--- Shows the current plan as virtual lines under the header (they move no buffer line, so the
--- steps' lines stay where they are).
function Transcript:_show_plan()
  if not self.plan or not self.header_line or not vim.api.nvim_buf_is_valid(self.buf) then
    return
  end
  local virt = {}
  for i, line in ipairs(M.plan_lines(self.plan.update)) do
    local hl = "DshDim"
    if i == 1 then
      hl = "DshTitle"
    elseif line:find("^  %[>%]") then
      hl = "DshTool"
    end
    table.insert(virt, { { line, hl } })
  end
  vim.api.nvim_buf_clear_namespace(self.buf, M.plan_ns, 0, -1)
  vim.api.nvim_buf_set_extmark(self.buf, M.plan_ns, self.header_line, 0, { virt_lines = virt })
end

---@param data dsh.TurnStart
handlers["turn/start"] = function(self, data)
  self.running = true
  self.turn = data.turn
  self:append({ "", ("━━ turn %d"):format(data.turn) }, "DshTurn")
end

--- One `[image: …]` line per image a message carries (after its text, as the model sees
--- them), each remembered for `<CR>` and `:Dsh image`.
---@param refs? dsh.ImageRef[]
---@param indent string
function Transcript:_images(refs, indent)
  for _, ref in ipairs(type(refs) == "table" and refs or {}) do
    local line = self:append({ indent .. words.image_text(ref) }, "DshImage")
    self.image_lines[line] = ref
    table.insert(self.images, ref)
  end
end

--- The image whose `[image: …]` line is `line` (0-based), if it is one.
---@param line integer
---@return dsh.ImageRef?
function Transcript:image_at(line)
  return self.image_lines[line]
end

---@param data dsh.UserMessage
handlers["user/message"] = function(self, data)
  if data.command then
    -- A prompt command's expansion: the command and its file, then the text the model got.
    self:append({ ("  ❯ /%s (%s)"):format(data.command.name, data.command.source) }, "DshUser")
    self:append(lines_of(data.text, "    ", "    "), "DshUser")
    self:_images(data.images, "    ")
    return
  end
  self:append(lines_of(data.text, "  ", "❯ "), "DshUser")
  self:_images(data.images, "  ")
end

---@param data dsh.SteeringMessage
---@param ev dsh.Event.steering_message
handlers["steering/message"] = function(self, data, ev)
  local first = self:append(lines_of(data.text, "  ", "↪ steer: "), "DshSteer")
  -- It joins the next request: the daemon's `joined` on that step/start says which.
  self.joinable[ev.seq] = first
end

local NOTE_PREFIX = "    │ "

---@param data dsh.ContextMessage
---@param ev dsh.Event.context_message
handlers["context/message"] = function(self, data, ev)
  local headline = M.note_headline(data)
  if not headline then
    local src = data.source and (" (" .. data.source .. ")") or ""
    self:append(lines_of(data.text, "    ", "· context" .. src .. ": ", 3), "DshContext")
    return
  end
  -- A workspace note: one line, and under it, folded, the whole text the model reads.
  local line = self:append({ "· " .. headline }, "DshNote")
  self:append(lines_of(data.text, NOTE_PREFIX, NOTE_PREFIX), "DshContext", self.note_text)
  -- It joins the next request, as steering does: the next step/start says which.
  self.joinable[ev.seq] = line
end

---@param data dsh.StepStart
---@param ev dsh.Event.step_start
handlers["step/start"] = function(self, data, ev)
  local line = self:append({ ("── step %d"):format(data.step) }, "DshStep")
  local st = { step = data.step, turn = data.turn, seq = ev.seq, line = line }
  if not self.steps[data.step] then
    table.insert(self.step_order, data.step)
  end
  self.steps[data.step] = st
  self.cur_step = data.step
  -- The steering and notes that joined this request, as the daemon says (`joined`).
  for _, seq in ipairs(ev.joined or {}) do
    local l = self.joinable[seq]
    if l then
      self.joinable[seq] = nil
      vim.api.nvim_buf_set_extmark(self.buf, M.ns, l, 0, {
        virt_text = { { ("  → joined step %d"):format(data.step), "DshLanded" } },
        virt_text_pos = "eol",
      })
    end
  end
  self:_changed()
end

---@param data dsh.HeaderDelta
handlers["request/header-delta"] = function(self, data)
  local what = {}
  if data.system then
    table.insert(what, "system prompt")
  end
  if data.tools then
    table.insert(what, "tools")
  end
  if data.config then
    table.insert(what, "config")
  end
  self:append({ ("  ✎ request header changed: %s"):format(table.concat(what, ", ")) }, "DshDim")
end

---@param data dsh.AssistantChunk
handlers["assistant/chunk"] = function(self, data)
  self:_chunk(data.step, data.delta)
end

---@param data dsh.AssistantTurn
handlers["assistant/message"] = function(self, data)
  if not self.chunked[data.step] then
    self:_message(data.step, data.message)
  end
  self.stream = nil
end

---@param data dsh.ToolCallStarted
handlers["tool/call"] = function(self, data)
  -- Only a command that ran without the sandbox is worth a line: everything else is confined.
  if data.unconfined then
    self:append({ ("  ⚠ %s ran unconfined (no sandbox)"):format(M.tool_label(data.name)) }, "DshError")
  end
end

---@param data dsh.ToolProgress
handlers["tool/progress"] = function(self, data)
  self:append(lines_of(data.text, "      ", "    … ", 3), "DshDim")
end

---@param data dsh.ToolResult
handlers["tool/result"] = function(self, data)
  local mark = data.isError and "✗" or "✓"
  local content = data.content or ""
  local max = require("dsh.config").get().result_lines
  local lines = lines_of(content, "    ", ("  %s %s → "):format(mark, M.tool_label(data.name)), max)
  local line = self:append(lines, data.isError and "DshError" or "DshToolResult")
  self:_mark_server(line, ("  %s "):format(mark), data.name)
  self:_images(data.images, "    ")
end

---@param data dsh.ApprovalRequest
handlers["approval/request"] = function(self, data)
  local sandbox = data.sandbox and (" [sandbox: %s]"):format(data.sandbox) or ""
  local line = self:append({ ("  ? %s wants approval: %s%s"):format(M.tool_label(data.tool), data.summary, sandbox) }, "DshApproval")
  self:_mark_server(line, "  ? ", data.tool)
  self.approvals[data.approvalId] = data
  self.approval_lines[data.approvalId] = line
  if self.on_approval then
    self.on_approval(self, data)
  end
end

---@param data dsh.ApprovalDecision
handlers["approval/decision"] = function(self, data)
  self.approvals[data.approvalId] = nil
  local words = {
    allow = "allowed",
    deny = "denied",
    allowAlways = "allowed always",
    allowUnconfined = "allowed once, unconfined",
    timeout = "timed out",
  }
  local line = self.approval_lines[data.approvalId]
  if line then
    vim.api.nvim_buf_set_extmark(self.buf, M.ns, line, 0, {
      virt_text = { { "  → " .. (words[data.decision] or data.decision), data.decision == "deny" and "DshError" or "DshLanded" } },
      virt_text_pos = "eol",
    })
  end
end

---@param data dsh.McpWait
handlers["mcp/wait"] = function(self, data)
  -- Logged before the step that waited: the step that follows shows the wait ended.
  self:append({ "  ◌ " .. M.mcp_wait_text(data) }, "DshDim")
end

---@param data dsh.WorkspaceCheckpoint
handlers["workspace/checkpoint"] = function(self, data)
  self:append({ "  ◇ " .. M.checkpoint_text(data) }, "DshDim")
end

---@param data dsh.WorkspaceRewind
handlers["workspace/rewind"] = function(self, data)
  self:append({ M.rewind_text(data) }, "DshLanded")
end

---@param data dsh.HookRun
handlers["hook/run"] = function(self, data)
  -- A hook that went on is dim; one that blocked or failed is always seen.
  self:append({ "  " .. M.hook_text(data) }, data.outcome == "ok" and "DshDim" or "DshError")
end

---@param data dsh.TaskSpawn
handlers["task/spawn"] = function(self, data)
  -- A `task` call's sub-agent, a session of its own (docs/subagents.md), under its step.
  -- The line opens the child's transcript (`<CR>`, `:Dsh child`).
  local line = self:append({ ("  ⇢ sub-agent %s (%s, depth %d): %s"):format(data.sessionId, data.context, data.depth, ((data.description or ""):gsub("\n", " "))) }, "DshDim")
  self.child_lines[line] = data.sessionId
  table.insert(self.children, data.sessionId)
end

--- The sub-agent session whose `⇢ sub-agent` line is `line` (0-based), if it is one.
---@param line integer
---@return string?
function Transcript:child_at(line)
  return self.child_lines[line]
end

---@param data dsh.StepEnd
handlers["step/end"] = function(self, data)
  self.stream = nil
  local st = self.steps[data.step]
  if st then
    st.usage = data.usage
    self:_annotate(st)
  end
  self:schedule_usage_refresh()
  self:_changed()
end

---@param data dsh.StepError
handlers["step/error"] = function(self, data)
  if data.cancelled then
    self:append({ ("  ⊘ step %d cancelled"):format(data.step) }, "DshError")
  else
    self:append(lines_of(data.error, "    ", ("  ✗ step %d failed: "):format(data.step), 6), "DshError")
  end
  self:schedule_usage_refresh()
end

---@param data dsh.LlmRetry
handlers["llm/retry"] = function(self, data)
  self:append({ ("  ↻ retry after attempt %d (next in %.1fs): %s"):format(data.attempt, (data.delayMs or 0) / 1000, (data.error or ""):gsub("\n", " ")) }, "DshDim")
end

---@param data dsh.TurnEnd
handlers["turn/end"] = function(self, data)
  self.running = false
  self.stream = nil
  self.approvals = {}
  local text = ("━━ turn %d %s"):format(data.turn, data.reason)
  if data.error then
    text = text .. ": " .. data.error:gsub("\n", " ")
  end
  local hl = (data.reason == "error") and "DshError" or "DshTurn"
  self:append({ text }, hl)
  self:schedule_usage_refresh()
  self:_changed()
end

---@param data dsh.PlanUpdate
---@param ev dsh.SessionEvent
handlers["plan/update"] = function(self, data, ev)
  -- Each update replaces the plan: shown under the header, not appended.
  self.plan = { seq = ev.seq, update = data }
  self:_show_plan()
  self:_changed()
end

---@param data dsh.TurnLimit
handlers["turn/limit"] = function(self, data)
  -- Logged between steps, right before the turn's end (reason `limit`).
  self:append({ "  ⊘ " .. M.limit_text(data) }, "DshError")
end

---@param data dsh.CompactStart
handlers["compact/start"] = function(self, data)
  self:append({ ("  ⇲ compacting (%s, %s prompt tokens before)"):format(data.reason, usage.thousands(data.tokensBefore)) }, "DshDim")
end

---@param data dsh.CompactSummary
handlers["compact/summary"] = function(self, data)
  self:append(lines_of(data.summary, "      ", ("  ⇲ summary (%s): "):format(data.model), 4), "DshDim")
end

---@param data dsh.SurfaceReplace
handlers["surface/replace"] = function(self, data)
  self:append({ ("  ⇲ surface seq %d–%d replaced by a %s"):format(data.start, data["end"], data.node and data.node.type or "node") }, "DshDim")
end

--- Render one `session/event`. Events at or below the last rendered seq are ignored, so a
--- resubscription may overlap.
---@param ev dsh.SessionEvent
function Transcript:on_event(ev)
  if type(ev) ~= "table" or (ev.seq or -1) <= self.last_seq then
    return
  end
  self.last_seq = ev.seq
  local handler = handlers[ev.type]
  if handler then
    local ok, err = pcall(handler, self, ev.data or {}, ev)
    if not ok then
      vim.notify(("dsh: cannot render %s (seq %d): %s"):format(ev.type, ev.seq, err), vim.log.levels.WARN)
    end
  end
end

--- The step whose block holds 0-based line `line` (the nearest step header above), or nil.
---@param line integer
---@return integer?
function Transcript:step_at(line)
  local best
  for _, n in ipairs(self.step_order) do
    local st = self.steps[n]
    if st.line <= line and (not best or st.line > self.steps[best].line) then
      best = n
    end
  end
  return best
end

--- The last step started.
---@return integer?
function Transcript:last_step()
  return self.step_order[#self.step_order]
end

--- A note line (connection state, command results).
---@param text string
---@param hl? string
function Transcript:note(text, hl)
  self:append({ "  " .. text }, hl or "DshDim")
end

return M
