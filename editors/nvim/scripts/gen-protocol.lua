-- Generates editors/nvim/lua/dsh/protocol.lua (LuaCATS annotations and the protocol constants)
-- from the protocol crate's generated artifacts:
--   protocol/schema/dsh-protocol.schema.json      methods, error codes, the API's types
--   editors/vscode/src/protocol.generated.ts      the log vocabulary (`LogEvent`: each event
--                                                 kind and its payload type), which the JSON
--                                                 Schema does not carry
-- Both inputs are themselves generated from the Rust types (`cargo test -p dsh-protocol`), so
-- nothing here is hand-copied. Usage (from the repo root or anywhere):
--   nvim -l editors/nvim/scripts/gen-protocol.lua          write the file
--   nvim -l editors/nvim/scripts/gen-protocol.lua --check  exit 1 when the committed file is stale
-- The headless test suite runs the check too (tests/protocol_spec.lua).

local M = {}

local function script_dir()
  local src = debug.getinfo(1, "S").source:sub(2)
  return vim.fn.fnamemodify(src, ":p:h")
end

--- The repository root (two levels above editors/nvim).
function M.repo_root()
  return vim.fn.fnamemodify(script_dir(), ":h:h:h")
end

function M.output_path()
  return M.repo_root() .. "/editors/nvim/lua/dsh/protocol.lua"
end

local function read(path)
  local f = assert(io.open(path, "rb"), "cannot read " .. path)
  local text = f:read("*a")
  f:close()
  return text
end

local function one_line(text)
  if not text then
    return ""
  end
  text = text:gsub("%s*\n%s*", " "):gsub("%s+$", "")
  return text
end

local function sorted_keys(t)
  local keys = vim.tbl_keys(t)
  table.sort(keys)
  return keys
end

local function constant_name(method)
  local out = {}
  for part in method:gmatch("[^/%-]+") do
    table.insert(out, part:sub(1, 1):upper() .. part:sub(2))
  end
  return table.concat(out)
end

local function ref_name(ref)
  return "dsh." .. ref:match("[^/]+$")
end

-- JSON Schema → LuaCATS type.
local function lua_type(s)
  if s == nil or s == true or next(s) == nil then
    return "any"
  end
  if s["$ref"] then
    return ref_name(s["$ref"])
  end
  local union = s.anyOf or s.oneOf
  if union then
    local parts, nullable = {}, false
    for _, alt in ipairs(union) do
      if alt.type == "null" then
        nullable = true
      else
        table.insert(parts, lua_type(alt))
      end
    end
    local t = table.concat(parts, "|")
    if nullable then
      t = #parts > 1 and ("(" .. t .. ")?") or (t .. "?")
    end
    return t
  end
  if s.const ~= nil then
    return ('"%s"'):format(s.const)
  end
  if s.enum then
    local parts = {}
    for _, v in ipairs(s.enum) do
      table.insert(parts, ('"%s"'):format(v))
    end
    return table.concat(parts, "|")
  end
  local ty = s.type
  if type(ty) == "table" then
    local parts, nullable = {}, false
    for _, t in ipairs(ty) do
      if t == "null" then
        nullable = true
      else
        table.insert(parts, lua_type({ type = t, items = s.items }))
      end
    end
    local t = table.concat(parts, "|")
    return nullable and (#parts > 1 and "(" .. t .. ")?" or t .. "?") or t
  end
  if ty == "string" or ty == "integer" or ty == "number" or ty == "boolean" then
    return ty
  elseif ty == "array" then
    local inner = lua_type(s.items)
    if inner:find("[|?]") then
      inner = "(" .. inner .. ")"
    end
    return inner .. "[]"
  elseif ty == "object" then
    if type(s.additionalProperties) == "table" then
      return "table<string, " .. lua_type(s.additionalProperties) .. ">"
    end
    return "table"
  end
  return "any"
end

local function emit_fields(out, s)
  local required = {}
  for _, name in ipairs(s.required or {}) do
    required[name] = true
  end
  for _, name in ipairs(sorted_keys(s.properties or {})) do
    local prop = s.properties[name]
    local t = lua_type(prop)
    local optional = not required[name]
    if t:sub(-1) == "?" then
      t = t:sub(1, -2)
      optional = true
      if t:sub(1, 1) == "(" and t:sub(-1) == ")" then
        t = t:sub(2, -2)
      end
    end
    local doc = one_line(prop.description)
    table.insert(out, ("---@field %s%s %s%s"):format(name, optional and "?" or "", t, doc ~= "" and (" " .. doc) or ""))
  end
end

local function variant_tag(alt)
  for _, key in ipairs({ "kind", "role", "type" }) do
    local p = alt.properties and alt.properties[key]
    if p and p.const then
      return key, p.const
    end
  end
end

-- One `$defs` entry → LuaCATS lines.
local function emit_def(out, name, s)
  local full = "dsh." .. name
  local doc = one_line(s.description)
  if s.oneOf then
    local all_const = true
    for _, alt in ipairs(s.oneOf) do
      if alt.const == nil then
        all_const = false
      end
    end
    if all_const then
      local parts = {}
      for _, alt in ipairs(s.oneOf) do
        table.insert(parts, ('"%s"'):format(alt.const))
      end
      if doc ~= "" then
        table.insert(out, "--- " .. doc)
      end
      table.insert(out, ("---@alias %s %s"):format(full, table.concat(parts, "|")))
      return
    end
    local members = {}
    for _, alt in ipairs(s.oneOf) do
      local _, tag = variant_tag(alt)
      local vname = full .. "." .. tostring(tag):gsub("[^%w]", "_")
      table.insert(members, vname)
      local vdoc = one_line(alt.description)
      if vdoc ~= "" then
        table.insert(out, "--- " .. vdoc)
      end
      local parent = alt["$ref"] and (": " .. ref_name(alt["$ref"])) or ""
      table.insert(out, ("---@class %s%s"):format(vname, parent))
      emit_fields(out, alt)
      table.insert(out, "")
    end
    if doc ~= "" then
      table.insert(out, "--- " .. doc)
    end
    table.insert(out, ("---@alias %s %s"):format(full, table.concat(members, "|")))
    return
  end
  if doc ~= "" then
    table.insert(out, "--- " .. doc)
  end
  table.insert(out, "---@class " .. full)
  emit_fields(out, s)
end

-- ---------------------------------------------------------------------------------------------
-- The log vocabulary from the generated TypeScript (ts-rs declarations are regular: one
-- `export type Name = ...;` per type, fields as `/** doc */ name?: Type,`).

local function ts_declarations(ts)
  local decls = {}
  local pos = 1
  while true do
    local s, e, name = ts:find("export type ([%w_]+) =", pos)
    if not s then
      break
    end
    -- The declaration ends at the first `;` outside braces.
    local depth, i = 0, e + 1
    while i <= #ts do
      local c = ts:sub(i, i)
      if c == "{" then
        depth = depth + 1
      elseif c == "}" then
        depth = depth - 1
      elseif c == ";" and depth == 0 then
        break
      end
      i = i + 1
    end
    decls[name] = vim.trim(ts:sub(e + 1, i - 1))
    pos = i + 1
  end
  return decls
end

local function ts_type(t)
  t = vim.trim(t)
  local inner = t:match("^Array<(.+)>$")
  if inner then
    local it = ts_type(inner)
    return (it:find("|") and "(" .. it .. ")" or it) .. "[]"
  end
  if t == "string" or t == "boolean" then
    return t
  elseif t == "number" then
    return "number"
  elseif t == "JsonValue" or t == "unknown" or t == "any" then
    return "any"
  elseif t:match('^".*"$') then
    return t
  elseif t:match("^[%w_]+$") then
    return "dsh." .. t
  end
  return "any"
end

-- Fields of one `{ ... }` object literal body.
local function ts_fields(body)
  local fields = {}
  local rest = body
  while true do
    rest = rest:gsub("^%s+", "")
    if rest == "" then
      break
    end
    local doc = ""
    local d, after = rest:match("^/%*%*(.-)%*/(.*)$")
    if d then
      doc = vim.trim(one_line((d:gsub("\n%s*%*", "\n"))))
      rest = after:gsub("^%s+", "")
    end
    local name, opt, ty, tail = rest:match('^"?([%w_]+)"?(%??):%s*([^,]+),?(.*)$')
    if not name then
      break
    end
    table.insert(fields, { name = name, optional = opt == "?", type = ts_type(ty), doc = doc })
    rest = tail
  end
  return fields
end

local function split_top(text, sep)
  local parts, depth, start = {}, 0, 1
  for i = 1, #text do
    local c = text:sub(i, i)
    if c == "{" or c == "<" then
      depth = depth + 1
    elseif c == "}" or c == ">" then
      depth = depth - 1
    elseif c == sep and depth == 0 then
      table.insert(parts, vim.trim(text:sub(start, i - 1)))
      start = i + 1
    end
  end
  table.insert(parts, vim.trim(text:sub(start)))
  return parts
end

local function emit_ts_fields(out, fields)
  table.sort(fields, function(a, b)
    return a.name < b.name
  end)
  for _, f in ipairs(fields) do
    table.insert(out, ("---@field %s%s %s%s"):format(f.name, f.optional and "?" or "", f.type, f.doc ~= "" and (" " .. f.doc) or ""))
  end
end

local function emit_ts_decl(out, name, decl)
  local full = "dsh." .. name
  local alts = split_top(decl, "|")
  if #alts == 1 and decl:match("^{.*}$") then
    table.insert(out, "---@class " .. full)
    emit_ts_fields(out, ts_fields(decl:sub(2, -2)))
    return
  end
  local all_lit = true
  for _, a in ipairs(alts) do
    if not a:match('^"[^"]*"$') then
      all_lit = false
    end
  end
  if all_lit then
    table.insert(out, ("---@alias %s %s"):format(full, table.concat(alts, "|")))
    return
  end
  local members = {}
  for _, a in ipairs(alts) do
    local obj, parent = a:match("^(%b{})%s*&%s*([%w_]+)$")
    obj = obj or a
    local fields = ts_fields(obj:sub(2, -2))
    local tag = "variant"
    for _, f in ipairs(fields) do
      if f.type:match('^".*"$') then
        tag = f.type:sub(2, -2)
        break
      end
    end
    local vname = full .. "." .. tag:gsub("[^%w]", "_")
    table.insert(members, vname)
    table.insert(out, ("---@class %s%s"):format(vname, parent and (": dsh." .. parent) or ""))
    emit_ts_fields(out, fields)
    table.insert(out, "")
  end
  table.insert(out, ("---@alias %s %s"):format(full, table.concat(members, "|")))
end

--- The generated file's text.
---@return string
function M.generate()
  local root = M.repo_root()
  local schema = vim.json.decode(read(root .. "/protocol/schema/dsh-protocol.schema.json"))
  local ts = read(root .. "/editors/vscode/src/protocol.generated.ts")
  local decls = ts_declarations(ts)

  local out = {
    "-- Generated by editors/nvim/scripts/gen-protocol.lua from protocol/schema/dsh-protocol.schema.json",
    "-- and the log vocabulary in editors/vscode/src/protocol.generated.ts (both generated from the",
    "-- protocol crate). Do not edit: regenerate with `nvim -l editors/nvim/scripts/gen-protocol.lua`.",
    "",
    "local M = {}",
    "",
    "--- The protocol version this plugin speaks.",
    ("M.PROTOCOL_VERSION = %d"):format(schema.protocolVersion),
    "",
    "--- Method names.",
    "M.methods = {",
  }
  local methods = sorted_keys(schema.methods)
  for _, note in ipairs(sorted_keys(schema.notifications or {})) do
    table.insert(methods, note)
  end
  table.sort(methods)
  for _, m in ipairs(methods) do
    table.insert(out, ('  %s = "%s",'):format(constant_name(m), m))
  end
  table.insert(out, "}")
  table.insert(out, "")
  table.insert(out, "--- Application error codes.")
  table.insert(out, "M.error_codes = {")
  for _, k in ipairs(sorted_keys(schema.errorCodes)) do
    table.insert(out, ("  %s = %d,"):format(k, schema.errorCodes[k]))
  end
  table.insert(out, "}")
  table.insert(out, "")

  -- The log vocabulary: `| { type: "kind"; data: Payload }` lines of `LogEvent`.
  local kinds = {}
  for kind, payload in (decls.LogEvent or ""):gmatch('type:%s*"([^"]+)";%s*data:%s*([%w_]+)') do
    table.insert(kinds, { kind = kind, payload = payload })
  end
  table.insert(out, "--- Every log event kind and the name of its payload type, in log-vocabulary order.")
  table.insert(out, "M.event_kinds = {")
  for _, k in ipairs(kinds) do
    table.insert(out, ('  { kind = "%s", payload = "%s" },'):format(k.kind, k.payload))
  end
  table.insert(out, "}")
  table.insert(out, "")

  table.insert(out, "-- The API's types (JSON Schema `$defs`).")
  table.insert(out, "")
  for _, name in ipairs(sorted_keys(schema["$defs"])) do
    emit_def(out, name, schema["$defs"][name])
    table.insert(out, "")
  end

  -- Log payload types the schema does not define, and the types they reference.
  table.insert(out, "-- The log vocabulary (payloads of `SessionEvent.data`).")
  table.insert(out, "")
  local wanted, seen = {}, {}
  local function want(name)
    if seen[name] or schema["$defs"][name] or not decls[name] then
      return
    end
    seen[name] = true
    table.insert(wanted, name)
    for ref in decls[name]:gmatch("[%w_]+") do
      if ref:match("^%u") and decls[ref] then
        want(ref)
      end
    end
  end
  for _, k in ipairs(kinds) do
    want(k.payload)
  end
  table.sort(wanted)
  for _, name in ipairs(wanted) do
    emit_ts_decl(out, name, decls[name])
    table.insert(out, "")
  end

  local kind_names = {}
  for _, k in ipairs(kinds) do
    table.insert(kind_names, ('"%s"'):format(k.kind))
  end
  table.insert(out, "---@alias dsh.EventKind " .. table.concat(kind_names, "|"))
  table.insert(out, "")
  table.insert(out, "-- One class per event kind: the `session/event` envelope with its typed payload.")
  table.insert(out, "")
  for _, k in ipairs(kinds) do
    table.insert(out, ("---@class dsh.Event.%s: dsh.SessionEvent"):format(k.kind:gsub("[^%w]", "_")))
    table.insert(out, ('---@field type "%s"'):format(k.kind))
    table.insert(out, ("---@field data dsh.%s"):format(k.payload))
    table.insert(out, "")
  end
  table.insert(out, "return M")
  return table.concat(out, "\n") .. "\n"
end

if arg and arg[0] and arg[0]:match("gen%-protocol%.lua$") then
  local text = M.generate()
  local path = M.output_path()
  if vim.tbl_contains(arg, "--check") then
    local f = io.open(path, "rb")
    local committed = f and f:read("*a") or ""
    if f then
      f:close()
    end
    if committed ~= text then
      io.stderr:write(path .. " is stale: regenerate with `nvim -l editors/nvim/scripts/gen-protocol.lua`\n")
      os.exit(1)
    end
    print("protocol.lua is fresh")
  else
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
    print("wrote " .. path)
  end
end

return M
