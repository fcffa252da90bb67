-- A minimal test harness for headless Neovim: `test(name, fn)`, assertions, `wait_for`, and a
-- summary line `N passed, N failed` (the process exits non-zero on any failure).
local H = { tests = {}, passed = 0, failed = 0, failures = {} }

function H.test(name, fn)
  table.insert(H.tests, { name = name, fn = fn })
end

local function fmt(v)
  return type(v) == "string" and ("%q"):format(v) or vim.inspect(v)
end

function H.eq(expected, actual, what)
  if not vim.deep_equal(expected, actual) then
    error(("%sexpected %s, got %s"):format(what and (what .. ": ") or "", fmt(expected), fmt(actual)), 2)
  end
end

function H.truthy(v, what)
  if not v then
    error((what or "expected a truthy value") .. ", got " .. fmt(v), 2)
  end
  return v
end

function H.contains(haystack, needle, what)
  if type(haystack) == "table" then
    haystack = table.concat(haystack, "\n")
  end
  if not tostring(haystack):find(needle, 1, true) then
    error(("%sexpected to find %s in:\n%s"):format(what and (what .. ": ") or "", fmt(needle), haystack), 2)
  end
end

--- Wait (pumping the event loop) until `cond()` is truthy; fails the test after `timeout` ms.
function H.wait_for(cond, timeout, what)
  local value
  local ok = vim.wait(timeout or 10000, function()
    value = cond()
    return value
  end, 20)
  if not ok then
    error("timed out waiting for " .. (what or "a condition"), 2)
  end
  return value
end

--- Send a request on a `dsh.Client` and wait for its answer (the test waits, not the plugin).
---@return any result, dsh.RpcError? err
function H.request(client, method, params, timeout)
  local done, result, err = false, nil, nil
  client:request(method, params, function(e, r)
    done, result, err = true, r, e
  end)
  H.wait_for(function()
    return done
  end, timeout or 10000, "the answer to " .. method)
  return result, err
end

--- The text of a buffer.
function H.buf_text(buf)
  return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
end

--- The usage annotations of a transcript buffer: `{ line, text, hl }` in line order.
function H.usage_marks(buf)
  local ns = require("dsh.transcript").usage_ns
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })) do
    local text = {}
    for _, chunk in ipairs(m[4].virt_text or {}) do
      table.insert(text, chunk[1])
    end
    table.insert(out, { line = m[2], text = vim.trim(table.concat(text)), hl = m[4].virt_text[1][2] })
  end
  return out
end

--- Messages shown with vim.notify during the run (also echoed to stdout, indented).
H.messages = {}
vim.notify = function(msg, level)
  table.insert(H.messages, msg)
  io.stdout:write(("      [notify %s] %s\n"):format(level or "", tostring(msg):gsub("\n", "\n      ")))
end

function H.run()
  local only = os.getenv("DSH_TEST_FILTER")
  for _, t in ipairs(H.tests) do
    if not only or t.name:find(only, 1, true) then
      local start = vim.uv.hrtime()
      local ok, err = xpcall(t.fn, debug.traceback)
      local ms = (vim.uv.hrtime() - start) / 1e6
      if ok then
        H.passed = H.passed + 1
        io.stdout:write(("ok    %s (%d ms)\n"):format(t.name, ms))
      else
        H.failed = H.failed + 1
        table.insert(H.failures, t.name)
        io.stdout:write(("FAIL  %s (%d ms)\n  %s\n"):format(t.name, ms, tostring(err):gsub("\n", "\n  ")))
      end
      io.stdout:flush()
    end
  end
  io.stdout:write(("\n%d passed, %d failed\n"):format(H.passed, H.failed))
  io.stdout:flush()
  return H.failed == 0
end

return H
