-- A scripted stand-in for `dsh stdio` (run as `nvim -l fake_dsh.lua`), to test the client's
-- framing edge cases the real daemon rarely produces: a line split across writes, a
-- notification that overtakes its subscribe answer, a subscription id above 2^52.
local function send(obj, split)
  local line = vim.json.encode(obj) .. "\n"
  if split then
    local mid = math.floor(#line / 2)
    io.stdout:write(line:sub(1, mid))
    io.stdout:flush()
    vim.uv.sleep(30)
    io.stdout:write(line:sub(mid + 1))
  else
    io.stdout:write(line)
  end
  io.stdout:flush()
end

local SUB = 4503599627370497
for line in io.lines() do
  local msg = vim.json.decode(line)
  if msg.method == "initialize" then
    send({ jsonrpc = "2.0", id = msg.id, result = { serverInfo = { name = "dsh", version = "fake" }, protocolVersion = 1, capabilities = { methods = {}, eventKinds = {} } } }, true)
  elseif msg.method == "session/subscribe" then
    send({ jsonrpc = "2.0", method = "session/event", params = { subscription = SUB, result = { sessionId = "s", seq = 0, time = 0, type = "user/message", data = { text = "early" } } } })
    send({ jsonrpc = "2.0", id = msg.id, result = SUB })
    send({ jsonrpc = "2.0", method = "session/event", params = { subscription = SUB, result = { sessionId = "s", seq = 1, time = 0, type = "user/message", data = { text = "late" } } } }, true)
  elseif msg.method == "session/unsubscribe" then
    send({ jsonrpc = "2.0", id = msg.id, result = msg.params[1] == SUB })
  elseif msg.method == "fail" then
    send({ jsonrpc = "2.0", id = msg.id, error = { code = 1002, message = "session busy" } })
  elseif msg.method == "garbled" then
    -- As the daemon answers a line it cannot read: an error with a null id.
    send({ jsonrpc = "2.0", id = vim.NIL, error = { code = -32600, message = "invalid request: request line exceeds 4194304 bytes" } })
  elseif msg.method == "exit" then
    io.stderr:write("fake: exiting on request\n")
    os.exit(7)
  end
end
