-- Neovim's built-in LSP client, no dsh plugin loaded, attaches `dsh lsp` and reads the hover of
-- a line an agent wrote; also shows it (vim.lsp.buf.hover) for the screenshot.
--   nvim --headless -u NONE -i NONE -n -l nvim_hover.lua DSH MOCK_URL HOME WORKSPACE FILE LINE EXPECTED
-- Exits 0 when the hover of LINE (0-based) contains EXPECTED (and, with DSH_OTHER_SERVER, the
-- other server answered the hover too); prints the hover either way.
-- For the screenshot (a UI, so `-c luafile` instead of `-l`) the same arguments come in
-- DSH_HOVER_ARGS, separated by spaces.
local args = arg
if os.getenv("DSH_HOVER_ARGS") then
  args = vim.split(os.getenv("DSH_HOVER_ARGS"), " ", { plain = true })
end
local dsh, url, home, ws, file, line, expected = unpack(args)
line = tonumber(line)

vim.cmd.edit(file)
local buf = vim.api.nvim_get_current_buf()
vim.lsp.start({
  name = "dsh",
  cmd = { dsh, "--base-url", url, "lsp" },
  cmd_env = { DSH_HOME = home, DEEPSEEK_API_KEY = "sk-test" },
  root_dir = ws,
}, { bufnr = buf })

-- With DSH_OTHER_SERVER (a command line), the user's own language server runs on the same
-- buffer too: Neovim attaches several clients to a buffer, so dsh is added beside it.
local other = os.getenv("DSH_OTHER_SERVER")
if other then
  vim.lsp.start({ name = "other", cmd = vim.split(other, " ", { plain = true }), root_dir = ws }, { bufnr = buf })
end

local attached = vim.wait(20000, function()
  for _, name in ipairs(other and { "dsh", "other" } or { "dsh" }) do
    local clients = vim.lsp.get_clients({ bufnr = buf, name = name })
    if #clients == 0 or not clients[1].initialized then
      return false
    end
  end
  return true
end, 20)
if not attached then
  io.stderr:write("the language servers did not attach\n")
  os.exit(2)
end

local results = vim.lsp.buf_request_sync(buf, "textDocument/hover", {
  textDocument = { uri = vim.uri_from_bufnr(buf) },
  position = { line = line, character = 0 },
}, 20000)
local text = ""
local answered = {}
for id, result in pairs(results or {}) do
  if result.error then
    io.stderr:write("hover failed: " .. vim.inspect(result.error) .. "\n")
  elseif result.result then
    local client = vim.lsp.get_client_by_id(id)
    answered[#answered + 1] = client and client.name or tostring(id)
    if client and client.name == "dsh" then
      text = result.result.contents.value
    end
  end
end
io.stdout:write(text .. "\n")
local ok = text:find(expected, 1, true) ~= nil
if other then
  table.sort(answered)
  io.stdout:write("hovers from: " .. table.concat(answered, ", ") .. "\n")
  ok = ok and table.concat(answered, ",") == "dsh,other"
end
if os.getenv("DSH_SHOW_HOVER") then
  -- The screenshot: the cursor on the line, the hover floating above it.
  vim.api.nvim_win_set_cursor(0, { line + 1, 0 })
  vim.lsp.buf.hover({ border = "rounded" })
  return
end
for _, client in ipairs(vim.lsp.get_clients()) do
  client:stop()
end
vim.wait(5000, function()
  return #vim.lsp.get_clients() == 0
end, 20)
os.exit(ok and 0 or 1)
