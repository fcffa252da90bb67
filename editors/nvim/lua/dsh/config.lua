--- Configuration, read from `vim.g.dsh` each time it is needed (no `setup()` required).
---
--- ```lua
--- vim.g.dsh = {
---   path = "dsh",            -- the dsh binary (name on $PATH or absolute path)
---   home = nil,              -- --home DIR (default: the daemon's own default)
---   base_url = nil,          -- where new sessions' requests go (default: the configured profile's)
---   model = nil,             -- model id for new sessions
---   in_process = false,      -- `dsh stdio --in-process`: a private daemon inside the bridge
---   when_busy = "queue",     -- :Dsh prompt while a turn runs: "queue" or "reject"
---   result_lines = 8,        -- lines of a tool result shown in the transcript
--- }
--- ```
local M = {}

---@class dsh.Config
---@field path string
---@field home? string
---@field base_url? string
---@field model? string
---@field in_process boolean
---@field when_busy "queue"|"reject"
---@field follow boolean Keep the transcript window scrolled to the end while the cursor is there.
---@field reasoning_fold boolean Fold reasoning in the transcript.
---@field result_lines integer Lines of a tool result shown in the transcript.

---@type dsh.Config
M.defaults = {
  path = "dsh",
  home = nil,
  base_url = nil,
  model = nil,
  in_process = false,
  when_busy = "queue",
  follow = true,
  reasoning_fold = true,
  result_lines = 8,
}

--- The effective configuration: `vim.g.dsh` over the defaults.
---@return dsh.Config
function M.get()
  local user = vim.g.dsh
  if type(user) ~= "table" then
    user = {}
  end
  return vim.tbl_extend("force", vim.deepcopy(M.defaults), user)
end

--- The command line that starts the bridge: `dsh [--home H] [--base-url U] [--model M] stdio`.
---@param cfg? dsh.Config
---@return string[]
function M.stdio_cmd(cfg)
  cfg = cfg or M.get()
  local cmd = { vim.fn.exepath(cfg.path) ~= "" and vim.fn.exepath(cfg.path) or cfg.path }
  if cfg.home then
    vim.list_extend(cmd, { "--home", vim.fn.expand(cfg.home) })
  end
  if cfg.base_url and cfg.in_process then
    -- An in-process daemon's default; a shared daemon gets it with each session (`M.create`).
    vim.list_extend(cmd, { "--base-url", cfg.base_url })
  end
  if cfg.model then
    vim.list_extend(cmd, { "--model", cfg.model })
  end
  table.insert(cmd, "stdio")
  if cfg.in_process then
    table.insert(cmd, "--in-process")
  end
  return cmd
end

--- Why the binary cannot run, with the fix; nil when it can.
---@param cfg? dsh.Config
---@return string?
function M.binary_problem(cfg)
  cfg = cfg or M.get()
  if vim.fn.executable(cfg.path) == 1 then
    return nil
  end
  return ("dsh: the binary `%s` was not found or is not executable.\n"
    .. "Fix: install dsh (`cargo install --path server/daemon` in the dsh repo) so `dsh` is on $PATH, "
    .. "or point the plugin at it: `vim.g.dsh = { path = '/path/to/dsh' }`."):format(cfg.path)
end

--- The API key problem, with the fix; nil when `DEEPSEEK_API_KEY` is set.
---@return string?
function M.api_key_problem()
  local key = vim.env.DEEPSEEK_API_KEY
  if key and key ~= "" then
    return nil
  end
  return "dsh: no API key: DEEPSEEK_API_KEY is not set.\n"
    .. "Fix: `export DEEPSEEK_API_KEY=sk-...` before starting Neovim (a daemon that is already "
    .. "running keeps the key it was started with: restart it with `:Dsh stop`)."
end

return M
