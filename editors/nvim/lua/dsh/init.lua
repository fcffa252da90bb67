--- dsh for Neovim: a thin client of the dsh daemon. This module owns the one connection
--- (`dsh stdio`, started on first use) and the open transcripts; commands live in
--- `dsh.commands`, rendering in `dsh.transcript`, formatting in `dsh.usage`.
---
--- No `setup()` is needed: configure with `vim.g.dsh` (see `:h dsh-config`).
local config = require("dsh.config")
local rpc = require("dsh.client")
local protocol = require("dsh.protocol")
local transcript = require("dsh.transcript")
local usage = require("dsh.usage")

local M = {}
local methods = protocol.methods

---@type dsh.Client? the connection, once `initialize` was answered
M._client = nil
---@type fun(client: dsh.Client)[]? callers waiting while a connection starts (nil: none starts)
M._waiting = nil
---@type dsh.Client? a connection `disconnect` is closing; the next one starts once it is gone
M._stopping = nil
---@type dsh.Transcript?
M._last = nil
---@type table<string, string[]> session ids by workspace, as the daemon last listed them
M._known_sessions = {}
---@type table<string, true|"again"> workspaces whose `session/list` is out (see refresh_known_sessions)
M._listing = {}

--- Report an error to the user.
---@param msg string
---@param level? integer
function M.notify(msg, level)
  vim.notify(msg, level or vim.log.levels.ERROR, { title = "dsh" })
end

--- An RPC error as a message with its fix, when there is one.
---@param err dsh.RpcError
---@return string
function M.error_text(err)
  local text = "dsh: " .. tostring(err.message)
  local codes = protocol.error_codes
  if err.code == codes.provider then
    local key = config.api_key_problem()
    if key then
      text = text .. "\n" .. key
    end
  elseif err.code == codes.sessionBusy then
    text = text .. "\nA turn is running: steer it with `:Dsh steer`, cancel it with `:Dsh cancel`, or wait."
  elseif err.code == codes.invalidWorkspace then
    text = text .. "\nFix: `:cd` into an existing directory before `:Dsh open`."
  end
  return text
end

--- Run `cb(client)` with the connection, starting it on first use. Never blocks: with a ready
--- connection `cb` runs at once, else once the daemon answered `initialize`. When the bridge
--- cannot start, the user is told why and `cb` does not run.
---@param cb fun(client: dsh.Client)
function M.with_client(cb)
  local c = M._client
  if c and not c.closed then
    return cb(c)
  end
  if M._waiting then
    table.insert(M._waiting, cb)
    return
  end
  M._waiting = { cb }
  local stopping = M._stopping
  if stopping and not stopping.closed then
    -- `:Dsh stop` is still shutting the daemon down: a bridge started now could join the daemon
    -- that is exiting. Start once the old bridge is gone.
    table.insert(stopping.on_exit_handlers, function()
      M._start()
    end)
    return
  end
  M._start()
end

--- Start the bridge and hand the connection to the waiting callers.
function M._start()
  M._stopping = nil
  rpc.start(nil, function(client, err)
    local waiting = M._waiting or {}
    M._waiting = nil
    if not client then
      M.notify(err or "dsh: cannot start")
      return
    end
    M._client = client
    table.insert(client.on_exit_handlers, function(_, reason)
      if M._client ~= client then
        return
      end
      M._client = nil
      for _, t in pairs(transcript.by_session) do
        t.sub = nil
      end
      if not client.stopping then
        M.notify("dsh: lost the connection to the daemon.\n" .. reason, vim.log.levels.WARN)
      end
    end)
    -- After a restart, the open transcripts catch up from their last seq.
    for _, t in pairs(transcript.by_session) do
      if not t.sub and vim.api.nvim_buf_is_valid(t.buf) then
        M._subscribe(client, t)
      end
    end
    -- Completion of `:Dsh open` offers these ids (it cannot wait for the daemon).
    M.refresh_known_sessions(vim.fn.getcwd())
    for _, w in ipairs(waiting) do
      w(client)
    end
  end)
end

--- Drop the connection (the shared daemon keeps running unless `shutdown`). Never blocks: `cb`
--- runs once the bridge is gone (with `shutdown`, after the daemon answered or gave up).
---@param shutdown? boolean also stop the daemon (`daemon/shutdown`)
---@param cb? fun()
function M.disconnect(shutdown, cb)
  cb = cb or function() end
  local c = M._client
  if not c or c.closed then
    return cb()
  end
  c.stopping = true
  M._client = nil
  M._stopping = c
  for _, t in pairs(transcript.by_session) do
    t.sub = nil
  end
  table.insert(c.on_exit_handlers, function()
    if M._stopping == c then
      M._stopping = nil
    end
    cb()
  end)
  if not shutdown then
    return c:close()
  end
  c:request(methods.DaemonShutdown, nil, function()
    -- The daemon answers, then exits; the bridge follows. Closing it is for a bridge that
    -- would linger.
    c:close()
  end)
  -- A daemon that does not answer within 5 s must not keep the next connection waiting.
  vim.defer_fn(function()
    c:close()
  end, 5000)
end

--- Request on the connection (started on first use), without blocking; errors are reported
--- unless `cb` handles them (returns true).
---@param method string
---@param params any
---@param cb? fun(err: dsh.RpcError?, result: any): boolean?
function M.request(method, params, cb)
  M.with_client(function(c)
    c:request(method, params, function(err, result)
      local handled = cb and cb(err, result)
      if err and not handled then
        M.notify(M.error_text(err))
      end
    end)
  end)
end

--- The ids of a workspace's sessions as the daemon last listed them (for completion, which
--- must answer at once); asks the daemon again in the background when connected.
---@param workspace string
---@return string[]
function M.known_sessions(workspace)
  M.refresh_known_sessions(workspace)
  return M._known_sessions[workspace] or {}
end

--- Ask the daemon for a workspace's session ids (when connected; never starts the bridge).
--- One request per workspace at a time: completion asks on every key, and a slow daemon would
--- otherwise collect a pile of them on the connection (it refuses past 64 in flight). An ask
--- while one is out asks once more when it answers.
---@param workspace string
function M.refresh_known_sessions(workspace)
  local c = M._client
  if not c or c.closed then
    return
  end
  if M._listing[workspace] then
    M._listing[workspace] = "again"
    return
  end
  M._listing[workspace] = true
  c:request(methods.SessionList, { workspace = workspace }, function(err, result)
    local again = M._listing[workspace] == "again"
    M._listing[workspace] = nil
    if not err and result then
      M.remember_sessions(workspace, result.sessions or {})
    end
    if again then
      M.refresh_known_sessions(workspace)
    end
  end)
end

--- Record a `session/list` answer for completion.
---@param workspace string
---@param sessions dsh.SessionSummary[]
function M.remember_sessions(workspace, sessions)
  local ids = {}
  for _, s in ipairs(sessions) do
    table.insert(ids, s.sessionId)
  end
  M._known_sessions[workspace] = ids
end

---@param client dsh.Client
---@param t dsh.Transcript
function M._subscribe(client, t)
  -- Marked at once so a second open while the answer is on its way does not subscribe twice.
  t.sub = "pending"
  client:subscribe(t.session_id, t.last_seq + 1, function(ev)
    t:on_event(ev)
  end, function(err, sub)
    if err then
      t.sub = nil
      M.notify(M.error_text(err))
      return
    end
    t.sub = sub
  end)
end

--- Refresh a transcript's usage annotations from `session/usage`.
---@param t dsh.Transcript
function M.refresh_usage(t)
  local c = M._client
  if not c or c.closed then
    return
  end
  c:request(methods.SessionUsage, { sessionId = t.session_id }, function(err, result)
    if not err and result then
      t:apply_usage(result)
    end
  end)
end

-- Approvals -----------------------------------------------------------------------------------

local approval_queue = {}
local approval_open = false

local decisions = {
  Allow = "allow",
  Deny = "deny",
  ["Allow always"] = "allowAlways",
  ["Allow once, unconfined"] = "allowUnconfined",
}

--- The answers an approval offers: a command that would run confined can also be allowed once
--- without the sandbox.
---@param req dsh.ApprovalRequest
---@return string[]
function M.approval_choices(req)
  local choices = { "Allow", "Deny", "Allow always" }
  if req.sandbox and not req.sandbox:find("unconfined", 1, true) then
    table.insert(choices, "Allow once, unconfined")
  end
  return choices
end

--- The question an approval asks: the tool (an MCP tool as `server › tool`), what it would do,
--- and for a command how it would run.
---@param req dsh.ApprovalRequest
---@return string
function M.approval_prompt(req)
  local sandbox = req.sandbox and (" [sandbox: %s]"):format(req.sandbox) or ""
  return ("dsh: %s wants to run — %s%s"):format(transcript.tool_label(req.tool), req.summary, sandbox)
end

local function next_approval()
  if approval_open then
    return
  end
  local item = table.remove(approval_queue, 1)
  if not item then
    return
  end
  local t, req = item[1], item[2]
  if not t.approvals[req.approvalId] then
    return next_approval()
  end
  approval_open = true
  vim.ui.select(M.approval_choices(req), {
    prompt = M.approval_prompt(req),
    kind = "dsh.approval",
  }, function(choice)
    approval_open = false
    if choice then
      M.request(methods.ApprovalRespond, {
        sessionId = t.session_id,
        approvalId = req.approvalId,
        decision = decisions[choice],
      }, function(err, result)
        if not err and result and result.accepted == false then
          M.notify("dsh: the approval was no longer pending", vim.log.levels.WARN)
        end
      end)
    else
      M.notify("dsh: approval left pending; answer it with `:Dsh approve`", vim.log.levels.INFO)
    end
    vim.schedule(next_approval)
  end)
end

--- Ask the user about an approval request (once the replay has shown whether it is answered).
---@param t dsh.Transcript
---@param req dsh.ApprovalRequest
function M.ask_approval(t, req)
  -- A replayed request is usually followed by its decision in the same burst: wait for it.
  vim.defer_fn(function()
    if t.approvals[req.approvalId] then
      table.insert(approval_queue, { t, req })
      next_approval()
    end
  end, 60)
end

--- Re-ask every pending approval of a transcript (`:Dsh approve`).
---@param t dsh.Transcript
function M.ask_pending(t)
  local any = false
  for _, req in pairs(t.approvals) do
    any = true
    table.insert(approval_queue, { t, req })
  end
  if not any then
    M.notify("dsh: no approval is pending", vim.log.levels.INFO)
  end
  next_approval()
end

-- Transcripts ---------------------------------------------------------------------------------

--- Open (or show) a session's transcript and subscribe to it; `cb(t)` once it is shown (at
--- once when connected, else when the connection is ready).
---@param session_id string
---@param opts? { win?: integer, split?: boolean }
---@param cb? fun(t: dsh.Transcript)
function M.open(session_id, opts, cb)
  opts = opts or {}
  M.with_client(function(c)
    local t = transcript.get_or_create(session_id)
    t.refresh_usage = M.refresh_usage
    t.on_approval = M.ask_approval
    if #t.on_change == 0 then
      table.insert(t.on_change, function()
        vim.cmd("redrawstatus!")
      end)
    end
    t.on_wipe = function(tt)
      if tt.sub and tt.sub ~= "pending" and M._client then
        M._client:unsubscribe(tt.sub)
      end
      if M._last == tt then
        M._last = nil
      end
    end
    if not t.sub then
      M._subscribe(c, t)
    end
    local win = opts.win
    if not win or not vim.api.nvim_win_is_valid(win) then
      local shown = vim.fn.win_findbuf(t.buf)
      if #shown > 0 then
        win = shown[1]
        vim.api.nvim_set_current_win(win)
      else
        if opts.split ~= false and vim.api.nvim_buf_get_name(0) ~= "" and vim.bo.buftype == "" then
          vim.cmd("vsplit")
        end
        win = vim.api.nvim_get_current_win()
      end
    end
    vim.api.nvim_win_set_buf(win, t.buf)
    transcript.setup_window(win)
    vim.wo[win].statusline = " session " .. session_id .. "%= %{v:lua.require'dsh'.statusline()} "
    M._last = t
    if cb then
      cb(t)
    end
  end)
end

--- The transcript of the current buffer, else the last one opened.
---@return dsh.Transcript?
function M.current()
  local t = transcript.by_buf[vim.api.nvim_get_current_buf()]
  if t then
    M._last = t
    return t
  end
  if M._last and vim.api.nvim_buf_is_valid(M._last.buf) then
    return M._last
  end
  return nil
end

--- Create a session for the current working directory and open it; `cb(t)` once it is shown.
--- With `opts.images` the session is for a prompt with images (`session/create`'s `images`): a
--- model that reads none is refused before anything is created.
---@param cb? fun(t: dsh.Transcript)
---@param opts? { images?: boolean }
function M.create(cb, opts)
  local cfg = config.get()
  local params = { workspace = vim.fn.getcwd() }
  if opts and opts.images then
    params.images = true
  end
  if cfg.model then
    params.model = cfg.model
  end
  if cfg.base_url and not cfg.in_process then
    -- The session's own base URL (an ad-hoc profile): the daemon is shared with other clients;
    -- an in-process one has it as its default already.
    params.config = { baseUrl = cfg.base_url }
  end
  M.request(methods.SessionCreate, params, function(err, result)
    if err or not result then
      return false
    end
    M.open(result.sessionId, nil, cb)
    return true
  end)
end

-- Status line ---------------------------------------------------------------------------------

--- A status line component: the live step and the session totals of the current (or last)
--- transcript, e.g. `dsh · ▶ step 4 · 31k prompt · 28k cached · 812 out · 90% hit · $0.000726`.
--- Use it as `%{%v:lua.require'dsh'.statusline()%}` or in a status line plugin.
---@return string
function M.statusline()
  local t = transcript.by_buf[vim.api.nvim_get_current_buf()] or M._last
  if not t then
    return ""
  end
  return usage.statusline({ step = t.cur_step, running = t.running, totals = t.totals, cost = t.cost })
end

return M
