--- Sessions: the picker (`agent/session/list`: this workspace's and Pi's own), the tree
--- buffer (`agent/session/tree`; branch, branch with a summary, label), fork, label, new.
local client = require('pi.client')
local util = require('pi.util')
local api = vim.api
local M = {}

local function ago(ms)
  if type(ms) ~= 'number' then
    return ''
  end
  local s = os.time() - math.floor(ms / 1000)
  if s < 90 then
    return s .. ' s ago'
  elseif s < 5400 then
    return math.floor(s / 60) .. ' min ago'
  elseif s < 129600 then
    return math.floor(s / 3600) .. ' h ago'
  end
  return math.floor(s / 86400) .. ' d ago'
end

--- One picker line of a session summary; a session of Pi's own (outside `root`'s
--- `.pi/sessions/`) is marked "from Pi".
function M.format(s, root)
  local title = s.name or s.firstPrompt or s.sessionId
  title = tostring(title):gsub('\n.*', ' …')
  if #title > 70 then
    title = title:sub(1, 67) .. '...'
  end
  local file = type(s.sessionFile) == 'string' and vim.fs.normalize(s.sessionFile) or nil
  local own = root and file and file:sub(1, #root + 14) ~= root .. '/.pi/sessions/'
  return ('%s%s  · %d entries · %s%s%s'):format(
    s.elsewhere and '⚠ ' or '',
    title,
    s.entryCount or 0,
    ago(s.lastActivity),
    own and ' · from Pi' or '',
    s.open and ' · open' or (s.elsewhere and ' · open in another editor' or '')
  )
end

--- Whether another process writes to session file `file`: it holds the OS lock (`flock`) on
--- `<file>.lock` (docs/protocol.md, agent/session/open). Asked with util-linux's `flock -n`;
--- nil when that cannot be told (no `flock` command, as on macOS).
function M.locked_elsewhere(file)
  if type(file) ~= 'string' or not vim.uv.fs_stat(file .. '.lock') or vim.fn.executable('flock') ~= 1 then
    return nil
  end
  local ok, r = pcall(function()
    return vim.system({ 'flock', '--nonblock', '--conflict-exit-code', '75', file .. '.lock', 'true' }):wait(2000)
  end)
  return ok and r.code == 75 or nil
end

--- Opens session summary `s` into its chat (drawing its history) and shows it.
function M.open(st, s, done)
  local params = s.open and { sessionId = s.sessionId } or { path = s.sessionFile }
  client.request(st, 'agent/session/open', params, 'open the session', function(state)
    if type(state.otherCwd) == 'string' then
      -- Another project's session, opened by its path: say whose it is.
      vim.notify(
        ('pi: this session is another project\'s (%s)'):format(state.otherCwd ~= '' and state.otherCwd or 'no folder named'),
        vim.log.levels.WARN
      )
    end
    local old = require('pi.chat').current(st)
    -- (The statusline's context meter and cost are read from the session's stats.)
    require('pi').use_state(st, state)
    local chat = require('pi.chat').get(st, state.sessionId)
    chat:load_history(function()
      chat:show_instead(old, false)
      if done then
        done(chat)
      end
    end)
  end)
end

--- `:Pi sessions` (`last`: the workspace's newest session, as Pi's `--continue`, without
--- the picker).
function M.pick(st, last)
  client.request(st, 'agent/session/list', {}, 'list the sessions', function(r)
    local sessions = r.sessions or {}
    if last then
      -- This workspace's own sessions only (not Pi's from its own folder), newest first.
      sessions = vim.tbl_filter(function(s)
        local file = type(s.sessionFile) == 'string' and vim.fs.normalize(s.sessionFile) or ''
        return file:sub(1, #st.root + 14) == st.root .. '/.pi/sessions/'
      end, sessions)
      table.sort(sessions, function(a, b)
        return (a.lastActivity or 0) > (b.lastActivity or 0)
      end)
    end
    if #sessions == 0 then
      return util.notify('no sessions in this workspace yet')
    end
    -- A session another editor (another pi-lsp) has open: marked, and said before it opens
    -- here as a fork.
    for _, s in ipairs(sessions) do
      if not s.open then
        s.elsewhere = M.locked_elsewhere(s.sessionFile) == true
      end
    end
    local function chosen(s)
      if not s then
        return
      end
      if not s.elsewhere then
        return M.open(st, s)
      end
      util.select({ 'Open a fork of it here', 'Cancel' }, {
        prompt = 'This session is open in another editor, which writes to its file: here it continues in a fork (a new session with its history).',
        kind = 'pi.confirm',
      }, function(choice)
        if choice == 'Open a fork of it here' then
          M.open(st, s)
        end
      end)
    end
    if last then
      return chosen(sessions[1])
    end
    util.select(sessions, { prompt = 'Pi sessions', format_item = function(x)
      return M.format(x, st.root)
    end, kind = 'pi.session' }, chosen)
  end)
end

--- `:Pi fork`: pick one of the session's user messages; the fork gets its text in the prompt.
function M.fork(chat)
  local st = chat.root
  client.request(st, 'agent/session/forkMessages', { sessionId = chat.session_id }, 'list the messages to fork from', function(r)
    local msgs = r.messages or {}
    if #msgs == 0 then
      return util.notify('no user message to fork from yet')
    end
    util.select(msgs, {
      prompt = 'Fork from',
      format_item = function(m)
        return (tostring(m.text):gsub('\n.*', ' …'))
      end,
    }, function(m)
      if not m then
        return
      end
      client.request(st, 'agent/session/fork', { sessionId = chat.session_id, entryId = m.entryId }, 'fork the session', function(f)
        local old = require('pi.chat').current(st)
        require('pi').use_state(st, f.session)
        local c = require('pi.chat').get(st, f.session.sessionId)
        c:load_history(function()
          c:show_instead(old, false)
          require('pi.prompt').set_text(c, f.text or m.text or '')
        end)
      end)
    end)
  end)
end

--- Words for the entry types without a role.
local KIND = {
  model_change = '· model change',
  thinking_level_change = '· thinking level change',
  compaction = '⋯ compaction',
  branch_summary = '⋯ branch summary',
  custom_message = 'message',
  session_info = '· session info',
  custom = '· custom entry',
}

local function tree_lines(r)
  local leaf_line
  local children, by_id = {}, {}
  for _, e in ipairs(r.entries or {}) do
    by_id[e.id] = e
    local p = e.parentId or ''
    children[p] = children[p] or {}
    table.insert(children[p], e)
  end
  local lines, ids = {}, {}
  local on_path = {}
  local id = r.leafId
  while id and by_id[id] do
    on_path[id] = true
    id = by_id[id].parentId
  end
  -- The leaf as drawn: a label entry (the leaf after :Pi label) is not a row, its entry is.
  local leaf = r.leafId
  while leaf and by_id[leaf] and by_id[leaf].type == 'label' do
    leaf = by_id[leaf].parentId
  end
  local function walk(parent, depth)
    for _, e in ipairs(children[parent] or {}) do
      if e.type ~= 'label' then
        local what = e.role or (KIND[e.type] or e.type)
        local preview = tostring(e.preview or ''):gsub('\n.*', ' …')
        local mark = e.id == leaf and '● ' or (on_path[e.id] and '│ ' or '  ')
        lines[#lines + 1] = ('%s%s%s%s%s'):format(string.rep('  ', depth), mark, what, preview ~= '' and (': ' .. preview) or '', e.label and ('  [' .. e.label .. ']') or '')
        ids[#lines] = e.id
        if e.id == leaf then
          leaf_line = #lines
        end
      end
      local next_depth = depth + ((#(children[parent] or {}) > 1) and 1 or 0)
      walk(e.id, next_depth)
    end
  end
  walk('', 0)
  return lines, ids, leaf_line
end

--- `:Pi tree`: the session's entry tree in a buffer.
function M.tree(chat)
  local st = chat.root
  local buf, win
  local ids = {}
  local drawn = false
  local function draw()
    client.request(st, 'agent/session/tree', { sessionId = chat.session_id }, 'read the session tree', function(r)
      if not (buf and api.nvim_buf_is_valid(buf)) then
        return
      end
      local lines, leaf
      lines, ids, leaf = tree_lines(r)
      vim.bo[buf].modifiable = true
      api.nvim_buf_set_lines(buf, 0, -1, false, #lines > 0 and lines or { '(empty session)' })
      vim.bo[buf].modifiable = false
      -- The cursor starts on the current entry (where the session is).
      if leaf and not drawn and api.nvim_win_is_valid(win) and api.nvim_win_get_buf(win) == buf then
        pcall(api.nvim_win_set_cursor, win, { leaf, 0 })
        pcall(api.nvim_win_call, win, function()
          vim.cmd('normal! zz')
        end)
      end
      drawn = true
    end)
  end
  buf = api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].filetype = 'pi-tree'
  api.nvim_buf_set_name(buf, ('pi://tree/%s/%d'):format(chat.session_id:sub(1, 8), buf))
  win = api.nvim_open_win(buf, true, { split = 'below', win = util.host_win(), height = 15 })
  api.nvim_set_option_value('winbar', ' Pi tree — <CR> branch · S branch with summary · L label · q close', { scope = 'local', win = win })
  api.nvim_set_option_value('wrap', false, { scope = 'local', win = win })
  local function entry()
    return ids[api.nvim_win_get_cursor(0)[1]]
  end
  local function branch(summarize)
    local id = entry()
    if not id then
      return
    end
    local params = { sessionId = chat.session_id, entryId = id, summarize = summarize or nil }
    client.request(st, 'agent/session/branch', params, 'branch the session', function(r)
      chat:load_history(function()
        if r.editorText then
          require('pi.prompt').set_text(chat, r.editorText)
        end
      end)
      draw()
    end)
  end
  require('pi.keymaps').tree(buf, {
    branch = function()
      branch(false)
    end,
    summarize = function()
      branch(true)
    end,
    label = function()
      local id = entry()
      if not id then
        return
      end
      util.input({ prompt = 'Label (empty clears): ' }, function(text)
        if text == nil then
          return
        end
        client.request(st, 'agent/session/label', { sessionId = chat.session_id, entryId = id, label = text }, 'label the entry', draw)
      end)
    end,
    close = function()
      if api.nvim_win_is_valid(win) then
        api.nvim_win_close(win, true)
      end
    end,
  })
  draw()
  return buf
end

--- `:Pi label {text}`: labels the session's current leaf.
function M.label(chat, text)
  local st = chat.root
  client.request(st, 'agent/state', { sessionId = chat.session_id }, 'read the session state', function(s)
    if not s.leafId then
      return util.notify('the session has no entry to label yet')
    end
    client.request(st, 'agent/session/label', { sessionId = chat.session_id, entryId = s.leafId, label = text }, 'label the entry', function()
      util.notify(text ~= '' and ('labelled: ' .. text) or 'label cleared')
    end)
  end)
end

return M
