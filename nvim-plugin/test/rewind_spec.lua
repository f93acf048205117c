-- Specs of :Pi changes and :Pi rewind against the real server: the session's changes in the
-- quickfix list; a rewind reverts a file in an open buffer as one undo step, the message's
-- text comes back into the prompt, `:Pi rewind undo` applies the changes again; a file the user
-- changed since is kept and reported.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

local function buf_text(c, name)
  return c:lua("return table.concat(vim.api.nvim_buf_get_lines(vim.fn.bufnr(...), 0, -1, false), '\\n')", name)
end

local PROMPT_TEXT = [[
  local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
  return require('pi.prompt').text(chat)
]]

H.case('rewind reverts an open buffer in one undo step, puts the message back; undo re-applies; :Pi changes lists it', function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_e1', name = 'edit', arguments = { path = 'a.txt', edits = { { oldText = 'two', newText = 'TWO' } } } } } },
    { text = 'Edited.' },
  })
  local ws = H.workspace({ ['a.txt'] = 'one\ntwo\nthree\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "auto-edit"}', cols = 160, rows = 40 })
  c:cmd('edit a.txt')
  c:cmd('Pi shout the second line')
  H.idle_with(c, 'Edited.')
  H.eq('one\nTWO\nthree', buf_text(c, 'a.txt'), 'the edit landed')

  -- The session's changes, from the server's record.
  c:cmd('Pi changes')
  H.wait('the quickfix list', 5000, function()
    return c:lua('return #vim.fn.getqflist()') == 1
  end)
  local qf = c:lua([[
    local it = vim.fn.getqflist()[1]
    return { name = vim.api.nvim_buf_get_name(it.bufnr), lnum = it.lnum, text = it.text, title = vim.fn.getqflist({ title = 1 }).title }
  ]])
  H.eq({ name = ws .. '/a.txt', lnum = 2, text = 'edit +1 −1 (call_e1)', title = 'Pi: session changes' }, qf, 'quickfix item')
  c:cmd('cclose')

  -- Rewind to before the prompt.
  c:cmd('wincmd t')
  local seq_before = c:lua("return vim.api.nvim_buf_call(vim.fn.bufnr('a.txt'), function() return vim.fn.undotree().seq_cur end)")
  c:input(':Pi rewind<CR>')
  H.wait('the picker', 5000, function()
    return c:screen_text():find('Rewind to before', 1, true) ~= nil
  end)
  H.contains(c:screen_text(), '1: shout the second line', 'picker item')
  c:input('1<CR>')
  H.wait('the rewind', 10000, function()
    return c:lua(H.CHAT_TEXT):find('### ⟲ rewound to before', 1, true) ~= nil
  end)
  H.eq('### ⟲ rewound to before “shout the second line”\n- `a.txt` reverted\n(`:Pi rewind undo` goes back)\n', c:lua(H.CHAT_TEXT):match('### ⟲.*$'), 'outcome in the chat')
  H.eq('one\ntwo\nthree', buf_text(c, 'a.txt'), 'the buffer reverted')
  H.wait('the disk reverted', 5000, function()
    return H.read(ws .. '/a.txt') == 'one\ntwo\nthree\n'
  end)
  H.eq('shout the second line', c:lua(PROMPT_TEXT), 'the message back in the prompt')
  -- One undo step: `u` in a.txt brings back exactly the agent's text, `<C-r>` the rewind.
  local seq_after = c:lua("return vim.api.nvim_buf_call(vim.fn.bufnr('a.txt'), function() return vim.fn.undotree().seq_cur end)")
  H.eq(seq_before + 1, seq_after, 'undo steps of the rewind')
  c:lua("vim.api.nvim_set_current_buf(vim.fn.bufnr('a.txt'))")
  c:input('u')
  H.wait('the undo', 3000, function()
    return buf_text(c, 'a.txt') == 'one\nTWO\nthree'
  end)
  c:input('<C-r>')
  H.wait('the redo', 3000, function()
    return buf_text(c, 'a.txt') == 'one\ntwo\nthree'
  end)
  -- The sign of the agent's change is hidden while its text is gone.
  H.eq(0, c:lua([[
    local b = vim.fn.bufnr('a.txt')
    local n = 0
    for _, m in ipairs(vim.api.nvim_buf_get_extmarks(b, require('pi.hunks').ns, 0, -1, { details = true })) do
      if m[4].sign_text then n = n + 1 end
    end
    return n
  ]]), 'signs after the rewind')

  -- Undo the rewind: the change is applied again.
  c:cmd('Pi rewind undo')
  H.wait('the rewind undone', 10000, function()
    return c:lua(H.CHAT_TEXT):find('### ⟲ rewind undone', 1, true) ~= nil
  end)
  H.eq('### ⟲ rewind undone\n- `a.txt` applied again\n(`:Pi rewind undo` goes back)\n', c:lua(H.CHAT_TEXT):match('### ⟲ rewind undone.*$'), 'outcome of the undo')
  H.contains(c:lua(H.CHAT_TEXT), 'Edited.', 'the history is back')
  H.eq('one\nTWO\nthree', buf_text(c, 'a.txt'), 'the buffer re-applied')
  c:stop()
  mock.stop()
end)

H.case('a file changed by the user since is kept by a rewind and reported', function()
  local mock = H.mock({
    {
      toolCalls = {
        { id = 'call_a', name = 'edit', arguments = { path = 'a.txt', edits = { { oldText = 'alpha', newText = 'ALPHA' } } } },
        { id = 'call_b', name = 'edit', arguments = { path = 'b.txt', edits = { { oldText = 'beta', newText = 'BETA' } } } },
      },
    },
    { text = 'Both edited.' },
  })
  local ws = H.workspace({ ['a.txt'] = 'alpha\n', ['b.txt'] = 'beta\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "auto-edit"}', cols = 160, rows = 40 })
  c:cmd('edit a.txt')
  c:cmd('Pi shout both')
  H.idle_with(c, 'Both edited.')
  -- The user changes the agent's line in b.txt.
  c:cmd('wincmd t')
  c:cmd('edit b.txt')
  c:input('ccBETA and mine<Esc>')
  H.wait('the user edit', 3000, function()
    return buf_text(c, 'b.txt') == 'BETA and mine'
  end)
  c:input(':Pi rewind<CR>')
  H.wait('the picker', 5000, function()
    return c:screen_text():find('Rewind to before', 1, true) ~= nil
  end)
  c:input('1<CR>')
  H.wait('the rewind', 10000, function()
    return c:lua(H.CHAT_TEXT):find('### ⟲ rewound to before', 1, true) ~= nil
  end)
  local block = c:lua(H.CHAT_TEXT):match('### ⟲.*$')
  local lines = vim.split(block, '\n')
  H.eq('### ⟲ rewound to before “shout both”', lines[1], 'title')
  H.eq('- `a.txt` reverted', lines[2], 'a.txt')
  assert(lines[3]:find('^%- `b%.txt` kept: .+'), 'b.txt refused with a reason: ' .. block)
  H.eq('alpha', buf_text(c, 'a.txt'), 'a.txt reverted')
  H.eq('BETA and mine', buf_text(c, 'b.txt'), 'the user\'s text kept')
  H.contains(c:lua("return vim.api.nvim_exec2('messages', {output = true}).output"), 'Pi: rewound to before “shout both”: 1 reverted, 1 kept (b.txt: changed since; see the chat)', 'said')
  c:stop()
  mock.stop()
end)

H.case('a file the agent created goes with a rewind and comes back with its undo', function()
  local mock = H.mock({
    {
      toolCalls = {
        { id = 'call_w', name = 'write', arguments = { path = 'new.txt', content = 'fresh\n' } },
        { id = 'call_r', name = 'write', arguments = { path = 'sub/two.txt', content = 'a\n\nb\n' } },
      },
    },
    { text = 'Written.' },
  })
  local ws = H.workspace({ ['keep.txt'] = 'keep\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "auto-edit"}', cols = 160, rows = 40 })
  c:cmd('edit keep.txt')
  c:cmd('Pi make a new file')
  H.idle_with(c, 'Written.')
  -- The files hold exactly the written text (no extra last line, none added).
  H.wait('the new files', 5000, function()
    return H.read(ws .. '/new.txt') == 'fresh\n' and H.read(ws .. '/sub/two.txt') == 'a\n\nb\n'
  end)
  c:cmd('Pi changes')
  H.wait('the quickfix list', 5000, function()
    return c:lua('return #vim.fn.getqflist()') == 2
  end)
  H.eq({ 'write created (call_w)', 'write created (call_r)' }, c:lua('return vim.tbl_map(function(i) return i.text end, vim.fn.getqflist())'), 'quickfix texts')
  c:cmd('cclose')
  c:cmd('wincmd t')
  c:input(':Pi rewind<CR>')
  H.wait('the picker', 5000, function()
    return c:screen_text():find('Rewind to before', 1, true) ~= nil
  end)
  c:input('1<CR>')
  H.wait('the rewind', 10000, function()
    return c:lua(H.CHAT_TEXT):find('### ⟲ rewound to before', 1, true) ~= nil
  end)
  H.eq('### ⟲ rewound to before “make a new file”\n- `new.txt` reverted\n- `sub/two.txt` reverted\n(`:Pi rewind undo` goes back)\n', c:lua(H.CHAT_TEXT):match('### ⟲.*$'), 'outcome')
  H.eq(nil, H.read(ws .. '/new.txt'), 'the created file is gone')
  H.eq(nil, H.read(ws .. '/sub/two.txt'), 'the other created file is gone')
  c:cmd('Pi rewind undo')
  H.wait('the files back', 10000, function()
    return H.read(ws .. '/new.txt') == 'fresh\n' and H.read(ws .. '/sub/two.txt') == 'a\n\nb\n'
  end)
  c:stop()
  mock.stop()
end)

H.done()
