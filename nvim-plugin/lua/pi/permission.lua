--- Permission questions (`agent/requestPermission`): an inline block at the tail of the
--- session's chat (or a float when the chat is not shown) with the command or the diff, and
--- the answers as real text rows. Digits answer from anywhere in the chat (or the float);
--- the mnemonic keys only while the cursor is on the block. Keys are buffer-local
--- normal-mode mappings of the chat buffer: typing in insert mode anywhere never answers.
--- The handler runs in the coroutine Neovim gives server requests and yields until answered.
local config = require('pi.config')
local util = require('pi.util')
local render = require('pi.render')
local api = vim.api
local M = {}

--- Open questions in arrival order: {chat, params, co, first_row, last_row, choices, float}
M.pending = {}

--- A question is answered on purpose (a Vim count must never answer): the key `key` that
--- would answer waits up to 'timeoutlen' for another key, as Neovim waits to tell a mapping
--- from a longer one. Another key: it was a count or the start of a command, so `key` goes
--- back to Neovim unmapped in front of it when `give_back` (a digit: `2j` moves two lines,
--- `13G` goes to line 13) and nothing is answered. No key: `answer()` runs, when the window
--- is still the one the key was typed in.
function M.deliberate(key, answer, give_back)
  local win = api.nvim_get_current_win()
  local followed = util.wait(vim.o.timeoutlen, function()
    return vim.fn.getchar(1) ~= 0
  end, 10)
  if followed then
    if give_back then
      api.nvim_feedkeys(key, 'ni', false)
    end
    return
  end
  if api.nvim_get_current_win() == win then
    answer()
  end
end

local function choices_of(p)
  local out = { { key = 'allow', label = 'Allow once', decision = { decision = 'allow' } } }
  for _, scope in ipairs(p.alwaysScopes or {}) do
    if scope == 'session' then
      out[#out + 1] = { key = 'session', label = 'Allow for this session', decision = { decision = 'allowAlways', scope = 'session' } }
    elseif scope == 'workspace' then
      out[#out + 1] = { key = 'workspace', label = 'Allow in this workspace', decision = { decision = 'allowAlways', scope = 'workspace' } }
    end
  end
  out[#out + 1] = { key = 'reject', label = 'Reject', decision = { decision = 'reject' } }
  out[#out + 1] = { key = 'reject_reason', label = 'Reject with a reason…', decision = { decision = 'reject' }, ask_reason = true }
  return out
end

local function what(p)
  local args = p.arguments or {}
  if p.tool == 'bash' then
    return 'run `' .. tostring(args.command) .. '`'
  elseif p.change then
    return p.tool .. ' ' .. tostring(p.change.path)
  end
  return vim.trim(p.tool .. ' ' .. util.tool_summary(p.tool, args))
end

--- What the oldest open question of `session_id` asks to do ("run `make`", "edit a.txt"),
--- or nil when none is open.
function M.asking(session_id)
  for _, q in ipairs(M.pending) do
    if q.chat.session_id == session_id and not q.done then
      return what(q.params)
    end
  end
end

--- The changed lines of a unified diff (`diff`: its lines), each run of them under a
--- `@@ line N @@` row (N: the line of the new text where the run is), and how many unchanged
--- context lines the diff has.
--- @param diff string[]
--- @return string[] changed, integer unchanged
function M.changed_lines(diff)
  local out, unchanged = {}, 0
  local line, in_run = nil, false
  for _, l in ipairs(diff) do
    local c = l:sub(1, 1)
    if l:sub(1, 3) == '---' or l:sub(1, 3) == '+++' then
      -- the file names
    elseif l:sub(1, 2) == '@@' then
      line = tonumber(l:match('^@@ %-%d+,?%d* %+(%d+)'))
      in_run = false
    elseif c == '+' or c == '-' then
      if not in_run and line then
        out[#out + 1] = '@@ line ' .. line .. ' @@'
      end
      in_run = true
      out[#out + 1] = l
      if c == '+' and line then
        line = line + 1
      end
    elseif c == ' ' or l == '' then
      unchanged = unchanged + 1
      in_run = false
      line = line and line + 1
    end
  end
  return out, unchanged
end

--- Lines of the question block (without the trailing blank line).
local function block_lines(q)
  local p = q.params
  if q.kind == 'select' then
    local lines = { q.header }
    if type(p.message) == 'string' and p.message ~= '' then
      vim.list_extend(lines, vim.split(p.message, '\n', { plain = true }))
    end
    q.choices_at = #lines
    for i, ch in ipairs(q.choices) do
      lines[#lines + 1] = ('  [%d] %s'):format(i, ch.label)
    end
    return lines
  end
  local lines = { '### ? Permission: ' .. what(p), 'Reason: ' .. tostring(p.reason or '') }
  q.diff_at, q.diff_lines, q.context_at, q.context_lines, q.context_from, q.context_to = nil, nil, nil, nil, nil, nil
  if p.change and type(p.change.diff) == 'string' and p.change.diff ~= '' then
    local max = config.values.chat.max_diff_lines or 400
    local diff = vim.split(p.change.diff:gsub('\n+$', ''), '\n', { plain = true })
    local changed, unchanged = M.changed_lines(diff)
    --- Appends `ls` in a diff fence (at most `max` of them); returns their first row in the block.
    local function fence(ls)
      lines[#lines + 1] = '```diff'
      local at = #lines
      local shown = ls
      if #ls > max then
        shown = { unpack(ls, 1, max) }
      end
      vim.list_extend(lines, shown)
      if #ls > max then
        lines[#lines + 1] = ('… %d more lines'):format(#ls - max)
      end
      lines[#lines + 1] = '```'
      return at, shown
    end
    -- The changed lines first (− / + under the line they start at), then the whole diff with
    -- its context, folded (`zo` opens it): a change far into a long hunk is in sight at once.
    q.diff_at, q.diff_lines = fence(changed)
    q.context_from = #lines
    lines[#lines + 1] = ('With context (%d unchanged line%s): zo'):format(unchanged, unchanged == 1 and '' or 's')
    q.context_at, q.context_lines = fence(diff)
    q.context_to = #lines - 1
  end
  local km = config.values.keymaps.permission or {}
  q.choices_at = #lines
  for i, ch in ipairs(q.choices) do
    local key = km[ch.key]
    lines[#lines + 1] = ('  [%d]%s %s'):format(i, key and (' ' .. key) or '', ch.label)
  end
  return lines
end

--- Answered questions by tool call id: {q, allowed} (to say in words when an allowed call
--- is then refused, e.g. its file changed while the user was deciding).
M.answered = {}

local function finish(q, answer, label)
  if q.done then
    return
  end
  q.done = true
  if answer and q.params.toolCallId then
    M.answered[q.params.toolCallId] = { q = q, allowed = answer.decision ~= 'reject' }
  end
  if q.stale_au then
    pcall(api.nvim_del_autocmd, q.stale_au)
    q.stale_au = nil
  end
  for i, x in ipairs(M.pending) do
    if x == q then
      table.remove(M.pending, i)
      break
    end
  end
  local buf = q.chat.buf
  if q.timer then
    q.timer:stop()
    q.timer:close()
    q.timer = nil
  end
  if q.header_row and api.nvim_buf_is_valid(buf) then
    local ok_hl = answer and answer.decision ~= 'reject' and not answer.cancelled and 'DiagnosticOk' or 'DiagnosticError'
    q.mark = require('pi.chat').status_mark(q.chat, q.header_row, ' → ' .. label, ok_hl, q.mark, q.head_len or #'### ? Permission')
    -- The answer rows stay as text (yank works) but dim, the chosen one in the answer's colour.
    for i = 1, #q.choices do
      local row = q.header_row + q.choices_at + i - 1
      local line = api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ''
      pcall(api.nvim_buf_set_extmark, buf, render.ns, row, 0, { end_col = #line, hl_group = i == q.chosen and ok_hl or 'Comment', priority = 200 })
    end
    if q.hint then
      pcall(api.nvim_buf_del_extmark, buf, render.ns, q.hint)
    end
    -- Answered: the block collapses to its header (the reason, diff and answers folded under
    -- it, `zo` opens them).
    q.chat.writer:flush()
    q.chat.writer:add_fold(q.header_row + 1, q.last_row)
  end
  local t = q.chat.tools[q.params.toolCallId or '']
  if t and t.row and api.nvim_buf_is_valid(buf) then
    -- The call runs from now (or is refused): its duration counts from the answer.
    t.t0 = vim.uv.hrtime()
    if answer and answer.decision ~= 'reject' then
      t.mark = require('pi.chat').status_mark(q.chat, t.row, ' ⏳ running', 'DiagnosticWarn', t.mark, t.col)
    end
  end
  if q.float and api.nvim_win_is_valid(q.float) then
    pcall(api.nvim_win_close, q.float, true)
  end
  q.chat.root.status.attention = nil
  require('pi.status').changed()
  require('pi.keymaps').permission_changed(q.chat)
  if answer then
    require('pi.client').flush_changes(q.chat.root)
    local ok, err = coroutine.resume(q.co, answer)
    if not ok then
      util.notify('could not send the answer: ' .. tostring(err), vim.log.levels.ERROR)
    end
  end
end

--- Answers question `q` with its choice `i` (1-based).
function M.answer(q, i)
  local ch = q.choices[i]
  if not ch or q.done then
    return
  end
  if ch.ask_reason then
    util.input({ prompt = 'Reason for rejecting: ' }, function(reason)
      if reason == nil then
        return -- cancelled: the question stays open
      end
      local d = vim.deepcopy(ch.decision)
      if reason ~= '' then
        d.reason = reason
      end
      q.chosen = i
      finish(q, d, 'rejected' .. (reason ~= '' and (': ' .. reason) or ''))
    end)
    return
  end
  if q.kind == 'select' then
    q.chosen = i
    return finish(q, { value = ch.value }, ch.label)
  end
  local labels = { allow = 'allowed once', session = 'allowed for this session', workspace = 'allowed in this workspace', reject = 'rejected' }
  q.chosen = i
  finish(q, vim.deepcopy(ch.decision), labels[ch.key] or ch.label)
end

--- The open question of `chat` whose block holds `row` (0-based), or nil.
function M.at_row(chat, row)
  for _, q in ipairs(M.pending) do
    if q.chat == chat and q.header_row and row >= q.header_row and row <= q.last_row then
      return q
    end
  end
end

--- The oldest open question of `chat`.
function M.first(chat)
  for _, q in ipairs(M.pending) do
    if q.chat == chat then
      return q
    end
  end
end

--- Answers the question under the cursor with choice named `key`; returns false when the
--- cursor is not on an open question (the key then keeps its usual meaning).
function M.answer_key(chat, key)
  local row = api.nvim_win_get_cursor(0)[1] - 1
  local q = M.at_row(chat, row)
  if not q then
    return false
  end
  for i, ch in ipairs(q.choices) do
    if ch.key == key then
      M.answer(q, i)
      return true
    end
  end
  return false
end

local function show_float(q)
  local lines = block_lines(q)
  table.insert(lines, 'Answer with a digit alone here (<C-w>w to focus), or :Pi chat')
  local buf = api.nvim_create_buf(false, true)
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].filetype = 'pi-chat'
  require('pi.highlight').markdown(buf, config.values.chat.treesitter)
  if q.diff_at then
    require('pi.chat').highlight_diff(buf, q.diff_at, q.diff_lines)
    require('pi.chat').highlight_diff(buf, q.context_at, q.context_lines)
  end
  local width = 0
  for _, l in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(l))
  end
  width = math.min(width + 2, math.max(20, vim.o.columns - 4))
  -- The diff with its context is folded (closed) in the float as in the chat.
  local folded = q.context_from and (q.context_to - q.context_from) or 0
  local height = math.min(#lines - folded, math.max(3, vim.o.lines - 6))
  q.float = api.nvim_open_win(buf, false, {
    relative = 'editor',
    anchor = 'NE',
    row = 1,
    col = vim.o.columns - 1,
    width = width,
    height = height,
    style = 'minimal',
    border = 'rounded',
    title = q.kind == 'select' and ' Pi question ' or ' Pi permission ',
    focusable = true,
    noautocmd = true,
  })
  if q.context_from then
    api.nvim_win_call(q.float, function()
      vim.wo.foldmethod = 'manual'
      vim.wo.foldtext = "v:lua.require'pi.render'.foldtext()"
      vim.wo.fillchars = 'fold: '
      vim.cmd(('silent! %d,%dfold'):format(q.context_from + 1, q.context_to + 1))
    end)
  end
  for i = 1, #q.choices do
    vim.keymap.set('n', tostring(i), function()
      M.deliberate(tostring(i), function()
        M.answer(q, i)
      end, true)
    end, { buffer = buf, nowait = true, desc = 'Pi: answer ' .. q.choices[i].label })
  end
end

--- The chat of open questions was hidden (its window closed): each of its questions is asked
--- in a float instead, so it stays in sight.
function M.chat_hidden(chat)
  for _, q in ipairs(M.pending) do
    if q.chat == chat and not q.done and not (q.float and api.nvim_win_is_valid(q.float)) then
      show_float(q)
    end
  end
end

--- The chat is shown again: its questions' floats go (the inline blocks ask).
function M.chat_shown(chat)
  for _, q in ipairs(M.pending) do
    if q.chat == chat and q.float then
      if api.nvim_win_is_valid(q.float) then
        pcall(api.nvim_win_close, q.float, true)
      end
      q.float = nil
    end
  end
end

--- The result of tool call `id` arrived (`tool_execution_end`): an allowed call that failed
--- anyway (its file changed while the user was deciding, or the editor refused the edit) is
--- said in words on the question's header and as a notification — never "allowed" followed
--- by a silent ✗.
function M.result(chat, id, text, is_error)
  local a = id and M.answered[id]
  M.answered[id or ''] = nil
  if not (a and a.allowed and is_error) then
    return
  end
  local first = vim.split(vim.trim(tostring(text or '')), '\n', { plain = true })[1] or ''
  local q = a.q
  if q.header_row and api.nvim_buf_is_valid(chat.buf) then
    q.mark = require('pi.chat').status_mark(chat, q.header_row, ' → allowed, but not done', 'DiagnosticError', q.mark, #'### ? Permission')
    q.note = api.nvim_buf_set_extmark(chat.buf, render.ns, q.header_row, 0, {
      id = q.note,
      virt_lines = { { { '  ✗ not done: ' .. first, 'DiagnosticError' } } },
    })
  end
  util.notify(('%s was allowed but not done: %s'):format(what(q.params), first), vim.log.levels.WARN)
end

--- The file of an open edit question changed in its buffer: the question says so at once
--- (allowing now would be refused: the change was computed on the old text).
local function watch_stale(q, st)
  local change = q.params.change
  if not (change and change.path) then
    return
  end
  local path = change.path
  if not path:match('^/') then
    path = st.root .. '/' .. path
  end
  local b = vim.fn.bufnr(vim.fn.fnamemodify(path, ':p'))
  if b <= 0 then
    return
  end
  q.stale_au = api.nvim_create_autocmd({ 'TextChanged', 'TextChangedI' }, {
    buffer = b,
    desc = 'pi: an open edit question goes stale',
    callback = function()
      if q.done or q.stale then
        return true
      end
      q.stale = true
      if q.header_row and api.nvim_buf_is_valid(q.chat.buf) then
        q.note = api.nvim_buf_set_extmark(q.chat.buf, render.ns, q.header_row, 0, {
          id = q.note,
          virt_lines = { { { '  ⚠ ' .. tostring(change.path) .. ' changed since this question: Allow will not apply it (the agent reads it again)', 'DiagnosticWarn' } } },
        })
      end
      util.notify(tostring(change.path) .. ' changed while Pi asks to edit it: allowing will not apply the old change', vim.log.levels.WARN)
      q.stale_au = nil
      return true -- once
    end,
  })
end

--- Asks the question of `params` (from the handler's coroutine): returns the answer.
function M.ask(chat, st, params)
  local co = coroutine.running()
  local q = { chat = chat, params = params, co = co, choices = choices_of(params) }
  M.pending[#M.pending + 1] = q
  st.status.attention = 'permission'
  local w = chat.writer
  w:blank()
  local lines = block_lines(q)
  w:mark(function(row)
    q.header_row = row
    q.last_row = row + #lines - 1
    if q.diff_at then
      require('pi.chat').highlight_diff(chat.buf, row + q.diff_at, q.diff_lines)
      require('pi.chat').highlight_diff(chat.buf, row + q.context_at, q.context_lines)
    end
  end)
  if q.context_from then
    -- The diff with its context is a fold region, closed (the answered question's fold takes
    -- it in).
    w:append(table.concat(lines, '\n', 1, q.context_from) .. '\n')
    w:fold_start()
    w:append(table.concat(lines, '\n', q.context_from + 1, q.context_to + 1) .. '\n')
    w:fold_end()
    w:append(table.concat(lines, '\n', q.context_to + 2) .. '\n')
  else
    w:append(table.concat(lines, '\n') .. '\n')
  end
  w:mark(function()
    if q.done then
      return
    end
    -- Above the answers (below the last line it would be out of sight: a window scrolled to
    -- the end shows no virtual line under its last line), on the first answer's row: the
    -- line before it may be in the closed fold of an edit's diff with its context.
    q.hint = api.nvim_buf_set_extmark(chat.buf, render.ns, q.header_row + q.choices_at, 0, {
      virt_lines = M.hint_lines(chat, 'a digit alone (no key after it) answers anywhere in this chat · <CR> on an answer · :Pi allow / :Pi reject from any window'),
      virt_lines_above = true,
    })
  end)
  w:flush()
  chat.block = 'permission'
  -- The tool call waits for the answer: its header says so.
  local t = chat.tools[params.toolCallId or '']
  if t and t.row then
    t.mark = require('pi.chat').status_mark(chat, t.row, ' ? waiting for your answer', 'DiagnosticWarn', t.mark, t.col)
  end
  require('pi.keymaps').permission_changed(chat)
  watch_stale(q, st)
  if not chat:window() then
    show_float(q)
  end
  require('pi.status').changed()
  if not co then
    return { decision = 'reject', reason = 'the editor could not wait for an answer' }
  end
  return coroutine.yield()
end

--- Asks an extension's `select` (`agent/ui/request`, e.g. plan mode's "what next?") inline
--- in `chat` as a permission is asked: the options as numbered rows, answered by a digit alone
--- (no key after it within 'timeoutlen'; `2j` stays a count) anywhere in the chat or by
--- `<CR>` on an option's row. Returns `{value}`, or `{cancelled = true}` on its timeout.
function M.ask_select(chat, st, params)
  local co = coroutine.running()
  local title = tostring(params.title or params.extension or 'Pi')
  local q = { chat = chat, params = params, co = co, kind = 'select', header = '### ? ' .. title }
  q.head_len = #q.header
  q.choices = {}
  for i, opt in ipairs(type(params.options) == 'table' and params.options or {}) do
    q.choices[i] = { key = 'option' .. i, label = tostring(opt), value = opt }
  end
  if #q.choices == 0 then
    return { cancelled = true }
  end
  M.pending[#M.pending + 1] = q
  st.status.attention = 'question'
  local w = chat.writer
  w:blank()
  local lines = block_lines(q)
  w:mark(function(row)
    q.header_row = row
    q.last_row = row + #lines - 1
  end)
  w:append(table.concat(lines, '\n') .. '\n')
  w:mark(function()
    if q.done then
      return
    end
    -- Above the answers (below the last line it would be out of sight: a window scrolled to
    -- the end shows no virtual line under its last line).
    q.hint = api.nvim_buf_set_extmark(chat.buf, render.ns, q.header_row + q.choices_at - 1, 0, {
      virt_lines = M.hint_lines(chat, 'a digit alone answers · <CR> on an answer'),
    })
  end)
  w:flush()
  chat.block = 'permission'
  require('pi.keymaps').permission_changed(chat)
  if not chat:window() then
    show_float(q)
  end
  require('pi.status').changed()
  if type(params.timeout) == 'number' and params.timeout > 0 then
    q.timer = vim.uv.new_timer()
    q.timer:start(params.timeout, 0, vim.schedule_wrap(function()
      finish(q, { cancelled = true }, 'timed out')
    end))
  end
  if not co then
    return { cancelled = true }
  end
  return coroutine.yield()
end

--- A hint as virtual lines no wider than the chat's window (they do not wrap by themselves).
function M.hint_lines(chat, text)
  local win = chat:window()
  local width = win and (api.nvim_win_get_width(win) - 3) or 60
  local out, cur = {}, ''
  for word in text:gmatch('%S+') do
    if cur ~= '' and vim.fn.strdisplaywidth(cur .. ' ' .. word) > width then
      out[#out + 1] = { { '  ' .. cur, 'Comment' } }
      cur = word
    else
      cur = cur == '' and word or (cur .. ' ' .. word)
    end
  end
  if cur ~= '' then
    out[#out + 1] = { { '  ' .. cur, 'Comment' } }
  end
  return out
end

--- The plan block at the top of `chat` changed height by `delta` lines: its questions' rows move.
function M.shift(chat, delta)
  local seen = {}
  local function move(q)
    if q.chat == chat and q.header_row and not seen[q] then
      seen[q] = true
      q.header_row = q.header_row + delta
      q.last_row = q.last_row + delta
    end
  end
  for _, q in ipairs(M.pending) do
    move(q)
  end
  for _, a in pairs(M.answered) do
    move(a.q)
  end
end

--- The oldest open question of any chat of root `st` (`:Pi allow`, `:Pi reject`).
function M.first_of_root(st)
  for _, q in ipairs(M.pending) do
    if q.chat.root == st then
      return q
    end
  end
end

--- Answers the oldest open question of root `st` from any window: `key` "allow" / "session" /
--- "workspace" / "reject" (with `reason`). Returns false (and says why) when it cannot.
function M.answer_root(st, key, reason)
  local q = M.first_of_root(st)
  if not q then
    util.notify('no permission question is open')
    return false
  end
  for i, ch in ipairs(q.choices) do
    if ch.key == key then
      if key == 'reject' and reason and reason ~= '' then
        q.chosen = i
        finish(q, { decision = 'reject', reason = reason }, 'rejected: ' .. reason)
        return true
      end
      M.answer(q, i)
      return true
    end
  end
  util.notify(('this question offers no %q answer'):format(key), vim.log.levels.WARN)
  return false
end

--- Withdraws the open questions of `session_id` (its run ended or was aborted); with
--- `server_gone` nothing is answered (no one would read it).
function M.withdraw_session(session_id, server_gone)
  for i = #M.pending, 1, -1 do
    local q = M.pending[i]
    -- (An extension's question comes after the run's end: it stays until answered.)
    if q.chat.session_id == session_id and (q.kind ~= 'select' or server_gone) then
      finish(q, not server_gone and { decision = 'reject', reason = 'withdrawn' } or nil, 'withdrawn')
    end
  end
end

--- `$/cancelRequest` from the server: with exactly one open question it is that one.
function M.cancelled()
  if #M.pending == 1 then
    local q = M.pending[1]
    finish(q, q.kind == 'select' and { cancelled = true } or { decision = 'reject', reason = 'withdrawn' }, 'withdrawn')
  end
end

return M
