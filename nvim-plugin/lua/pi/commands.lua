--- The `:Pi` command: its subcommands by name, how a command line is read (`:Pi !cmd`,
--- `:Pi {subcommand} {args}`, else a prompt) and its completion. The work behind each
--- subcommand lives in the modules it names (chat, sessions, hunks, permission, …); the
--- session-level actions (prompt, queue, abort) in `pi` (init.lua).
local util = require('pi.util')
local pi = require('pi')

local api = vim.api
local M = {}

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
    pi.with_chat(function(chat)
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
  pi.prompt_chat(chat, text)
end)

subcommands.steer = chat_cmd(function(chat, args, o)
  pi.queue(chat, 'steer', args .. selection(o))
end)

subcommands.followup = chat_cmd(function(chat, args, o)
  pi.queue(chat, 'followUp', args .. selection(o))
end)

subcommands.abort = function()
  local client = require('pi.client')
  local st = client.roots[client.root_of(0)]
  local chat = st and require('pi.chat').current(st)
  if not chat then
    return util.notify('nothing is running')
  end
  pi.abort(chat)
end

subcommands.new = function()
  local client = require('pi.client')
  client.ensure(client.root_of(0), function(st)
    client.request(st, 'agent/session/new', {}, 'start a session', function(state)
      local old = require('pi.chat').current(st)
      pi.use_state(st, state)
      -- The focus stays where the user works (the new chat shows, its prompt is one key away).
      require('pi.chat').get(st, state.sessionId):show_instead(old, false)
    end)
  end)
end

subcommands.sessions = function(args)
  local last = vim.trim(args or '') == 'last'
  if not last and vim.trim(args or '') ~= '' then
    return util.notify(('`:Pi sessions %s`: only `last` (the newest session) is known'):format(vim.trim(args)), vim.log.levels.ERROR)
  end
  local client = require('pi.client')
  client.ensure(client.root_of(0), function(st)
    require('pi.sessions').pick(st, last)
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
        -- What the session's model takes (its `input`: images or not) is the new model's.
        if type(chat.root.state) == 'table' then
          chat.root.state.model = m
        end
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
  pi.with_chat(function(chat)
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

--- Whether the change `diff` (a unified diff) is taken back in the file's text now: `path`'s
--- buffer when loaded (what the user sees), else its disk. Taken back: none of its added lines
--- is there; for a change that only deleted lines, all of them are back.
local function undone(diff, path)
  local b = vim.fn.bufnr(path)
  local lines
  if b > 0 and api.nvim_buf_is_loaded(b) then
    lines = api.nvim_buf_get_lines(b, 0, -1, false)
  else
    local ok, l = pcall(vim.fn.readfile, path)
    lines = ok and l or {}
  end
  local have = {}
  for _, l in ipairs(lines) do
    have[l] = true
  end
  local added, deleted = {}, {}
  for line in (type(diff) == 'string' and diff or ''):gmatch('[^\n]+') do
    if line:match('^%+') and not line:match('^%+%+%+ ') then
      added[#added + 1] = line:sub(2)
    elseif line:match('^%-') and not line:match('^%-%-%- ') then
      deleted[#deleted + 1] = line:sub(2)
    end
  end
  if #added > 0 then
    for _, l in ipairs(added) do
      if have[l] then
        return false
      end
    end
    return true
  end
  if #deleted == 0 then
    return false
  end
  for _, l in ipairs(deleted) do
    if not have[l] then
      return false
    end
  end
  return true
end

subcommands.changes = function()
  local client = require('pi.client')
  local st = client.roots[client.root_of(0)]
  -- The session whose changes are listed: the one of the chat (or its prompt) the command is
  -- given in, else the root's current one — never another session's (two sessions, one Neovim).
  local chats = require('pi.chat')
  local here = vim.b.pi_session and chats.chats[vim.b.pi_session]
  local chat = here and here.root == st and here or (st and chats.current(st))
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
      -- A file deleted since (by a command, by hand, by a rewind) is no change to look at.
      local b = path and vim.fn.bufnr(path) or -1
      if path and (vim.uv.fs_stat(path) or (b > 0 and vim.api.nvim_buf_is_loaded(b) and vim.bo[b].modified)) then
        -- Taken back since (`u`, the undo key, by hand): said, so the list agrees with the buffer.
        local back = not ch.created and undone(ch.diff, path) and ' · undone' or ''
        items[#items + 1] = { filename = path, lnum = lnum, text = ('%s %s (%s)%s'):format(ch.toolName, what, tostring(ch.toolCallId), back) }
      end
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

--- Rewinds `chat`'s session to before entry `entry_id` (conversation and the agent's file
--- changes, `agent/session/rewind`), draws the outcome titled `title` and puts `text` (the
--- message's) back into the prompt.
function M.rewind_to(chat, entry_id, title, text)
  require('pi.client').request(chat.root, 'agent/session/rewind', { sessionId = chat.session_id, entryId = entry_id }, 'rewind the session', function(r)
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

local function short(text)
  local s = tostring(text):gsub('\n.*', ' …')
  if #s > 40 then
    s = s:sub(1, 37) .. '...'
  end
  return s
end

--- The entry of the turn under the cursor of `chat`'s window: calls `fn(entry_id, text)`.
local function turn_under_cursor(chat, fn)
  local k, first = chat:turn_at(vim.api.nvim_win_get_cursor(0)[1])
  if not k then
    return util.notify('put the cursor on one of your messages (## You)')
  end
  local client = require('pi.client')
  -- The active branch's user messages, in order; the chat shows the last ones.
  client.request(chat.root, 'agent/session/history', { sessionId = chat.session_id, limit = 100000 }, 'read the session history', function(r)
    local users = {}
    for _, e in ipairs(r.entries or {}) do
      if e.type == 'message' and type(e.message) == 'table' and e.message.role == 'user' then
        users[#users + 1] = e
      end
    end
    local e = users[#users - k + 1]
    local text = e and util.content_text(e.message.content) or nil
    if not e or vim.split(text, '\n', { plain = true })[1] ~= first then
      return util.notify('could not find this message in the session (reopen it: :Pi sessions)', vim.log.levels.WARN)
    end
    fn(e.id, text)
  end)
end

--- The chat's "rewind to here" key: the session (and the agent's file changes) back to before
--- the turn under the cursor; its text back into the prompt.
function M.rewind_turn(chat)
  turn_under_cursor(chat, function(id, text)
    M.rewind_to(chat, id, ('rewound to before “%s”'):format(short(text)), text)
  end)
end

--- The chat's "edit" key: the turn under the cursor edited and sent again as a branch from
--- before it — the conversation only (`agent/session/branch`; files stay as they are) or the
--- conversation and files (`agent/session/rewind`; refused, and said, where you changed a file
--- since). The text goes into the prompt, focused.
function M.edit_turn(chat)
  turn_under_cursor(chat, function(id, text)
    local only, both = 'Conversation only (files stay as they are)', 'Conversation and files (the agent’s changes since are undone)'
    util.select({ only, both }, { prompt = ('Edit “%s” and send it again as a branch from before it:'):format(short(text)), kind = 'pi.branch' }, function(choice)
      local function to_prompt()
        require('pi.prompt').set_text(chat, text)
        local pw = require('pi.prompt').window(chat)
        if pw then
          vim.api.nvim_set_current_win(pw)
        end
      end
      if choice == both then
        M.rewind_to(chat, id, ('editing “%s”: rewound to before it'):format(short(text)), text)
        local pw = require('pi.prompt').window(chat)
        if pw then
          vim.api.nvim_set_current_win(pw)
        end
      elseif choice == only then
        require('pi.client').request(chat.root, 'agent/session/branch', { sessionId = chat.session_id, entryId = id }, 'branch the session', function()
          chat:load_history(function()
            chat:line(('⑂ editing “%s”: the conversation goes on from before it (files unchanged)'):format(short(text)))
            chat.writer:flush()
            to_prompt()
          end)
        end)
      end
    end)
  end)
end

subcommands.rewind = chat_cmd(function(chat, args)
  local client = require('pi.client')
  if not client.has_method(chat.root, 'agent/session/rewind') then
    return util.notify('this pi-lsp cannot rewind (a newer one: :Pi build)', vim.log.levels.WARN)
  end
  local rewind = function(entry_id, title, text)
    M.rewind_to(chat, entry_id, title, text)
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
    pi.use_state(st, r.session)
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

subcommands.policy = function(args)
  require('pi.policy').command(args)
end

subcommands.save_user_changes = function(args)
  require('pi.save_changes').command(args)
end

subcommands.retry = chat_cmd(function(chat)
  pi.retry(chat)
end)

subcommands.mcp = function()
  local client = require('pi.client')
  client.ensure(client.root_of(0), function(st)
    require('pi.mcp').open(st)
  end)
end

subcommands.plan = chat_cmd(function(chat)
  local client = require('pi.client')
  local function switch(state)
    local on = not (type(state) == 'table' and state.mode == 'plan')
    client.request(chat.root, 'agent/plan/set', { sessionId = chat.session_id, enabled = on }, on and 'turn plan mode on' or 'turn plan mode off', function(r)
      chat:set_plan(r)
      util.notify(on and 'plan mode: read-only; Pi plans, you decide (:Pi plan leaves it)' or 'plan mode off: all tools again from the next prompt')
    end)
  end
  if chat.plan then
    return switch(chat.plan)
  end
  client.request(chat.root, 'agent/plan/get', { sessionId = chat.session_id }, 'read the plan', switch)
end)

subcommands.build = function()
  require('pi.client').build()
end

--- The subcommand names (for completion and `:help pi-commands`).
M.subcommand_names = { 'abort', 'allow', 'build', 'changes', 'chat', 'clone', 'compact', 'diff', 'export', 'fork', 'followup', 'image', 'label', 'mcp', 'model', 'new', 'plan', 'policy', 'prompt', 'reject', 'rename', 'retry', 'rewind', 'save_user_changes', 'sessions', 'stats', 'steer', 'thinking', 'tree' }

--- The subcommands' handlers by name (`M.subcommand_names` lists them).
M.subcommands = subcommands

--- `:Pi [subcommand] [text]`.
function M.command(o)
  local args = o.args or ''
  local bang, cmd = args:match('^%s*(!!?)%s*(.+)$')
  if bang then
    return pi.with_chat(function(chat)
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
  if before:match('^sessions%s') then
    return { 'last' }
  end
  if before:match('^allow%s') then
    return vim.tbl_filter(function(x)
      return x:sub(1, #arg_lead) == arg_lead
    end, { 'session', 'workspace' })
  end
  if before:match('^policy%s') then
    -- The policy first, then the place it goes.
    local policy = require('pi.policy')
    local rest = before:gsub('^policy%s+', '')
    local done = #vim.split(rest, '%s+', { trimempty = true }) - (arg_lead ~= '' and 1 or 0)
    local list = done == 0 and vim.tbl_map(function(p)
      return p.name
    end, policy.policies) or done == 1 and policy.scope_names or {}
    return vim.tbl_filter(function(x)
      return x:sub(1, #arg_lead) == arg_lead
    end, list)
  end
  if before:match('^save_user_changes%s') then
    -- The value first, then the place it goes.
    local save = require('pi.save_changes')
    local rest = before:gsub('^save_user_changes%s+', '')
    local done = #vim.split(rest, '%s+', { trimempty = true }) - (arg_lead ~= '' and 1 or 0)
    local list = done == 0 and vim.tbl_map(function(p)
      return p.name
    end, save.values) or done == 1 and save.scope_names or {}
    return vim.tbl_filter(function(x)
      return x:sub(1, #arg_lead) == arg_lead
    end, list)
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
