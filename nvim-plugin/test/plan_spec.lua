-- Plan mode in the chat (issue 31): `:Pi plan` toggles it, the plan is a block at the top of the
-- chat that is replaced in place (one block, never appended again) and folds to its header, and
-- plan mode's "what next?" is asked inline with the permission's rule: a digit alone (no key
-- after it within 'timeoutlen') or <CR> on an option's row answers; counts and motions do not.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

local CHAT = [[
  local client = require('pi.client')
  local chat = require('pi.chat').current(client.roots[client.root_of(0)])
]]
-- (Pi's example cleans the steps: "Read the config" becomes "Config".)
local PLAN = 'Here is what I found.\n\nPlan:\n1. Read the config\n2. Change the greeting\n3. Run the tests\n'
local PENDING = 'return #require("pi.permission").pending'

--- The chat's lines.
local function lines(c)
  return vim.split(c:lua(H.CHAT_TEXT), '\n', { plain = true })
end

local function count(text, needle)
  local n, at = 0, 1
  while true do
    local s = text:find(needle, at, true)
    if not s then
      return n
    end
    n, at = n + 1, s + 1
  end
end

H.case('the plan is one block at the top, replaced in place; the question answers only on purpose', function()
  local mock = H.mock({ { text = PLAN }, { text = 'Read it. [DONE:1]' } })
  local ws = H.workspace({ ['notes.txt'] = 'hello\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "approve-all"}', init = 'vim.o.timeoutlen = 400', cols = 80, rows = 24 })
  c:cmd('Pi plan')
  H.wait('plan mode on', 15000, function()
    return c:lua(CHAT .. 'return chat and chat.plan and chat.plan.mode or vim.NIL') == 'plan'
  end)
  c:cmd('Pi chat')
  H.eq({ '### ☰ Plan · plan mode (read-only; :Pi plan leaves it) · no steps yet', '', '' }, lines(c), 'the block alone (and its blank line) above the empty conversation')
  c:cmd('Pi prompt plan the greeting change')
  H.wait('the question', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ? Plan mode - what next?', 1, true) ~= nil
  end)
  local l = lines(c)
  H.eq({
    '### ☰ Plan · plan mode (read-only; :Pi plan leaves it) · 0/3 done',
    '- [ ] 1. Config',
    '- [ ] 2. Change the greeting',
    '- [ ] 3. Tests',
    '',
    '## You',
    'plan the greeting change',
  }, { unpack(l, 1, 7) }, 'the plan block at the top, then the conversation')
  local text = c:lua(H.CHAT_TEXT)
  H.eq(1, count(text, '### ☰ Plan'), 'one plan block')
  local q = text:match('(### %? Plan mode %- what next%?.*)$')
  H.eq('### ? Plan mode - what next?\n  [1] Execute the plan (track progress)\n  [2] Stay in plan mode\n  [3] Refine the plan\n', q, 'the question inline at the end')
  -- Counts and motions in the chat answer nothing.
  c:input('<C-w>k') -- (:Pi chat focused the prompt, under the chat)
  H.wait('the chat focused', 2000, function()
    return c:lua('return vim.bo.filetype') == 'pi-chat'
  end)
  c:input('gg')
  c:input('2j')
  vim.wait(900)
  H.eq({ 1, 6 }, { c:lua(PENDING), c:lua('return vim.fn.line(".")') }, '2j: still asked, the cursor moved two lines (the closed plan fold is one)')
  c:input('1k')
  vim.wait(900)
  H.eq(1, c:lua(PENDING), '1k: still asked')
  c:input('3G')
  vim.wait(900)
  H.eq({ 1, 3 }, { c:lua(PENDING), c:lua('return vim.fn.line(".")') }, '3G: still asked')
  -- A digit alone: "Execute the plan".
  c:input('1')
  H.idle_with(c, 'Read it. [DONE:1]')
  H.wait('step 1 done in the block', 5000, function()
    return lines(c)[1] == '### ☰ Plan · 1/3 done · now: 2. Change the greeting'
  end)
  l = lines(c)
  H.eq({
    '### ☰ Plan · 1/3 done · now: 2. Change the greeting',
    '- [x] 1. Config',
    '- [>] 2. Change the greeting',
    '- [ ] 3. Tests',
    '',
    '## You',
  }, { unpack(l, 1, 6) }, 'the block replaced in place')
  text = c:lua(H.CHAT_TEXT)
  H.eq(1, count(text, '### ☰ Plan'), 'still one plan block')
  H.contains(text, '### ? Plan mode - what next?', 'the answered question stays')
  -- The answer on the question's header; the block folded to its header at the top.
  c:input('gg')
  vim.wait(100)
  local screen = c:screen_text()
  -- (The chat is 40 columns at 80: the fold's line is cut at its edge.)
  H.contains(screen, '│### ☰ Plan · 1/3 done · now: 2. Change\n~', 'the folded block on the chat\'s first row')
  H.eq('pi-chat', c:lua('return vim.bo.filetype'), 'the chat focused')
  H.eq(1, c:lua('return vim.fn.foldclosed(1)'), 'the block is a closed fold')
  local qrow = c:lua(CHAT .. [[
    for i, line in ipairs(vim.api.nvim_buf_get_lines(chat.buf, 0, -1, false)) do
      if line == '### ? Plan mode - what next?' then return i end
    end
  ]])
  c:input(qrow .. 'Gzt')
  vim.wait(100)
  H.contains(c:screen_text(), '│### ? Plan mode - what next? → Execute', 'the answer said on the question\'s header')
  -- :Pi plan toggles: back into plan mode, then off.
  c:cmd('Pi plan')
  H.wait('plan mode again', 5000, function()
    return c:lua(CHAT .. 'return chat.plan.mode') == 'plan'
  end)
  c:cmd('Pi plan')
  H.wait('plan mode off', 5000, function()
    return c:lua(CHAT .. 'return chat.plan.mode') == 'off'
  end)
  H.eq('### ☰ Plan · 1/3 done · now: 2. Change the greeting', lines(c)[1], 'the header without plan mode (the list stays)')
  c:stop()
  mock.stop()
end)

H.case('<CR> on an option row answers it ("Stay in plan mode")', function()
  local mock = H.mock({ { text = PLAN } })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "approve-all"}', init = 'vim.o.timeoutlen = 400', cols = 80, rows = 24 })
  c:cmd('Pi plan')
  H.wait('plan mode on', 15000, function()
    return c:lua(CHAT .. 'return chat and chat.plan and chat.plan.mode or vim.NIL') == 'plan'
  end)
  c:cmd('Pi prompt plan it')
  local ok = pcall(H.wait, 'the question', 15000, function()
    return c:lua(H.CHAT_TEXT):find('[3] Refine the plan', 1, true) ~= nil
  end)
  assert(ok, 'no question; the chat:\n' .. tostring(c:lua(H.CHAT_TEXT)))
  c:input('<C-w>l')
  H.wait('the chat focused', 2000, function()
    return c:lua('return vim.bo.filetype') == 'pi-chat'
  end)
  local row = c:lua(CHAT .. [[
    for i, line in ipairs(vim.api.nvim_buf_get_lines(chat.buf, 0, -1, false)) do
      if line == '  [2] Stay in plan mode' then return i end
    end
  ]])
  c:input(row .. 'G')
  vim.wait(900)
  H.eq(1, c:lua(PENDING), 'the motion to the row answers nothing')
  c:input('<CR>')
  H.wait('answered', 5000, function()
    return c:lua(PENDING) == 0
  end)
  H.eq('plan', c:lua(CHAT .. 'return chat.plan.mode'), 'still in plan mode')
  local reqs = mock.requests()
  H.eq(1, #reqs, 'no further request to the model')
  c:stop()
  mock.stop()
end)

H.done()
