-- The agent's hunk marks stay true through undo and reloads (issue 30 item 4): the undo key
-- then `u` brings the mark back with the agent's text; a sign whose text went away with
-- `:!git checkout` + `:e!` is gone; the Changes view drops a file deleted since.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

local SIGNS = [[
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(0, require('pi.hunks').ns, 0, -1, { details = true })) do
    out[#out + 1] = { m[2], m[4].sign_text or 'none' }
  end
  return out
]]
local TEXT = 'return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\\n")'

local function edited(c, text)
  H.wait('the edit in the buffer', 15000, function()
    return c:lua(TEXT) == text
  end)
end

H.case('the undo key then u: the agent text and its mark come back; <C-r> hides it again', function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_e', name = 'edit', arguments = { path = 'code.txt', edits = { { oldText = 'value = 1', newText = 'value = 2' } } } } } },
    { text = 'Changed.' },
  })
  local ws = H.workspace({ ['code.txt'] = 'first\nvalue = 1\nlast\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "approve-all"}', init = 'vim.g.mapleader = " "', cols = 80, rows = 24 })
  c:cmd('edit code.txt')
  c:cmd('Pi change the value')
  H.idle_with(c, 'Changed.')
  edited(c, 'first\nvalue = 2\nlast')
  H.eq({ { 1, '~ ' } }, c:lua(SIGNS), 'the mark of the agent edit')
  c:input('2G')
  c:input(' pu')
  H.wait('the undo key', 5000, function()
    return c:lua(TEXT) == 'first\nvalue = 1\nlast'
  end)
  H.eq({ { 1, 'none' } }, c:lua(SIGNS), 'after the undo key: the mark hidden over the old text')
  c:input('u')
  H.wait('u', 5000, function()
    return c:lua(TEXT) == 'first\nvalue = 2\nlast'
  end)
  H.wait('the mark shown again', 2000, function()
    return vim.deep_equal(c:lua(SIGNS), { { 1, '~ ' } })
  end)
  -- On the screen: the sign column holds the mark on the agent's line.
  local rows = vim.split(c:screen_text(), '\n', { plain = true })
  H.eq('~ value = 2', rows[2]:sub(1, 11), 'the sign beside the agent line')
  H.eq(1, #c:lua('return require("pi.hunks").list(vim.api.nvim_get_current_buf())'), ']h / :Pi diff see the hunk')
  c:input('<C-r>')
  H.wait('redo', 5000, function()
    return c:lua(TEXT) == 'first\nvalue = 1\nlast'
  end)
  H.wait('hidden again', 2000, function()
    return vim.deep_equal(c:lua(SIGNS), { { 1, 'none' } })
  end)
  c:stop()
  mock.stop()
end)

H.case('a sign does not survive :!git checkout + :e!; :Pi changes drops a deleted file', function()
  local mock = H.mock({
    {
      toolCalls = {
        { id = 'call_e', name = 'edit', arguments = { path = 'code.txt', edits = { { oldText = 'value = 1', newText = 'value = 2' } } } },
        { id = 'call_w', name = 'write', arguments = { path = 'extra.txt', content = 'extra\n' } },
      },
    },
    { text = 'Changed.' },
  })
  local ws = H.workspace()
  vim.fn.delete(ws .. '/.git', 'rf')
  H.write(ws .. '/code.txt', 'first\nvalue = 1\nlast\n')
  local git = { 'git', '-C', ws, '-c', 'user.name=t', '-c', 'user.email=t@t' }
  for _, args in ipairs({ { 'init', '-q' }, { 'add', 'code.txt' }, { 'commit', '-qm', 'base' } }) do
    local r = vim.system(vim.list_extend(vim.deepcopy(git), args)):wait()
    assert(r.code == 0, 'git ' .. args[1] .. ': ' .. tostring(r.stderr))
  end
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "approve-all"}', cols = 80, rows = 24 })
  c:cmd('edit code.txt')
  c:cmd('Pi change the value')
  H.idle_with(c, 'Changed.')
  edited(c, 'first\nvalue = 2\nlast')
  H.eq({ { 1, '~ ' } }, c:lua(SIGNS), 'the mark of the agent edit')
  c:cmd('silent write')
  c:cmd('silent !git checkout -- code.txt')
  c:cmd('edit!')
  H.eq('first\nvalue = 1\nlast', c:lua(TEXT), 'the checked-out text')
  H.eq({}, c:lua(SIGNS), 'no stale mark after :e!')
  H.eq({}, c:lua('return require("pi.hunks").list(vim.api.nvim_get_current_buf())'), 'no hunk left')
  -- extra.txt deleted since: the Changes view lists only code.txt.
  os.remove(ws .. '/extra.txt')
  c:cmd('silent! bwipeout! extra.txt')
  c:cmd('Pi changes')
  H.wait('the quickfix list', 5000, function()
    return c:lua('return vim.fn.getqflist({title = 0}).title') == 'Pi: session changes'
  end)
  local qf = c:lua("return vim.tbl_map(function(i) return { vim.fn.fnamemodify(vim.fn.bufname(i.bufnr), ':t'), i.lnum, i.text } end, vim.fn.getqflist())")
  H.eq({ { 'code.txt', 2, 'edit +1 −1 (call_e)' } }, qf, 'the deleted file is not listed')
  c:stop()
  mock.stop()
end)

H.done()
