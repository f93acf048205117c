-- The agent's hunk marks stay true through undo and reloads (issue 30 item 4): the undo key
-- then `u` brings the mark back with the agent's text (a deleted line's mark too), and the disk
-- follows the undo key (saved when the buffer had no unsaved changes, else only the undo written
-- onto the disk's text, the user's lines left unsaved); a sign whose text went away with
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
  -- The buffer had no unsaved changes: the undo is saved, so the disk agrees (the agent's next
  -- bash sees the lines taken back).
  H.wait('the disk after the undo key', 5000, function()
    return H.read(ws .. '/code.txt') == 'first\nvalue = 1\nlast\n'
  end)
  H.eq(false, c:lua('return vim.bo.modified'), 'saved by the undo key')
  c:input('u')
  H.wait('u', 5000, function()
    return c:lua(TEXT) == 'first\nvalue = 2\nlast'
  end)
  H.wait('the mark shown again', 2000, function()
    return vim.deep_equal(c:lua(SIGNS), { { 1, '~ ' } })
  end)
  -- The disk follows the undo: the agent's line is there again, the buffer clean.
  H.wait('the disk after u', 5000, function()
    return H.read(ws .. '/code.txt') == 'first\nvalue = 2\nlast\n'
  end)
  H.eq(false, c:lua('return vim.bo.modified'), 'clean after u')
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
  H.wait('the disk after <C-r>', 5000, function()
    return H.read(ws .. '/code.txt') == 'first\nvalue = 1\nlast\n'
  end)
  c:stop()
  mock.stop()
end)

H.case('a deleted line: the undo key puts it back and hides its mark; u deletes it again with its mark; <C-r> hides it', function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_d', name = 'edit', arguments = { path = 'list.txt', edits = { { oldText = 'c\nd\n', newText = 'c\n' } } } } } },
    { text = 'Deleted.' },
  })
  local ws = H.workspace({ ['list.txt'] = 'a\nb\nc\nd\ne\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "approve-all"}', init = 'vim.g.mapleader = " "', cols = 80, rows = 24 })
  local MARKS = [[
    local out = {}
    for _, m in ipairs(vim.api.nvim_buf_get_extmarks(0, require('pi.hunks').ns, 0, -1, { details = true })) do
      local vl = {}
      for _, l in ipairs(m[4].virt_lines or {}) do vl[#vl + 1] = l[1][1] end
      out[#out + 1] = { m[2], m[4].sign_text or 'none', vl }
    end
    return out
  ]]
  c:cmd('edit list.txt')
  c:cmd('Pi delete d')
  H.idle_with(c, 'Deleted.')
  edited(c, 'a\nb\nc\ne')
  H.eq({ { 3, '- ', { '- d' } } }, c:lua(MARKS), 'the deletion mark on the line after it')
  c:input('4G')
  c:input(' pu')
  H.wait('the undo key', 5000, function()
    return c:lua(TEXT) == 'a\nb\nc\nd\ne'
  end)
  H.eq({ { 4, 'none', {} } }, c:lua(MARKS), 'hidden on its line after the undo key')
  H.wait('the disk after the undo key', 5000, function()
    return H.read(ws .. '/list.txt') == 'a\nb\nc\nd\ne\n'
  end)
  c:input('u')
  H.wait('u', 5000, function()
    return c:lua(TEXT) == 'a\nb\nc\ne'
  end)
  H.wait('the mark shown again', 2000, function()
    return vim.deep_equal(c:lua(MARKS), { { 3, '- ', { '- d' } } })
  end)
  H.eq(1, #c:lua('return require("pi.hunks").list(vim.api.nvim_get_current_buf())'), ']h / :Pi diff see the hunk again')
  c:input('<C-r>')
  H.wait('redo', 5000, function()
    return c:lua(TEXT) == 'a\nb\nc\nd\ne'
  end)
  H.wait('hidden again', 2000, function()
    return vim.deep_equal(c:lua(MARKS), { { 4, 'none', {} } })
  end)
  H.eq(0, #c:lua('return require("pi.hunks").list(vim.api.nvim_get_current_buf())'), 'no hunk while the line is back')
  c:stop()
  mock.stop()
end)

H.case("the undo key with the user's unsaved changes: the disk loses the agent's change and gets none of the user's", function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_e', name = 'edit', arguments = { path = 'code.txt', edits = { { oldText = 'value = 1', newText = 'value = 2' } } } } } },
    { text = 'Changed.' },
  })
  local ws = H.workspace({ ['code.txt'] = 'first\nvalue = 1\nlast\n' })
  local c = H.child({
    ws = ws,
    models_json = mock.models_json,
    setup = '{approval_policy = "approve-all", save_user_changes = "never"}',
    init = 'vim.g.mapleader = " "',
    cols = 80,
    rows = 24,
  })
  c:cmd('edit code.txt')
  c:input('ggOmine, unsaved<Esc>')
  H.wait('the unsaved line', 5000, function()
    return c:lua(TEXT) == 'mine, unsaved\nfirst\nvalue = 1\nlast'
  end)
  c:cmd('Pi change the value')
  H.idle_with(c, 'Changed.')
  edited(c, 'mine, unsaved\nfirst\nvalue = 2\nlast')
  H.eq('first\nvalue = 2\nlast\n', H.read(ws .. '/code.txt'), "the disk: the agent's change merged, not the user's line")
  H.eq({ { 2, '~ ' } }, c:lua(SIGNS), 'the mark of the agent edit')
  c:input('3G')
  c:input(' pu')
  H.wait('the undo key', 5000, function()
    return c:lua(TEXT) == 'mine, unsaved\nfirst\nvalue = 1\nlast'
  end)
  H.wait('the disk after the undo key', 5000, function()
    return H.read(ws .. '/code.txt') == 'first\nvalue = 1\nlast\n'
  end)
  H.eq(true, c:lua('return vim.bo.modified'), "the user's line is still unsaved")
  -- No W11/W12 for the file written under the modified buffer; the user's own :w writes
  -- everything with no "changed since reading" question.
  c:cmd('checktime')
  local msgs = c:lua("return vim.api.nvim_exec2('messages', {output = true}).output")
  assert(not msgs:find('W12', 1, true) and not msgs:find('W11', 1, true), 'W11/W12 in messages: ' .. msgs)
  H.eq('mine, unsaved\nfirst\nvalue = 1\nlast', c:lua(TEXT), 'the buffer after checktime')
  c:input(':w<CR>')
  H.wait('the user save', 5000, function()
    return c:lua('return vim.bo.modified') == false
  end)
  H.eq('mine, unsaved\nfirst\nvalue = 1\nlast\n', H.read(ws .. '/code.txt'), 'the disk after the user save')
  local screen = c:screen_text()
  assert(not screen:find('WARNING', 1, true) and not screen:find('changed since reading', 1, true), screen)
  c:stop()
  mock.stop()
end)

H.case("u of an agent edit reaches the disk, the user's unsaved line does not; <C-r> brings the agent's line back; typing is not saved", function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_e', name = 'edit', arguments = { path = 'code.txt', edits = { { oldText = 'value = 1', newText = 'value = 2' } } } } } },
    { text = 'Changed.' },
  })
  local ws = H.workspace({ ['code.txt'] = 'first\nvalue = 1\nlast\n' })
  local c = H.child({
    ws = ws,
    models_json = mock.models_json,
    setup = '{approval_policy = "approve-all", save_user_changes = "never"}',
    cols = 80,
    rows = 24,
  })
  c:cmd('edit code.txt')
  c:input('ggOmine, unsaved<Esc>')
  H.wait('the unsaved line', 5000, function()
    return c:lua(TEXT) == 'mine, unsaved\nfirst\nvalue = 1\nlast'
  end)
  c:cmd('Pi change the value')
  H.idle_with(c, 'Changed.')
  edited(c, 'mine, unsaved\nfirst\nvalue = 2\nlast')
  H.eq('first\nvalue = 2\nlast\n', H.read(ws .. '/code.txt'), "the disk: the agent's change only")
  c:lua('vim.api.nvim_set_current_win(vim.fn.bufwinid(vim.fn.bufnr("code.txt")))')
  c:input('u')
  H.wait('u', 5000, function()
    return c:lua(TEXT) == 'mine, unsaved\nfirst\nvalue = 1\nlast'
  end)
  H.wait('the disk after u', 5000, function()
    return H.read(ws .. '/code.txt') == 'first\nvalue = 1\nlast\n'
  end)
  H.eq(true, c:lua('return vim.bo.modified'), "the user's line still unsaved")
  -- The Changes view agrees: the change is listed as taken back.
  c:cmd('Pi changes')
  H.wait('the quickfix list', 5000, function()
    return c:lua('return vim.fn.getqflist({title = 0}).title') == 'Pi: session changes'
  end)
  H.eq({ 'edit +1 −1 (call_e) · undone' }, c:lua('return vim.tbl_map(function(i) return i.text end, vim.fn.getqflist())'), 'the Changes view after u')
  c:cmd('cclose')
  c:lua('vim.api.nvim_set_current_win(vim.fn.bufwinid(vim.fn.bufnr("code.txt")))')
  c:cmd('checktime')
  local msgs = c:lua("return vim.api.nvim_exec2('messages', {output = true}).output")
  assert(not msgs:find('W12', 1, true) and not msgs:find('W11', 1, true), 'W11/W12 in messages: ' .. msgs)
  c:input('<C-r>')
  H.wait('<C-r>', 5000, function()
    return c:lua(TEXT) == 'mine, unsaved\nfirst\nvalue = 2\nlast'
  end)
  H.wait('the disk after <C-r>', 5000, function()
    return H.read(ws .. '/code.txt') == 'first\nvalue = 2\nlast\n'
  end)
  -- The same text typed by hand is the user's: the mark goes, the disk stays.
  c:input('3Gccvalue = 1<Esc>')
  H.wait('the typed line', 5000, function()
    return c:lua(TEXT) == 'mine, unsaved\nfirst\nvalue = 1\nlast'
  end)
  H.wait('the mark hidden', 2000, function()
    return vim.deep_equal(c:lua(SIGNS), { { 2, 'none' } })
  end)
  vim.wait(300)
  H.eq('first\nvalue = 2\nlast\n', H.read(ws .. '/code.txt'), 'typing is not saved')
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
  -- (code.txt's change was taken back by the checkout: said.)
  H.eq({ { 'code.txt', 2, 'edit +1 −1 (call_e) · undone' } }, qf, 'the deleted file is not listed')
  c:stop()
  mock.stop()
end)

H.case("two sessions in one Neovim: each session's :Pi changes lists only its own change", function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_a', name = 'edit', arguments = { path = 'a.txt', edits = { { oldText = 'a = 1', newText = 'a = 2' } } } } } },
    { text = 'Changed a.' },
    { toolCalls = { { id = 'call_b', name = 'edit', arguments = { path = 'b.txt', edits = { { oldText = 'b = 1', newText = 'b = 2' } } } } } },
    { text = 'Changed b.' },
  })
  local ws = H.workspace({ ['a.txt'] = 'a = 1\n', ['b.txt'] = 'b = 1\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "approve-all"}', cols = 100, rows = 30 })
  c:cmd('edit a.txt')
  c:cmd('Pi change a')
  H.idle_with(c, 'Changed a.')
  local first = c:lua(H.CHAT_STATE).session
  c:cmd('Pi new')
  H.wait('the second session', 10000, function()
    local s = c:lua(H.CHAT_STATE)
    return s ~= vim.NIL and s.session ~= first
  end)
  c:cmd('Pi change b')
  H.idle_with(c, 'Changed b.')
  H.eq('a = 2\n', H.read(ws .. '/a.txt'), 'the first session changed a.txt')
  H.eq('b = 2\n', H.read(ws .. '/b.txt'), 'the second session changed b.txt')
  local QF = "return vim.tbl_map(function(i) return { vim.fn.fnamemodify(vim.fn.bufname(i.bufnr), ':t'), i.lnum, i.text } end, vim.fn.getqflist())"
  local function changes()
    c:lua('vim.fn.setqflist({}, " ", { title = "cleared" })')
    c:cmd('Pi changes')
    H.wait('the quickfix list', 5000, function()
      return c:lua('return vim.fn.getqflist({title = 0}).title') == 'Pi: session changes'
    end)
    local qf = c:lua(QF)
    c:cmd('cclose')
    return qf
  end
  -- From the file (the second session is the current one): only its change.
  H.eq({ { 'b.txt', 1, 'edit +1 −1 (call_b)' } }, changes(), "the second session's Changes view")
  -- In the first session's chat: only the first session's change.
  c:lua('vim.api.nvim_set_current_buf(require("pi.chat").chats[...].buf)', first)
  H.eq({ { 'a.txt', 1, 'edit +1 −1 (call_a)' } }, changes(), "the first session's Changes view, from its chat")
  c:stop()
  mock.stop()
end)

H.done()
