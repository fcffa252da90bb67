-- Entry point: `nvim -u NONE -i NONE -n -l editors/nvim/tests/run.lua [spec ...]`
-- (editors/nvim/scripts/test.sh runs it). Loads the plugin from this checkout, runs the specs,
-- prints `N passed, N failed` and exits non-zero on failure.
local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
vim.opt.rtp:prepend(root)
package.path = root .. "/tests/?.lua;" .. package.path
vim.cmd("runtime plugin/dsh.lua")
vim.o.swapfile = false
vim.o.shortmess = vim.o.shortmess .. "F"

-- Nothing answers a prompt in a headless run: one that reaches the user (a test that failed
-- before it could stand in for the user, say) must fail loudly, not read stdin — at its end of
-- input Neovim quit with status 0, before the summary.
vim.fn.inputlist = function()
  error("a test reached a real prompt (inputlist): nothing answers in a headless run")
end
vim.fn.input = function()
  error("a test reached a real prompt (input): nothing answers in a headless run")
end

local H = require("harness")
_G.test, _G.H = H.test, H

local specs = #arg > 0 and arg or { "unit_spec", "e2e_spec" }
for _, spec in ipairs(specs) do
  dofile(root .. "/tests/" .. spec:gsub("%.lua$", "") .. ".lua")
end
local ok = H.run()
-- Stop anything the tests left running.
pcall(function()
  require("dsh").disconnect(false)
end)
-- `os.exit` runs no VimLeavePre: remove the images' private directory as quitting would.
if package.loaded["dsh.image"] and package.loaded["dsh.image"]._dir then
  vim.fn.delete(package.loaded["dsh.image"]._dir, "rf")
end
os.exit(ok and 0 or 1)
