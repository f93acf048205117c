-- Each turn is a checkpoint (issue 30 item 10): your message's header says "⟲ gr rewind to
-- here · cc edit"; `cc` on it edits it and sends it again as a branch, with the conversation
-- only or the conversation and files; `gr` rewinds to before it.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

local CHAT = [[
  local client = require('pi.client')
  local chat = require('pi.chat').current(client.roots[client.root_of(0)])
]]
local PICK = [[
  _G.asked = {}
  _G.pick = nil
  vim.ui.select = function(items, opts, cb)
    table.insert(_G.asked, { prompt = opts.prompt, items = items })
    cb(items[_G.pick], _G.pick)
  end
]]

local function row_of(c, text, nth)
  return c:lua(CHAT .. [[
    local want, nth = ...
    local n = 0
    for i, line in ipairs(vim.api.nvim_buf_get_lines(chat.buf, 0, -1, false)) do
      if line == want then
        n = n + 1
        if n == nth then return i end
      end
    end
  ]], text, nth or 1)
end

H.case('cc edits a message as a branch: conversation only keeps the files, conversation and files reverts them', function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_w', name = 'write', arguments = { path = 'a.txt', content = 'agent\n' } } } },
    { text = 'Wrote a.txt.' },
    { text = 'Second answer.' },
    { text = 'Branched answer.' },
    { text = 'Reverted answer.' },
  })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "approve-all"}', init = PICK, cols = 100, rows = 30 })
  c:cmd('Pi write a file')
  H.idle_with(c, 'Wrote a.txt.')
  c:cmd('Pi and then')
  H.idle_with(c, 'Second answer.')
  -- The checkpoint marker on each of your messages.
  c:input('<C-w>l')
  local first = row_of(c, '## You', 1)
  c:input(first .. 'Gzt')
  vim.wait(100)
  H.contains(c:screen_text(), '## You  ⟲ gr rewind to here · cc edit', 'the marker on the screen')
  -- cc on the second message, "conversation only".
  c:lua('_G.pick = 1')
  c:input(row_of(c, 'and then') .. 'G')
  c:input('cc')
  H.wait('the branch', 10000, function()
    return c:lua(H.CHAT_TEXT):find('⑂ editing “and then”', 1, true) ~= nil
  end)
  local asked = c:lua('return _G.asked')
  H.eq({
    prompt = 'Edit “and then” and send it again as a branch from before it:',
    items = { 'Conversation only (files stay as they are)', 'Conversation and files (the agent’s changes since are undone)' },
  }, asked[1], 'the choice')
  H.eq('pi-prompt', c:lua('return vim.bo.filetype'), 'the prompt focused')
  H.eq('and then', c:lua('return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\\n")'), 'the text to edit')
  local text = c:lua(H.CHAT_TEXT)
  assert(not text:find('Second answer.', 1, true), 'the branch left the second turn:\n' .. text)
  c:input('ccand then, differently<Esc>')
  c:input('<CR>')
  H.idle_with(c, 'Branched answer.')
  H.eq('agent\n', H.read(ws .. '/a.txt'), 'the files stay')
  -- cc on the first message, "conversation and files": a.txt, created by the agent, goes.
  c:input('<C-w>k')
  c:lua('_G.pick = 2')
  c:input(row_of(c, 'write a file') .. 'G')
  c:input('cc')
  H.wait('the rewind', 10000, function()
    return c:lua(H.CHAT_TEXT):find('### ⟲ editing “write a file”: rewound to before it', 1, true) ~= nil
  end)
  H.eq(nil, H.read(ws .. '/a.txt'), 'the agent\'s file is gone')
  H.eq('write a file', c:lua(CHAT .. 'return require("pi.prompt").text(chat)'), 'the text to edit')
  c:stop()
  mock.stop()
end)

H.case('gr rewinds to before the turn under the cursor', function()
  local mock = H.mock({ { text = 'One.' }, { text = 'Two.' } })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 100, rows = 30 })
  c:cmd('Pi first')
  H.idle_with(c, 'One.')
  c:cmd('Pi second')
  H.idle_with(c, 'Two.')
  c:input('<C-w>l')
  c:input(row_of(c, 'second') .. 'G')
  c:input('gr')
  H.wait('the rewind', 10000, function()
    return c:lua(H.CHAT_TEXT):find('### ⟲ rewound to before “second”', 1, true) ~= nil
  end)
  local text = c:lua(H.CHAT_TEXT)
  assert(text:find('^## You\nfirst\n\n## Pi mock/mock%-1\n\nOne.\n'), text)
  assert(not text:find('Two.', 1, true), text)
  H.eq('second', c:lua(CHAT .. 'return require("pi.prompt").text(chat)'), 'the text back in the prompt')
  c:stop()
  mock.stop()
end)

H.done()
