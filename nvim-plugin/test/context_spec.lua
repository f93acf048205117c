-- The editor as context (issue 30 item 13): with `chat.editor_context` on, the buffer you were
-- in and your last selection there are chips above the prompt, sent with it (the buffer's
-- unsaved text), and `<M-x>` drops one; `@path` in a prompt attaches the file's text.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

--- The text of the last user message the model got.
local function sent(mock, n)
  local req = mock.requests()[n]
  local out
  for _, m in ipairs(req.messages) do
    if m.role == 'user' then
      out = type(m.content) == 'string' and m.content or m.content[1].text
    end
  end
  return out
end

H.case('chips for the buffer and the selection go with the prompt; <M-x> drops one; @path attaches a file', function()
  local mock = H.mock({ { text = 'One.' }, { text = 'Two.' } })
  local ws = H.workspace({ ['src/add.lua'] = 'local M = {}\n\nfunction M.add(a, b)\n  return a + b\nend\n\nreturn M\n', ['notes.md'] = '# Notes\nkeep it short\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{chat = {editor_context = true}}', cols = 100, rows = 30 })
  c:cmd('edit src/add.lua')
  -- An unsaved change: the buffer's text is what goes.
  c:input('Goprint("unsaved")<Esc>')
  c:input('3GVj<Esc>')
  c:cmd('Pi')
  H.wait('the prompt focused', 10000, function()
    return c:lua('return vim.bo.filetype') == 'pi-prompt'
  end)
  vim.wait(100)
  H.contains(c:screen_text(), '│  ⧉ src/add.lua:3-4 (selection)\n~' .. (' '):rep(48) .. '│  ⧉ src/add.lua (buffer) · <M-x> drops\n', 'the chips above the prompt, one a line')
  c:input('iexplain it<Esc>')
  c:input('<CR>')
  H.idle_with(c, 'One.')
  H.eq(table.concat({
    'explain it',
    '',
    '`src/add.lua` lines 3-4:',
    '```lua',
    'function M.add(a, b)',
    '  return a + b',
    '```',
    '',
    '`src/add.lua` (the current buffer):',
    '```lua',
    'local M = {}',
    '',
    'function M.add(a, b)',
    '  return a + b',
    'end',
    '',
    'return M',
    'print("unsaved")',
    '```',
  }, '\n'), sent(mock, 1), 'the prompt with both chips')
  -- Drop both chips; @notes.md attaches the file.
  c:input('<M-x>')
  c:input('<M-x>')
  vim.wait(100)
  local screen = c:screen_text()
  assert(not screen:find('⧉', 1, true), 'a chip left:\n' .. screen)
  c:input('isummarize @notes.md<Esc>')
  c:input('<CR>')
  H.idle_with(c, 'Two.')
  H.eq('summarize @notes.md\n\n`notes.md`:\n```markdown\n# Notes\nkeep it short\n```', sent(mock, 2), 'the prompt with the file')
  c:stop()
  mock.stop()
end)

H.done()
