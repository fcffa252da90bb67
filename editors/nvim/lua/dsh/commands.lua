--- The `:Dsh` subcommands and their completion.
local dsh = require("dsh")
local image = require("dsh.image")
local protocol = require("dsh.protocol")
local usage = require("dsh.usage")
local view = require("dsh.view")
local words = require("dsh.words")

local methods = protocol.methods
local M = {}

--- The current transcript, or an error telling how to get one.
---@return dsh.Transcript?
local function need_session()
  local t = dsh.current()
  if not t then
    dsh.notify("dsh: no session here: `:Dsh open` starts one, `:Dsh sessions` lists this workspace's", vim.log.levels.WARN)
  end
  return t
end

--- The step named by `arg`, else the step under the cursor in the transcript, else the last.
---@param t dsh.Transcript
---@param arg? string
---@return integer?
local function step_arg(t, arg)
  if arg and arg ~= "" then
    local n = tonumber(arg)
    if not n then
      dsh.notify(("dsh: `%s` is not a step number"):format(arg))
    end
    return n
  end
  if vim.api.nvim_get_current_buf() == t.buf then
    local step = t:step_at(vim.api.nvim_win_get_cursor(0)[1] - 1)
    if step then
      return step
    end
  end
  local last = t:last_step()
  if not last then
    dsh.notify("dsh: this session has no steps yet", vim.log.levels.WARN)
  end
  return last
end

---@type table<string, { run: fun(args: string[], line: string), complete?: fun(lead: string, line: string): string[], desc: string }>
M.subcommands = {}

M.subcommands.open = {
  desc = "open a session by id, or start a new one in the current directory",
  run = function(args)
    if args[1] then
      dsh.open(args[1])
    else
      dsh.create()
    end
  end,
  complete = function(lead)
    -- Completion must answer at once: it offers the ids the daemon last listed (fetched when
    -- the connection started, and asked again now for the next <Tab>).
    return vim.tbl_filter(function(id)
      return vim.startswith(id, lead)
    end, dsh.known_sessions(vim.fn.getcwd()))
  end,
}

--- Send a prompt to a session, with the images `attachments` after its text. A refusal (the
--- model reads no images, a file is no image) is the daemon's message, shown as it comes.
---@param t dsh.Transcript
---@param text string
---@param attachments? dsh.Attachment[]
function M.prompt(t, text, attachments)
  local cfg = require("dsh.config").get()
  local params = { sessionId = t.session_id, text = text, whenBusy = cfg.when_busy }
  if attachments and #attachments > 0 then
    -- A line over the daemon's limit would be refused unread, with no answer to this request.
    local too_long = image.too_long(attachments, text)
    if too_long then
      return dsh.notify("dsh: " .. too_long)
    end
    params.attachments = attachments
  end
  dsh.request(methods.SessionPrompt, params, function(err, result)
    if err then
      return false
    end
    if result.stopReason == "error" and result.error then
      dsh.notify("dsh: the turn ended with an error: " .. result.error)
    end
    return true
  end)
end

--- The prompt commands last listed for each session (`session/commands`), for completion.
---@type table<string, dsh.CommandInfo[]>
M._prompt_commands = {}

---@type table<string, true|"again"> sessions whose `session/commands` is out
M._commands_listing = {}

--- Ask the daemon for the current session's prompt commands (when connected); completion
--- answers at once with what it last listed. One request per session at a time: completion asks
--- on every key, and a slow daemon would otherwise collect a pile of them on the connection (it
--- refuses past 64 in flight — a prompt sent then is refused too). An ask while one is out asks
--- once more when it answers.
---@param session_id string
function M.refresh_prompt_commands(session_id)
  local c = dsh._client
  if not c or c.closed then
    return
  end
  if M._commands_listing[session_id] then
    M._commands_listing[session_id] = "again"
    return
  end
  M._commands_listing[session_id] = true
  c:request(methods.SessionCommands, { sessionId = session_id }, function(err, result)
    local again = M._commands_listing[session_id] == "again"
    M._commands_listing[session_id] = nil
    if not err and result then
      M._prompt_commands[session_id] = result.commands or {}
    end
    if again then
      M.refresh_prompt_commands(session_id)
    end
  end)
end

--- `/name` completions for a prompt's first word `lead` (nothing unless it starts with `/`).
---@param lead string
---@return string[]
function M.complete_prompt(lead)
  if not vim.startswith(lead, "/") or lead:find("%s") then
    return {}
  end
  local t = dsh.current()
  if not t then
    return {}
  end
  M.refresh_prompt_commands(t.session_id)
  local out = {}
  for _, command in ipairs(M._prompt_commands[t.session_id] or {}) do
    local name = "/" .. command.name
    if vim.startswith(name, lead) then
      table.insert(out, name)
    end
  end
  table.sort(out)
  return out
end

--- `vim.ui.input`'s completion of a prompt (`customlist`): the whole line so far is the lead.
---@param lead string
---@param line string
---@return string[]
function _G.dsh_complete_prompt(lead, line)
  return M.complete_prompt(line ~= "" and line or lead)
end

--- `:Dsh prompt`'s arguments: leading `--image=FILE` or `--image FILE` (repeatable, as
--- `dsh prompt --image`; a backslash takes the next character as it is, so `my\ shot.png` is
--- one name), an optional `--` that ends them, then the text, verbatim.
---@param rest string
---@return { images: string[], text: string, ended: boolean }? parsed, string? err
function M.parse_prompt(rest)
  local images, pos, ended = {}, 1, false
  local function skip_space()
    pos = rest:find("%S", pos) or (#rest + 1)
  end
  -- A file name from `pos` to the next unescaped white space.
  local function word()
    local out = {}
    while pos <= #rest do
      local c = rest:sub(pos, pos)
      if c:match("%s") then
        break
      end
      if c == "\\" and pos < #rest then
        pos = pos + 1
        c = rest:sub(pos, pos)
      end
      table.insert(out, c)
      pos = pos + 1
    end
    return table.concat(out)
  end
  local function file()
    local name = word()
    if name == "" then
      return nil
    end
    table.insert(images, name)
    return name
  end
  local needs = "`--image` needs a file: `:Dsh prompt --image=FILE text`"
  while true do
    skip_space()
    local tail = rest:sub(pos)
    if tail == "--" or tail:match("^%-%-%s") then
      pos = pos + 2
      skip_space()
      ended = true
      break
    elseif tail:match("^%-%-image=") then
      pos = pos + #"--image="
      if not file() then
        return nil, needs
      end
    elseif tail == "--image" or tail:match("^%-%-image%s") then
      pos = pos + #"--image"
      skip_space()
      if not file() then
        return nil, needs
      end
    else
      break
    end
  end
  return { images = images, text = rest:sub(pos), ended = ended }
end

--- The extensions `--image` completion offers (the daemon reads the format from the bytes).
local IMAGE_EXTENSIONS = { png = true, jpg = true, jpeg = true, gif = true, webp = true }

--- Files for `--image`: directories and images by their extension, escaped for the command line.
---@param lead string
---@return string[]
function M.complete_image_file(lead)
  local out = {}
  for _, name in ipairs(vim.fn.getcompletion(lead, "file")) do
    local ext = (name:match("%.([^./]+)$") or ""):lower()
    if name:sub(-1) == "/" or IMAGE_EXTENSIONS[ext] then
      table.insert(out, vim.fn.fnameescape(name))
    end
  end
  return out
end

--- Completion of `:Dsh prompt`'s argument `lead` on the command line `line` (up to the
--- cursor): a file after `--image=` or `--image`, `--image=` for a `-`, and the prompt
--- commands for the text's first word.
---@param lead string
---@param line string
---@return string[]
function M.complete_prompt_args(lead, line)
  local before = line:sub(1, #line - #lead):gsub("^%s*%S+%s+%S+", "", 1)
  if before:match("%-%-image%s+$") then
    -- The lead is `--image`'s file when a name put there would be taken as one.
    local parsed = M.parse_prompt(before .. "x")
    if parsed and parsed.text == "" then
      return M.complete_image_file(lead)
    end
  end
  local parsed = M.parse_prompt(before)
  if not parsed or parsed.text ~= "" then
    return {}
  end
  if not parsed.ended and vim.startswith(lead, "--image=") then
    local prefix = "--image="
    return vim.tbl_map(function(name)
      return prefix .. name
    end, M.complete_image_file(lead:sub(#prefix + 1)))
  end
  if not parsed.ended and lead ~= "" and vim.startswith("--image=", lead) then
    return { "--image=" }
  end
  return M.complete_prompt(lead)
end

M.subcommands.prompt = {
  desc = "send a prompt (asks for it without an argument; `/` completes prompt commands; `--image=FILE` attaches an image)",
  complete = function(lead, line)
    return M.complete_prompt_args(lead, line or ("Dsh prompt " .. lead))
  end,
  run = function(_, rest)
    local parsed, err = M.parse_prompt(rest)
    if not parsed then
      return dsh.notify("dsh: " .. err)
    end
    -- The files are read now: one that cannot be sent is refused before a session is made.
    local attachments = {}
    for _, path in ipairs(parsed.images) do
      local attachment, aerr = image.attachment(path)
      if not attachment then
        return dsh.notify("dsh: " .. aerr)
      end
      table.insert(attachments, attachment)
    end
    if #attachments > 0 then
      local too_long = image.too_long(attachments, parsed.text)
      if too_long then
        return dsh.notify("dsh: " .. too_long)
      end
    end
    local function ask(t)
      if parsed.text ~= "" then
        return M.prompt(t, parsed.text, attachments)
      end
      M.refresh_prompt_commands(t.session_id)
      local what = #attachments > 0 and (" (%d image%s)"):format(#attachments, #attachments == 1 and "" or "s") or ""
      vim.ui.input({ prompt = ("dsh prompt%s: "):format(what), completion = "customlist,v:lua.dsh_complete_prompt" }, function(text)
        if text and text ~= "" then
          M.prompt(t, text, attachments)
        end
      end)
    end
    local t = dsh.current()
    if t then
      return ask(t)
    end
    -- A session made for images is for a model that reads them: the daemon refuses one that
    -- does not before creating anything (no empty log is left).
    dsh.create(ask, { images = #attachments > 0 })
  end,
}

M.subcommands.steer = {
  desc = "steer the running turn: the text joins the next model request",
  run = function(_, rest)
    local t = need_session()
    if not t then
      return
    end
    local function send(text)
      dsh.request(methods.SessionInject, { sessionId = t.session_id, text = text })
    end
    if rest ~= "" then
      return send(rest)
    end
    vim.ui.input({ prompt = "dsh steer: " }, function(text)
      if text and text ~= "" then
        send(text)
      end
    end)
  end,
}

M.subcommands.cancel = {
  desc = "cancel the running turn",
  run = function()
    local t = need_session()
    if t then
      dsh.request(methods.SessionCancel, { sessionId = t.session_id }, function(err, result)
        if not err and result and not result.cancelled then
          dsh.notify("dsh: no turn was running", vim.log.levels.INFO)
        end
      end)
    end
  end,
}

M.subcommands.fork = {
  desc = "fork the session at a step (default: the step under the cursor) and open the fork",
  run = function(args)
    local t = need_session()
    if not t then
      return
    end
    local params = { sessionId = t.session_id }
    local step = args[1] and tonumber(args[1])
    if not step and not args[1] and vim.api.nvim_get_current_buf() == t.buf then
      step = t:step_at(vim.api.nvim_win_get_cursor(0)[1] - 1)
    end
    if step then
      -- Fork "at step N": the daemon keeps everything before step N's `step/start`.
      params.atStep = step
    end
    dsh.request(methods.SessionFork, params, function(err, result)
      if not err and result then
        dsh.open(result.sessionId)
      end
    end)
  end,
}

--- How many paths a rewind's message lists before it says how many more.
local LISTED = 12

---@param paths string[]
---@return string
local function path_list(paths)
  local shown = table.concat(vim.list_slice(paths, 1, LISTED), ", ")
  if #paths > LISTED then
    shown = ("%s and %d more"):format(shown, #paths - LISTED)
  end
  return shown
end

--- What a rewind changes (or, `done`, changed), a line per kind of change.
---@param plan dsh.SessionRewindResult
---@param done? boolean
---@return string[]
function M.rewind_changes(plan, done)
  local lines = {}
  local function add(label, paths)
    if paths and #paths > 0 then
      table.insert(lines, ("%s (%d): %s"):format(label, #paths, path_list(paths)))
    end
  end
  add(done and "restored" or "restore", plan.restored)
  add(done and "recreated" or "recreate", plan.created)
  add(done and "deleted" or "delete", plan.deleted)
  add("not restorable (over the size cap)", plan.notRestorable)
  if plan.incomplete then
    table.insert(lines, "the checkpoint is incomplete: " .. plan.incomplete)
  end
  if #lines == 0 then
    table.insert(lines, done and "no file changed" or "no file changes")
  end
  return lines
end

--- Of `paths` (relative to `workspace`), those loaded in a buffer with unsaved changes.
---@param workspace string
---@param paths string[]
---@return string[]
function M.unsaved(workspace, paths)
  local modified = {}
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.bo[buf].buftype == "" and vim.bo[buf].modified then
      modified[vim.api.nvim_buf_get_name(buf)] = true
    end
  end
  return vim.tbl_filter(function(p)
    return modified[workspace .. "/" .. p] == true
  end, paths)
end

--- The question before a rewind, from its dry run; `unsaved`: the files it touches that have
--- unsaved changes in a buffer.
---@param step integer
---@param plan dsh.SessionRewindResult
---@param unsaved? string[]
---@return string
function M.rewind_question(step, plan, unsaved)
  local lines = { ("Rewind the files and the conversation to before step %d?"):format(step) }
  vim.list_extend(lines, M.rewind_changes(plan))
  if #plan.conflicts > 0 then
    table.insert(lines, ("changed since the agent's last checkpoint by someone else, and overwritten (%d): %s"):format(#plan.conflicts, path_list(plan.conflicts)))
  end
  if unsaved and #unsaved > 0 then
    table.insert(lines, ("unsaved in a buffer (%d): %s; the rewind changes them on disk, and writing the buffer afterwards would undo that for them"):format(#unsaved, path_list(unsaved)))
  end
  table.insert(lines, ("The conversation continues in a new session forked before step %d; this one stays as history."):format(step))
  return table.concat(lines, "\n")
end

--- Rewind `t`'s files and conversation to before `step`: a dry run, its files listed and
--- confirmed (`vim.fn.confirm`; with files someone else changed, the button overwrites them),
--- then the rewind; on success the window shows the session that continues (the fork), where
--- `:Dsh prompt` goes next. A rewind refused for files changed after the question asks again.
---@param t dsh.Transcript
---@param step integer
function M.rewind(t, step)
  local codes = protocol.error_codes
  local params = { sessionId = t.session_id, step = step }
  local function busy(err)
    if err and err.code == codes.sessionBusy then
      -- The daemon says why: a turn runs (cancel it first) or another rewind holds the session.
      dsh.notify("dsh: cannot rewind now: " .. err.message .. "\n`:Dsh cancel` cancels a running turn.", vim.log.levels.WARN)
      return true
    end
  end
  local function done(result)
    dsh.notify(("dsh: rewound %s to before step %d: %s; %s"):format(t.session_id, step, table.concat(M.rewind_changes(result, true), "; "), result.sessionId == t.session_id and "the session continues" or ("the conversation continues in " .. result.sessionId)), vim.log.levels.INFO)
    if result.sessionId ~= t.session_id then
      local shown = vim.fn.win_findbuf(t.buf)
      dsh.open(result.sessionId, { win = shown[1], split = false })
    end
  end
  local function go(force)
    dsh.request(methods.SessionRewind, vim.tbl_extend("force", params, { force = force }), function(err, result)
      if busy(err) then
        return true
      end
      if err and err.code == codes.rewindConflict and not force then
        local files = err.data and err.data.conflicts or {}
        local question = ("Since you confirmed, someone other than the agent changed: %s.\nOverwrite?"):format(path_list(files))
        if vim.fn.confirm(question, "&Overwrite\n&Cancel", 2, "Warning") == 1 then
          go(true)
        else
          dsh.notify("dsh: rewind cancelled", vim.log.levels.INFO)
        end
        return true
      end
      if err or not result then
        return false
      end
      done(result)
      return true
    end)
  end
  dsh.request(methods.SessionRewind, vim.tbl_extend("force", params, { dryRun = true }), function(err, plan)
    if busy(err) then
      return true
    end
    if err or not plan then
      return false
    end
    local conflicts = #plan.conflicts > 0
    local buttons = conflicts and "&Overwrite and rewind\n&Cancel" or "&Rewind\n&Cancel"
    local touched = vim.list_extend(vim.list_extend(vim.list_extend({}, plan.restored), plan.created), plan.deleted)
    local unsaved = t.meta and M.unsaved(t.meta.workspace, touched) or {}
    if vim.fn.confirm(M.rewind_question(step, plan, unsaved), buttons, 2, "Warning") ~= 1 then
      dsh.notify("dsh: rewind cancelled", vim.log.levels.INFO)
      return true
    end
    go(conflicts)
    return true
  end)
end

M.subcommands.rewind = {
  desc = "rewind the files and the conversation to before a step (default: the step under the cursor); asks first",
  run = function(args)
    local t = need_session()
    if not t then
      return
    end
    local step = args[1] and tonumber(args[1])
    if args[1] and not step then
      return dsh.notify(("dsh: `%s` is not a step number"):format(args[1]))
    end
    if not step and vim.api.nvim_get_current_buf() == t.buf then
      step = t:step_at(vim.api.nvim_win_get_cursor(0)[1] - 1)
    end
    if step then
      return M.rewind(t, step)
    end
    local steps = vim.fn.reverse(vim.deepcopy(t.step_order))
    if #steps == 0 then
      return dsh.notify("dsh: this session has no steps yet", vim.log.levels.WARN)
    end
    vim.ui.select(steps, {
      prompt = "dsh: rewind to before which step?",
      kind = "dsh.step",
      format_item = function(n)
        return ("step %d (turn %d)"):format(n, t.steps[n].turn or 0)
      end,
    }, function(choice)
      if choice then
        M.rewind(t, choice)
      end
    end)
  end,
}

M.subcommands.saw = {
  desc = "what the model saw at a step: the rebuilt request, read-only",
  run = function(args)
    local t = need_session()
    local step = t and step_arg(t, args[1])
    if not step then
      return
    end
    dsh.request(methods.SessionRequest, { sessionId = t.session_id, step = step }, function(err, result)
      if not err and result then
        view.show_request(t.session_id, result)
      end
    end)
  end,
}

M.subcommands.diff = {
  desc = "diff a step's request against the previous step's, in diff mode",
  run = function(args)
    local t = need_session()
    local step = t and step_arg(t, args[1])
    if not step then
      return
    end
    dsh.request(methods.SessionRequest, { sessionId = t.session_id, step = step }, function(err, cur)
      if err or not cur then
        return
      end
      if step == 1 then
        return view.show_diff(t.session_id, nil, cur)
      end
      dsh.request(methods.SessionRequest, { sessionId = t.session_id, step = step - 1 }, function(perr, prev)
        if not perr and prev then
          view.show_diff(t.session_id, prev, cur)
        end
      end)
    end)
  end,
}

M.subcommands.sessions = {
  desc = "list this workspace's sessions and open one (`all`: every workspace)",
  run = function(args)
    local params = {}
    if args[1] ~= "all" then
      params.workspace = vim.fn.getcwd()
    end
    dsh.request(methods.SessionList, params, function(err, result)
      if err or not result then
        return
      end
      local sessions = result.sessions or {}
      if params.workspace then
        dsh.remember_sessions(params.workspace, sessions)
      end
      if #sessions == 0 then
        return dsh.notify("dsh: no sessions in " .. (params.workspace or "any workspace") .. "; `:Dsh open` starts one", vim.log.levels.INFO)
      end
      -- Newest first, each sub-agent under its parent.
      sessions = view.nest_sessions(sessions)
      vim.ui.select(sessions, {
        prompt = "dsh sessions",
        kind = "dsh.session",
        format_item = function(s)
          return view.session_line(s)
        end,
      }, function(choice)
        if choice and choice.error then
          dsh.notify("dsh: the log of " .. choice.sessionId .. " cannot be read: " .. choice.error, vim.log.levels.ERROR)
        elseif choice then
          dsh.open(choice.sessionId)
        end
      end)
    end)
  end,
  complete = function()
    return { "all" }
  end,
}

M.subcommands.compact = {
  desc = "compact the session now",
  run = function()
    local t = need_session()
    if t then
      dsh.request(methods.SessionCompact, { sessionId = t.session_id }, function(err, result)
        if not err and result then
          dsh.notify("dsh: " .. result.message, vim.log.levels.INFO)
        end
      end)
    end
  end,
}

M.subcommands.approve = {
  desc = "answer the session's pending approval requests",
  run = function()
    local t = need_session()
    if t then
      dsh.ask_pending(t)
    end
  end,
}

M.subcommands.usage = {
  desc = "per-step usage of the session, with the cause of every cache drop",
  run = function()
    local t = need_session()
    if not t then
      return
    end
    dsh.request(methods.SessionUsage, { sessionId = t.session_id }, function(err, result)
      if err or not result then
        return
      end
      t:apply_usage(result)
      view.show_usage(t.session_id, result)
    end)
  end,
}

M.subcommands.plan = {
  desc = "the session's current plan (session/plan): each step with its status",
  run = function()
    local t = need_session()
    if not t then
      return
    end
    dsh.request(methods.SessionPlan, { sessionId = t.session_id }, function(err, result)
      if err or not result then
        return
      end
      if result.seq == nil then
        return dsh.notify("dsh: the model has set no plan in this session", vim.log.levels.INFO)
      end
      dsh.notify(table.concat(words.plan_lines(result), "\n"), vim.log.levels.INFO)
    end)
  end,
}

M.subcommands.child = {
  desc = "open a sub-agent's transcript: the `⇢ sub-agent` line under the cursor, else the Nth (or pick one)",
  run = function(args)
    local t = need_session()
    if not t then
      return
    end
    local here = t.buf == vim.api.nvim_get_current_buf() and t:child_at(vim.api.nvim_win_get_cursor(0)[1] - 1)
    local n = tonumber(args[1] or "")
    if here and not n then
      return dsh.open(here, { win = vim.api.nvim_get_current_win() })
    end
    if #t.children == 0 then
      return dsh.notify("dsh: this session started no sub-agents", vim.log.levels.INFO)
    end
    if n then
      local child = t.children[n]
      if not child then
        return dsh.notify(("dsh: this session started %d sub-agent(s), not %s"):format(#t.children, args[1]), vim.log.levels.WARN)
      end
      return dsh.open(child)
    end
    if #t.children == 1 then
      return dsh.open(t.children[1])
    end
    vim.ui.select(t.children, { prompt = "dsh sub-agents", kind = "dsh.child" }, function(choice)
      if choice then
        dsh.open(choice)
      end
    end)
  end,
}

M.subcommands.image = {
  desc = "open an image of the transcript: the `[image: …]` line under the cursor (`<CR>` on it does the same), else the Nth (or pick one)",
  run = function(args)
    local t = need_session()
    if not t then
      return
    end
    local n = tonumber(args[1] or "")
    if args[1] and not n then
      return dsh.notify(("dsh: `%s` is not an image number"):format(args[1]))
    end
    local here = not n and t.buf == vim.api.nvim_get_current_buf() and t:image_at(vim.api.nvim_win_get_cursor(0)[1] - 1)
    if here then
      return image.open(t.session_id, here)
    end
    if #t.images == 0 then
      return dsh.notify("dsh: no message of this session carries an image", vim.log.levels.INFO)
    end
    if n then
      local ref = t.images[n]
      if not ref then
        return dsh.notify(("dsh: this session's messages carry %d image(s), not %s"):format(#t.images, args[1]), vim.log.levels.WARN)
      end
      return image.open(t.session_id, ref)
    end
    if #t.images == 1 then
      return image.open(t.session_id, t.images[1])
    end
    vim.ui.select(t.images, { prompt = "dsh images", kind = "dsh.image", format_item = words.image_text }, function(choice)
      if choice then
        image.open(t.session_id, choice)
      end
    end)
  end,
  complete = function(lead)
    local t = dsh.current()
    local out = {}
    for n = 1, t and #t.images or 0 do
      if vim.startswith(tostring(n), lead) then
        table.insert(out, tostring(n))
      end
    end
    return out
  end,
}

M.subcommands.stop = {
  desc = "stop the daemon (daemon/shutdown); the next command starts it again",
  run = function()
    dsh.disconnect(true, function()
      dsh.notify("dsh: daemon stopped", vim.log.levels.INFO)
    end)
  end,
}

--- Run `:Dsh {args}`.
---@param opts { fargs: string[], args: string }
function M.run(opts)
  local name = opts.fargs[1]
  if not name then
    -- `:Dsh` alone shows the last transcript, or starts a session.
    local t = dsh.current()
    if t then
      dsh.open(t.session_id)
      return
    end
    return M.subcommands.open.run({}, "")
  end
  local sub = M.subcommands[name]
  if not sub then
    return dsh.notify(("dsh: unknown subcommand `%s` (one of: %s)"):format(name, table.concat(M.names(), ", ")))
  end
  local rest = vim.trim(opts.args:gsub("^%s*%S+", "", 1))
  sub.run(vim.list_slice(opts.fargs, 2), rest)
end

---@return string[]
function M.names()
  local names = vim.tbl_keys(M.subcommands)
  table.sort(names)
  return names
end

--- Completion for `:Dsh`.
---@param lead string
---@param line string
---@return string[]
function M.complete(lead, line)
  local words = vim.split(vim.trim(line:gsub("^%s*%S+", "", 1)), "%s+", { trimempty = true })
  local completing_sub = #words == 0 or (#words == 1 and not line:match("%s$"))
  if completing_sub then
    return vim.tbl_filter(function(n)
      return vim.startswith(n, lead)
    end, M.names())
  end
  local sub = M.subcommands[words[1]]
  if sub and sub.complete then
    return sub.complete(lead, line)
  end
  if sub and (words[1] == "saw" or words[1] == "diff" or words[1] == "fork" or words[1] == "rewind") then
    local t = dsh.current()
    local out = {}
    for _, n in ipairs(t and t.step_order or {}) do
      if vim.startswith(tostring(n), lead) then
        table.insert(out, tostring(n))
      end
    end
    return out
  end
  return {}
end

M.usage = usage
return M
