--- Small helpers: notifications in the user's words, URIs, plugin paths.
local M = {}

local said = {}

--- `vim.wait(ms, cond, interval)` whose timeout holds however often events come. Neovim's
--- wait loop (`LOOP_PROCESS_EVENTS_UNTIL`) takes the elapsed time off the timeout in whole
--- milliseconds per event: while events come faster than one a millisecond (an RPC client
--- asking, a redraw flood), nothing is taken off and `vim.wait` never times out. Here the
--- condition also ends the wait at the deadline read from the monotonic clock.
--- @param ms integer timeout in milliseconds
--- @param cond fun(): any the condition (nil: wait the whole time)
--- @param interval integer|nil polling interval in milliseconds (vim.wait's)
--- @return boolean met whether `cond` returned a true value before the deadline
function M.wait(ms, cond, interval)
  local deadline = vim.uv.hrtime() + ms * 1e6
  local met = false
  vim.wait(ms, function()
    if cond and cond() then
      met = true
      return true
    end
    return vim.uv.hrtime() >= deadline
  end, interval)
  return met
end

--- `vim.notify` with a "Pi: " prefix.
--- @param msg string
--- @param level integer|nil vim.log.levels.*
function M.notify(msg, level)
  vim.notify('Pi: ' .. msg, level or vim.log.levels.INFO, { title = 'Pi' })
end

--- `notify` of a server-initiated message cut to one screen line, so that an event never
--- raises a "Press ENTER" prompt while the user works (the whole text is in the chat).
function M.notify_line(msg, level)
  msg = tostring(msg):gsub('%s*\n.*', ' …')
  local max = math.max(20, vim.o.columns - 16)
  if vim.fn.strdisplaywidth(msg) > max then
    msg = vim.fn.strcharpart(msg, 0, max - 1) .. '…'
  end
  M.notify(msg, level)
end

--- Shows `lines` in a float by the cursor that closes when the cursor moves (LSP hover's
--- float: no "Press ENTER", nothing to dismiss).
function M.preview(lines, title)
  return vim.lsp.util.open_floating_preview(lines, 'text', { border = 'rounded', title = ' ' .. title .. ' ', title_pos = 'center', focus_id = 'pi-preview' })
end

--- `vim.ui.select` whose choice is handled after a redraw: Neovim's own select (inputlist)
--- leaves its list on the screen, and a message said then would raise "Press ENTER".
function M.select(items, opts, on_choice)
  vim.ui.select(items, opts, function(...)
    pcall(vim.cmd, 'redraw')
    on_choice(...)
  end)
end

--- `vim.ui.input`, its answer handled after a redraw (as `select`).
function M.input(opts, on_confirm)
  vim.ui.input(opts, function(...)
    pcall(vim.cmd, 'redraw')
    on_confirm(...)
  end)
end

--- The window a helper window (tree, export, extension editor) splits: the current one unless
--- it shows a chat or a prompt, else the first window of the tabpage that does not, so the
--- chat column and its prompt keep their sizes when the helper closes.
function M.host_win()
  local function pi_win(w)
    local ft = vim.bo[vim.api.nvim_win_get_buf(w)].filetype
    return ft == 'pi-chat' or ft == 'pi-prompt'
  end
  local cur = vim.api.nvim_get_current_win()
  if not pi_win(cur) then
    return cur
  end
  for _, w in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    if not pi_win(w) and vim.api.nvim_win_get_config(w).relative == '' then
      return w
    end
  end
  return -1
end

--- Says `msg` once per Neovim session under `key`, in one screen line.
function M.notify_once(key, msg, level)
  if said[key] then
    return
  end
  said[key] = true
  M.notify_line(msg, level)
end

--- The user's words for an `agent/*` error code (docs/protocol.md "Errors").
local WORDS = {
  [-32700] = 'the server could not read the request',
  [-32601] = 'this server does not know that request (is pi-lsp up to date? :Pi build)',
  [-32602] = 'the request was refused',
  [-32800] = 'cancelled',
  [-31001] = 'Pi is busy with a run (use :Pi steer or :Pi followup, or :Pi abort)',
  [-31002] = 'that session is not known to the server',
  [-31003] = 'that model is not available',
  [-31004] = 'the session file could not be written',
  [-31005] = 'that entry is not in the session',
  [-31006] = 'a shell command of this session is still running',
  [-31007] = 'the model could not write the branch summary',
  [-31008] = 'nothing was compacted',
}

--- One line for a JSON-RPC error `err` of the request `what` ("send the prompt").
--- @param what string
--- @param err table|string
function M.error_text(what, err)
  if type(err) ~= 'table' then
    return ('could not %s: %s'):format(what, tostring(err))
  end
  local words = WORDS[err.code]
  local msg = err.message
  if type(msg) ~= 'string' or msg == '' then
    msg = nil
  end
  if msg and err.code == -31003 and msg:find('^no usable model') then
    -- The server's own sentence says what is missing (a key, a models.json that did not load).
    msg = msg:gsub(vim.pesc(vim.fn.expand('~')), '~')
    local file, why = msg:match('^no usable model, and the model configuration did not load: cannot read (.-): (.*)$')
    if file then
      return ('could not %s: %s does not load (%s)'):format(what, file, why)
    end
    return ('could not %s: %s'):format(what, msg)
  end
  if words and msg then
    return ('could not %s: %s (%s)'):format(what, words, msg)
  end
  return ('could not %s: %s'):format(what, words or msg or vim.inspect(err))
end

--- Causes of a failed model request, as the HTTP client words them (lower case), and what
--- they mean to the user; `%s` is the server's address.
local TRANSPORT = {
  { 'connection refused', 'the model server at %s is not answering (connection refused): is it running?' },
  { 'dns error', 'the model server %s cannot be found (its host name does not resolve)' },
  { 'failed to lookup address', 'the model server %s cannot be found (its host name does not resolve)' },
  { 'timed out', 'the model server at %s did not answer in time' },
  { 'connection closed before message completed', 'the model server at %s closed the connection before answering' },
  { 'connection reset', 'the model server at %s dropped the connection' },
  { 'certificate', 'the model server at %s has a TLS certificate that is not trusted' },
}

--- What an HTTP status from the model server means to the user.
local STATUS = {
  [400] = 'rejected the request',
  [401] = 'refused the API key',
  [403] = 'refused access',
  [404] = 'does not know this model or address',
  [408] = 'timed out',
  [413] = 'found the request too large',
  [429] = 'is rate limiting (too many requests)',
}

--- A failed HTTP answer ([`M.http_status`]) as "the model server had an error on its side (HTTP
--- 500): <its message>";
--- the message read from a JSON error body (`error.message`, `message`, `detail`).
local function http_error(status, body)
  local said = STATUS[status] or (status >= 500 and 'had an error on its side' or 'refused the request')
  local text = vim.trim(body or '')
  if text:sub(1, 1) == '{' then
    local ok, v = pcall(vim.json.decode, text)
    if ok and type(v) == 'table' then
      local e = type(v.error) == 'table' and v.error or v
      local m = e.message or v.message or v.detail or (type(v.error) == 'string' and v.error) or nil
      if type(m) == 'string' and m ~= '' then
        text = m
      end
    end
  end
  return ('the model server %s (HTTP %d)%s'):format(said, status, text ~= '' and (': ' .. text) or '')
end

--- The status and body of a provider's failed HTTP answer as the server words it: Pi 1.6's
--- wording per wire (`400: {error object}` and `400 text` on chat completions, `400 {body}`
--- on Anthropic messages, `<Provider> API error (400): text` on Responses, `500 status code
--- (no body)` for an empty body) and the `HTTP 400: {body}` of older session files. Only
--- 4xx and 5xx statuses count; anything else gives nil.
--- @param msg string
--- @return integer|nil status
--- @return string|nil body
function M.http_status(msg)
  local status, body = msg:match('^HTTP (%d%d%d): (.*)$')
  if not status then
    status, body = msg:match('^(%d%d%d):? (.*)$')
  end
  if not status then
    status, body = msg:match('^.- API error %((%d%d%d)%): (.*)$')
  end
  local n = tonumber(status)
  if not n or n < 400 or n > 599 then
    return nil, nil
  end
  if body == 'status code (no body)' then
    body = ''
  end
  return n, body
end

--- A failed model request's message in the user's words: "request to URL failed: <the HTTP
--- client's error chain>" becomes what happened to which server, the original kept after it
--- in brackets when it says more; other messages are returned unchanged.
--- @param msg string
--- @return string
function M.model_error(msg)
  msg = tostring(msg)
  local status, body = M.http_status(msg)
  if status then
    return http_error(status, body)
  end
  local url, rest = msg:match('^request to (%S+) failed: (.*)$')
  if not url then
    return msg
  end
  local origin = url:match('^(%a[%w+.-]*://[^/]+)') or url
  local low = rest:lower()
  for _, t in ipairs(TRANSPORT) do
    if low:find(t[1], 1, true) then
      return t[2]:format(origin)
    end
  end
  return ('the request to the model server at %s failed (%s)'):format(origin, rest)
end

--- A command's output as a terminal would leave it on screen, as plain text: ANSI escape
--- sequences (colours, cursor moves, OSC titles/links) removed, and a line rewritten with
--- `\r` (a progress bar) reduced to what was written last (`\r\n` is a line end).
--- @param text string
--- @return string
function M.terminal_text(text)
  text = tostring(text or '')
  if not text:find('[\27\r]') then
    return text
  end
  text = text:gsub('\27%][^\7\27]*\7', ''):gsub('\27%][^\27]*\27\\', '')
  text = text:gsub('\27%[[0-?]*[ -/]*[@-~]', ''):gsub('\27[@-Z\\-_]', '')
  text = text:gsub('\r+\n', '\n')
  local out = {}
  for line in (text .. '\n'):gmatch('([^\n]*)\n') do
    local parts = vim.split(line, '\r', { plain = true })
    local last = parts[#parts]
    -- A trailing `\r` (the bar about to be redrawn) leaves the last complete write.
    for i = #parts, 1, -1 do
      if parts[i] ~= '' then
        last = parts[i]
        break
      end
    end
    out[#out + 1] = last
  end
  if text:sub(-1) == '\n' then
    out[#out] = nil
    return table.concat(out, '\n') .. '\n'
  end
  return table.concat(out, '\n')
end

--- The folder of the plugin (`nvim-plugin/`), symlinks resolved (a `pack/*/start/pi` link
--- to the clone's `nvim-plugin/` names the clone).
function M.plugin_dir()
  local src = debug.getinfo(1, 'S').source:sub(2)
  src = vim.uv.fs_realpath(src) or src
  return vim.fn.fnamemodify(src, ':p:h:h:h')
end

--- The repository holding the plugin (its parent folder), where `:Pi build` builds.
function M.repo_dir()
  return vim.fn.fnamemodify(M.plugin_dir(), ':h')
end

--- The OS the paths and names are for: Windows when Neovim runs there (`has('win32')`), unless
--- a spec fakes another by setting `M.os` to `'windows'` or `'unix'`.
M.os = nil

--- True on Windows (or when `M.os` fakes it).
function M.is_windows()
  if M.os then
    return M.os == 'windows'
  end
  return vim.fn.has('win32') == 1
end

--- The server binary's file name: `pi-lsp.exe` on Windows, else `pi-lsp`.
function M.server_name()
  return M.is_windows() and 'pi-lsp.exe' or 'pi-lsp'
end

--- `parts` joined with the OS's separator (`\` on Windows), each part's trailing separators
--- dropped first.
function M.join(...)
  local sep = M.is_windows() and '\\' or '/'
  local out = {}
  for i, p in ipairs({ ... }) do
    out[#out + 1] = i < select('#', ...) and (p:gsub('[/\\]+$', '')) or p
  end
  return table.concat(out, sep)
end

--- Whether `path` is an executable (`vim.fn.executable`; specs replace it).
function M.executable(path)
  return vim.fn.executable(path) == 1
end

--- Where `:Pi build` puts the server: `<repo>/target/release/pi-lsp` (`pi-lsp.exe`, `\` on
--- Windows).
function M.built_server()
  return M.join(M.repo_dir(), 'target', 'release', M.server_name())
end

--- `path` with the home folder as `~` (for messages).
function M.short(path)
  return vim.fn.fnamemodify(path, ':~')
end

--- Text of a message's `content` (a string or blocks).
function M.content_text(content)
  if type(content) == 'string' then
    return content
  end
  if type(content) ~= 'table' then
    return ''
  end
  local parts = {}
  for _, b in ipairs(content) do
    if b.type == 'text' and type(b.text) == 'string' then
      parts[#parts + 1] = b.text
    elseif b.type == 'image' then
      parts[#parts + 1] = '[image ' .. tostring(b.mimeType or '') .. ']'
    end
  end
  return table.concat(parts, '\n')
end

--- `{}` that encodes as a JSON object (Neovim encodes an empty Lua table as `[]`).
function M.obj(t)
  if t == nil or next(t) == nil then
    return vim.empty_dict()
  end
  return t
end

--- Short one-line summary of a tool call's arguments.
function M.tool_summary(name, args)
  if type(args) ~= 'table' or next(args) == nil then
    return '' -- no arguments (`ls` of the workspace): nothing to say, not "{}"
  end
  local s
  if name == 'bash' then
    s = args.command
  elseif args.path then
    s = args.path
    if name == 'grep' and args.pattern then
      s = args.pattern .. ' in ' .. args.path
    end
  elseif args.pattern then
    s = args.pattern
  end
  if type(s) ~= 'string' then
    local ok, enc = pcall(vim.json.encode, args)
    s = ok and enc or ''
  end
  s = s:gsub('\n.*', ' …')
  if #s > 120 then
    s = s:sub(1, 117) .. '...'
  end
  return s
end

return M
