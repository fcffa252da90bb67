--- The JSON-RPC 2.0 client: spawns `dsh stdio` and speaks newline-delimited JSON on its
--- stdin/stdout. It knows the wire, not the methods' meaning: requests with callbacks,
--- `session/event` notifications routed to their subscription's handler, and a clear error when
--- the bridge cannot start or dies. Nothing here waits: every answer reaches its callback on the
--- main loop, so the editor never blocks on the daemon.
local config = require("dsh.config")
local protocol = require("dsh.protocol")

---@class dsh.RpcError
---@field code integer
---@field message string
---@field data? any

---@class dsh.Client
---@field proc vim.SystemObj?
---@field next_id integer
---@field pending table<integer, fun(err: dsh.RpcError?, result: any)>
---@field subscriptions table<string, fun(event: dsh.SessionEvent)>
---@field sub_ids table<string, any> the daemon's subscription ids, as sent
---@field early table<string, dsh.SessionEvent[]> events that arrived before their subscribe answer
---@field partial string
---@field stderr string[]
---@field closed boolean
---@field exit_code integer?
---@field server_info? dsh.InitializeResult
---@field on_exit_handlers fun(client: dsh.Client, reason: string)[]
---@field on_unmatched_error fun(err: dsh.RpcError) an error answer no request can be matched to (id null)
local Client = {}
Client.__index = Client

local M = { Client = Client }

--- A table key for a subscription id: ids are numbers (up to 2^53) or strings, and `tostring`
--- of a large number drops digits.
---@param id any
---@return string
local function sub_key(id)
  if type(id) == "number" then
    return ("%.0f"):format(id)
  end
  return tostring(id)
end
M.sub_key = sub_key

--- Error codes by name (generated from `protocol`).
M.codes = protocol.error_codes

--- Tell the user of an error answer with a null id: a request the daemon could not read, whose
--- command waits for an answer that will not come.
---@param err dsh.RpcError
function M.notify_unmatched_error(err)
  local text = ("dsh: the daemon refused a request it could not read (code %s): %s"):format(tostring(err.code), tostring(err.message))
  vim.notify(text .. "\nThe command that sent it gets no answer.", vim.log.levels.ERROR, { title = "dsh" })
end

---@param cmd string[]
---@return dsh.Client
function Client.spawn(cmd)
  local self = setmetatable({
    next_id = 0,
    pending = {},
    subscriptions = {},
    sub_ids = {},
    early = {},
    partial = "",
    stderr = {},
    closed = false,
    on_exit_handlers = {},
    on_unmatched_error = M.notify_unmatched_error,
  }, Client)
  local ok, proc = pcall(vim.system, cmd, {
    stdin = true,
    text = true,
    stdout = function(_, data)
      if data then
        vim.schedule(function()
          self:_on_stdout(data)
        end)
      end
    end,
    stderr = function(_, data)
      if data then
        vim.schedule(function()
          for line in data:gmatch("[^\n]+") do
            table.insert(self.stderr, line)
            if #self.stderr > 50 then
              table.remove(self.stderr, 1)
            end
          end
        end)
      end
    end,
  }, function(out)
    vim.schedule(function()
      self:_on_exit(out.code, out.signal)
    end)
  end)
  if not ok then
    self.closed = true
    self.exit_code = -1
    table.insert(self.stderr, tostring(proc))
    return self
  end
  self.proc = proc
  return self
end

---@param data string
function Client:_on_stdout(data)
  local buffer = self.partial .. data
  local start = 1
  while true do
    local nl = buffer:find("\n", start, true)
    if not nl then
      break
    end
    local line = buffer:sub(start, nl - 1)
    start = nl + 1
    if line:match("%S") then
      self:_on_line(line)
    end
  end
  self.partial = buffer:sub(start)
end

---@param line string
function Client:_on_line(line)
  local ok, msg = pcall(vim.json.decode, line, { luanil = { object = true, array = true } })
  if not ok or type(msg) ~= "table" then
    table.insert(self.stderr, "unparsable line from dsh: " .. line:sub(1, 200))
    return
  end
  if msg.id ~= nil and msg.method == nil then
    local cb = self.pending[msg.id]
    self.pending[msg.id] = nil
    if cb then
      cb(msg.error, msg.result)
    end
  elseif msg.method == nil and msg.error ~= nil then
    -- An error with a null id: the daemon could not read a request (a line over its limit,
    -- not JSON) and cannot say which. No callback can be called; the user is told.
    self.on_unmatched_error(msg.error)
  elseif msg.method == protocol.methods.SessionEvent then
    local params = msg.params or {}
    local key = sub_key(params.subscription)
    local handler = self.subscriptions[key]
    if handler then
      handler(params.result)
    else
      -- The notification can overtake the answer to `session/subscribe`; hold it until then.
      self.early[key] = self.early[key] or {}
      table.insert(self.early[key], params.result)
    end
  end
end

---@param code integer?
---@param signal integer?
function Client:_on_exit(code, signal)
  if self.closed then
    return
  end
  self.closed = true
  self.exit_code = code
  self.exit_signal = signal
  local reason = self:failure_text()
  local pending = self.pending
  self.pending = {}
  for _, cb in pairs(pending) do
    cb({ code = -32000, message = reason }, nil)
  end
  for _, handler in ipairs(self.on_exit_handlers) do
    pcall(handler, self, reason)
  end
end

--- A one-paragraph explanation of why the bridge is gone, with the last lines of its stderr.
---@return string
function Client:failure_text()
  local text = ("dsh stdio exited (code %s)"):format(tostring(self.exit_code))
  if self.exit_signal and self.exit_signal ~= 0 then
    text = text .. (" on signal %d"):format(self.exit_signal)
  end
  if #self.stderr > 0 then
    local tail = vim.list_slice(self.stderr, math.max(1, #self.stderr - 4))
    text = text .. ":\n" .. table.concat(tail, "\n")
  end
  return text .. "\nFix: run `dsh stdio` in a terminal to see why the daemon does not start (`:checkhealth dsh`)."
end

--- Send a request; `cb(err, result)` runs on the main loop.
---@param method string
---@param params any
---@param cb? fun(err: dsh.RpcError?, result: any)
---@return integer? id
function Client:request(method, params, cb)
  cb = cb or function() end
  if self.closed or not self.proc then
    cb({ code = -32000, message = self:failure_text() }, nil)
    return nil
  end
  self.next_id = self.next_id + 1
  local id = self.next_id
  self.pending[id] = cb
  local msg = { jsonrpc = "2.0", id = id, method = method }
  if params ~= nil then
    msg.params = params
  end
  local ok, err = pcall(self.proc.write, self.proc, vim.json.encode(msg) .. "\n")
  if not ok then
    self.pending[id] = nil
    cb({ code = -32000, message = "cannot write to dsh stdio: " .. tostring(err) }, nil)
    return nil
  end
  return id
end

--- Subscribe to a session's events from `from_seq`; `on_event` gets every event in seq order.
---@param session_id string
---@param from_seq integer
---@param on_event fun(event: dsh.SessionEvent)
---@param cb? fun(err: dsh.RpcError?, subscription: string?)
function Client:subscribe(session_id, from_seq, on_event, cb)
  self:request(protocol.methods.SessionSubscribe, { sessionId = session_id, fromSeq = from_seq }, function(err, sub)
    if err then
      if cb then
        cb(err, nil)
      end
      return
    end
    local key = sub_key(sub)
    self.sub_ids[key] = sub
    self.subscriptions[key] = on_event
    local early = self.early[key]
    self.early[key] = nil
    for _, event in ipairs(early or {}) do
      on_event(event)
    end
    if cb then
      cb(nil, key)
    end
  end)
end

---@param subscription string
function Client:unsubscribe(subscription)
  self.subscriptions[subscription] = nil
  local id = self.sub_ids[subscription]
  self.sub_ids[subscription] = nil
  if id ~= nil and not self.closed then
    self:request(protocol.methods.SessionUnsubscribe, { id })
  end
end

--- Stop the bridge process (not the shared daemon).
function Client:close()
  if self.proc and not self.closed then
    pcall(self.proc.kill, self.proc, "sigterm")
  end
end

--- How long `start` waits for the answer to `initialize` before giving up on the bridge.
M.initialize_timeout_ms = 15000

--- Spawn the bridge from the configuration and run `initialize`, without blocking: `cb` gets
--- the ready client, or nil and an error text that says how to fix it. `cb` runs on the main
--- loop, at once when the binary is missing.
---@param cfg? dsh.Config
---@param cb fun(client: dsh.Client?, err: string?)
function M.start(cfg, cb)
  cfg = cfg or config.get()
  local problem = config.binary_problem(cfg)
  if problem then
    return cb(nil, problem)
  end
  local client = Client.spawn(config.stdio_cmd(cfg))
  local timer = vim.uv.new_timer()
  local settled = false
  ---@param err dsh.RpcError?
  local function settle(err, result)
    if settled then
      return
    end
    settled = true
    if timer then
      timer:stop()
      timer:close()
    end
    if err then
      local text = err.message
      if err.code == protocol.error_codes.unsupportedProtocol then
        text = text .. "\nFix: the plugin and the dsh binary are from different versions; update both."
      elseif not text:find("Fix:", 1, true) then
        text = "dsh: the daemon did not answer `initialize`: " .. text .. "\n" .. client:failure_text()
      end
      client:close()
      return cb(nil, text)
    end
    client.server_info = result
    cb(client, nil)
  end
  -- A bridge that neither answers nor exits (a daemon stuck starting) must not leave the caller
  -- waiting forever.
  if timer then
    timer:start(M.initialize_timeout_ms, 0, function()
      vim.schedule(function()
        settle({ code = -32001, message = ("dsh: %s timed out"):format(protocol.methods.Initialize) })
      end)
    end)
  end
  client:request(protocol.methods.Initialize, {
    clientInfo = { name = "dsh-nvim", version = M.version },
    protocolVersion = protocol.PROTOCOL_VERSION,
  }, settle)
end

M.version = "0.1.0"

return M
