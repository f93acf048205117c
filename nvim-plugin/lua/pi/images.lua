--- Images as context: files named in the prompt (a pasted or dragged path, `@path`, a
--- `file://` URI) and images attached with `:Pi image [path]` or from the clipboard go with the
--- prompt as Pi's image blocks (`images` of `agent/prompt` / `agent/steer` / `agent/followUp`:
--- `{type = "image", data = <base64>, mimeType}`). The type is read from the file's first
--- bytes (PNG, JPEG, GIF, WebP), never from its name alone.
local config = require('pi.config')
local util = require('pi.util')
local M = {}

--- Largest image sent (bytes); larger files are refused with a message.
M.max_bytes = 20 * 1024 * 1024

local EXT = { png = true, jpg = true, jpeg = true, gif = true, webp = true }

--- The image type of `bytes` (its first bytes), or nil.
--- @param bytes string
function M.sniff(bytes)
  if type(bytes) ~= 'string' or #bytes < 12 then
    return nil
  end
  if bytes:sub(1, 8) == '\137PNG\r\n\26\n' then
    return 'image/png'
  elseif bytes:sub(1, 3) == '\255\216\255' then
    return 'image/jpeg'
  elseif bytes:sub(1, 6) == 'GIF87a' or bytes:sub(1, 6) == 'GIF89a' then
    return 'image/gif'
  elseif bytes:sub(1, 4) == 'RIFF' and bytes:sub(9, 12) == 'WEBP' then
    return 'image/webp'
  end
  return nil
end

local function human(n)
  if n >= 1024 * 1024 then
    return ('%.1f MB'):format(n / 1024 / 1024)
  elseif n >= 1024 then
    return ('%d KB'):format(math.floor(n / 1024 + 0.5))
  end
  return n .. ' B'
end

M.human = human

--- An image block from raw `bytes` (`name` for messages), or nil and why.
function M.from_bytes(bytes, name)
  local mime = M.sniff(bytes)
  if not mime then
    return nil, ('%s is not a PNG, JPEG, GIF or WebP image'):format(name)
  end
  if #bytes > M.max_bytes then
    return nil, ('%s is %s; images up to %s are sent'):format(name, human(#bytes), human(M.max_bytes))
  end
  return { type = 'image', data = vim.base64.encode(bytes), mimeType = mime, name = name, size = #bytes }
end

local function read_file(path)
  local f = io.open(path, 'rb')
  if not f then
    return nil
  end
  local bytes = f:read('*a')
  f:close()
  return bytes
end

--- An image block from the file `path`, or nil and why.
function M.from_file(path)
  local bytes = read_file(path)
  if not bytes then
    return nil, ('cannot read %s'):format(util.short(path))
  end
  return M.from_bytes(bytes, vim.fs.basename(path))
end

--- Absolute path of `p` as written in a prompt (`~`, relative to `root`, `file://`, `\ `).
local function resolve(p, root)
  p = p:gsub('\\ ', ' ')
  if p:match('^file://') then
    local ok, name = pcall(vim.uri_to_fname, p)
    p = ok and name or p
  end
  if p:sub(1, 1) == '~' then
    p = vim.fn.expand(p)
  elseif p:sub(1, 1) ~= '/' then
    p = root .. '/' .. p
  end
  return vim.fs.normalize(p)
end

--- The image files named in `text`: tokens ending in .png/.jpg/.jpeg/.gif/.webp (bare, after
--- `@`, quoted as terminals paste paths with spaces, or `file://` URIs) that exist.
--- @param text string
--- @param root string the folder relative paths start from
--- @return string[] absolute paths, each once, in order
function M.paths_in(text, root)
  local found, seen = {}, {}
  local function consider(tok)
    tok = tok:gsub('^@', ''):gsub('[,;:!?%)%]]+$', '')
    local ext = tok:match('%.(%w+)$')
    if not ext or not EXT[ext:lower()] then
      return
    end
    local path = resolve(tok, root)
    if not seen[path] and vim.fn.filereadable(path) == 1 then
      seen[path] = true
      found[#found + 1] = path
    end
  end
  -- Tokens in order: a quoted run ('…' or "…", as terminals paste paths with spaces), else
  -- a run up to white space not escaped with a backslash.
  local i, n = 1, #text
  while i <= n do
    local s = text:find('%S', i)
    if not s then
      break
    end
    local q = text:sub(s, s)
    local e
    if q == '"' or q == "'" then
      e = text:find(q, s + 1, true)
      if e then
        consider(text:sub(s + 1, e - 1))
      end
    end
    if not e then
      e = s
      while e <= n do
        local c = text:sub(e, e)
        if c == '\\' and text:sub(e + 1, e + 1) == ' ' then
          e = e + 2
        elseif c:match('%s') then
          break
        else
          e = e + 1
        end
      end
      consider(text:sub(s, e - 1))
    end
    i = e + 1
  end
  return found
end

--- Shows the chat's attachments above its prompt (with the queue); the chat opens (without
--- the focus) so they can be seen.
local function changed(chat)
  if chat.attachments and #chat.attachments > 0 and chat.open then
    chat:open(false)
  end
  require('pi.prompt').show_queue(chat)
end

--- The current model's name when it takes no images (its `input`, from models.json, lacks
--- "image"), else nil (it does, or that is not known).
function M.blind_model(chat)
  local m = vim.tbl_get(chat, 'root', 'state', 'model')
  if type(m) ~= 'table' or type(m.input) ~= 'table' or vim.tbl_contains(m.input, 'image') then
    return nil
  end
  return (type(m.name) == 'string' and m.name ~= '' and m.name) or tostring(m.id)
end

--- Says at once that `what` (an image) would not reach the model when the model takes none.
local function warn_blind(chat, what)
  local model = M.blind_model(chat)
  if model then
    util.notify(('%s does not take images: %s would not reach the model (:Pi model picks one that does)'):format(model, what), vim.log.levels.WARN)
    return true
  end
end

--- Attaches the image file `path` to the chat's next prompt.
function M.attach_file(chat, path)
  local abs = resolve(path, chat.root.root)
  local img, why = M.from_file(abs)
  if not img then
    return util.notify('could not attach the image: ' .. why, vim.log.levels.ERROR)
  end
  img.path = abs
  chat.attachments = chat.attachments or {}
  table.insert(chat.attachments, img)
  changed(chat)
  if not warn_blind(chat, img.name) then
    util.notify(('image attached: %s (%s)'):format(img.name, human(img.size)))
  end
end

--- The command printing the clipboard's image on stdout: `config.clipboard_image_cmd`, else
--- the first of wl-paste, xclip, pngpaste found.
function M.clipboard_cmd()
  local cmd = config.values.clipboard_image_cmd
  if cmd then
    return cmd
  end
  local known = {
    { 'wl-paste', '--no-newline', '--type', 'image/png' },
    { 'xclip', '-selection', 'clipboard', '-t', 'image/png', '-o' },
    { 'pngpaste', '-' },
  }
  for _, c in ipairs(known) do
    if vim.fn.executable(c[1]) == 1 then
      return c
    end
  end
end

--- Attaches the clipboard's image to the chat's next prompt (asynchronously).
function M.attach_clipboard(chat)
  local cmd = M.clipboard_cmd()
  if not cmd then
    return util.notify_line('no clipboard image tool (wl-paste, xclip, pngpaste): :Pi image {file} attaches a file', vim.log.levels.WARN)
  end
  vim.system(cmd, {}, function(r)
    vim.schedule(function()
      if r.code ~= 0 or not r.stdout or r.stdout == '' then
        return util.notify('the clipboard holds no image', vim.log.levels.WARN)
      end
      local img, why = M.from_bytes(r.stdout, 'clipboard image')
      if not img then
        return util.notify('could not attach the clipboard: ' .. why, vim.log.levels.WARN)
      end
      chat.attachments = chat.attachments or {}
      table.insert(chat.attachments, img)
      changed(chat)
      if not warn_blind(chat, 'the clipboard image') then
        util.notify(('image attached: clipboard (%s, %s)'):format(img.mimeType, human(img.size)))
      end
    end)
  end)
end

--- Drops the chat's attachments.
function M.clear(chat)
  chat.attachments = nil
  changed(chat)
end

--- The images that go with `text`: the attachments, then the image files `text` names. The
--- attachments are taken (the next prompt starts without); returns the wire list (nil when
--- there is none) and what was taken (to give back when sending fails).
function M.take(chat, text)
  local out = {}
  local taken = chat.attachments or {}
  chat.attachments = nil
  local attached = {}
  local function wire(img)
    out[#out + 1] = { type = 'image', data = img.data, mimeType = img.mimeType }
  end
  for _, img in ipairs(taken) do
    wire(img)
    if img.path then
      attached[img.path] = true
    end
  end
  -- A file both attached and named is sent once.
  for _, path in ipairs(M.paths_in(text or '', chat.root.root)) do
    if not attached[path] then
      local img, why = M.from_file(path)
      if img then
        wire(img)
      else
        util.notify('not sent as an image: ' .. why, vim.log.levels.WARN)
      end
    end
  end
  if #taken > 0 then
    changed(chat)
  end
  -- Named in the prompt only now: said as it goes (attached ones were said when attached).
  if #out > #taken then
    warn_blind(chat, #out - #taken == 1 and 'the image named in the prompt' or 'the images named in the prompt')
  end
  return #out > 0 and out or nil, taken
end

--- Gives `taken` attachments back (sending failed).
function M.give_back(chat, taken)
  if taken and #taken > 0 then
    chat.attachments = vim.list_extend(vim.list_extend({}, taken), chat.attachments or {})
    changed(chat)
  end
end

--- Virtual lines describing the attachments (for the prompt window).
function M.lines(chat)
  local vl = {}
  for i, img in ipairs(chat.attachments or {}) do
    vl[#vl + 1] = { { ('  📎 %d. %s (%s, %s)'):format(i, img.name, img.mimeType, human(img.size)), 'Comment' } }
  end
  return vl
end

return M
