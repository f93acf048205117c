-- After a failed or interrupted run (issue 30 items 9 and 11): the failure in words, the failed
-- prompt back in the prompt buffer, and `:Pi retry` running the turn again through
-- `agent/continue` — the user message reaches the model once more but stays once in the session.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

local PROMPT_TEXT = [[
  local client = require('pi.client')
  local chat = require('pi.chat').current(client.roots[client.root_of(0)])
  return require('pi.prompt').text(chat)
]]

H.case(':Pi retry resends without a second user message; the failed prompt comes back', function()
  local mock = H.mock({ { status = 401, error = 'invalid key' }, { text = 'Recovered.' } })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 100, rows = 30 })
  c:cmd('Pi say hello')
  H.wait('the failure', 15000, function()
    local s = c:lua(H.CHAT_STATE)
    return s ~= vim.NIL and s.state == 'failed'
  end)
  local text = c:lua(H.CHAT_TEXT)
  H.eq('## You\nsay hello\n\n✗ the model server refused the API key (HTTP 401): invalid key\n\n↻ :Pi retry runs it again (your message is not repeated)\n', text, 'the chat after the failure')
  H.eq('say hello', c:lua(PROMPT_TEXT), 'the failed prompt is back in the prompt buffer')
  c:cmd('Pi retry')
  H.idle_with(c, 'Recovered.')
  H.eq('', c:lua(PROMPT_TEXT), 'the prompt buffer emptied by the retry')
  local reqs = mock.requests()
  H.eq(2, #reqs, 'two model requests')
  local users = vim.tbl_filter(function(m)
    return m.role == 'user'
  end, reqs[2].messages)
  H.eq(1, #users, 'the retried request carries the user message once: ' .. vim.inspect(reqs[2].messages))
  -- The session file holds the user message once.
  local files = vim.fn.glob(ws .. '/.pi/sessions/**/*.jsonl', false, true)
  H.eq(1, #files, 'one session file')
  local n = 0
  for line in H.read(files[1]):gmatch('[^\n]+') do
    local e = vim.json.decode(line)
    if e.type == 'message' and e.message.role == 'user' then
      n = n + 1
    end
  end
  H.eq(1, n, 'one user message stored')
  c:stop()
  mock.stop()
end)

H.case(':Pi sessions last opens a session whose run was interrupted; it says so, and :Pi retry continues it without a second user message', function()
  local mock = H.mock({ { text = 'Too late.', delayMs = 30000 }, { text = 'Continued.' } })
  local ws = H.workspace()
  -- The first Neovim goes away while the model has not answered: the session ends with the
  -- user's message.
  local c1 = H.child({ ws = ws, models_json = mock.models_json, cols = 100, rows = 30 })
  c1:cmd('Pi do the thing')
  H.wait('the request at the model', 15000, function()
    return #mock.requests() == 1
  end)
  c1:stop()
  local files = vim.fn.glob(ws .. '/.pi/sessions/**/*.jsonl', false, true)
  H.eq(1, #files, 'one session file')
  -- Its server gone with it (its lock on the session file released).
  H.wait('the first server gone', 15000, function()
    return vim.system({ 'flock', '--nonblock', files[1] .. '.lock', 'true' }):wait().code == 0
  end)
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 100, rows = 30 })
  -- A Neovim started again: `:Pi sessions last` opens the workspace's newest session at once.
  c:cmd('Pi sessions last')
  H.wait('the history and the offer', 15000, function()
    return c:lua(H.CHAT_TEXT):find('⚠', 1, true) ~= nil
  end)
  H.eq('## You\ndo the thing\n\n⚠ the last run stopped before it answered: ↻ :Pi retry continues it\n', c:lua(H.CHAT_TEXT), 'the reopened chat')
  c:cmd('Pi retry')
  H.idle_with(c, 'Continued.')
  local reqs = mock.requests()
  H.eq(2, #reqs, 'two model requests')
  local users = vim.tbl_filter(function(m)
    return m.role == 'user'
  end, reqs[2].messages)
  H.eq(1, #users, 'the continued request carries the user message once: ' .. vim.inspect(reqs[2].messages))
  local n = 0
  for line in H.read(files[1]):gmatch('[^\n]+') do
    local e = vim.json.decode(line)
    if e.type == 'message' and e.message.role == 'user' then
      n = n + 1
    end
  end
  H.eq(1, n, 'one user message stored')
  c:stop()
  mock.stop()
end)

H.done()
