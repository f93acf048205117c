-- Acting on the chat's text (issue 30 item 14): `gf` on a file named with its line opens it
-- there, beside the chat; `yc` yanks the code block under the cursor without its fences; `gp`
-- puts it below the cursor of the window beside the chat; `gn` opens it as a new, unsaved file.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

local ROW_OF = [[
  local client = require('pi.client')
  local chat = require('pi.chat').current(client.roots[client.root_of(0)])
  for i, line in ipairs(vim.api.nvim_buf_get_lines(chat.buf, 0, -1, false)) do
    if line:find(..., 1, true) then return i end
  end
]]

H.case('gf opens a file at its line; yc yanks a code block, gp puts it in the file, gn makes a new file of it', function()
  local answer = 'The sum is in src/add.py:3 and the rest.\n\n```python\nprint(add(1, 2))\nprint(add(3, 4))\n```\n\nDone.'
  local mock = H.mock({ { text = answer } })
  local ws = H.workspace({ ['src/add.py'] = 'import sys\n\ndef add(a, b):\n    return a + b\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 80, rows = 24 })
  c:cmd('Pi where is the sum')
  H.idle_with(c, 'Done.')
  c:input('<C-w>l')
  H.wait('the chat focused', 2000, function()
    return c:lua('return vim.bo.filetype') == 'pi-chat'
  end)
  local row = c:lua(ROW_OF, 'src/add.py:3')
  local line = c:lua('return vim.api.nvim_buf_get_lines(0, ... - 1, ..., false)[1]', row)
  local col = line:find('add.py', 1, true)
  c:lua('vim.api.nvim_win_set_cursor(0, {...})', row, col)
  c:input('gf')
  H.wait('the file open', 5000, function()
    return c:lua('return vim.fn.expand("%:t")') == 'add.py'
  end)
  H.eq({ 3, 0 }, c:lua('return vim.api.nvim_win_get_cursor(0)'), 'at its line')
  local wins = c:lua([[return vim.tbl_map(function(w) return vim.bo[vim.api.nvim_win_get_buf(w)].filetype end, vim.api.nvim_tabpage_list_wins(0))]])
  table.sort(wins)
  H.eq({ 'pi-chat', 'pi-prompt', 'python' }, wins, 'the chat and its prompt stay; the file beside them')
  -- Back in the chat, inside the code block: yc.
  c:input('<C-w>l')
  local code = c:lua(ROW_OF, 'print(add(3, 4))')
  c:input(code .. 'G')
  c:input('yc')
  H.wait('the yank', 3000, function()
    return c:lua('return vim.fn.getreg(\'"\')') == 'print(add(1, 2))\nprint(add(3, 4))\n'
  end)
  H.eq('V', c:lua('return vim.fn.getregtype(\'"\')'), 'linewise')
  -- gp: below the cursor (line 3) of the file beside the chat, not saved; the focus goes there.
  c:input('gp')
  H.wait('the code put in the file', 3000, function()
    return c:lua('return vim.fn.expand("%:t")') == 'add.py'
  end)
  H.eq(
    { 'import sys', '', 'def add(a, b):', 'print(add(1, 2))', 'print(add(3, 4))', '    return a + b' },
    c:lua('return vim.api.nvim_buf_get_lines(0, 0, -1, false)'),
    'the file after gp'
  )
  H.eq({ 4, 0 }, c:lua('return vim.api.nvim_win_get_cursor(0)'), 'the cursor on the code put')
  H.eq(true, c:lua('return vim.bo.modified'), 'not saved')
  H.eq('import sys\n\ndef add(a, b):\n    return a + b\n', H.read(ws .. '/src/add.py'), 'the disk untouched')
  -- gn: a new file of the block, its path asked; nothing on disk until :w.
  c:input('<C-w>l')
  c:input(code .. 'G')
  c:input('gn')
  H.wait('the path asked', 3000, function()
    return c:screen_text():find('new file for the code block:', 1, true) ~= nil
  end)
  c:input('demo.py<CR>')
  H.wait('the new file', 3000, function()
    return c:lua('return vim.fn.expand("%:t")') == 'demo.py'
  end)
  H.eq({ 'print(add(1, 2))', 'print(add(3, 4))' }, c:lua('return vim.api.nvim_buf_get_lines(0, 0, -1, false)'), 'the new buffer')
  H.eq(nil, H.read(ws .. '/demo.py'), 'not written')
  -- An existing file is not replaced.
  c:input('<C-w>l')
  c:input(code .. 'G')
  c:input('gn')
  H.wait('the path asked again', 3000, function()
    return c:screen_text():find('new file for the code block:', 1, true) ~= nil
  end)
  c:input('src/add.py<CR>')
  H.wait('the refusal', 3000, function()
    return c:lua("return vim.api.nvim_exec2('messages', {output = true}).output"):find('Pi: src/add.py exists: not replaced (yc yanks the code)', 1, true) ~= nil
  end)
  H.eq('pi-chat', c:lua('return vim.bo.filetype'), 'still in the chat')
  c:stop()
  mock.stop()
end)

H.done()
