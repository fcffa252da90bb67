--- Images a session's log names (docs/log.md "Images"), shown outside the editor: their bytes
--- fetched from the daemon (`session/object`), written to a private file — 0600, in a 0700
--- directory of this Neovim's own, removed when it exits — with the extension of their media
--- type, and opened with `vim.ui.open` (the system's viewer). Also the other way: image files
--- read for a prompt's `attachments`.
local protocol = require("dsh.protocol")
local words = require("dsh.words")

local M = {}

--- The largest image the daemon takes, in bytes (its `MAX_IMAGE_BYTES`, protocol/README.md
--- `session/prompt`): a larger file is refused here, unread — its base64 would not fit in one
--- request line.
M.max_bytes = 3000000

--- The file extension of each media type the log may name.
M.extensions = { ["image/png"] = "png", ["image/jpeg"] = "jpg", ["image/gif"] = "gif", ["image/webp"] = "webp" }

---@type string? the private directory, once made
M._dir = nil

--- Whether `dir` is still the private directory `mkdtemp` made: a directory (not a link to
--- one), the user's own, 0700. Once the made one went away, anyone could have put another
--- thing at its name.
---@param dir string
---@return boolean
function M.is_private_dir(dir)
  local stat = vim.uv.fs_lstat(dir)
  return stat ~= nil
    and stat.type == "directory"
    and stat.uid == vim.uv.getuid()
    and bit.band(stat.mode, tonumber("7777", 8)) == tonumber("700", 8)
end

--- The private directory images are written to: made on first use by `mkdtemp` (0700, a name
--- no one else can have taken), made anew (another name) if what is at its name is no longer
--- it: gone, a link, someone else's or open to others.
---@return string? dir, string? err
function M.dir()
  local dir = M._dir
  if dir and M.is_private_dir(dir) then
    return dir
  end
  local made, err = vim.uv.fs_mkdtemp(vim.fs.joinpath(vim.uv.os_tmpdir(), "dsh-nvim-images-XXXXXX"))
  if not made then
    return nil, "cannot make a private directory for images: " .. tostring(err)
  end
  M._dir = made
  return made
end

vim.api.nvim_create_autocmd("VimLeavePre", {
  group = vim.api.nvim_create_augroup("dsh_images", { clear = true }),
  callback = function()
    if M._dir then
      vim.fn.delete(M._dir, "rf")
    end
  end,
})

--- The file name an image is written under: its name's stem (letters, digits, `-`, `_`), the
--- first 12 digits of its hash (two images of one name stay apart), and the extension of its
--- media type (never its name's). Nil for a media type the log does not name.
---@param ref dsh.ImageRef
---@return string? name, string? err
function M.file_name(ref)
  local ext = M.extensions[ref.mediaType]
  if not ext then
    return nil, ("%s is no image media type the log names"):format(tostring(ref.mediaType))
  end
  local stem = ""
  if type(ref.name) == "string" then
    stem = vim.fs.basename(ref.name):gsub("%.[^.]*$", ""):gsub("[^%w%-_]", "_"):sub(1, 64)
  end
  local hash = tostring(ref.sha256 or ""):gsub("[^%x]", ""):sub(1, 12)
  return ("%s%s.%s"):format(stem ~= "" and (stem .. "-") or "", hash, ext)
end

--- Write an image's bytes to its private file (0600: created anew, never through a file that
--- is there, then renamed over the name).
---@param ref dsh.ImageRef
---@param bytes string
---@return string? path, string? err
function M.write(ref, bytes)
  local dir, err = M.dir()
  if not dir then
    return nil, err
  end
  local name, nerr = M.file_name(ref)
  if not name then
    return nil, nerr
  end
  local path = vim.fs.joinpath(dir, name)
  local part = path .. ".part"
  vim.uv.fs_unlink(part)
  local fd, oerr = vim.uv.fs_open(part, "wx", tonumber("600", 8))
  if not fd then
    return nil, oerr
  end
  local written, werr = vim.uv.fs_write(fd, bytes, 0)
  vim.uv.fs_close(fd)
  if written ~= #bytes then
    vim.uv.fs_unlink(part)
    return nil, werr or ("wrote %d of %d bytes"):format(written or 0, #bytes)
  end
  local renamed, rerr = vim.uv.fs_rename(part, path)
  if not renamed then
    vim.uv.fs_unlink(part)
    return nil, rerr
  end
  return path
end

--- Hand a file to the system's viewer (`vim.ui.open`). Nil and why when there is none.
---@param path string
---@return boolean? ok, string? err
function M.show(path)
  local ok, cmd, err = pcall(vim.ui.open, path)
  if not ok then
    return nil, tostring(cmd)
  end
  if not cmd then
    return nil, err or "no opener"
  end
  return true
end

--- Fetch an image of `session_id`'s log, write it to its private file and open it; every
--- failure (the daemon has no such object, the bytes are not what the log names, no viewer)
--- is a notification naming the image. `cb(path)` runs once it is written.
---@param session_id string
---@param ref dsh.ImageRef
---@param cb? fun(path: string)
function M.open(session_id, ref, cb)
  local dsh = require("dsh")
  local shown = words.image_text(ref)
  dsh.request(protocol.methods.SessionObject, { sessionId = session_id, sha256 = ref.sha256 }, function(err, result)
    if err then
      dsh.notify(("dsh: cannot show %s: %s"):format(shown, err.message))
      return true
    end
    local ok, bytes = pcall(vim.base64.decode, result and result.data or "")
    if not ok or #bytes ~= ref.size then
      dsh.notify(("dsh: cannot show %s: the daemon sent %s, not the %d bytes the log names"):format(shown, ok and (#bytes .. " bytes") or "no base64", ref.size))
      return true
    end
    local path, werr = M.write(ref, bytes)
    if not path then
      dsh.notify(("dsh: cannot write %s to a private file: %s"):format(shown, werr))
      return true
    end
    local opened, why = M.show(path)
    if not opened then
      dsh.notify(("dsh: cannot open %s: %s\nIt is saved at %s"):format(shown, why, path), vim.log.levels.WARN)
    end
    if cb then
      cb(path)
    end
    return true
  end)
end

--- The longest request line the daemon reads (its `MAX_LINE_BYTES`, 4 MiB; protocol/README.md):
--- a longer one is refused unread, with an error no request can be matched to.
M.max_line_bytes = 4194304

--- Room in a request line for all but the images' base64 and the text: the envelope, the ids,
--- the names (as `dsh prompt` counts it).
M.envelope_bytes = 64 * 1024

--- Nil when a prompt's `attachments` and `text` fit one request line; else why not (the words
--- of `dsh prompt`): a prompt's images together are limited by that line.
---@param attachments dsh.Attachment[]
---@param text string
---@return string? err
function M.too_long(attachments, text)
  local encoded = 0
  for _, attachment in ipairs(attachments) do
    encoded = encoded + #attachment.data
  end
  local taken = encoded + #vim.json.encode(text)
  if taken + M.envelope_bytes > M.max_line_bytes then
    return ("the images of one prompt and its text take %d bytes as base64 and JSON, more than one API request line holds (%d bytes): give them over several prompts"):format(taken, M.max_line_bytes)
  end
  return nil
end

--- Read an image file for a prompt's `attachments` (`{data, name}`, the bytes in base64). The
--- daemon checks what it is (by its magic bytes) and whether the model reads images; this
--- refuses only what cannot be sent: no such file, not a file, unreadable, over the limit.
---@param path string as the user wrote it (`~` and relative paths allowed)
---@return dsh.Attachment? attachment, string? err
function M.attachment(path)
  local full = vim.fn.fnamemodify(vim.fs.normalize(path), ":p")
  local stat, serr = vim.uv.fs_stat(full)
  if not stat then
    return nil, ("cannot attach %s: %s"):format(path, serr)
  end
  if stat.type ~= "file" then
    return nil, ("cannot attach %s: it is a %s, not a file"):format(path, stat.type)
  end
  if stat.size > M.max_bytes then
    return nil, ("%s is %d bytes, over the limit of %d bytes for an image"):format(path, stat.size, M.max_bytes)
  end
  local fd, oerr = vim.uv.fs_open(full, "r", 0)
  if not fd then
    return nil, ("cannot attach %s: %s"):format(path, oerr)
  end
  local pieces, got = {}, 0
  while got < stat.size do
    local piece, rerr = vim.uv.fs_read(fd, stat.size - got, got)
    if not piece then
      vim.uv.fs_close(fd)
      return nil, ("cannot attach %s: %s"):format(path, rerr)
    end
    if piece == "" then
      break
    end
    table.insert(pieces, piece)
    got = got + #piece
  end
  vim.uv.fs_close(fd)
  return { data = vim.base64.encode(table.concat(pieces)), name = vim.fs.basename(full) }
end

return M
