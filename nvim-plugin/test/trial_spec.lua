-- Specs of what a hand trial (a new user, from the README, in a real Neovim against an
-- independent model server) found: the abort's outcome drawn after everything the server sent
-- before it, delivered messages leaving the queue, the prompt window after a session switch, a
-- question in a float when its chat is closed, model failures in the user's words.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

local CHAT = [[
  local client = require('pi.client')
  local chat = require('pi.chat').current(client.roots[client.root_of(0)])
]]

-- Records every vim.notify message of the child in _G.notes.
local NOTES = [[
  _G.notes = {}
  local notify = vim.notify
  vim.notify = function(msg, level, opts)
    table.insert(_G.notes, tostring(msg))
    return notify(msg, level, opts)
  end
]]

H.case('the abort outcome comes after the text the server sent before it, "stopping…" under the tail meanwhile', function()
  local words = {}
  for i = 1, 400 do
    words[#words + 1] = 'word' .. i
  end
  local long = table.concat(words, ' ')
  local mock = H.mock({ { text = long, chunk = 6, chunkDelayMs = 3 } })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json })
  c:cmd('Pi stream a lot')
  H.wait('the stream', 15000, function()
    return c:lua(H.CHAT_TEXT):find('word2 ', 1, true) ~= nil
  end)
  -- The user stops the run while Neovim is behind the stream: the server's deltas sent before
  -- the abort are still to be drawn when the key is handled.
  local note = c:lua(CHAT .. [[
    vim.uv.sleep(400)
    require('pi').abort(chat)
    return chat.writer.note and chat.writer.note.text or vim.NIL
  ]])
  H.eq('■ stopping…', note, 'the note under the tail at once')
  H.wait('the outcome', 10000, function()
    return c:lua(H.CHAT_STATE).state == 'idle' and c:lua(H.CHAT_TEXT):find('■ stopped', 1, true) ~= nil
  end)
  local text = c:lua(H.CHAT_TEXT)
  H.eq(nil, text:find('stopping', 1, true), 'no "stopping" text in the buffer')
  -- Everything streamed is above the outcome, which is the last line.
  local before = text:match('^## You\nstream a lot\n\n## Pi mock/mock%-1\n\n(.-)\n\n■ stopped\n$')
  assert(before, 'the outcome is not the last line after the streamed text:\n' .. text)
  H.eq(long:sub(1, #before), before, 'the streamed text, whole, before the outcome')
  H.eq(vim.NIL, c:lua(CHAT .. 'return chat.writer.note or vim.NIL'), 'the note is gone')
  c:stop()
  mock.stop()
end)

H.case('a delivered steer leaves the queue when the aborted run ends; no filler row above the prompt', function()
  local mock = H.mock({
    { text = 'Working.', toolCalls = { { id = 'call_s', name = 'bash', arguments = { command = 'sleep 2' } } } },
    { text = 'late answer', delayMs = 8000 },
  })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "approve-all"}', cols = 140, rows = 40 })
  c:cmd('Pi run it')
  H.wait('the bash call', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ⚙ bash  sleep 2', 1, true) ~= nil
  end)
  c:cmd('Pi steer keep it short')
  H.wait('the steer delivered', 15000, function()
    local q = c:lua(CHAT .. 'return chat:queued()')
    return #q == 1 and q[1].state == 'delivered'
  end)
  H.contains(c:screen_text(), '⧗ steer (delivered): keep it short', 'the delivered steer above the prompt')
  c:cmd('Pi abort')
  H.wait('the run stopped', 10000, function()
    return c:lua(H.CHAT_STATE).state == 'idle' and c:lua(H.CHAT_TEXT):find('■ stopped', 1, true) ~= nil
  end)
  H.eq({}, c:lua(CHAT .. 'return chat:queued()'), 'queue after the run')
  local screen
  local ok = pcall(H.wait, 'the placeholder', 3000, function()
    screen = c:screen_text()
    return screen:find('Ask Pi…', 1, true) ~= nil
  end)
  assert(ok, 'placeholder not on the screen (prompt: ' .. vim.inspect(c:lua(CHAT .. 'return { require("pi.prompt").text(chat), require("pi.prompt").window(chat) or vim.NIL, chat.state }')) .. '):\n' .. screen)
  H.eq(nil, screen:find('⧗', 1, true), 'no queue line on the screen')
  -- The prompt window's first row is the placeholder (no row of '-' left from the queue lines).
  local rows = vim.split(screen, '\n')
  local at
  for i, r in ipairs(rows) do
    if r:find(' Pi prompt ', 1, true) then
      break
    end
    if r:find('Ask Pi…', 1, true) then
      at = i
    end
  end
  assert(at, 'placeholder not on the screen:\n' .. screen)
  assert(rows[at - 1]:find('│?%s*Pi%s') or rows[at - 1]:find(' Pi ', 1, true), 'the row above the prompt is not the chat statusline: ' .. rows[at - 1] .. '\n' .. screen)
  for _, r in ipairs(rows) do
    assert(not r:find('%-%-%-%-%-%-%-%-%-%-'), 'a filler row on the screen:\n' .. screen)
  end
  c:stop()
  mock.stop()
end)

H.case('after :Pi new the prompt window keeps its statusline and options; the meter is the new session\'s', function()
  local mock = H.mock({ { text = 'One.' } })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 140, rows = 30 })
  c:cmd('Pi first')
  H.idle_with(c, 'One.')
  H.wait('the meter', 5000, function()
    return c:lua('return require("pi").statusline()'):find('%d+%%') ~= nil
  end)
  local first = c:lua(H.CHAT_STATE).session
  c:cmd('Pi new')
  H.wait('the new session', 10000, function()
    local s = c:lua(H.CHAT_STATE)
    return s ~= vim.NIL and s.session ~= first
  end)
  -- The new session's meter and cost are its own (nothing used yet), not the first one's.
  H.wait('the statusline of the new session', 5000, function()
    return c:lua('return require("pi").statusline()') == 'mock/mock-1 · $0.000 · idle'
  end)
  local opts = c:lua(CHAT .. [[
    local win = require('pi.prompt').window(chat)
    local o = {}
    for _, name in ipairs({ 'statusline', 'fillchars', 'number', 'signcolumn', 'winfixheight' }) do
      o[name] = vim.api.nvim_get_option_value(name, { win = win, scope = 'local' })
    end
    o.buf = vim.api.nvim_win_get_buf(win) == chat.prompt_buf
    return o
  ]])
  H.eq({
    buf = true,
    statusline = '%#Title# Pi prompt %* <CR> send · <M-CR> follow-up · <C-c> stop%<',
    fillchars = 'eob: ',
    number = false,
    signcolumn = 'no',
    winfixheight = true,
  }, opts, 'prompt window options')
  H.contains(c:screen_text(), ' Pi prompt  <CR> send · <M-CR> follow-up · <C-c> stop', 'prompt statusline on the screen')
  c:stop()
  mock.stop()
end)

H.case('a question open when its chat is closed moves to a float; the notice says what it asks', function()
  local mock = H.mock({
    { text = 'Reading.', toolCalls = { { id = 'call_r', name = 'read', arguments = { path = 'notes.txt' } } } },
    { text = 'Read it.' },
  })
  local ws = H.workspace({ ['notes.txt'] = 'hello\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "ask"}', cols = 140, rows = 40 })
  c:cmd('edit notes.txt')
  c:lua(NOTES)
  c:cmd('Pi read the notes')
  H.wait('the question', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ? Permission: read notes.txt', 1, true) ~= nil
  end)
  local ok = pcall(H.wait, 'the notice', 5000, function()
    return vim.tbl_contains(c:lua('return _G.notes'), 'Pi: wants to read notes.txt — answer: a digit in the chat, :Pi allow or :Pi reject')
  end)
  assert(ok, 'notices: ' .. vim.inspect(c:lua('return _G.notes')))
  H.eq(0, c:lua('local n = 0 for _, w in ipairs(vim.api.nvim_list_wins()) do if vim.api.nvim_win_get_config(w).relative ~= "" then n = n + 1 end end return n'), 'no float while the chat shows the question')
  c:cmd('Pi chat') -- closes the chat
  H.wait('the float', 5000, function()
    return c:screen_text():find('Answer with a digit alone here', 1, true) ~= nil
  end)
  local screen = c:screen_text()
  H.contains(screen, 'Pi permission', 'float title')
  H.contains(screen, '### ? Permission: read notes.txt', 'float question')
  H.eq('notes.txt', c:lua('return vim.fn.expand("%:t")'), 'the focus stays in the file')
  -- Answered with a digit in the float.
  c:lua([[
    for _, w in ipairs(vim.api.nvim_list_wins()) do
      if vim.api.nvim_win_get_config(w).relative ~= '' then vim.api.nvim_set_current_win(w) end
    end
  ]])
  c:input('1')
  H.idle_with(c, 'Read it.')
  H.eq(nil, c:screen_text():find('Answer with a digit alone here', 1, true), 'the float is gone')
  c:stop()
  mock.stop()
end)

H.case('a model server that is down is said in the user words; an abort during the retries is no "gave up"', function()
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
  local c = H.child({ ws = ws, models_json = models, cols = 160 })
  c:lua(NOTES)
  c:cmd('Pi hello?')
  H.wait('the retry', 5000, function()
    return c:lua(H.CHAT_TEXT):find('⟳ retry 1/', 1, true) ~= nil
  end)
  local text = c:lua(H.CHAT_TEXT)
  -- The server says it in words (docs/protocol.md "errors in words"); the chat shows them.
  H.contains(text, '✗ the model server refused the connection at 127.0.0.1:9 (is it running?)', 'the failure in words')
  H.eq(nil, text:find('os error', 1, true), 'no HTTP client chain')
  -- No usage read yet: the meter says nothing rather than "0%".
  H.eq(nil, c:lua('return require("pi").statusline()'):find('0%', 1, true), 'no 0% meter')
  c:cmd('Pi abort')
  H.wait('the abort', 10000, function()
    return c:lua(H.CHAT_STATE).state == 'idle' and c:lua(H.CHAT_TEXT):find('■ stopped', 1, true) ~= nil
  end)
  text = c:lua(H.CHAT_TEXT)
  H.eq(nil, text:find('gave up', 1, true), 'no "gave up" after the user stopped it')
  H.eq(nil, text:find('aborted', 1, true), 'no "Request was aborted"')
  for _, n in ipairs(c:lua('return _G.notes')) do
    assert(not n:find('os error', 1, true), 'a notice with the HTTP client chain: ' .. n)
  end
  c:stop()
end)

-- Whether the server has `agent/continue` (`:Pi retry`; the chat offers it after a failure).
local HAS_CONTINUE = [[
  local client = require('pi.client')
  return client.has_method(client.roots[client.root_of(0)], 'agent/continue')
]]
local PROMPT_TEXT = [[
  local client = require('pi.client')
  return require('pi.prompt').text(require('pi.chat').current(client.roots[client.root_of(0)]))
]]

H.case('a model server error is said once in its own words; the retries say "same error"', function()
  local fail = { status = 500, error = 'trial internal error' }
  local mock = H.mock({ fail, fail, fail })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 160 })
  H.write(c.home .. '/agent/settings.json', vim.json.encode({ retry = { maxRetries = 2, baseDelayMs = 100 } }))
  c:cmd('Pi hello?')
  H.wait('the give-up', 15000, function()
    return c:lua(H.CHAT_STATE).state ~= 'running' and c:lua(H.CHAT_TEXT):find('gave up', 1, true) ~= nil
  end)
  local text = c:lua(H.CHAT_TEXT):gsub('in [%d.]+ s', 'in N s')
  H.eq(
    table.concat({
      '## You',
      'hello?',
      '',
      '✗ the model server had an error on its side (HTTP 500): trial internal error',
      '',
      '⟳ retry 1/2 in N s',
      '',
      '⟳ retry 2/2 in N s (same error)',
      '',
      '✗ gave up after 2 attempts (same error)',
      '',
    }, '\n') .. (c:lua(HAS_CONTINUE) and '\n↻ :Pi retry runs it again (your message is not repeated)\n' or ''),
    text,
    'chat text'
  )
  H.eq('hello?', c:lua(PROMPT_TEXT), 'the failed prompt back in the prompt buffer')
  c:stop()
  mock.stop()
end)

H.case(':Pi sessions marks a session of Pi\'s own and opens it with its history', function()
  local mock = H.mock({ { text = 'Ours.' } })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 160 })
  -- A session Pi wrote for this folder, in Pi's sessions folder.
  local src = H.plugin_dir .. '/../fixtures/sessions/pi-0.73.1-anthropic-read.jsonl'
  local lines = vim.fn.readfile(src)
  local header = vim.json.decode(lines[1])
  header.cwd = ws
  lines[1] = vim.json.encode(header)
  local dir = c.home .. '/agent/sessions/--' .. ws:gsub('^/', ''):gsub('/', '-') .. '--'
  vim.fn.mkdir(dir, 'p')
  vim.fn.writefile(lines, dir .. '/2026-11-30T16-52-40-958Z_pi.jsonl')
  c:cmd('Pi ours')
  H.idle_with(c, 'Ours.')
  c:lua([[
    _G.picked = nil
    vim.ui.select = function(items, opts, on_choice)
      local out = {}
      for _, it in ipairs(items) do out[#out + 1] = opts.format_item(it):gsub(' · %d+ [smhd]%w* ago', ' · T ago') end
      _G.picked = out
      for i, it in ipairs(items) do
        if not it.sessionFile:find('/.pi/sessions/', 1, true) then return on_choice(it, i) end
      end
    end
  ]])
  c:cmd('Pi sessions')
  H.wait('the picker', 10000, function()
    return c:lua('return _G.picked') ~= vim.NIL
  end)
  local picked = c:lua('return _G.picked')
  H.eq(2, #picked, 'two sessions: ' .. vim.inspect(picked))
  -- Pi 1.6's stored system message is an entry too.
  H.eq('ours  · 5 entries · T ago · open', picked[1]:gsub('^ours', 'ours'), 'this workspace\'s session')
  assert(picked[2]:find(' · from Pi$'), 'Pi\'s own session marked: ' .. picked[2])
  H.wait('its history', 10000, function()
    return c:lua(H.CHAT_TEXT):find('### ⚙ read', 1, true) ~= nil
  end)
  c:stop()
  mock.stop()
end)

H.case('the chat opened beside two split windows leaves them equally wide, itself at its width', function()
  local mock = H.mock({ { text = 'Fine.' } })
  local ws = H.workspace({ ['a.txt'] = 'a\n', ['b.txt'] = 'b\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 200, rows = 40 })
  c:cmd('edit a.txt')
  c:cmd('vsplit b.txt')
  local cur = c:lua('return vim.api.nvim_get_current_win()')
  c:cmd('Pi hello')
  H.idle_with(c, 'Fine.')
  local w = c:lua([[
    local out = {}
    for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
      out[vim.fn.fnamemodify(vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(win)), ':t')] = vim.api.nvim_win_get_width(win)
    end
    return out
  ]])
  local chat_w, a, b
  for name, width in pairs(w) do
    if name:match('^%x+%-') or name == '' then
      chat_w = chat_w or width
    elseif name == 'a.txt' then
      a = width
    elseif name == 'b.txt' then
      b = width
    end
  end
  H.eq(80, chat_w, 'chat width (0.4 of 200 columns): ' .. vim.inspect(w))
  assert(math.abs(a - b) <= 1, 'the code windows are not equally wide: ' .. vim.inspect(w))
  H.eq(cur, c:lua('return vim.api.nvim_get_current_win()'), 'focus unchanged')
  c:stop()
  mock.stop()
end)

H.case('a models.json that does not load is said as the server words it, not as "that model is not available"', function()
  local ws = H.workspace()
  local c = H.child({ ws = ws, cols = 160 })
  H.write(c.home .. '/agent/models.json', '{"providers": {"x": {"baseUrl": "http://127.0.0.1:9",\n')
  c:lua(NOTES)
  c:cmd('Pi hi')
  H.wait('the notice', 10000, function()
    return #c:lua('return _G.notes') > 0
  end)
  H.eq(
    { 'Pi: could not start a session: ~/agent/models.json does not load (EOF while parsing a value at line 2 column 0)' },
    c:lua('return _G.notes'),
    'notices'
  )
  c:stop()
end)

H.case('Pi\'s own / commands typed in the prompt run as :Pi subcommands (not sent to the model), and complete', function()
  local mock = H.mock({ { text = 'Hi.' } })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 160 })
  c:cmd('Pi hello')
  H.idle_with(c, 'Hi.')
  c:lua(NOTES)
  c:cmd('Pi')
  H.eq('pi-prompt', c:lua('return vim.bo.filetype'), 'the prompt focused')
  c:input('i/na<C-x><C-u>')
  H.wait('the completion', 3000, function()
    return c:lua('return vim.api.nvim_get_current_line()') == '/name'
  end)
  c:input(' trial session<Esc>')
  c:input('<CR>')
  H.wait('the session named', 5000, function()
    return vim.tbl_contains(c:lua('return _G.notes'), 'Pi: session named: trial session')
  end)
  H.eq('', c:lua(CHAT .. 'return require("pi.prompt").text(chat)'), 'the prompt emptied')
  H.eq(1, #mock.requests(), 'nothing sent to the model')
  H.eq(nil, c:lua(H.CHAT_TEXT):find('/name', 1, true), 'no prompt in the chat')
  c:stop()
  mock.stop()
end)

H.case('a tool call without arguments reads "ls", not "ls {}", in the chat, the question and the notice', function()
  local mock = H.mock({ { text = 'Looking.', toolCalls = { { id = 'call_l', name = 'ls', arguments = vim.empty_dict() } } }, { text = 'Seen.' } })
  local ws = H.workspace({ ['a.txt'] = 'a\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "ask"}', cols = 160 })
  c:cmd('edit a.txt')
  c:lua(NOTES)
  c:cmd('Pi look')
  H.wait('the question', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ? Permission: ls\n', 1, true) ~= nil
  end)
  H.wait('the notice', 5000, function()
    return vim.tbl_contains(c:lua('return _G.notes'), 'Pi: wants to ls — answer: a digit in the chat, :Pi allow or :Pi reject')
  end)
  c:cmd('Pi allow')
  H.idle_with(c, 'Seen.')
  local text = c:lua(H.CHAT_TEXT)
  H.contains(text, '\n### ⚙ ls\n', 'tool header')
  H.eq(nil, text:find('{}', 1, true), 'no "{}" in the chat')
  c:stop()
  mock.stop()
end)

H.case('a model request that has not answered yet is said under the tail, and goes with its first event', function()
  local mock = H.mock({ { text = 'Late but here.', delayMs = 3000 } })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 120 })
  c:cmd('Pi are you slow?')
  H.wait('the waiting line', 2500, function()
    return c:screen_text():find('are you slow%?\n[^\n]*\n[^\n]*⋯ waiting for mock/mock%-1') ~= nil
  end)
  H.eq('## You\nare you slow?\n', c:lua(H.CHAT_TEXT), 'not text of the buffer')
  H.idle_with(c, 'Late but here.')
  H.eq(nil, c:screen_text():find('waiting for', 1, true), 'gone once the answer came')
  H.eq(vim.NIL, c:lua(CHAT .. 'return chat.writer.note or vim.NIL'), 'no note left')
  c:stop()
  mock.stop()
end)

H.case('`a` in the chat away from a question goes to the prompt in insert mode, as `i` does', function()
  local mock = H.mock({ { text = 'Hi.' } })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 120 })
  c:cmd('Pi hello')
  H.idle_with(c, 'Hi.')
  c:lua(CHAT .. 'vim.api.nvim_set_current_win(chat:window())')
  c:input('a')
  H.wait('the prompt', 3000, function()
    return c:lua('return vim.bo.filetype .. ":" .. vim.api.nvim_get_mode().mode') == 'pi-prompt:i'
  end)
  c:input('typed<Esc>')
  H.eq('typed', c:lua(CHAT .. 'return require("pi.prompt").text(chat)'), 'prompt text')
  c:stop()
  mock.stop()
end)

H.case('two :Pi prompts before the server answered make one session and one chat; the second steers', function()
  local mock = H.mock({ { text = 'First answer.', chunk = 2, chunkDelayMs = 20 }, { text = 'Second answer.' } })
  local ws = H.workspace({ ['a.txt'] = 'a\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 160 })
  c:cmd('edit a.txt')
  c:lua(NOTES)
  c:lua([[vim.cmd('Pi first one') vim.cmd('Pi second one')]])
  H.idle_with(c, 'First answer.')
  local n = c:lua([[
    local n = 0
    for _ in pairs(require('pi.chat').chats) do n = n + 1 end
    local wins = 0
    for _, w in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
      if vim.bo[vim.api.nvim_win_get_buf(w)].filetype == 'pi-chat' then wins = wins + 1 end
    end
    return { chats = n, windows = wins }
  ]])
  H.eq({ chats = 1, windows = 1 }, n, 'chats')
  -- The steer reaches the run before its first model request (both go in it) or after its
  -- first answer (a second turn): either way both are the user's, in order, in one run.
  local text = c:lua(H.CHAT_TEXT)
  local one = '## You\nfirst one\n\n## You\nsecond one\n\n## Pi mock/mock-1\n\nFirst answer.\n'
  local two = '## You\nfirst one\n\n## Pi mock/mock-1\n\nFirst answer.\n\n## You\nsecond one\n\n## Pi mock/mock-1\n\nSecond answer.\n'
  assert(text == one or text == two, 'chat text:\n' .. text)
  H.eq({}, c:lua('return _G.notes'), 'no notice (no "busy" error, no queued-for-later steer)')
  c:stop()
  mock.stop()
end)

H.case(':Pi compact during a streaming answer is drawn after it, not inside it', function()
  local lines = {}
  for i = 1, 60 do
    lines[#lines + 1] = ('line %d of a long answer'):format(i)
  end
  local answer = table.concat(lines, '\n')
  local mock = H.mock({ { text = answer, chunk = 4, chunkDelayMs = 6 }, { text = 'Summary of it.' } })
  -- One turn is all there is: keep less than it raw, so there is something to summarise.
  local ws = H.workspace()
  local c = H.child({
    ws = ws,
    models_json = mock.models_json,
    agent_files = { ['settings.json'] = '{"compaction": {"keepRecentTokens": 1}}' },
    cols = 160,
  })
  c:cmd('Pi talk a lot')
  H.wait('the stream', 15000, function()
    return c:lua(H.CHAT_TEXT):find('line 3 of', 1, true) ~= nil
  end)
  c:cmd('Pi compact')
  H.wait('the compaction', 20000, function()
    return c:lua(H.CHAT_TEXT):find('⋯ compacted', 1, true) ~= nil
  end)
  local text = c:lua(H.CHAT_TEXT)
  H.contains(text, '## Pi mock/mock-1\n\n' .. answer .. '\n\n⋯ compacting the context (manual)\n\n⋯ compacted: ', 'the answer whole, then the compaction')
  c:stop()
  mock.stop()
end)

H.case('your own :Pi !cmd during a streaming answer is drawn after it, not inside it', function()
  local lines = {}
  for i = 1, 60 do
    lines[#lines + 1] = ('line %d of a long answer'):format(i)
  end
  local answer = table.concat(lines, '\n')
  local mock = H.mock({ { text = answer, chunk = 4, chunkDelayMs = 6 } })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 160 })
  c:cmd('Pi talk a lot')
  H.wait('the stream', 15000, function()
    return c:lua(H.CHAT_TEXT):find('line 3 of', 1, true) ~= nil
  end)
  c:cmd('Pi !echo user-cmd')
  H.wait('the command block', 20000, function()
    return c:lua(H.CHAT_STATE).state == 'idle' and c:lua(H.CHAT_TEXT):find('### $ echo user-cmd', 1, true) ~= nil
  end)
  H.contains(c:lua(H.CHAT_TEXT), '## Pi mock/mock-1\n\n' .. answer .. '\n\n### $ echo user-cmd\n↳ $ ✓ (1 line)\n```\nuser-cmd\n```\n', 'the answer whole, then the command')
  c:stop()
  mock.stop()
end)

H.case('the prompt placeholder follows the run\'s end also when the abort answer came first', function()
  local mock = H.mock({ { text = 'Hi.' } })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 120 })
  c:cmd('Pi hello')
  H.idle_with(c, 'Hi.')
  local hint = c:lua(CHAT .. [[
    local function hint()
      local m = vim.api.nvim_buf_get_extmarks(chat.prompt_buf, -1, 0, -1, { details = true })
      for _, x in ipairs(m) do
        if x[4].virt_text then return x[4].virt_text[1][1] end
      end
    end
    -- The abort's answer (state idle) before the run's agent_end.
    chat.running = true
    chat:set_state('stopping')
    chat:set_state('idle')
    local during = hint()
    chat:on_event({ event = { type = 'agent_end', messages = {} } })
    return { during, hint() }
  ]])
  H.eq({ 'steer Pi (<C-s>), or queue a follow-up (<M-CR>)', 'Ask Pi… (<C-s> sends; / commands, @ files)' }, hint, 'placeholders')
  c:stop()
  mock.stop()
end)

H.case('a queued message of several lines is one line of the abort report', function()
  local mock = H.mock({
    { text = 'Working.', toolCalls = { { id = 'call_w', name = 'bash', arguments = { command = 'sleep 30' } } } },
  })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "approve-all"}', cols = 160 })
  c:cmd('Pi run it')
  H.wait('the bash call', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ⚙ bash  sleep 30', 1, true) ~= nil
  end)
  c:lua(CHAT .. [[
    require('pi.prompt').set_text(chat, 'first line\nsecond line')
    require('pi.prompt').send(chat, 'followUp')
  ]])
  H.wait('the follow-up queued', 5000, function()
    return #c:lua(CHAT .. 'return chat:queued()') == 1
  end)
  c:cmd('Pi abort')
  H.wait('the report', 10000, function()
    return c:lua(H.CHAT_TEXT):find('Queued messages kept', 1, true) ~= nil
  end)
  local text = c:lua(H.CHAT_TEXT)
  H.contains(text, 'Queued messages kept for the next prompt (gq in the prompt edits or drops them):\n- followUp: first line …\n', 'report line')
  H.eq(nil, text:find('second line', 1, true), 'the rest of the message not in the list')
  c:stop()
  mock.stop()
end)

H.done()
