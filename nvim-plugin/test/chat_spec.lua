-- UI-level specs of the chat: a prompt streams into the chat buffer (whole text), the
-- tail-append rule (a wrapped vim.api fails on any write above the tail while streaming),
-- a model server that is down is visible within a second, steer + abort during a slow run.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

-- Counts the chat buffer writes in the child and records any that is not an append at the
-- tail, or a whole-buffer set_lines, while a run streams.
local WRAP = [[
  local api = vim.api
  _G.writes = { tail = 0, bad = {}, times = {} }
  local function chat_buf(b)
    if b == 0 then b = api.nvim_get_current_buf() end
    return vim.bo[b].filetype == 'pi-chat' and vim.b[b].pi_session ~= nil
  end
  local set_text, set_lines = api.nvim_buf_set_text, api.nvim_buf_set_lines
  api.nvim_buf_set_text = function(b, sr, sc, er, ec, lines)
    if chat_buf(b) then
      local n = api.nvim_buf_line_count(b)
      local last = api.nvim_buf_get_lines(b, n - 1, n, true)[1]
      if sr ~= n - 1 or er ~= n - 1 or sc ~= #last or ec ~= #last then
        table.insert(_G.writes.bad, ('set_text %d,%d-%d,%d with %d lines'):format(sr, sc, er, ec, n))
      else
        _G.writes.tail = _G.writes.tail + 1
        table.insert(_G.writes.times, vim.uv.hrtime() / 1e6)
      end
    end
    return set_text(b, sr, sc, er, ec, lines)
  end
  api.nvim_buf_set_lines = function(b, s, e, strict, lines)
    if chat_buf(b) and _G.streaming then
      table.insert(_G.writes.bad, ('set_lines %d-%d'):format(s, e))
    end
    return set_lines(b, s, e, strict, lines)
  end
]]

local ANSWER = 'Hello from the mock model. Streaming works in small pieces.\n\nSecond paragraph, with `code`.\n\n```lua\nlocal x = 1\n```'

H.case('a prompt streams into the chat buffer; writes are tail appends, coalesced', function()
  local mock = H.mock({ { text = ANSWER, chunk = 3, chunkDelayMs = 4 } })
  local ws = H.workspace({ ['notes.txt'] = 'hello\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json })
  c:cmd('edit notes.txt')
  c:lua(WRAP)
  local win_before = c:lua('return vim.api.nvim_get_current_win()')
  c:cmd('Pi Say hello')
  H.wait('the answer in the chat', 15000, function()
    local s = c:lua(H.CHAT_STATE)
    return s ~= vim.NIL and s.state == 'idle' and c:lua(H.CHAT_TEXT):find('Second paragraph', 1, true)
  end)
  local text = c:lua(H.CHAT_TEXT)
  H.eq('## You\nSay hello\n\n## Pi mock/mock-1\n\n' .. ANSWER .. '\n', text, 'chat text')
  local w = c:lua('return _G.writes')
  H.eq({}, w.bad, 'writes above the tail')
  -- 30 deltas of 3 characters at ~4 ms: far fewer writes than deltas, never two within 15 ms
  -- while streaming (the last write of a run flushes at once).
  local deltas = math.ceil(#ANSWER / 3)
  assert(w.tail < deltas / 2, ('%d writes for %d deltas'):format(w.tail, deltas))
  for i = 2, #w.times - 1 do
    local gap = w.times[i] - w.times[i - 1]
    assert(gap >= 15, ('writes %d and %d only %.1f ms apart'):format(i - 1, i, gap))
  end
  -- Focus, mode and window unchanged; the chat is on the screen.
  H.eq(win_before, c:lua('return vim.api.nvim_get_current_win()'), 'current window')
  H.eq('n', c:lua('return vim.api.nvim_get_mode().mode'), 'mode')
  local screen = c:screen_text()
  H.contains(screen, 'Second paragraph, with `code`.', 'screen')
  H.contains(screen, '## Pi mock/mock-1', 'screen')
  -- Tree-sitter highlights the chat as markdown (no regex syntax), the lua fence with lua's.
  local ts = c:lua([[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    local function caps(row, col)
      local out = {}
      for _, cap in ipairs(vim.treesitter.get_captures_at_pos(chat.buf, row, col)) do
        out[#out + 1] = cap.lang .. ':' .. cap.capture
      end
      return out
    end
    local lines = vim.api.nvim_buf_get_lines(chat.buf, 0, -1, false)
    local code_row = vim.fn.index(lines, 'local x = 1')
    return { active = vim.treesitter.highlighter.active[chat.buf] ~= nil, syntax = vim.bo[chat.buf].syntax, heading = caps(0, 3), code = caps(code_row, 0) }
  ]])
  H.eq(true, ts.active, 'tree-sitter highlighter on the chat')
  H.eq('', ts.syntax, 'no regex syntax')
  assert(vim.tbl_contains(ts.heading, 'markdown:markup.heading.2'), vim.inspect(ts.heading))
  assert(vim.tbl_contains(ts.code, 'lua:keyword'), vim.inspect(ts.code))
  c:stop()
  mock.stop()
end)

-- Every global option value and global mapping ('syntax' left out: Neovim's own FileType
-- handler, synload.vim, sets it with :set for every buffer that gets a filetype, yours too).
local GLOBALS = [[
  local out = {}
  for name in pairs(vim.api.nvim_get_all_options_info()) do
    local ok, v = pcall(vim.api.nvim_get_option_value, name, { scope = 'global' })
    if ok and name ~= 'syntax' then out['o:' .. name] = vim.inspect(v) end
  end
  for _, mode in ipairs({ 'n', 'i', 'v', 'x', 'o', 'c', 't' }) do
    for _, m in ipairs(vim.api.nvim_get_keymap(mode)) do
      out['map:' .. mode .. ':' .. m.lhs] = m.rhs or 'fn'
    end
  end
  return out
]]

H.case('no global option or mapping changes; / completes from agent/commands', function()
  local mock = H.mock({ { text = 'Fine.', toolCalls = { { id = 'l1', name = 'ls', arguments = vim.empty_dict() } } }, { text = 'Listed.' } })
  local ws = H.workspace({ ['a.txt'] = 'a\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json })
  H.write(c.home .. '/agent/prompts/review.md', '---\ndescription: Review the code\n---\nReview $@\n')
  c:cmd('edit a.txt')
  local before = c:lua(GLOBALS)
  c:cmd('Pi look around')
  H.wait('the run', 15000, function()
    local s = c:lua(H.CHAT_STATE)
    return s ~= vim.NIL and s.state == 'idle' and c:lua(H.CHAT_TEXT):find('Listed.', 1, true)
  end)
  c:cmd('Pi chat')
  c:cmd('Pi chat')
  c:cmd('Pi')
  local after = c:lua(GLOBALS)
  local changed = {}
  for k, v in pairs(after) do
    if before[k] ~= v then
      changed[#changed + 1] = k .. ': ' .. tostring(before[k]) .. ' -> ' .. v
    end
  end
  for k in pairs(before) do
    if after[k] == nil then
      changed[#changed + 1] = k .. ' removed'
    end
  end
  table.sort(changed)
  H.eq({}, changed, 'global options and mappings changed')
  -- In the prompt (focused by :Pi): /re + CTRL-X CTRL-U completes the template.
  H.eq('pi-prompt', c:lua('return vim.bo.filetype'), 'focused buffer')
  c:input('i/re<C-x><C-u>')
  H.wait('the completion', 3000, function()
    return c:lua('return vim.api.nvim_get_current_line()') == '/review'
  end)
  -- @ completes workspace paths.
  c:input(' @a.<C-x><C-u>')
  H.wait('the path completion', 3000, function()
    return c:lua('return vim.api.nvim_get_current_line()') == '/review @a.txt'
  end)
  c:input('<Esc>')
  c:stop()
  mock.stop()
end)

H.case('a model server that is down is visible within a second', function()
  local ws = H.workspace()
  local models = {
    providers = {
      down = {
        baseUrl = 'http://127.0.0.1:9/v1',
        api = 'openai-completions',
        apiKey = 'k',
        models = { { id = 'm', contextWindow = 128000, maxTokens = 1000 } },
      },
    },
  }
  local c = H.child({ ws = ws, models_json = models })
  c:cmd('Pi new')
  H.wait('the session', 10000, function()
    return c:lua(H.CHAT_STATE) ~= vim.NIL
  end)
  local t0 = vim.uv.hrtime()
  c:cmd('Pi hello?')
  H.wait('the failure in the chat', 1000, function()
    local t = c:lua(H.CHAT_TEXT)
    return t:find('⟳', 1, true) or t:find('✗', 1, true)
  end)
  local ms = (vim.uv.hrtime() - t0) / 1e6
  io.stdout:write(('     (failure shown after %.0f ms)\n'):format(ms))
  c:cmd('Pi abort')
  c:stop()
end)

H.case('abort before anything streamed puts the prompt back', function()
  local mock = H.mock({ { text = 'late', delayMs = 5000 } })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json })
  c:cmd('Pi a prompt to keep')
  H.wait('the run', 10000, function()
    local s = c:lua(H.CHAT_STATE)
    return s ~= vim.NIL and s.state == 'running'
  end)
  c:cmd('Pi abort')
  H.wait('the prompt back', 10000, function()
    return c:lua([[
      local client = require('pi.client')
      local chat = require('pi.chat').current(client.roots[client.root_of(0)])
      return require('pi.prompt').text(chat)
    ]]) == 'a prompt to keep'
  end)
  -- Nothing ran but the request: one line says the outcome, no empty report.
  H.wait('the outcome', 5000, function()
    return c:screen_text():find('■ stopped', 1, true) ~= nil
  end)
  H.eq('## You\na prompt to keep\n\n■ stopped\n', c:lua(H.CHAT_TEXT), 'chat text')
  H.eq(nil, c:lua(H.CHAT_TEXT):find('### ■ Stopped', 1, true), 'no empty report block')
  c:stop()
  mock.stop()
end)

H.case('steer and abort during a slow run: the queue and the report block', function()
  local mock = H.mock({
    { text = 'Working on it.', toolCalls = { { id = 'call_sleep', name = 'bash', arguments = { command = 'sleep 30' } } } },
    { text = 'never reached' },
  })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "approve-all"}', cols = 160 })
  c:cmd('Pi run the slow thing')
  H.wait('the bash call running', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ⚙ bash  sleep 30', 1, true)
  end)
  -- The run's work-done progress reaches vim.lsp.status() (for statuslines).
  H.wait('progress in vim.lsp.status()', 5000, function()
    return c:lua('return vim.lsp.status()') ~= ''
  end)
  H.eq('running', c:lua(H.CHAT_STATE).state, 'state while running')
  H.contains(c:lua('return require("pi").statusline()'), 'mock/mock-1 · ', 'statusline')
  -- Steer from the prompt buffer: type, then <CR> in normal mode.
  c:lua([[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    vim.api.nvim_set_current_win(require('pi.prompt').window(chat))
  ]])
  c:input('ialso look at the tests<Esc>')
  c:input('<CR>')
  H.wait('the steer queued', 5000, function()
    local q = c:lua([[
      local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
      return chat:queued()
    ]])
    return #q == 1 and q[1].state == 'queued' and q[1].delivery == 'steer' and q[1].text == 'also look at the tests'
  end)
  H.contains(c:screen_text(), '⧗ steer (queued): also look at the tests', 'queue shown above the prompt')
  c:input('<C-c>')
  H.wait('the abort report', 10000, function()
    return c:lua(H.CHAT_TEXT):find('Queued messages kept', 1, true)
  end)
  local text = c:lua(H.CHAT_TEXT)
  local report = text:sub(text:find('↳ bash ✗', 1, true), -1)
  H.eq(
    table.concat({
      '↳ bash ✗ (1 line)',
      '```',
      'Command aborted',
      '```',
      '',
      '### ■ Stopped',
      'Stopped tool calls:',
      '- bash sleep 30',
      'Killed processes:',
      '- `sleep 30`',
      'Queued messages kept for the next prompt (gq in the prompt edits or drops them):',
      '- steer: also look at the tests',
      '',
    }, '\n'),
    report,
    'report block'
  )
  -- The tool header shows ✗ (an extmark over the real-text header).
  local marks = c:lua([[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    local out = {}
    for _, m in ipairs(vim.api.nvim_buf_get_extmarks(chat.buf, require('pi.render').ns, 0, -1, { details = true })) do
      local line = vim.api.nvim_buf_get_lines(chat.buf, m[2], m[2] + 1, false)[1]
      if m[4].virt_text and line:find('### ⚙', 1, true) then
        out[#out + 1] = line .. ' |' .. m[4].virt_text[1][1]:gsub(' [%d.]+ s$', '')
      end
    end
    return out
  ]])
  H.eq({ '### ⚙ bash  sleep 30 | ✗' }, marks, 'tool status')
  H.eq('idle', c:lua(H.CHAT_STATE).state, 'state after abort')
  c:stop()
  mock.stop()
end)

H.case('<Esc> stops a young run at once; in a long run it asks once and a second <Esc> keeps it running', function()
  local mock = H.mock({
    { text = 'Working.', toolCalls = { { id = 'call_s1', name = 'bash', arguments = { command = 'sleep 30' } } } },
    { text = 'Working again.', toolCalls = { { id = 'call_s2', name = 'bash', arguments = { command = 'sleep 31' } } } },
    { text = 'never reached' },
  })
  local c = H.child({ ws = H.workspace(), models_json = mock.models_json, setup = '{approval_policy = "approve-all", chat = {esc_confirm_after = 2}}', cols = 160 })
  local CHAT_WIN = [[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    vim.api.nvim_set_current_win(chat:window())
  ]]
  c:cmd('Pi first run')
  H.wait('the first sleep running', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ⚙ bash  sleep 30', 1, true)
  end)
  c:lua(CHAT_WIN)
  c:input('<Esc>')
  H.wait('stopped at once', 10000, function()
    return c:lua(H.CHAT_TEXT):find('### ■ Stopped', 1, true) and c:lua(H.CHAT_STATE).state == 'idle'
  end)
  -- Outside a run <Esc> is the usual key (nothing asked, nothing sent).
  c:input('<Esc>')
  vim.wait(100)
  assert(not c:screen_text():find('Stop it?', 1, true), 'asked outside a run')
  c:cmd('Pi second run')
  H.wait('the second sleep running', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ⚙ bash  sleep 31', 1, true)
  end)
  vim.wait(2100)
  -- In the prompt, <Esc><Esc> out of insert mode (the habit) neither asks nor stops.
  c:lua([[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    vim.api.nvim_set_current_win(require('pi.prompt').window(chat))
  ]])
  c:input('inote<Esc><Esc>')
  vim.wait(300)
  assert(not c:screen_text():find('Stop it?', 1, true), 'asked after <Esc><Esc> out of insert mode')
  H.eq('running', c:lua(H.CHAT_STATE).state, 'still running after <Esc><Esc> in the prompt')
  c:lua(CHAT_WIN)
  c:input('<Esc>')
  H.wait('the question', 5000, function()
    return c:screen_text():find('Pi has been running for %d+ s%. Stop it%?') ~= nil
  end)
  H.contains(c:screen_text(), '1: Keep it running\n2: Stop the run', 'choices')
  -- A second <Esc> (the habit) answers "keep it".
  c:input('<Esc>')
  vim.wait(300)
  H.eq('running', c:lua(H.CHAT_STATE).state, 'still running after <Esc><Esc>')
  c:input('<Esc>')
  H.wait('the question again', 5000, function()
    return c:screen_text():find('Stop it?', 1, true) ~= nil
  end)
  c:input('2<CR>')
  H.wait('stopped after the answer', 10000, function()
    local _, n = c:lua(H.CHAT_TEXT):gsub('### ■ Stopped', '')
    return n == 2 and c:lua(H.CHAT_STATE).state == 'idle'
  end)
  c:stop()
  mock.stop()
end)

-- The pi-lsp process started by the child Neovim (its child process).
local function server_pid(c)
  local nvim_pid = c.handle:get_pid()
  for _, dir in ipairs(vim.fn.glob('/proc/[0-9]*', false, true)) do
    local stat = H.read(dir .. '/stat') or ''
    local pid, comm, ppid = stat:match('^(%d+) %((.-)%) %S+ (%d+)')
    if pid and tonumber(ppid) == nvim_pid and comm:match('^pi%-lsp') then
      return tonumber(pid)
    end
  end
end

H.case('the server dying during a run is said, the chat stops waiting, the next :Pi goes on', function()
  local mock = H.mock({
    { text = 'Working.', toolCalls = { { id = 'call_k', name = 'bash', arguments = { command = 'sleep 30' } } } },
    { text = 'Back again.' },
  })
  local c = H.child({ ws = H.workspace(), models_json = mock.models_json, setup = '{approval_policy = "approve-all"}', cols = 160 })
  c:cmd('Pi first')
  H.wait('the sleep running', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ⚙ bash  sleep 30', 1, true)
  end)
  local pid = server_pid(c)
  assert(pid, 'no pi-lsp child found')
  vim.uv.kill(pid, 'sigkill')
  -- Neovim says it (its own message for a client killed by a signal); the chat says it too.
  H.wait('Neovim\'s message', 10000, function()
    return table.concat(c:screen(), '\n'):find('Client pi-lsp quit with exit code 0 and signal 9', 1, true) ~= nil
  end)
  c:input('<CR>')
  H.wait('the chat stopped', 10000, function()
    return c:lua(H.CHAT_STATE).state == 'stopped'
  end)
  H.contains(c:lua(H.CHAT_TEXT), '\n✗ the server stopped during the run (signal 9); the next :Pi starts it again\n', 'chat')
  H.eq(false, c:lua(H.CHAT_STATE).running, 'not running')
  c:cmd('Pi second')
  H.wait('the answer after the restart', 15000, function()
    return c:lua(H.CHAT_TEXT):find('Back again.', 1, true) and c:lua(H.CHAT_STATE).state == 'idle'
  end)
  assert(server_pid(c) and server_pid(c) ~= pid, 'a new server')
  c:stop()
  mock.stop()
end)

H.case('a long chat streams under the regex syntax and gets tree-sitter back when the run ends', function()
  local mock = H.mock({ { text = string.rep('streaming words ', 40), chunk = 8, chunkDelayMs = 15 } })
  local c = H.child({ ws = H.workspace(), models_json = mock.models_json })
  c:cmd('Pi new')
  H.wait('the session', 10000, function()
    return c:lua(H.CHAT_STATE) ~= vim.NIL
  end)
  local HL = [[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    return { ts = vim.treesitter.highlighter.active[chat.buf] ~= nil, syntax = vim.bo[chat.buf].syntax, lines = vim.api.nvim_buf_line_count(chat.buf) }
  ]]
  -- 400 lines of earlier conversation.
  c:lua([[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    chat.writer:append(string.rep('## Pi\n\nEarlier **answer**.\n\n', 100))
    chat.writer:flush()
  ]])
  H.eq({ ts = true, syntax = '', lines = 401 }, c:lua(HL), 'before the run')
  c:cmd('Pi go on')
  H.wait('streaming', 10000, function()
    return c:lua(H.CHAT_TEXT):find('streaming words', 1, true) ~= nil
  end)
  local during = c:lua(HL)
  H.eq({ false, 'markdown' }, { during.ts, during.syntax }, 'while the run streams')
  H.wait('the end of the run', 15000, function()
    return c:lua(H.CHAT_STATE).state == 'idle'
  end)
  local after = c:lua(HL)
  H.eq({ true, '' }, { after.ts, after.syntax }, 'after the run')
  c:stop()
  mock.stop()
end)


H.case('<Up> in the prompt recalls the earlier prompts of the workspace (kept on disk); <Down> comes back', function()
  local mock = H.mock({ { text = 'One.' }, { text = 'Two.' } })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json })
  c:cmd('Pi first prompt')
  H.idle_with(c, 'One.')
  c:cmd('Pi second\nof two lines')
  H.idle_with(c, 'Two.')
  local PROMPT = [[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    return require('pi.prompt').text(chat)
  ]]
  -- In the prompt, something typed, then <Up>: the newest prompt; <Up>: the one before.
  c:cmd('Pi')
  H.wait('the prompt focused', 2000, function()
    return c:lua('return vim.bo.filetype') == 'pi-prompt'
  end)
  c:input('<Esc>idraft<Esc>')
  c:input('<Up>')
  H.wait('the newest prompt', 2000, function()
    return c:lua(PROMPT) == 'second\nof two lines'
  end)
  c:input('<Up>')
  H.wait('the earlier prompt', 2000, function()
    return c:lua(PROMPT) == 'first prompt'
  end)
  c:input('<Down><Down>')
  H.wait('back to the draft', 2000, function()
    return c:lua(PROMPT) == 'draft'
  end)
  -- Kept on disk for this workspace (a new Neovim recalls them too).
  local files = vim.fn.glob(c.home .. '/state/nvim/pi/prompts/*.json', false, true)
  H.eq(1, #files, 'one history file')
  H.eq({ 'first prompt', 'second\nof two lines' }, vim.json.decode(H.read(files[1])), 'the history file')
  c:stop()
  mock.stop()
end)

H.done()
