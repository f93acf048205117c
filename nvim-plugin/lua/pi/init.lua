--- Pi inside Neovim: the pi-lsp coding agent through Neovim's own LSP client.
--- `require("pi").setup(opts)` is optional (see `:help pi-config`); `:Pi` drives everything.
local config = require('pi.config')
local util = require('pi.util')

local api = vim.api
local M = {}

--- Sets the configuration (merged over the defaults). Calling it is optional.
--- @param opts table|nil
function M.setup(opts)
  config.set(opts)
  M.did_setup = true
end

--- The statusline segment `model · ctx% · $cost · state`.
function M.statusline()
  local ok, text = pcall(require('pi.status').line)
  return ok and text or ''
end

--- Records a session state (agent/state, session/new|open) as the root's current session.
function M.use_state(st, state)
  if type(state) ~= 'table' or not state.sessionId then
    return
  end
  if st.session_id ~= state.sessionId then
    -- Another session: the context meter and cost are its own (read from its stats), not the
    -- last session's.
    st.status.usage = nil
    M.read_usage(st, state.sessionId)
  end
  st.session_id = state.sessionId
  st.state = state
  if type(state.model) == 'table' then
    st.status.model = tostring(state.model.provider) .. '/' .. tostring(state.model.id)
  end
  if type(state.thinkingLevel) == 'string' then
    st.status.thinking = state.thinkingLevel
  end
  require('pi.status').changed()
end

--- Sets the statusline's context meter and cost from `agent/session/stats` of `session_id`
--- (until its next response reports usage).
function M.read_usage(st, session_id)
  require('pi.client').request(st, 'agent/session/stats', { sessionId = session_id }, 'read the session stats', function(stats)
    if type(stats) ~= 'table' or st.session_id ~= session_id or st.status.usage then
      return
    end
    -- JSON null arrives as vim.NIL: only numbers are figures (the context's tokens are
    -- unknown after a compaction until the next response).
    local function num(v)
      return type(v) == 'number' and v or nil
    end
    local cu = type(stats.contextUsage) == 'table' and stats.contextUsage or nil
    st.status.usage = {
      -- 0 tokens: nothing measured yet (a new session); the meter says nothing rather than 0%.
      contextTokens = cu and num(cu.tokens) ~= 0 and num(cu.tokens) or nil,
      contextWindow = cu and num(cu.contextWindow) or nil,
      -- The money spent in the whole file (`cost` is the model's context's, as Pi's).
      session = { cost = num(stats.sessionCost) or num(stats.cost) },
    }
    require('pi.status').changed()
  end, function()
    return true
  end)
end

--- Calls `fn(chat)` with the current workspace's chat, starting the server and creating a
--- session when needed.
function M.with_chat(fn, buf)
  local client = require('pi.client')
  local root = client.root_of(buf or 0)
  client.ensure(root, function(st)
    local chats = require('pi.chat')
    local c = chats.current(st)
    if c then
      return fn(c)
    end
    -- Commands given while the first session is being made wait for it (one session, one
    -- chat, however many `:Pi` came before the server answered).
    if st.creating then
      st.creating[#st.creating + 1] = fn
      return
    end
    st.creating = { fn }
    client.request(st, 'agent/session/new', {}, 'start a session', function(state)
      local waiting = st.creating or {}
      st.creating = nil
      M.use_state(st, state)
      local chat = chats.get(st, state.sessionId)
      for _, f in ipairs(waiting) do
        f(chat)
      end
    end, function()
      st.creating = nil
      return false
    end)
  end)
end

--- Sends `text` as a prompt of `chat` (a steer when a run is active), with the chat's attached
--- images and the image files the text names.
function M.prompt_chat(chat, text)
  -- Recalled later with <Up> in the prompt (per workspace).
  require('pi.recall').add(chat.root and chat.root.root, text)
  if chat.running then
    return M.queue(chat, 'steer', text)
  end
  if chat.state == 'sending' then
    -- The last prompt is on its way: this steers its run once the server has started it.
    chat.pending_steers = chat.pending_steers or {}
    table.insert(chat.pending_steers, text)
    return
  end
  if config.values.chat.open_on_prompt then
    chat:open(false)
  end
  local images, taken = require('pi.images').take(chat, text)
  chat.last_prompt = text
  chat.streamed = false
  chat.run_started = vim.uv.hrtime()
  chat:set_state('sending')
  local params = { sessionId = chat.session_id, text = text, images = images }
  require('pi.client').request(chat.root, 'agent/prompt', params, 'send the prompt', function(r)
    if r and r.command then
      chat:set_state('idle')
    end
    local steers = chat.pending_steers or {}
    chat.pending_steers = nil
    for _, t in ipairs(steers) do
      M.queue(chat, 'steer', t)
    end
  end, function(err)
    chat:set_state('idle')
    util.notify(util.error_text('send the prompt', err), vim.log.levels.ERROR)
    local back = { text }
    vim.list_extend(back, chat.pending_steers or {})
    chat.pending_steers = nil
    require('pi.prompt').set_text(chat, table.concat(back, '\n\n'))
    require('pi.images').give_back(chat, taken)
    return true
  end)
end

--- Queues a steering message or a follow-up (`kind` "steer" / "followUp"), with images as a
--- prompt has them.
function M.queue(chat, kind, text)
  require('pi.recall').add(chat.root and chat.root.root, text)
  local method = kind == 'followUp' and 'agent/followUp' or 'agent/steer'
  local what = kind == 'followUp' and 'queue the follow-up' or 'steer'
  local images, taken = require('pi.images').take(chat, text)
  local idle = not chat.running and chat.state ~= 'sending'
  if config.values.chat.open_on_prompt then
    chat:open(false) -- the queue is shown above the prompt
  end
  require('pi.client').request(chat.root, method, { sessionId = chat.session_id, text = text, images = images }, what, function()
    if idle then
      util.notify(('%s queued: no run now, it goes first with your next prompt (gq in the prompt edits it)'):format(kind == 'followUp' and 'follow-up' or 'steer'))
    end
  end, function(err)
    util.notify(util.error_text(what, err), vim.log.levels.ERROR)
    require('pi.prompt').set_text(chat, text)
    require('pi.images').give_back(chat, taken)
    return true
  end)
end

--- Aborts the chat's run: "stopping…" at once, then the server's report at the chat's end; the
--- prompt text comes back when nothing streamed yet.
function M.abort(chat)
  if chat.bash_running and not chat.running then
    -- The user's own shell command (`:Pi !cmd`).
    return require('pi.client').request(chat.root, 'agent/bash/abort', { sessionId = chat.session_id }, 'stop the command')
  end
  if not chat.running and chat.state ~= 'sending' then
    util.notify('nothing is running')
    return
  end
  chat.aborting = true
  chat:set_state('stopping')
  -- Said at once under the last line, as a virtual line: what the server streamed before the
  -- abort may still be arriving, and lands above it; the outcome is written after it all.
  chat.writer:set_note('■ stopping…', 'DiagnosticWarn')
  require('pi.client').request(chat.root, 'agent/abort', { sessionId = chat.session_id }, 'abort the run', function(r)
    chat.aborting = false
    chat:abort_report(r or {})
    chat:set_state('idle')
    if not chat.streamed and chat.last_prompt and vim.trim(require('pi.prompt').text(chat)) == '' then
      require('pi.prompt').set_text(chat, chat.last_prompt)
    end
  end, function()
    chat.aborting = false
    chat.writer:set_note(nil)
    chat:set_state(chat.running and 'running' or 'idle')
    return false
  end)
end

--- `<Esc>` during a run: stops it at once while the run is young; in a long run (older than
--- `chat.esc_confirm_after` seconds) asks once, "keep it running" being the default answer
--- (a second `<Esc>` keeps it).
function M.esc(chat)
  if chat.asking_stop or chat.aborting then
    return
  end
  local after = config.values.chat.esc_confirm_after
  local age = chat.run_started and (vim.uv.hrtime() - chat.run_started) / 1e9 or 0
  if after == false or after == nil or age < after then
    return M.abort(chat)
  end
  local run = chat.run_started
  chat.asking_stop = true
  local secs = math.floor(age)
  local took = secs >= 60 and ('%d min %d s'):format(math.floor(secs / 60), secs % 60) or (secs .. ' s')
  util.select({ 'Keep it running', 'Stop the run' }, { prompt = ('Pi has been running for %s. Stop it?'):format(took), kind = 'pi.confirm' }, function(choice)
    chat.asking_stop = false
    if choice == 'Stop the run' and chat.run_started == run and (chat.running or chat.state == 'sending') then
      M.abort(chat)
    end
  end)
end

------------------------------------------------------------------------------------------
-- :Pi

local function selection(o)
  if not o or o.range == 0 then
    return ''
  end
  local buf = api.nvim_get_current_buf()
  local lines = api.nvim_buf_get_lines(buf, o.line1 - 1, o.line2, false)
  local name = api.nvim_buf_get_name(buf)
  local rel = name ~= '' and vim.fn.fnamemodify(name, ':.') or '[No Name]'
  local ft = vim.bo[buf].filetype
  local text = table.concat(lines, '\n')
  local fence = '```'
  while text:find(fence, 1, true) do
    fence = fence .. '`'
  end
  return ('\n\n`%s` lines %d-%d:\n%s%s\n%s\n%s'):format(rel, o.line1, o.line2, fence, ft, text, fence)
end

local function chat_cmd(fn)
  return function(args, o)
    M.with_chat(function(chat)
      fn(chat, args, o)
    end)
  end
end

local subcommands = {}

subcommands.prompt = chat_cmd(function(chat, args, o)
  local text = args .. selection(o)
  if vim.trim(text) == '' then
    chat:open(true)
    return
  end
  M.prompt_chat(chat, text)
end)

subcommands.steer = chat_cmd(function(chat, args, o)
  M.queue(chat, 'steer', args .. selection(o))
end)

subcommands.followup = chat_cmd(function(chat, args, o)
  M.queue(chat, 'followUp', args .. selection(o))
end)

subcommands.abort = function()
  local client = require('pi.client')
  local st = client.roots[client.root_of(0)]
  local chat = st and require('pi.chat').current(st)
  if not chat then
    return util.notify('nothing is running')
  end
  M.abort(chat)
end

subcommands.new = function()
  local client = require('pi.client')
  client.ensure(client.root_of(0), function(st)
    client.request(st, 'agent/session/new', {}, 'start a session', function(state)
      local old = require('pi.chat').current(st)
      M.use_state(st, state)
      require('pi.chat').get(st, state.sessionId):show_instead(old, true)
    end)
  end)
end

subcommands.sessions = function()
  local client = require('pi.client')
  client.ensure(client.root_of(0), function(st)
    require('pi.sessions').pick(st)
  end)
end

subcommands.tree = chat_cmd(function(chat)
  require('pi.sessions').tree(chat)
end)

subcommands.fork = chat_cmd(function(chat)
  require('pi.sessions').fork(chat)
end)

subcommands.label = chat_cmd(function(chat, args)
  require('pi.sessions').label(chat, args)
end)

subcommands.compact = chat_cmd(function(chat, args)
  local params = { sessionId = chat.session_id }
  if args ~= '' then
    params.instructions = args
  end
  -- Said in the chat and the statusline (a message now and one at the end would stack into a
  -- "Press ENTER" prompt). During a run the server compacts after it: the line is drawn
  -- then, not into the middle of the streaming answer.
  if chat.running then
    chat.compact_after_run = true
  else
    chat:compaction_start('manual')
  end
  local function started()
    -- Not drawn yet (no run end seen since): now, before its outcome.
    if chat.compact_after_run then
      chat.compact_after_run = false
      chat:compaction_start('manual')
    end
  end
  require('pi.client').request(chat.root, 'agent/compact', params, 'compact the context', function(r)
    started()
    chat:compaction_end({ result = r })
    util.notify(('compacted (%s tokens before)'):format(tostring(r and r.tokensBefore)))
  end, function(err)
    started()
    -- The server's own sentence when it gave one ("Nothing to compact (session too small)"),
    -- as the compaction_end event words it; else the code in the user's words.
    local why = type(err) == 'table' and type(err.message) == 'string' and err.message ~= '' and err.message
      or util.error_text('compact the context', err):gsub('^could not compact the context: ', '')
    chat:compaction_end({ errorMessage = why })
    return false
  end)
end)

subcommands.model = chat_cmd(function(chat)
  local client = require('pi.client')
  client.request(chat.root, 'agent/model/list', {}, 'list the models', function(r)
    local current = chat.root.status.model
    -- The offline demo model only when nothing else is configured (or it is in use).
    local models = vim.tbl_filter(function(m)
      return m.provider ~= 'scripted' or (m.provider .. '/' .. m.id) == current
    end, r.models or {})
    if #models == 0 then
      models = r.models or {}
    end
    util.select(models, {
      prompt = 'Pi model (now ' .. tostring(current) .. ')',
      kind = 'pi.model',
      format_item = function(m)
        local id = m.provider .. '/' .. m.id
        local parts = { id .. (id == current and ' ✓' or '') }
        if m.name and m.name ~= '' and m.name ~= m.id then
          parts[#parts + 1] = m.name
        end
        if type(m.contextWindow) == 'number' then
          parts[#parts + 1] = (m.contextWindow >= 1000 and ('%dk'):format(math.floor(m.contextWindow / 1000)) or tostring(m.contextWindow)) .. ' context'
        end
        local c = type(m.cost) == 'table' and m.cost or {}
        if (c.input or 0) > 0 or (c.output or 0) > 0 then
          parts[#parts + 1] = ('$%s / $%s per M tokens'):format(c.input or 0, c.output or 0)
        end
        if type(m.thinkingLevels) == 'table' and #m.thinkingLevels > 1 then
          parts[#parts + 1] = 'reasons'
        end
        return table.concat(parts, ' · ')
      end,
    }, function(m)
      if not m then
        return
      end
      client.request(chat.root, 'agent/model/set', { sessionId = chat.session_id, model = m.provider .. '/' .. m.id }, 'switch the model', function(res)
        chat.root.status.model = m.provider .. '/' .. m.id
        if res and type(res.thinkingLevel) == 'string' then
          chat.root.status.thinking = res.thinkingLevel
        end
        require('pi.status').changed()
        util.notify(('model: %s/%s (thinking %s)'):format(m.provider, m.id, tostring(res and res.thinkingLevel)))
      end)
    end)
  end)
end)

subcommands.thinking = chat_cmd(function(chat, args)
  local client = require('pi.client')
  client.request(chat.root, 'agent/state', { sessionId = chat.session_id }, 'read the session state', function(s)
    local model = type(s.model) == 'table' and (tostring(s.model.provider) .. '/' .. tostring(s.model.id)) or 'the model'
    local levels = vim.tbl_get(s, 'model', 'thinkingLevels')
    if type(levels) ~= 'table' or #levels == 0 then
      levels = { 'off' }
    end
    local function set(level)
      client.request(chat.root, 'agent/thinking/set', { sessionId = chat.session_id, level = level }, 'set the thinking level', function(r)
        local now = r and r.level or level
        chat.root.status.thinking = now
        require('pi.status').changed()
        util.notify('thinking: ' .. tostring(now) .. (now ~= level and (' (%s is more than %s supports)'):format(level, model) or ''))
      end)
    end
    if args ~= '' then
      if not vim.tbl_contains(levels, args) then
        return util.notify(('thinking levels of %s: %s'):format(model, table.concat(levels, ', ')), vim.log.levels.WARN)
      end
      return set(args)
    end
    if #levels < 2 then
      return util.notify(('%s has no thinking levels (it does not reason)'):format(model))
    end
    util.select(levels, {
      prompt = ('Thinking level of %s (now %s)'):format(model, tostring(s.thinkingLevel)),
      kind = 'pi.thinking',
      format_item = function(l)
        return l == s.thinkingLevel and (l .. ' ✓') or l
      end,
    }, function(level)
      if level then
        set(level)
      end
    end)
  end)
end)

subcommands.stats = chat_cmd(function(chat)
  require('pi.client').request(chat.root, 'agent/session/stats', { sessionId = chat.session_id }, 'read the session stats', function(s)
    local t = s.tokens or {}
    local lines = {
      ('messages    %d (%d user, %d assistant), tool calls %d'):format(s.totalMessages or 0, s.userMessages or 0, s.assistantMessages or 0, s.toolCalls or 0),
      ('tokens      %d in, %d out, %d cache read, %d cache write'):format(t.input or 0, t.output or 0, t.cacheRead or 0, t.cacheWrite or 0),
      ('cost        $%.4f in context, $%.4f in the session'):format(type(s.cost) == 'number' and s.cost or 0, type(s.sessionCost) == 'number' and s.sessionCost or (type(s.cost) == 'number' and s.cost or 0)),
    }
    local cu = type(s.contextUsage) == 'table' and s.contextUsage or nil
    if cu then
      local function fig(v)
        return type(v) == 'number' and tostring(v) or '?'
      end
      lines[#lines + 1] = ('context     %s of %s tokens (%s%%)'):format(fig(cu.tokens), fig(cu.contextWindow), type(cu.percent) == 'number' and ('%.1f'):format(cu.percent) or '?')
    end
    lines[#lines + 1] = 'file        ' .. vim.fn.fnamemodify(tostring(s.sessionFile), ':~:.')
    -- A float that goes away with the next cursor move (no "Press ENTER").
    util.preview(lines, 'Pi session stats')
  end)
end)

subcommands.export = chat_cmd(function(chat, args)
  local function run(format, path)
    local params = { sessionId = chat.session_id, format = format }
    if path and path ~= '' then
      params.outputPath = path
    end
    require('pi.client').request(chat.root, 'agent/session/export', params, 'export the session', function(r)
      if r.path then
        util.notify('exported to ' .. r.path)
      else
        local buf = api.nvim_create_buf(true, true)
        api.nvim_buf_set_lines(buf, 0, -1, false, vim.split(r.content or '', '\n', { plain = true }))
        vim.bo[buf].filetype = format == 'html' and 'html' or 'markdown'
        api.nvim_open_win(buf, true, { split = 'below', win = util.host_win() })
      end
    end)
  end
  if args ~= '' then
    local format = args:match('%.html?$') and 'html' or 'markdown'
    return run(format, args)
  end
  util.select({ 'markdown', 'html' }, { prompt = 'Export format' }, function(format)
    if not format then
      return
    end
    util.input({ prompt = 'Write to (empty: show in a buffer): ', default = 'session.' .. (format == 'html' and 'html' or 'md') }, function(path)
      if path == nil then
        return
      end
      run(format, path)
    end)
  end)
end)

subcommands.chat = function(args)
  M.with_chat(function(chat)
    if args == 'older' then
      return chat:load_older()
    end
    chat:toggle()
  end)
end

--- The first changed line (1-based, in the new text) of a unified diff, or 1.
local function first_changed_line(diff)
  local new = nil
  for line in (type(diff) == 'string' and diff or ''):gmatch('[^\n]*') do
    local start = line:match('^@@ %-%d+,?%d* %+(%d+)')
    if start then
      new = tonumber(start)
    elseif new then
      local c = line:sub(1, 1)
      if c == '+' or c == '-' then
        return math.max(new, 1)
      elseif c == ' ' then
        new = new + 1
      end
    end
  end
  return 1
end

--- `+N −M` of a unified diff.
local function diff_counts(diff)
  local add, del = 0, 0
  for line in (type(diff) == 'string' and diff or ''):gmatch('[^\n]+') do
    if line:match('^%+') and not line:match('^%+%+%+ ') then
      add = add + 1
    elseif line:match('^%-') and not line:match('^%-%-%- ') then
      del = del + 1
    end
  end
  return add, del
end

subcommands.changes = function()
  local client = require('pi.client')
  local st = client.roots[client.root_of(0)]
  local chat = st and require('pi.chat').current(st)
  local function local_list()
    local items = require('pi.hunks').qflist()
    if #items == 0 then
      return util.notify('no agent changes are marked')
    end
    vim.fn.setqflist({}, ' ', { title = 'Pi: agent changes', items = items })
    vim.cmd('botright copen')
  end
  if not (chat and client.has_method(st, 'agent/session/changes')) then
    return local_list()
  end
  -- The session's own record: every edit the agent applied on the active branch, oldest first.
  client.request(st, 'agent/session/changes', { sessionId = chat.session_id }, 'list the session changes', function(r)
    local items = {}
    for _, ch in ipairs(r.changes or {}) do
      local lnum = first_changed_line(ch.diff)
      local path = ch.absolutePath or ch.path
      if path and not path:match('^/') then
        path = st.root .. '/' .. path
      end
      local add, del = diff_counts(ch.diff)
      local what = ch.created and 'created' or ('+%d −%d'):format(add, del)
      items[#items + 1] = { filename = path, lnum = lnum, text = ('%s %s (%s)'):format(ch.toolName, what, tostring(ch.toolCallId)) }
    end
    if #items == 0 then
      return util.notify('the agent changed no file on this branch of the session')
    end
    vim.fn.setqflist({}, ' ', { title = 'Pi: session changes', items = items })
    vim.cmd('botright copen')
  end)
end

local STATUS_WORDS = { reverted = 'reverted', reapplied = 'applied again', refused = 'kept', unchanged = 'unchanged' }

--- Draws a rewind's outcome at the end of the chat and says it in one line.
local function rewind_report(chat, r, title)
  local lines, counts, refused = {}, {}, {}
  for _, f in ipairs(r.files or {}) do
    counts[f.status] = (counts[f.status] or 0) + 1
    local line = ('- `%s` %s'):format(tostring(f.path), STATUS_WORDS[f.status] or tostring(f.status))
    if f.status == 'refused' then
      line = line .. ': ' .. tostring(f.reason or 'changed since')
      refused[#refused + 1] = tostring(f.path)
    end
    lines[#lines + 1] = line
  end
  chat.writer:blank()
  chat.writer:append('### ⟲ ' .. title .. '\n' .. (#lines > 0 and table.concat(lines, '\n') or 'No file changes to undo.') .. '\n')
  chat.writer:append('(`:Pi rewind undo` goes back)\n')
  chat.writer:flush()
  local parts = {}
  for _, k in ipairs({ 'reverted', 'reapplied', 'refused', 'unchanged' }) do
    if counts[k] then
      parts[#parts + 1] = counts[k] .. ' ' .. STATUS_WORDS[k]
    end
  end
  local level = #refused > 0 and vim.log.levels.WARN or vim.log.levels.INFO
  local said = #parts > 0 and table.concat(parts, ', ') or 'no file changes'
  if #refused > 0 then
    said = said .. ' (' .. table.concat(refused, ', ') .. ': changed since; see the chat)'
  end
  util.notify_line(title .. ': ' .. said, level)
end

subcommands.rewind = chat_cmd(function(chat, args)
  local client = require('pi.client')
  if not client.has_method(chat.root, 'agent/session/rewind') then
    return util.notify('this pi-lsp cannot rewind (a newer one: :Pi build)', vim.log.levels.WARN)
  end
  local function rewind(entry_id, title, text)
    client.request(chat.root, 'agent/session/rewind', { sessionId = chat.session_id, entryId = entry_id }, 'rewind the session', function(r)
      chat.rewind_back = r.previousLeafId
      -- Its own entry is the report drawn below, not a line of the history.
      chat.rewind_shown = r.leafId
      chat:load_history(function()
        rewind_report(chat, r, title)
        if text then
          require('pi.prompt').set_text(chat, text)
        end
      end)
    end)
  end
  if args == 'undo' then
    if not chat.rewind_back then
      return util.notify('no rewind to undo in this session')
    end
    local back = chat.rewind_back
    chat.rewind_back = nil
    return rewind(back, 'rewind undone')
  end
  client.request(chat.root, 'agent/session/forkMessages', { sessionId = chat.session_id }, 'list the messages', function(r)
    local msgs = r.messages or {}
    if #msgs == 0 then
      return util.notify('no message to rewind to yet')
    end
    util.select(msgs, {
      prompt = 'Rewind to before (its text comes back into the prompt)',
      kind = 'pi.rewind',
      format_item = function(m)
        return (tostring(m.text):gsub('\n.*', ' …'))
      end,
    }, function(m)
      if m then
        local short = tostring(m.text):gsub('\n.*', ' …')
        if #short > 40 then
          short = short:sub(1, 37) .. '...'
        end
        rewind(m.entryId, ('rewound to before “%s”'):format(short), m.text)
      end
    end)
  end)
end)

subcommands.rename = chat_cmd(function(chat, args)
  local client = require('pi.client')
  local function set(name)
    if not name or vim.trim(name) == '' then
      return
    end
    client.request(chat.root, 'agent/session/name', { sessionId = chat.session_id, name = vim.trim(name) }, 'name the session', function(r)
      util.notify('session named: ' .. tostring(r and r.name or name))
    end)
  end
  if args ~= '' then
    return set(args)
  end
  util.input({ prompt = 'Session name: ', default = vim.tbl_get(chat.root, 'state', 'sessionName') or '' }, set)
end)

subcommands.clone = chat_cmd(function(chat)
  local st = chat.root
  require('pi.client').request(st, 'agent/session/clone', { sessionId = chat.session_id }, 'clone the session', function(r)
    local old = require('pi.chat').current(st)
    M.use_state(st, r.session)
    local c = require('pi.chat').get(st, r.session.sessionId)
    c:load_history(function()
      c:show_instead(old, false)
      util.notify('cloned: this chat is the copy; :Pi sessions has the original')
    end)
  end)
end)

--- `:Pi !{command}` (`!!` keeps its output out of the model's context): the user's own shell
--- command in the workspace, drawn in the chat; the model sees it with the next prompt.
function M.bash(chat, command, exclude)
  local id = 'bash:' .. tostring(vim.uv.hrtime())
  local t0 = vim.uv.hrtime()
  local t
  local function header()
    t = chat:tool_header(id, '$', { command = command }, 'running')
    t.t0 = t0
    chat.writer:flush()
  end
  -- During a run the answer streams at the chat's end: the command's block comes after it
  -- (drawn whole when both have ended), never inside it.
  if chat.running then
    util.notify(('running `%s`; its output follows this run in the chat'):format(command))
  else
    header()
    chat:set_state('running a command')
  end
  chat.bash_running = true
  require('pi.client').request(chat.root, 'agent/bash', { sessionId = chat.session_id, command = command, excludeFromContext = exclude or nil }, 'run the command', function(r)
    chat.bash_running = false
    local code = type(r.exitCode) == 'number' and r.exitCode or 0
    local failed = r.cancelled == true or code ~= 0
    local text = type(r.output) == 'string' and r.output or ''
    if r.cancelled == true then
      text = text .. '\n(stopped)'
    elseif code ~= 0 then
      text = text .. ('\n(exit code %d)'):format(code)
    end
    local elapsed = (vim.uv.hrtime() - t0) / 1e9
    local function draw()
      if not t then
        header()
      end
      chat:tool_result(id, exclude and '$ (not in the context)' or '$', { content = text }, failed, elapsed)
      chat.writer:flush()
    end
    if chat.running then
      chat.after_run = chat.after_run or {}
      table.insert(chat.after_run, draw)
    else
      draw()
      chat:set_state('idle')
    end
  end, function()
    chat.bash_running = false
    if not chat.running then
      chat:set_state('idle')
    end
    return false
  end)
end

subcommands.diff = function()
  require('pi.hunks').diff()
end

subcommands.image = chat_cmd(function(chat, args)
  local images = require('pi.images')
  if args == 'clear' then
    return images.clear(chat)
  end
  if args == '' then
    return images.attach_clipboard(chat)
  end
  images.attach_file(chat, vim.fn.expand(args))
end)

local function answer(key)
  return function(args)
    local client = require('pi.client')
    local st = client.roots[client.root_of(0)]
    if not st then
      return util.notify('no permission question is open')
    end
    if key == 'allow' and (args == 'session' or args == 'workspace') then
      return require('pi.permission').answer_root(st, args)
    end
    require('pi.permission').answer_root(st, key, args)
  end
end

subcommands.allow = answer('allow')
subcommands.reject = answer('reject')

subcommands.build = function()
  require('pi.client').build()
end

--- The subcommand names (for completion and `:help pi-commands`).
M.subcommand_names = { 'abort', 'allow', 'build', 'changes', 'chat', 'clone', 'compact', 'diff', 'export', 'fork', 'followup', 'image', 'label', 'model', 'new', 'prompt', 'reject', 'rename', 'rewind', 'sessions', 'stats', 'steer', 'thinking', 'tree' }

--- The subcommands' handlers by name (`M.subcommand_names` lists them).
M.subcommands = subcommands

--- `:Pi [subcommand] [text]`.
function M.command(o)
  local args = o.args or ''
  local bang, cmd = args:match('^%s*(!!?)%s*(.+)$')
  if bang then
    return M.with_chat(function(chat)
      chat:open(false)
      M.bash(chat, cmd, bang == '!!')
    end)
  end
  local name, rest = args:match('^(%S+)%s*(.*)$')
  local fn = name and subcommands[name]
  if fn then
    return fn(rest or '', o)
  end
  return subcommands.prompt(args, o)
end

--- Completion of `:Pi`.
function M.complete(arg_lead, cmdline)
  local before = cmdline:gsub('^%s*%S+%s*', '', 1)
  if not before:find('%s') then
    local out = {}
    for _, n in ipairs(M.subcommand_names) do
      if n:sub(1, #arg_lead) == arg_lead then
        out[#out + 1] = n
      end
    end
    if arg_lead:sub(1, 1) == '/' then
      local client = require('pi.client')
      local st = client.roots[client.root_of(0)]
      local chat = st and require('pi.chat').current(st)
      for _, c in ipairs(chat and chat.commands or {}) do
        local w = '/' .. c.name
        if w:sub(1, #arg_lead) == arg_lead then
          out[#out + 1] = w
        end
      end
    end
    return out
  end
  if before:match('^chat%s') then
    return { 'older' }
  end
  if before:match('^rewind%s') then
    return { 'undo' }
  end
  if before:match('^allow%s') then
    return vim.tbl_filter(function(x)
      return x:sub(1, #arg_lead) == arg_lead
    end, { 'session', 'workspace' })
  end
  if before:match('^thinking%s') then
    local out = {}
    for _, l in ipairs({ 'off', 'minimal', 'low', 'medium', 'high', 'xhigh' }) do
      if l:sub(1, #arg_lead) == arg_lead then
        out[#out + 1] = l
      end
    end
    -- The levels of the current model when the server runs.
    local client = require('pi.client')
    local st = client.roots[client.root_of(0)]
    local levels = st and vim.tbl_get(st, 'state', 'model', 'thinkingLevels')
    if type(levels) == 'table' and #levels > 0 then
      out = vim.tbl_filter(function(l)
        return vim.tbl_contains(levels, l)
      end, out)
    end
    return out
  end
  if before:match('^image%s') then
    local out = arg_lead == '' and { 'clear' } or {}
    return vim.list_extend(out, vim.fn.getcompletion(arg_lead, 'file'))
  end
  return {}
end

return M
