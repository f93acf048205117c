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
  return p.tool .. ' ' .. util.tool_summary(p.tool, args)
end

--- Lines of the question block (without the trailing blank line).
local function block_lines(q)
  local p = q.params
  local lines = { '### ? Permission: ' .. what(p), 'Reason: ' .. tostring(p.reason or '') }
  if p.change and type(p.change.diff) == 'string' and p.change.diff ~= '' then
    lines[#lines + 1] = '```diff'
    q.diff_at = #lines
    q.diff_lines = vim.split(p.change.diff:gsub('\n+$', ''), '\n', { plain = true })
    vim.list_extend(lines, q.diff_lines)
    lines[#lines + 1] = '```'
  end
  local km = config.values.keymaps.permission or {}
  for i, ch in ipairs(q.choices) do
    local key = km[ch.key]
    lines[#lines + 1] = ('  [%d]%s %s'):format(i, key and (' ' .. key) or '', ch.label)
  end
  return lines
end

local function finish(q, answer, label)
  if q.done then
    return
  end
  q.done = true
  for i, x in ipairs(M.pending) do
    if x == q then
      table.remove(M.pending, i)
      break
    end
  end
  if q.header_row and api.nvim_buf_is_valid(q.chat.buf) then
    require('pi.chat').status_mark(q.chat, q.header_row, ' → ' .. label, answer and answer.decision ~= 'reject' and 'DiagnosticOk' or 'DiagnosticError', nil, #'### ? Permission')
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
      finish(q, d, 'rejected' .. (reason ~= '' and (': ' .. reason) or ''))
    end)
    return
  end
  local labels = { allow = 'allowed once', session = 'allowed for this session', workspace = 'allowed in this workspace', reject = 'rejected' }
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
  table.insert(lines, 'Answer with a digit here (<C-w>w to focus), or :Pi chat')
  local buf = api.nvim_create_buf(false, true)
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].filetype = 'pi-chat'
  require('pi.highlight').markdown(buf, config.values.chat.treesitter)
  if q.diff_at then
    require('pi.chat').highlight_diff(buf, q.diff_at, q.diff_lines)
  end
  local width = 0
  for _, l in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(l))
  end
  width = math.min(width + 2, math.max(20, vim.o.columns - 4))
  local height = math.min(#lines, math.max(3, vim.o.lines - 6))
  q.float = api.nvim_open_win(buf, false, {
    relative = 'editor',
    anchor = 'NE',
    row = 1,
    col = vim.o.columns - 1,
    width = width,
    height = height,
    style = 'minimal',
    border = 'rounded',
    title = ' Pi permission ',
    focusable = true,
    noautocmd = true,
  })
  for i = 1, #q.choices do
    vim.keymap.set('n', tostring(i), function()
      M.answer(q, i)
    end, { buffer = buf, nowait = true, desc = 'Pi: answer ' .. q.choices[i].label })
  end
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
    end
  end)
  w:append(table.concat(lines, '\n') .. '\n')
  w:flush()
  require('pi.keymaps').permission_changed(chat)
  if not chat:window() then
    show_float(q)
  end
  require('pi.status').changed()
  if not co then
    return { decision = 'reject', reason = 'the editor could not wait for an answer' }
  end
  return coroutine.yield()
end

--- Withdraws the open questions of `session_id` (its run ended or was aborted).
function M.withdraw_session(session_id)
  for i = #M.pending, 1, -1 do
    local q = M.pending[i]
    if q.chat.session_id == session_id then
      finish(q, { decision = 'reject', reason = 'withdrawn' }, 'withdrawn')
    end
  end
end

--- `$/cancelRequest` from the server: with exactly one open question it is that one.
function M.cancelled()
  if #M.pending == 1 then
    finish(M.pending[1], { decision = 'reject', reason = 'withdrawn' }, 'withdrawn')
  end
end

return M
