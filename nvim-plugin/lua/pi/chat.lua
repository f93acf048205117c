--- The chat of one session: a `filetype=pi-chat` buffer (markdown syntax) drawn from
--- `agent/event`, `agent/queueUpdate` and the session's history, plus its prompt buffer.
--- Server events never change the user's mode, window or cursor: they only append to the
--- chat buffer (render.lua) and move extmarks.
local render = require('pi.render')
local util = require('pi.util')
local config = require('pi.config')

local api = vim.api
local M = {}

--- sessionId -> chat
M.chats = {}

local Chat = {}
Chat.__index = Chat

local function set_local(win, name, value)
  api.nvim_set_option_value(name, value, { scope = 'local', win = win })
end

--- Sets the chat window's local options (folds, wrap); never a global option.
function M.setup_window(win)
  set_local(win, 'foldmethod', 'expr')
  set_local(win, 'foldexpr', "v:lua.require'pi.render'.foldexpr(v:lnum)")
  set_local(win, 'foldtext', "v:lua.require'pi.render'.foldtext()")
  set_local(win, 'foldlevel', 0)
  set_local(win, 'foldenable', true)
  set_local(win, 'wrap', true)
  set_local(win, 'linebreak', true)
  set_local(win, 'number', false)
  set_local(win, 'relativenumber', false)
  set_local(win, 'signcolumn', 'no')
  set_local(win, 'spell', false)
  set_local(win, 'list', false)
  set_local(win, 'winfixwidth', true)
  set_local(win, 'fillchars', 'fold: ,eob: ')
  if vim.fn.exists('+winfixbuf') == 1 then
    set_local(win, 'winfixbuf', true) -- :edit elsewhere, not in the chat's window
  end
  set_local(win, 'statusline', "%#Title# Pi %* %{v:lua.require'pi'.statusline()} %<%=%l/%L ")
end

--- The chat of `session_id` (created hidden when new).
--- @param root table the root state (client.lua)
--- @param session_id string
function M.get(root, session_id)
  local c = M.chats[session_id]
  if c then
    return c
  end
  c = setmetatable({
    root = root,
    session_id = session_id,
    tools = {}, -- toolCallId -> {row, mark, name, args, t0}
    queue = {}, -- queueId -> {text, delivery, state}
    queue_order = {},
    running = false,
    streamed = false,
    permissions = {},
  }, Chat)
  local buf = api.nvim_create_buf(false, true)
  api.nvim_buf_set_name(buf, 'pi://chat/' .. session_id)
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'hide'
  vim.bo[buf].swapfile = false
  vim.bo[buf].undolevels = -1
  vim.bo[buf].filetype = 'pi-chat'
  c.highlighter = require('pi.highlight').markdown(buf, config.values.chat.treesitter)
  vim.bo[buf].modifiable = false
  vim.b[buf].pi_session = session_id
  vim.b[buf].pi_root = root.root
  c.buf = buf
  c.writer = render.new(buf, config.values.chat.flush_ms)
  -- The plan block at the top changed height: the rows the chat and its questions hold move.
  c.writer.shifted[#c.writer.shifted + 1] = function(delta)
    for _, t in pairs(c.tools) do
      if t.row then
        t.row = t.row + delta
      end
    end
    require('pi.permission').shift(c, delta)
  end
  -- The chat's window closed (`:q`, CTRL-W c): its prompt goes with it, unless the chat is
  -- still shown in another window of that tabpage.
  api.nvim_create_autocmd('WinClosed', {
    buffer = buf,
    callback = function(a)
      local closed = tonumber(a.match)
      local ok, tab = pcall(api.nvim_win_get_tabpage, closed)
      vim.schedule(function()
        if not ok or not api.nvim_tabpage_is_valid(tab) then
          return
        end
        for _, w in ipairs(api.nvim_tabpage_list_wins(tab)) do
          if w ~= closed and api.nvim_win_get_buf(w) == buf then
            return
          end
        end
        for _, w in ipairs(api.nvim_tabpage_list_wins(tab)) do
          if c.prompt_buf and api.nvim_win_get_buf(w) == c.prompt_buf and #api.nvim_tabpage_list_wins(tab) > 1 then
            pcall(api.nvim_win_close, w, false)
          end
        end
        if tab == api.nvim_get_current_tabpage() then
          require('pi.permission').chat_hidden(c)
        end
      end)
    end,
  })
  M.chats[session_id] = c
  require('pi.keymaps').chat(c)
  return c
end

--- The chat shown for `root` (its current session), if any.
function M.current(root)
  return root and root.session_id and M.chats[root.session_id] or nil
end

------------------------------------------------------------------------------------------
-- Drawing pieces (shared by live events and history)

local HL = {
  running = 'DiagnosticWarn',
  ok = 'DiagnosticOk',
  fail = 'DiagnosticError',
  dim = 'Comment',
}

--- A status as virtual text on a header row: at its end (`col` nil), or inline at byte `col`
--- (always visible, also when the header wraps).
local function status_mark(c, row, text, hl, id, col)
  if not api.nvim_buf_is_valid(c.buf) then
    return nil
  end
  return api.nvim_buf_set_extmark(c.buf, render.ns, row, col or 0, {
    id = id,
    virt_text = { { text, hl } },
    virt_text_pos = col and 'inline' or 'eol',
    hl_mode = 'combine',
    right_gravity = false,
  })
end

M.status_mark = status_mark

function Chat:user_block(text, label)
  local w = self.writer
  w:blank()
  if not label then
    -- Each turn is a checkpoint: its header says how to go back to before it or edit it.
    local km = config.values.keymaps.chat or {}
    local keys = {}
    if km.rewind_turn then
      keys[#keys + 1] = km.rewind_turn .. ' rewind to here'
    end
    if km.edit_turn then
      keys[#keys + 1] = km.edit_turn .. ' edit'
    end
    if #keys > 0 then
      w:mark(function(row)
        status_mark(self, row, ' ⟲ ' .. table.concat(keys, ' · '), HL.dim)
      end)
    end
  end
  w:append('## ' .. (label or 'You') .. '\n')
  w:append((text ~= '' and text or '(empty)') .. '\n')
end

--- The user message (turn) whose block holds row `row` (1-based): `(k, first_line)` where `k`
--- counts the turns from the chat's end (1: the last), or nil.
function Chat:turn_at(row)
  local lines = api.nvim_buf_get_lines(self.buf, 0, -1, false)
  local header
  for i = math.min(row, #lines), 1, -1 do
    if lines[i]:match('^## ') then
      header = lines[i] == '## You' and i or nil
      break
    end
  end
  if not header then
    return nil
  end
  local k = 0
  for i = #lines, header, -1 do
    if lines[i] == '## You' then
      k = k + 1
    end
  end
  return k, lines[header + 1]
end

function Chat:assistant_header(model)
  -- Drawn with the message's first content (an aborted message without any draws nothing).
  self.header_pending = { model = model }
  self.block = nil
end

function Chat:draw_header()
  local h = self.header_pending
  if not h then
    return
  end
  self.header_pending = nil
  local w = self.writer
  w:blank()
  -- The model that answers is part of the header's text ("## Pi anthropic/claude-…"), so the
  -- buffer, a yank and the screen say the same; it is dimmed.
  if h.model then
    w:append('## Pi ' .. h.model .. '\n')
    w:mark(function(row)
      if api.nvim_buf_is_valid(self.buf) then
        pcall(api.nvim_buf_set_extmark, self.buf, render.ns, row - 1, #'## Pi ', {
          end_col = #'## Pi ' + #h.model,
          hl_group = HL.dim,
        })
      end
    end)
  else
    w:append('## Pi\n')
  end
end

function Chat:thinking_start()
  self:draw_header()
  local w = self.writer
  w:blank()
  w:fold_start()
  w:append('> 💭 thinking\n')
  self.block = 'thinking'
end

function Chat:thinking_end()
  local w = self.writer
  w:newline()
  w:fold_end()
  self.block = nil
end

function Chat:text_start()
  self:draw_header()
  if self.block == 'thinking' then
    self:thinking_end()
  end
  if self.block ~= 'text' then
    self.writer:blank()
  end
  self.block = 'text'
end

function Chat:text(delta)
  self.writer:append(delta)
end

function Chat:tool_header(id, name, args, status)
  local w = self.writer
  if self.block == 'thinking' then
    self:thinking_end()
  end
  self:draw_header()
  w:blank()
  -- `$`: the user's own shell command (`:Pi !cmd`), drawn as `### $ cmd`.
  local summary = name ~= '$' and util.tool_summary(name, args) or ''
  local head = name == '$' and ('### $ ' .. tostring(args.command)) or ('### ⚙ ' .. name .. (summary ~= '' and ('  ' .. summary) or ''))
  w:append(head .. '\n')
  local t = { id = id, name = name, args = args, t0 = vim.uv.hrtime(), col = name == '$' and #head or #('### ⚙ ' .. name) }
  self.tools[id] = t
  w:mark(function(row)
    t.row = row - 1
    if status == 'running' then
      t.mark = status_mark(self, t.row, ' ⏳ running', HL.running, nil, t.col)
    elseif status then
      t.mark = status_mark(self, t.row, status.text, status.hl, nil, t.col)
    end
  end)
  self.block = 'tool'
  return t
end

--- Highlights the lines of a unified diff drawn from `row` on (added, removed, hunk headers,
--- and the changed words of each removed/added pair).
function M.highlight_diff(buf, row, lines)
  require('pi.highlight').diff(buf, render.ns, row, lines)
end

local function fence_for(text)
  local f = '```'
  while text:find(f, 1, true) do
    f = f .. '`'
  end
  return f
end

function Chat:tool_result(id, name, result, is_error, elapsed)
  local t = self.tools[id]
  local w = self.writer
  local status = is_error and '✗' or '✓'
  local dur = elapsed and (' %.1f s'):format(elapsed) or ''
  if t then
    w:mark(function()
      if t.row then
        if t.mark then
          pcall(api.nvim_buf_del_extmark, self.buf, render.ns, t.mark)
        end
        t.mark = status_mark(self, t.row, ' ' .. status .. dur, is_error and HL.fail or HL.ok, nil, t.col)
        t.done = true
        if t.live then
          pcall(api.nvim_buf_del_extmark, self.buf, render.ns, t.live)
          t.live = nil
        end
      end
    end)
  end
  local details = type(result) == 'table' and result.details or nil
  local body, lang
  local udiff = type(details) == 'table' and (details.unifiedDiff or details.diff) or nil
  if type(udiff) == 'string' and udiff ~= '' and not is_error then
    -- `unifiedDiff` (a unified diff) when the server gives it; `diff` is Pi's numbered one.
    body, lang = udiff, 'diff'
  else
    body = util.content_text(type(result) == 'table' and result.content or result)
    if name == 'bash' or name:sub(1, 1) == '$' then
      -- As a terminal leaves it: no escape codes, a progress line once.
      body = util.terminal_text(body)
    end
    lang = ''
  end
  body = body:gsub('\n+$', '')
  local lines = vim.split(body, '\n', { plain = true })
  local max = config.values.chat.max_tool_lines
  local more = 0
  if #lines > max then
    more = #lines - max
    lines = { unpack(lines, 1, max) }
  end
  if self.block == 'permission' then
    w:blank()
  else
    w:newline()
  end
  w:fold_start()
  local total = #lines + more
  w:append('↳ ' .. name .. ' ' .. status .. (body ~= '' and (' (' .. total .. (total == 1 and ' line)' or ' lines)')) or '') .. '\n')
  if body ~= '' then
    local text = table.concat(lines, '\n')
    local fence = fence_for(text)
    w:append(fence .. lang .. '\n')
    if lang == 'diff' then
      w:mark(function(row)
        M.highlight_diff(self.buf, row, lines)
      end)
    end
    w:append(text .. '\n')
    if more > 0 then
      w:append('… ' .. more .. ' more lines\n')
    end
    w:append(fence .. '\n')
  end
  w:fold_end()
  self.block = nil
end

function Chat:line(text)
  self.writer:blank()
  self.writer:append(text .. '\n')
  self.block = nil
end

------------------------------------------------------------------------------------------
-- Live events

function Chat:set_state(state)
  self.state = state
  self.root.status.state = state
  require('pi.status').changed()
  if self.prompt_buf then
    -- Also when the state stays: the placeholder depends on `running` too (the abort's
    -- answer can come before the run's end).
    require('pi.prompt').placeholder(self)
  end
end

--- What each `agent/event` kind does to the chat: `EVENTS[type](chat, event)`, one small
--- handler per kind (Pi's `AgentEvent` types).
local EVENTS = {}

--- The streamed parts of an assistant message (`message_update`'s `assistantMessageEvent`).
local STREAM = {}

function STREAM.text_delta(self, a)
  if self.block ~= 'text' then
    self:text_start()
  end
  self.streamed = true
  self:text(a.delta)
end

function STREAM.thinking_delta(self, a)
  if self.block ~= 'thinking' then
    self:thinking_start()
  end
  self.streamed = true
  self.writer:append(a.delta)
end

function STREAM.text_start(self)
  self:text_start()
end

function STREAM.thinking_start(self)
  self:thinking_start()
end

function STREAM.thinking_end(self)
  if self.block == 'thinking' then
    self:thinking_end()
  end
end

function STREAM.toolcall_start(self)
  -- Arguments stream before the call runs (a long `write`): say so in the statusline.
  self:set_state('preparing a tool call')
end

function EVENTS.message_update(self, ev)
  local a = ev.assistantMessageEvent
  local fn = type(a) == 'table' and STREAM[a.type]
  if fn then
    fn(self, a)
  end
end

--- Draws the last lines of a running tool's output (`partial`: its partial result) as virtual
--- lines under its header, as a terminal leaves them.
local function draw_live(self, t, partial)
  if t.done or not api.nvim_buf_is_valid(self.buf) then
    return
  end
  t.live_at = vim.uv.hrtime()
  local text = util.terminal_text(util.content_text(partial.content))
  local lines = vim.split(text:gsub('\n+$', ''), '\n', { plain = true })
  local vl = {}
  for i = math.max(1, #lines - 4), #lines do
    vl[#vl + 1] = { { '  ┊ ' .. lines[i], HL.dim } }
  end
  t.live = api.nvim_buf_set_extmark(self.buf, render.ns, t.row, 0, { id = t.live, virt_lines = vl })
end

function EVENTS.tool_execution_update(self, ev)
  local t = self.tools[ev.toolCallId]
  if t and t.row and ev.partialResult then
    -- At most one draw per 50 ms; the latest output is drawn at the end of the interval
    -- (an update coming too soon is never lost).
    t.partial = ev.partialResult
    local wait = t.live_at and (50e6 - (vim.uv.hrtime() - t.live_at)) or 0
    if wait <= 0 then
      draw_live(self, t, t.partial)
    elseif not t.live_timer then
      t.live_timer = true
      vim.defer_fn(function()
        t.live_timer = nil
        draw_live(self, t, t.partial)
      end, math.ceil(wait / 1e6))
    end
  end
end

function EVENTS.agent_start(self, ev)
  if self.highlighter == 'treesitter' and not self.hl_paused then
    self.hl_paused = require('pi.highlight').pause(self.buf, config.values.chat.treesitter_max_live_lines)
  end
  -- A retry's new run (Pi 1.6 ends the run before an automatic retry) goes on with the same
  -- clock and the failure it retries.
  if not ((self.state == 'sending' or self.in_retry) and self.run_started) then
    self.run_started = vim.uv.hrtime()
  end
  if not self.in_retry then
    self.last_error = nil
    self.same_error = false
  end
  self.running = true
  self.streamed = false
  self.aborting = false
  self:set_state('running')
end

function EVENTS.message_start(self, ev)
  local m = ev.message or {}
  if m.role == 'user' then
    -- The user's own new message: every window of the chat follows the answer again.
    self.writer:pin_all()
    self:user_block(util.content_text(m.content))
  elseif m.role == 'assistant' then
    self:assistant_header(m.provider and m.model and (m.provider .. '/' .. m.model) or nil)
  elseif m.role == 'custom' and m.display ~= false then
    self:user_block(util.content_text(m.content), m.customType or 'message')
  end
end

function EVENTS.message_end(self, ev)
  local m = ev.message or {}
  if m.role == 'assistant' then
    if self.block == 'thinking' then
      self:thinking_end()
    end
    self.writer:newline()
    local empty = self.header_pending ~= nil
    if m.stopReason == 'error' then
      -- A failed request without content: one line, no header (a retry may follow).
      -- The same failure again (a retry that failed alike) is said once: the retry line
      -- then says "same error".
      local err = util.model_error(m.errorMessage or 'the model request failed')
      self.same_error = err == self.last_error
      if not self.same_error then
        self:line('✗ ' .. err)
      end
      self.last_error = err
      self.failed = err
    elseif m.stopReason == 'aborted' then
      -- Stopped from here: the "stopping…" line and the report say it.
      if not empty and not self.aborting then
        self:line('_■ stopped_')
      end
    elseif m.stopReason == 'length' then
      self:line('_(the answer hit the output limit)_')
    end
    self.header_pending = nil
  end
end

function EVENTS.tool_execution_start(self, ev)
  if self.state ~= 'running' and self.state ~= 'stopping' then
    self:set_state('running')
  end
  self:tool_header(ev.toolCallId, ev.toolName, ev.args, 'running')
end

function EVENTS.tool_execution_end(self, ev)
  local t = self.tools[ev.toolCallId]
  local elapsed = t and (vim.uv.hrtime() - t.t0) / 1e9 or nil
  self:tool_result(ev.toolCallId, ev.toolName, ev.result, ev.isError, elapsed)
  local text = {}
  for _, blk in ipairs(type(ev.result) == 'table' and ev.result.content or {}) do
    if blk.type == 'text' then
      text[#text + 1] = blk.text
    end
  end
  require('pi.permission').result(self, ev.toolCallId, table.concat(text, '\n'), ev.isError)
end

function EVENTS.agent_end(self, ev)
  -- Pi 1.6: a run that ends to be retried (`willRetry`) goes on after `auto_retry_start`.
  if ev.willRetry then
    return
  end
  -- The last attempt of a retry failed: `auto_retry_end` follows and draws this end after its
  -- "gave up" line.
  if self.in_retry then
    self.end_after_retry = ev
    return
  end
  self.running = false
  -- What waited for the run's end (the user's own command's block) is drawn now.
  local after = self.after_run or {}
  self.after_run = nil
  if self.compact_after_run then
    -- `:Pi compact` given during the run: the server compacts now.
    self.compact_after_run = false
    self:compaction_start('manual')
  end
  -- A delivered message is in the conversation (drawn as its own block) and no longer waits:
  -- an aborted response never reports it consumed, so it leaves the queue now.
  local dropped = false
  for id, q in pairs(self.queue) do
    if q.state == 'delivered' then
      self.queue[id] = nil
      dropped = true
    end
  end
  if dropped then
    self.queue_order = vim.tbl_filter(function(id)
      return self.queue[id] ~= nil
    end, self.queue_order)
    require('pi.prompt').show_queue(self)
  end
  self.writer:newline()
  self.writer:flush()
  if self.hl_paused then
    self.hl_paused = false
    require('pi.highlight').resume(self.buf)
  end
  if self.failed and not self.aborting then
    -- The failed prompt comes back to be edited; :Pi retry sends the turn again as it is.
    if require('pi.client').has_method(self.root, 'agent/continue') then
      self:line('↻ :Pi retry runs it again (your message is not repeated)')
      self.writer:flush()
    end
    local prompt = require('pi.prompt')
    if self.last_prompt and self.prompt_buf and vim.trim(prompt.text(self)) == '' then
      prompt.set_text(self, self.last_prompt)
      self.retry_text = self.last_prompt
    end
  end
  self:set_state(self.failed and 'failed' or 'idle')
  self.failed = nil
  require('pi.permission').withdraw_session(self.session_id)
  for _, fn in ipairs(after) do
    fn()
  end
end

function EVENTS.auto_retry_start(self, ev)
  local err = util.model_error(ev.errorMessage)
  self:line(
    ('⟳ retry %d/%d in %.1f s%s'):format(
      ev.attempt or 0,
      ev.maxAttempts or 0,
      (ev.delayMs or 0) / 1000,
      err ~= self.last_error and (': ' .. err) or (self.same_error and ' (same error)' or '')
    )
  )
  self.same_error = false
  self.failed = nil
  self.in_retry = true
  self:set_state('retrying')
  self.writer:flush()
end

function EVENTS.auto_retry_end(self, ev)
  -- Stopped from here: the abort's report says it (not "gave up … Request was aborted").
  if not ev.success and not self.aborting then
    local err = util.model_error(ev.finalError)
    local n = ev.attempt or 0
    self:line(('✗ gave up after %d attempt%s%s'):format(n, n == 1 and '' or 's', err ~= self.last_error and (': ' .. err) or (self.same_error and ' (same error)' or '')))
  end
  self.in_retry = nil
  local ended = self.end_after_retry
  self.end_after_retry = nil
  if ended then
    return EVENTS.agent_end(self, ended)
  end
  self:set_state(self.running and 'running' or 'idle')
end

function EVENTS.compaction_start(self, ev)
  self:compaction_start(ev.reason)
end

function EVENTS.compaction_end(self, ev)
  self:compaction_end(ev)
end

function EVENTS.extension_error(self, ev)
  self:line(('✗ extension %s (%s): %s'):format(tostring(ev.extensionPath), tostring(ev.event), tostring(ev.error)))
end

function EVENTS.turn_start(self, ev)
  -- A model request begins: said under the tail until its first event (a slow or silent
  -- model server is seen, not guessed). Static text, no timer.
  if not self.aborting then
    self.waiting = true
    self.writer:set_note('⋯ waiting for ' .. tostring(self.root.status.model or 'the model'), 'Comment')
  end
end

function EVENTS.turn_end() end

--- Pi 1.6's `entry_appended`: the `context_edit` that leaves a retried or recovered attempt out
--- of the context; the chat keeps showing the attempt, nothing to draw.
function EVENTS.entry_appended() end

--- Pi 1.6's `agent_settled`: the harness will not go on by itself (retries, compaction
--- recovery and queued messages are over). `agent_end` drew the run's end, unless a retry was
--- stopped in its wait.
function EVENTS.agent_settled(self)
  -- A retry stopped during its wait ends with no run of its own after the `agent_end` that
  -- announced it (Pi 1.6): the run's end is drawn now.
  self.in_retry = nil
  if self.running then
    EVENTS.agent_end(self, {})
  end
end

--- `agent/event` params `{sessionId, runId, event}`: the event's handler in `EVENTS` (an
--- unknown kind is one dim line).
function Chat:on_event(p)
  local ev = p.event
  if type(ev) ~= 'table' then
    return
  end
  local ty = ev.type
  -- (The assistant's message_start comes with its first streamed event, as Pi 1.6's.)
  local quiet = ty == 'turn_start' or ty == 'message_start' or (ty == 'message_end' and type(ev.message) == 'table' and ev.message.role ~= 'assistant')
  if self.waiting and not quiet then
    -- Something came: the "waiting for the model" line under the tail goes.
    self.waiting = false
    if not self.aborting then
      self.writer:set_note(nil)
    end
  end
  local fn = EVENTS[ty]
  if fn then
    fn(self, ev)
  else
    self:line('· ' .. tostring(ty))
  end
end

M.EVENTS = EVENTS

------------------------------------------------------------------------------------------
-- The plan (agent/plan): a block at the top of the chat, replaced in place

local PLAN_MARK = { completed = '[x]', in_progress = '[>]', pending = '[ ]' }

--- The lines of the plan block for state `p` (`agent/plan` params), or none when there is no
--- plan and plan mode is off. The first line is the fold's (what `foldtext` shows).
function M.plan_lines(p)
  local todos = type(p.todos) == 'table' and p.todos or {}
  local mode = p.mode
  if p.available == false or (#todos == 0 and mode ~= 'plan') then
    return {}
  end
  local done, current = 0, nil
  for _, t in ipairs(todos) do
    if t.done then
      done = done + 1
    elseif t.status == 'in_progress' and not current then
      current = t
    end
  end
  local head = '### ☰ Plan'
  if mode == 'plan' then
    head = head .. ' · plan mode (read-only; :Pi plan leaves it)'
  end
  if #todos > 0 then
    head = head .. (' · %d/%d done'):format(done, #todos)
    if current then
      head = head .. ' · now: ' .. tostring(current.id) .. '. ' .. tostring(current.text):gsub('\n.*', ' …')
    end
  else
    head = head .. ' · no steps yet'
  end
  local lines = { head }
  for _, t in ipairs(todos) do
    local mark = PLAN_MARK[t.status] or (t.done and '[x]' or '[ ]')
    local prio = (t.priority == 'high' or t.priority == 'low') and (' (' .. t.priority .. ')') or ''
    lines[#lines + 1] = ('- %s %s. %s%s'):format(mark, tostring(t.id), (tostring(t.text):gsub('\n', ' ')), prio)
  end
  lines[#lines + 1] = ''
  return lines
end

--- Reads the session's plan (`agent/plan/get`) and draws it (a chat opened on an existing
--- session; the server pushes later changes).
function Chat:read_plan()
  local client = require('pi.client')
  if not client.has_method(self.root, 'agent/plan/get') then
    return
  end
  client.request(self.root, 'agent/plan/get', { sessionId = self.session_id }, 'read the plan', function(r)
    if type(r) == 'table' then
      self:set_plan(r)
    end
  end, function()
    return true
  end)
end

--- `agent/plan` params: the plan block is drawn again in place (never appended). The step in
--- progress is highlighted, done ones dimmed.
function Chat:set_plan(p)
  self.plan = p
  require('pi.highlight').groups()
  local lines = M.plan_lines(p)
  if #lines == 0 and self.writer.top == 0 then
    -- (Marks left by a block the history's reset took away go too.)
    pcall(api.nvim_buf_clear_namespace, self.buf, M.plan_ns, 0, -1)
    return
  end
  self.writer:set_top(lines, #lines > 1 and (#lines - 2) or nil)
  if not api.nvim_buf_is_valid(self.buf) then
    return
  end
  api.nvim_buf_clear_namespace(self.buf, M.plan_ns, 0, -1)
  for i, t in ipairs(type(p.todos) == 'table' and p.todos or {}) do
    local hl = t.status == 'in_progress' and 'PiPlanCurrent' or (t.done and 'PiPlanDone' or nil)
    if hl then
      pcall(api.nvim_buf_set_extmark, self.buf, M.plan_ns, i, 0, { end_col = #lines[i + 1], hl_group = hl, priority = 150 })
    end
  end
  if #lines > 0 then
    pcall(api.nvim_buf_set_extmark, self.buf, M.plan_ns, 0, 0, { end_col = #lines[1], hl_group = 'PiPlanHeader', priority = 150 })
  end
end

M.plan_ns = api.nvim_create_namespace('pi.plan')

--- A compaction begins (`reason` manual / threshold / overflow); one asked for with
--- `:Pi compact` is drawn once, whether or not the server also sends its events.
function Chat:compaction_start(reason)
  if self.compacting then
    return
  end
  self.compacting = true
  self:line('⋯ compacting the context (' .. tostring(reason) .. ')')
  self:set_state('compacting')
end

--- A compaction ends: `{result?, aborted?, errorMessage?}` (Pi's `compaction_end`, or the
--- answer of `agent/compact`); the summary is folded under the line.
function Chat:compaction_end(ev)
  if not self.compacting then
    return
  end
  self.compacting = false
  if type(ev.result) == 'table' then
    self:line(('⋯ compacted: %s tokens before; the next answer shows the new size'):format(tostring(ev.result.tokensBefore)))
    -- The meter's reading is of the context before: it waits for the next answer.
    local u = self.root.status.usage
    if type(u) == 'table' then
      u.contextTokens = nil
      require('pi.status').changed()
    end
    if type(ev.result.summary) == 'string' and ev.result.summary ~= '' then
      self.writer:fold_start()
      self.writer:append('> summary\n' .. ev.result.summary:gsub('\n+$', '') .. '\n')
      self.writer:fold_end()
    end
  elseif ev.aborted then
    self:line('⋯ compaction cancelled')
  else
    self:line('✗ compaction failed: ' .. (tostring(ev.errorMessage):gsub('^[Cc]ompaction failed: ', '')))
  end
  self.writer:flush()
  self:set_state(self.running and 'running' or 'idle')
end

--- `agent/queueUpdate` params.
function Chat:on_queue(p)
  local q = self.queue[p.queueId]
  if not q then
    q = {}
    self.queue[p.queueId] = q
    self.queue_order[#self.queue_order + 1] = p.queueId
  end
  q.text, q.delivery, q.state = p.text, p.delivery, p.state
  if p.state == 'consumed' or p.state == 'dropped' or p.state == 'removed' then
    self.queue[p.queueId] = nil
    for i, id in ipairs(self.queue_order) do
      if id == p.queueId then
        table.remove(self.queue_order, i)
        break
      end
    end
  end
  require('pi.prompt').show_queue(self)
end

--- The queued items still shown: `{queueId, text, delivery, state}` in order.
function Chat:queued()
  local out = {}
  for _, id in ipairs(self.queue_order) do
    local q = self.queue[id]
    if q then
      out[#out + 1] = { queueId = id, text = q.text, delivery = q.delivery, state = q.state }
    end
  end
  return out
end

--- Draws the report of `agent/abort` at the chat's end, after everything the server sent
--- before it: "■ stopped" (or "■ nothing was running"), then what was stopped, killed, kept
--- and left queued under "### ■ Stopped" (nothing more when the run only streamed text).
function Chat:abort_report(r)
  local w = self.writer
  w:set_note(nil)
  local lists = {}
  local function list(title, items, fmt)
    if type(items) == 'table' and #items > 0 then
      lists[#lists + 1] = title
      for _, it in ipairs(items) do
        lists[#lists + 1] = '- ' .. fmt(it)
      end
    end
  end
  list('Stopped tool calls:', r.stoppedToolCalls, function(t)
    return vim.trim(t.toolName .. ' ' .. util.tool_summary(t.toolName, t.args))
  end)
  list('Killed processes:', r.stoppedProcesses, function(t)
    return '`' .. tostring(t.command) .. '`'
  end)
  list('Edits that stay (undo them in their buffers):', r.appliedEdits, function(t)
    return t.toolName .. ' ' .. tostring(t.path)
  end)
  list('Queued messages kept for the next prompt (gq in the prompt edits or drops them):', r.queuedMessages, function(t)
    -- One line each (a message of several lines, or a command's output, would break the list).
    return t.delivery .. ': ' .. (tostring(t.text):gsub('\n.*', ' …'))
  end)
  w:blank()
  if #lists > 0 then
    w:append('### ■ Stopped\n' .. table.concat(lists, '\n') .. '\n')
  else
    w:append((r.aborted and '■ stopped' or '■ nothing was running') .. '\n')
  end
  self.block = nil
  w:flush()
end

------------------------------------------------------------------------------------------
-- History

--- Draws history entries (agent/session/history `entries`, chronological) through `self`.
function Chat:draw_entries(entries)
  -- The model and thinking level a session starts with (the settings entries at its root, before
  -- any message) are not drawn, as the live chat does not draw them; later changes are.
  local root_chain = nil
  for _, e in ipairs(entries) do
    local setting = e.type == 'model_change' or e.type == 'thinking_level_change'
    if setting and (e.parentId == nil or e.parentId == vim.NIL or e.parentId == root_chain) then
      root_chain = e.id
    elseif e.type == 'message' and type(e.message) == 'table' then
      self:draw_message(e.message)
    elseif e.type == 'compaction' then
      self:line(('⋯ compaction (%s tokens before)'):format(tostring(e.tokensBefore)))
      self.writer:fold_start()
      self.writer:append('> summary\n' .. tostring(e.summary or '') .. '\n')
      self.writer:fold_end()
    elseif e.type == 'branch_summary' then
      self:line('⋯ branch summary')
      self.writer:fold_start()
      self.writer:append('> summary\n' .. tostring(e.summary or '') .. '\n')
      self.writer:fold_end()
    elseif e.type == 'custom' and e.customType == 'pi-lsp.rewind' and e.id ~= self.rewind_shown then
      -- Where a rewind moved the session (written by pi-lsp; not part of the model's context).
      local files = type(e.data) == 'table' and type(e.data.files) == 'table' and #e.data.files or 0
      self:line(('⟲ rewound here (%d file%s)'):format(files, files == 1 and '' or 's'))
    elseif e.type == 'custom_message' and e.display ~= false then
      self:user_block(util.content_text(e.content), e.customType or 'message')
    elseif e.type == 'model_change' then
      self:line(('· model: %s/%s'):format(tostring(e.provider), tostring(e.modelId)))
    elseif e.type == 'thinking_level_change' then
      self:line('· thinking: ' .. tostring(e.thinkingLevel))
    end
  end
end

--- Draws one stored message (Pi's AgentMessage).
function Chat:draw_message(m)
  local role = m.role
  if role == 'user' then
    self:user_block(util.content_text(m.content))
  elseif role == 'assistant' then
    self:assistant_header(m.provider and m.model and (m.provider .. '/' .. m.model) or nil)
    for _, b in ipairs(type(m.content) == 'table' and m.content or {}) do
      if b.type == 'thinking' then
        self:thinking_start()
        self.writer:append(tostring(b.thinking or ''))
        self:thinking_end()
      elseif b.type == 'text' then
        self:text_start()
        self:text(tostring(b.text or ''))
      elseif b.type == 'toolCall' then
        -- As drawn live: a tool call runs after its message ended, under no header of its own.
        self.header_pending = nil
        self:tool_header(b.id, b.name, b.arguments, { text = ' …', hl = HL.dim })
      end
    end
    self.writer:newline()
    if m.stopReason == 'error' then
      self:line('✗ ' .. util.model_error(m.errorMessage or 'the model request failed'))
    elseif m.stopReason == 'aborted' and not self.header_pending then
      self:line('_■ stopped_')
    end
    self.header_pending = nil
  elseif role == 'toolResult' then
    self:tool_result(m.toolCallId, m.toolName or '?', m, m.isError, nil)
  elseif role == 'bashExecution' then
    local id = 'bash:' .. tostring(m.timestamp)
    self:tool_header(id, '$', { command = m.command }, nil)
    local code = type(m.exitCode) == 'number' and m.exitCode or 0
    self:tool_result(id, m.excludeFromContext and '$ (not in the context)' or '$', { content = type(m.output) == 'string' and m.output or '' }, code ~= 0 or m.cancelled == true)
  elseif role == 'custom' and m.display ~= false then
    self:user_block(util.content_text(m.content), m.customType or 'message')
  elseif role == 'branchSummary' or role == 'compactionSummary' then
    self:line('⋯ ' .. (role == 'branchSummary' and 'branch summary' or 'compaction summary'))
    self.writer:fold_start()
    self.writer:append('> summary\n' .. tostring(m.summary or '') .. '\n')
    self.writer:fold_end()
  end
end

local OLDER = '⋯ older history: press gO (or :Pi chat older)'

--- What the end of a session's branch offers, from its last message (Pi's AgentMessage):
--- `continue` when it ends with the user's message, a tool result, tool calls that never got
--- theirs or an answer stopped before it said anything (the run was interrupted: Neovim or the
--- server went away mid-run, or it was stopped at once), `retry` when its
--- last answer failed, else nil. Both are `:Pi retry` (`agent/continue`): the user's message is
--- sent again once and stored once.
function M.offer_of(last)
  if type(last) ~= 'table' then
    return nil
  end
  if last.role == 'user' or last.role == 'toolResult' then
    return 'continue'
  end
  if last.role == 'assistant' then
    if last.stopReason == 'error' then
      return 'retry'
    elseif last.stopReason == 'toolUse' then
      return 'continue'
    elseif last.stopReason == 'aborted' and (type(last.content) ~= 'table' or next(last.content) == nil) then
      -- Stopped before any answer (what a server going away mid-request stores).
      return 'continue'
    end
  end
  return nil
end

--- Says under a loaded history what its end offers (`M.offer_of`), when no run is going.
function Chat:offer_recovery(last)
  local offer = M.offer_of(last)
  if not offer or self.running or self.state == 'sending' or not require('pi.client').has_method(self.root, 'agent/continue') then
    return
  end
  if offer == 'continue' then
    self:line('⚠ the last run stopped before it answered: ↻ :Pi retry continues it')
  else
    self:line('↻ :Pi retry runs it again (your message is not repeated)')
  end
  self.writer:flush()
end

--- Loads and draws the session's history: the last page first, older pages on demand.
function Chat:load_history(done)
  local client = require('pi.client')
  local page = config.values.chat.history_page
  self.writer:reset()
  self.tools = {}
  if client.has_method(self.root, 'agent/session/history') then
    client.request(self.root, 'agent/session/history', { sessionId = self.session_id, limit = page }, 'load the session history', function(r)
      self.oldest = r.entries[1] and r.entries[1].id
      self.has_more = r.hasMore
      if self.has_more then
        self.writer:append(OLDER .. '\n')
      end
      self:draw_entries(r.entries)
      self.writer:flush()
      local last
      for i = #r.entries, 1, -1 do
        local e = r.entries[i]
        if e.type == 'message' and type(e.message) == 'table' then
          last = e.message
          break
        end
      end
      self:offer_recovery(last)
      self:read_plan()
      if done then
        done()
      end
    end)
  else
    client.request(self.root, 'agent/messages', { sessionId = self.session_id }, 'load the session history', function(r)
      local msgs = r.messages or {}
      local from = math.max(1, #msgs - page + 1)
      self.older_messages = from > 1 and { unpack(msgs, 1, from - 1) } or nil
      self.has_more = self.older_messages ~= nil
      if self.has_more then
        self.writer:append(OLDER .. '\n')
      end
      for i = from, #msgs do
        self:draw_message(msgs[i])
      end
      self.writer:flush()
      self:offer_recovery(msgs[#msgs])
      self:read_plan()
      if done then
        done()
      end
    end)
  end
end

--- Draws `draw(tmp_chat)` into a detached writer and returns its lines and fold regions.
local function render_detached(self, draw)
  local buf = api.nvim_create_buf(false, true)
  local tmp = setmetatable({
    buf = buf,
    root = self.root,
    session_id = self.session_id,
    tools = {},
    writer = render.new(buf, 1000),
  }, Chat)
  draw(tmp)
  tmp.writer:newline()
  tmp.writer:flush()
  local lines = api.nvim_buf_get_lines(buf, 0, -1, false)
  if lines[#lines] == '' then
    table.remove(lines)
  end
  local folds = tmp.writer.folds
  local marks = api.nvim_buf_get_extmarks(buf, render.ns, 0, -1, { details = true })
  tmp.writer:close()
  api.nvim_buf_delete(buf, { force = true })
  return lines, folds, marks
end

--- Loads the next older page above what is shown (not while a run streams).
function Chat:load_older()
  if not self.has_more or self.loading then
    return
  end
  if self.running then
    util.notify('older history loads when the run has ended')
    return
  end
  local function insert(lines, folds, marks, has_more)
    if has_more then
      table.insert(lines, 1, OLDER)
      for _, f in ipairs(folds) do
        f.s = f.s + 1
        if f.e then
          f.e = f.e + 1
        end
      end
      for _, m in ipairs(marks) do
        m[2] = m[2] + 1
      end
    end
    self.writer:prepend(lines, folds, 1)
    for _, m in ipairs(marks) do
      local d = m[4]
      pcall(api.nvim_buf_set_extmark, self.buf, render.ns, m[2] + self.writer.top, m[3], {
        virt_text = d.virt_text,
        virt_text_pos = d.virt_text_pos,
      })
    end
    self.has_more = has_more
    self.loading = false
  end
  self.loading = true
  local page = config.values.chat.history_page
  if self.older_messages then
    local msgs = self.older_messages
    local from = math.max(1, #msgs - page + 1)
    local slice = { unpack(msgs, from, #msgs) }
    self.older_messages = from > 1 and { unpack(msgs, 1, from - 1) } or nil
    local lines, folds, marks = render_detached(self, function(t)
      for _, m in ipairs(slice) do
        t:draw_message(m)
      end
    end)
    insert(lines, folds, marks, self.older_messages ~= nil)
    return
  end
  require('pi.client').request(
    self.root,
    'agent/session/history',
    { sessionId = self.session_id, beforeEntryId = self.oldest, limit = page },
    'load older history',
    function(r)
      self.oldest = r.entries[1] and r.entries[1].id or self.oldest
      local lines, folds, marks = render_detached(self, function(t)
        t:draw_entries(r.entries)
      end)
      insert(lines, folds, marks, r.hasMore)
    end,
    function()
      self.loading = false
    end
  )
end

------------------------------------------------------------------------------------------
-- Windows

--- A window size: `v` lines/columns, or a fraction of `total` when < 1 (then at least `min`
--- and at most `total` less 30, so the chat stays readable beside a code window, and at most
--- half of `total`).
local function size(v, total, min)
  if v < 1 then
    local n = math.floor(total * v)
    if min then
      n = math.max(n, math.min(min, total - 30))
    end
    -- A small screen (80 columns): never more than half of it.
    return math.max(10, math.min(n, math.floor(total / 2)))
  end
  return v
end

--- The window showing the chat in the current tabpage, if any.
function Chat:window()
  for _, win in ipairs(api.nvim_tabpage_list_wins(0)) do
    if api.nvim_win_get_buf(win) == self.buf then
      return win
    end
  end
end

--- Opens the chat and its prompt (focus moves only when `focus`). Returns the chat window.
function Chat:open(focus)
  local win = self:window()
  local cfg = config.values.chat
  if not win then
    local pos = cfg.position
    local opts
    if pos == 'tab' then
      local cur = api.nvim_get_current_tabpage()
      vim.cmd('tab sbuffer ' .. self.buf)
      win = api.nvim_get_current_win()
      if not focus then
        api.nvim_set_current_tabpage(cur)
      end
    else
      if pos == 'left' or pos == 'right' then
        opts = { split = pos, win = -1, width = size(cfg.width, vim.o.columns, 56) }
      else
        opts = { split = pos, win = -1, height = size(cfg.height, vim.o.lines) }
      end
      win = api.nvim_open_win(self.buf, false, opts)
    end
    M.setup_window(win)
    local n = api.nvim_buf_line_count(self.buf)
    pcall(api.nvim_win_set_cursor, win, { n, 0 })
    require('pi.prompt').open(self, win)
    if (pos == 'left' or pos == 'right') and vim.o.equalalways then
      -- As Neovim does after a split: the other windows share the rest of the width evenly
      -- (the new column took it all from its neighbour); the chat keeps its width
      -- ('winfixwidth'). No window, cursor or focus changes.
      pcall(vim.cmd, 'horizontal wincmd =')
    end
  elseif not require('pi.prompt').window(self) then
    -- The prompt was closed on its own: back under the chat.
    require('pi.prompt').open(self, win)
  end
  require('pi.permission').chat_shown(self)
  if focus then
    local pw = require('pi.prompt').window(self)
    api.nvim_set_current_win(pw or win)
  end
  return win
end

--- Shows `self` in place of the chat `old` (another session of the same workspace) in this
--- tabpage: `old`'s chat and prompt windows get this chat's buffers, so the layout stays as
--- it is; without a window of `old`, `open` as usual. The focus moves only when `focus`.
function Chat:show_instead(old, focus)
  local ow = old and old ~= self and old:window() or nil
  if not ow or self:window() then
    return self:open(focus)
  end
  local prompt = require('pi.prompt')
  local opw = prompt.window(old)
  local function put(win, buf)
    -- The windows keep their buffers ('winfixbuf'): lifted for this one change.
    if vim.fn.exists('+winfixbuf') == 1 then
      set_local(win, 'winfixbuf', false)
    end
    api.nvim_win_set_buf(win, buf)
    if vim.fn.exists('+winfixbuf') == 1 then
      set_local(win, 'winfixbuf', true)
    end
  end
  put(ow, self.buf)
  M.setup_window(ow)
  pcall(api.nvim_win_set_cursor, ow, { api.nvim_buf_line_count(self.buf), 0 })
  if opw then
    put(opw, prompt.ensure_buf(self))
    -- Window-local options belong to the window and its buffer: a buffer put into the window
    -- has the window's global values, not the old prompt's.
    prompt.setup_window(opw)
    prompt.show_queue(self)
  else
    prompt.open(self, ow)
  end
  if focus then
    api.nvim_set_current_win(prompt.window(self) or ow)
  end
  return ow
end

--- Closes the chat's windows in this tabpage (the buffers stay).
function Chat:close()
  local pw = require('pi.prompt').window(self)
  if pw then
    pcall(api.nvim_win_close, pw, false)
  end
  local win = self:window()
  if win and #api.nvim_tabpage_list_wins(0) > 1 then
    pcall(api.nvim_win_close, win, false)
  end
end

--- Toggles the chat window.
function Chat:toggle()
  if self:window() then
    self:close()
  else
    self:open(true)
  end
end

--- Routes one `agent/event` to its chat (a function of the module so it can be measured).
function M.on_event(c, p)
  c:on_event(p)
end

M.Chat = Chat
return M
