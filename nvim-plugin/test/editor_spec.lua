-- UI-level specs of the editor side: an agent edit into a MODIFIED buffer opened after the
-- client started (one undo step, no W12 after the server's save, hunk signs and keep/undo),
-- a permission answered both ways (an insert-mode key elsewhere is not an answer), sessions
-- listed and reopened with their history, and `:checkhealth pi`.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
local uv = vim.uv
H.require_tools()

local function buf_text(c)
  return c:lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
end

-- vim.ui.select replaced in the child (as a user's picker plugin would): the question is kept
-- for the test to read and answer.
local SELECT = [[
  _G.asked = {}
  vim.ui.select = function(items, opts, cb)
    _G.asked[#_G.asked + 1] = { prompt = opts.prompt, items = vim.tbl_map(opts.format_item or tostring, items) }
    _G.answer = function(i) cb(items[i], i) end
  end
]]

H.case('an edit lands in a modified buffer opened after the client started; the disk gets only the agent change; u reverts exactly it; no W12', function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_edit', name = 'edit', arguments = { path = 'notes.md', edits = { { oldText = 'target = 1', newText = 'target = 2' } } } } } },
    { text = 'Changed target to 2.' },
  })
  local ws = H.workspace({ ['notes.md'] = '# Notes\n\nalpha\ntarget = 1\nomega\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "auto-edit"}', init = SELECT })
  c:cmd('Pi new')
  H.wait('the server', 10000, function()
    return c:lua(H.CHAT_STATE) ~= vim.NIL
  end)
  -- Opened after the client started (in the first window: :Pi new focused the prompt), then
  -- changed without saving (a line above the target).
  c:cmd('wincmd t')
  c:cmd('edit notes.md')
  c:input('ggOunsaved line<Esc>')
  H.wait('the unsaved line', 2000, function()
    return buf_text(c):find('^unsaved line') ~= nil
  end)
  c:cmd('Pi set target to 2')
  H.wait('the run to end', 15000, function()
    local s = c:lua(H.CHAT_STATE)
    return s.state == 'idle' and c:lua(H.CHAT_TEXT):find('Changed target to 2.', 1, true)
  end)
  H.eq('unsaved line\n# Notes\n\nalpha\ntarget = 2\nomega', buf_text(c), 'buffer after the edit')
  -- saveUserChanges "ask" (the default), not answered yet: the disk has the agent's change
  -- only; the user's line is still unsaved in the buffer.
  H.eq('# Notes\n\nalpha\ntarget = 2\nomega\n', H.read(ws .. '/notes.md'), 'disk after the edit')
  H.eq(true, c:lua('return vim.bo.modified'), 'modified after the edit')
  H.wait('the question', 5000, function()
    return #c:lua('return _G.asked') == 1
  end)
  H.eq({ {
    prompt = "Pi: Pi changed notes.md, where you have unsaved changes. Pi's change is on disk; yours are still unsaved in the editor. Save yours too?",
    items = { 'Save mine too', 'Keep mine unsaved' },
  } }, c:lua('return _G.asked'), 'the question asked once')
  -- The model was told what bash sees.
  local reqs = mock.requests()
  local last = vim.json.encode(reqs[#reqs])
  assert(last:find('Successfully replaced 1 block(s) in notes.md.\\n\\nNote: the user has unsaved changes to notes.md in the editor.', 1, true), last)
  -- No W11/W12 for the file Pi wrote under the modified buffer.
  c:cmd('checktime')
  local msgs = c:lua("return vim.api.nvim_exec2('messages', {output = true}).output")
  assert(not msgs:find('W12', 1, true) and not msgs:find('W11', 1, true), 'W11/W12 in messages: ' .. msgs)
  H.eq(true, c:lua('return vim.bo.modified'), 'still modified after checktime')
  -- "Keep mine unsaved"; then the user's own :w writes everything, with no "changed since
  -- reading" question.
  c:lua('_G.answer(2)')
  c:input(':w<CR>')
  H.wait('the user save', 5000, function()
    return c:lua('return vim.bo.modified') == false
  end)
  H.eq('unsaved line\n# Notes\n\nalpha\ntarget = 2\nomega\n', H.read(ws .. '/notes.md'), 'disk after the user save')
  local screen = c:screen_text()
  assert(not screen:find('WARNING', 1, true) and not screen:find('changed since reading', 1, true), screen)
  -- The agent's change has a sign; ]h goes to it.
  c:cmd('normal! gg')
  c:input(']h')
  H.wait(']h', 2000, function()
    return c:lua('return vim.api.nvim_win_get_cursor(0)[1]') == 5
  end)
  local signs = c:lua([[
    local out = {}
    for _, m in ipairs(vim.api.nvim_buf_get_extmarks(0, require('pi.hunks').ns, 0, -1, { details = true })) do
      out[#out + 1] = { m[2], m[4].sign_text, m[4].end_row }
    end
    return out
  ]])
  H.eq({ { 4, '~ ', 4 } }, signs, 'hunk signs (row, sign, last row)')
  local code_win = c:lua('return vim.api.nvim_get_current_win()')
  c:cmd('Pi changes')
  H.wait('the quickfix list', 5000, function()
    local qf = c:lua("return vim.tbl_map(function(i) return { vim.fn.bufname(i.bufnr), i.lnum, i.text } end, vim.fn.getqflist())")
    return #qf == 1 and qf[1][1]:find('notes.md$') ~= nil and qf[1][2] == 5
  end)
  c:cmd('cclose')
  c:lua('vim.api.nvim_set_current_win(...)', code_win)
  H.eq('notes.md', c:lua('return vim.fn.expand("%:t")'), 'back in notes.md')
  H.eq({ 5, 0 }, c:lua('return vim.api.nvim_win_get_cursor(0)'), 'cursor')
  -- u reverts exactly the agent's edit; the user's unsaved line stays.
  c:input('u')
  H.wait('undo', 2000, function()
    return buf_text(c) == 'unsaved line\n# Notes\n\nalpha\ntarget = 1\nomega'
  end)
  local SIGNS = [[
    local out = {}
    for _, m in ipairs(vim.api.nvim_buf_get_extmarks(0, require('pi.hunks').ns, 0, -1, { details = true })) do
      out[#out + 1] = m[4].sign_text or 'none'
    end
    return out
  ]]
  H.wait('the sign hidden once the change is undone', 2000, function()
    return vim.deep_equal(c:lua(SIGNS), { 'none' })
  end)
  -- Redo, then undo the hunk with the keymap: an ordinary change, itself undoable.
  c:input('<C-r>')
  H.wait('redo', 2000, function()
    return buf_text(c):find('target = 2', 1, true) ~= nil
  end)
  H.wait('the sign back after redo', 2000, function()
    return vim.deep_equal(c:lua(SIGNS), { '~ ' })
  end)
  c:cmd('5')
  c:input('\\pu')
  H.wait('hunk undo', 2000, function()
    return buf_text(c) == 'unsaved line\n# Notes\n\nalpha\ntarget = 1\nomega'
  end)
  c:input('u')
  H.wait('undo of the hunk undo', 2000, function()
    return buf_text(c) == 'unsaved line\n# Notes\n\nalpha\ntarget = 2\nomega'
  end)
  c:stop()
  mock.stop()
end)

H.case("the agent's save runs no BufWritePre formatter; the user's save still does", function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_edit', name = 'edit', arguments = { path = 'code.lua', edits = { { oldText = 'x = 1', newText = 'x  =  2' } } } } } },
    { text = 'Done.' },
  })
  local ws = H.workspace({ ['code.lua'] = 'local a\nx = 1\n' })
  -- A formatter on save: squeezes spaces, counts its runs.
  local formatter = [[
    _G.formats = 0
    vim.api.nvim_create_autocmd('BufWritePre', { pattern = '*.lua', callback = function(ev)
      _G.formats = _G.formats + 1
      local lines = vim.api.nvim_buf_get_lines(ev.buf, 0, -1, false)
      for i, l in ipairs(lines) do lines[i] = l:gsub('  +', ' ') end
      vim.api.nvim_buf_set_lines(ev.buf, 0, -1, false, lines)
    end })
  ]]
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "auto-edit"}', init = formatter })
  c:cmd('edit code.lua')
  c:cmd('Pi change x')
  H.idle_with(c, 'Done.')
  H.eq('local a\nx  =  2\n', H.read(ws .. '/code.lua'), "disk after the agent's save")
  H.eq({ 0, false }, c:lua('return { _G.formats, vim.bo.modified }'), 'formatter runs, modified')
  -- One undo step for the agent's edit (the formatter added none).
  c:input('u')
  H.wait('undo', 2000, function()
    return buf_text(c) == 'local a\nx = 1'
  end)
  c:input('<C-r>')
  H.wait('redo', 2000, function()
    return buf_text(c) == 'local a\nx  =  2'
  end)
  c:cmd('write')
  H.eq({ 1, 'local a\nx = 2\n' }, { c:lua('return _G.formats'), H.read(ws .. '/code.lua') }, "the user's own save formats")
  c:stop()
  mock.stop()
end)

H.case('saveUserChanges never: an agent change on the unsaved lines asks; kept in the buffer only, the model is told', function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_edit', name = 'edit', arguments = { path = 'notes.md', edits = { { oldText = 'beta mine', newText = 'beta agent' } } } } } },
    { text = 'Edited.' },
  })
  local ws = H.workspace({ ['notes.md'] = 'alpha\nbeta\ngamma\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "auto-edit", save_user_changes = "never"}', init = SELECT })
  c:cmd('edit notes.md')
  c:input('2GA mine<Esc>')
  H.wait('the unsaved change', 2000, function()
    return buf_text(c) == 'alpha\nbeta mine\ngamma'
  end)
  c:cmd('Pi change beta')
  H.wait('the question', 15000, function()
    return #c:lua('return _G.asked') == 1
  end)
  H.eq({ {
    prompt = "Pi: Pi's change to notes.md (line 2) touches lines you changed and have not saved. Save your changes with it, or keep Pi's change in the editor only (not on disk)?",
    items = { 'Save mine too', "Keep Pi's change in the buffer only" },
  } }, c:lua('return _G.asked'), 'the question')
  c:lua('_G.answer(2)')
  H.idle_with(c, 'Edited.')
  H.eq('alpha\nbeta agent\ngamma', buf_text(c), 'buffer')
  H.eq('alpha\nbeta\ngamma\n', H.read(ws .. '/notes.md'), 'disk untouched')
  H.eq(true, c:lua('return vim.bo.modified'), 'modified')
  local reqs = mock.requests()
  local last = vim.json.encode(reqs[#reqs])
  assert(last:find('Note: your last change to notes.md is in the editor only, not on disk', 1, true), last)
  c:stop()
  mock.stop()
end)

H.case('write over a buffer with unsaved text asks even under approve-all, shows what is lost, and the model hears it', function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_write', name = 'write', arguments = { path = 'notes.md', content = 'new text\n' } } } },
    { text = 'Written.' },
  })
  local ws = H.workspace({ ['notes.md'] = 'saved\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "approve-all"}', cols = 160, rows = 40 })
  c:cmd('edit notes.md')
  c:input('Amine<Esc>')
  H.wait('the unsaved text', 2000, function()
    return buf_text(c) == 'savedmine'
  end)
  c:cmd('Pi write the notes')
  H.wait('the question', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ? Permission: write notes.md', 1, true)
  end)
  local text = c:lua(H.CHAT_TEXT)
  local block = text:sub(text:find('### ? Permission', 1, true), -1)
  H.contains(block, "Reason: write replaces notes.md, whose editor buffer holds unsaved text of the user's: 1 line(s) of it are lost (the − lines)", 'reason')
  H.contains(block, '-savedmine', 'the lost line in the diff')
  H.contains(block, '+new text', 'the new line in the diff')
  -- Only once or reject: nothing to remember for a loss like this.
  assert(not block:find('Allow for this session', 1, true), block)
  H.eq('savedmine', buf_text(c), 'buffer untouched while asked')
  c:cmd('Pi allow')
  H.idle_with(c, 'Written.')
  H.eq('new text\n', H.read(ws .. '/notes.md'), 'disk')
  local reqs = mock.requests()
  local last = vim.json.encode(reqs[#reqs])
  assert(last:find("Successfully wrote to notes.md. The editor's buffer held unsaved text of the user's; the user allowed replacing it", 1, true), last)
  c:stop()
  mock.stop()
end)

H.case('write over a new unsaved buffer of the same name asks even under approve-all; rejected, the draft stays and nothing reaches the disk', function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_write', name = 'write', arguments = { path = 'fresh.md', content = 'agent text\n' } } } },
    { text = 'Written.' },
  })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "approve-all"}', cols = 160, rows = 40 })
  c:cmd('edit fresh.md')
  c:input('imy draft<Esc>')
  H.wait('the unsaved text', 2000, function()
    return buf_text(c) == 'my draft'
  end)
  c:cmd('Pi write fresh.md')
  H.wait('the question', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ? Permission: write fresh.md', 1, true)
  end)
  local text = c:lua(H.CHAT_TEXT)
  local block = text:sub(text:find('### ? Permission', 1, true), -1)
  H.contains(block, '-my draft', 'the lost line in the diff')
  H.eq('my draft', buf_text(c), 'buffer untouched while asked')
  H.eq(nil, H.read(ws .. '/fresh.md'), 'nothing on disk while asked')
  c:cmd('Pi reject')
  H.idle_with(c, 'Written.')
  H.eq('my draft', buf_text(c), 'the draft kept')
  H.eq(nil, H.read(ws .. '/fresh.md'), 'nothing on disk after the refusal')
  c:stop()
  mock.stop()
end)

--- A run asking to run `echo one` (then answering "Finished."), its question in the chat and
--- the chat focused; 'timeoutlen' 400. Returns the mock and the child.
local function bash_question_in_chat()
  local mock = H.mock({
    { toolCalls = { { id = 'call_one', name = 'bash', arguments = { command = 'echo one' } } } },
    { text = 'Finished.' },
  })
  local ws = H.workspace({ ['code.txt'] = 'code\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "auto-edit"}', init = 'vim.o.timeoutlen = 400', cols = 160, rows = 40 })
  c:cmd('edit code.txt')
  c:cmd('Pi run a command')
  H.wait('the question', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ? Permission: run `echo one`', 1, true)
  end)
  c:input('<C-w>l')
  H.wait('the chat focused', 2000, function()
    return c:lua('return vim.bo.filetype') == 'pi-chat'
  end)
  return mock, c
end

H.case('a count or a key followed by another never answers; a digit alone does, after timeoutlen', function()
  local mock, c = bash_question_in_chat()
  local PENDING = 'return #require("pi.permission").pending'
  -- 2j: a count and a motion (the cursor moves two lines), no answer.
  c:input('gg')
  c:input('2j')
  vim.wait(900)
  H.eq({ 1, 3 }, { c:lua(PENDING), c:lua('return vim.fn.line(".")') }, '2j: still asked, cursor on line 3')
  -- 13G: a count and a command, no answer.
  c:input('13G')
  vim.wait(900)
  H.eq(1, c:lua(PENDING), '13G: still asked')
  -- 1 followed at once by k: not an answer either.
  c:input('1k')
  vim.wait(900)
  H.eq(1, c:lua(PENDING), '1k: still asked')
  -- The same digit in another window (the code buffer) is a count there and answers nothing.
  -- (Neovim holds API calls while a count is pending: <Esc> ends it before looking.)
  c:input('<C-w>h')
  c:input('1')
  vim.wait(900)
  c:input('<Esc>')
  H.eq({ 1, 'code.txt' }, { c:lua(PENDING), c:lua('return vim.fn.expand("%:t")') }, 'a digit in the code window')
  -- A digit alone in the chat, nothing after it: allowed once, and no count left pending.
  c:input('<C-w>l')
  vim.wait(100)
  c:input('1')
  H.idle_with(c, 'Finished.')
  H.contains(c:screen_text(), '→ allowed once', 'the answer on the screen')
  c:input('gg')
  c:input('j')
  H.eq(2, c:lua('return vim.fn.line(".")'), 'j after the answer moves one line (no count left)')
  c:stop()
  mock.stop()
end)

H.case('a digit answers after timeoutlen while messages keep coming faster than one a millisecond', function()
  local mock, c = bash_question_in_chat()
  -- A client asking back to back (each answer brings the next request) while the digit waits
  -- its 'timeoutlen': Neovim's own `vim.wait` would never time out under such a flood.
  c:input('1')
  local t0 = uv.hrtime()
  local pending, asked = 1, 0
  while pending > 0 and uv.hrtime() - t0 < 5e9 do
    pending = c:lua('return #require("pi.permission").pending')
    asked = asked + 1
  end
  local ms = (uv.hrtime() - t0) / 1e6
  assert(pending == 0 and ms < 3000, ('still asked after %.0f ms and %d requests'):format(ms, asked))
  H.idle_with(c, 'Finished.')
  H.contains(c:screen_text(), '→ allowed once', 'the answer on the screen')
  c:stop()
  mock.stop()
end)

H.case('a permission answered both ways; an insert-mode key elsewhere is not an answer', function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_one', name = 'bash', arguments = { command = 'echo one' } } } },
    { toolCalls = { { id = 'call_two', name = 'bash', arguments = { command = 'echo two' } } } },
    { text = 'Finished.' },
  })
  local ws = H.workspace({ ['code.txt'] = 'code\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "auto-edit"}', cols = 160, rows = 40 })
  c:cmd('edit code.txt')
  c:cmd('Pi run two commands')
  H.wait('the first question', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ? Permission: run `echo one`', 1, true)
  end)
  -- Insert mode in the code buffer: digits and mnemonic keys are text there.
  c:input('A 1asr2<Esc>')
  H.wait('the typed text', 2000, function()
    return buf_text(c) == 'code 1asr2'
  end)
  local pending = c:lua('return #require("pi.permission").pending')
  H.eq(1, pending, 'questions still open after typing elsewhere')
  local text = c:lua(H.CHAT_TEXT)
  local block = text:sub(text:find('### ? Permission', 1, true), -1)
  H.eq(
    table.concat({
      '### ? Permission: run `echo one`',
      'Reason: approvalPolicy "auto-edit": bash asks',
      '  [1] a Allow once',
      '  [2] s Allow for this session',
      '  [3] r Reject',
      '  [4] R Reject with a reason…',
      '',
    }, '\n'),
    block,
    'permission block'
  )
  -- The tool call's header says it waits for the answer (it is not running yet).
  H.contains(c:screen_text(), '### ⚙ bash ? waiting for your answer  echo one', 'tool header while asked')
  -- Digit 1 in the chat (from anywhere in it) allows once.
  c:input('<C-w>l')
  H.wait('the chat focused', 2000, function()
    return c:lua('return vim.bo.filetype') == 'pi-chat'
  end)
  c:input('gg1')
  H.wait('the second question', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ? Permission: run `echo two`', 1, true)
  end)
  -- The answered block collapsed to its header (reason and answers folded under it).
  local folded = c:lua([[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    local lines = vim.api.nvim_buf_get_lines(chat.buf, 0, -1, false)
    local head = vim.fn.index(lines, '### ? Permission: run `echo one`') + 1
    return vim.api.nvim_win_call(chat:window(), function()
      return { vim.fn.foldclosed(head), vim.fn.foldclosed(head + 1), vim.fn.foldclosedend(head + 1) - head }
    end)
  ]])
  H.eq({ -1, folded[2], 5 }, folded, 'fold of the answered block')
  assert(folded[2] > 0, 'answered block not folded')
  -- <CR> on the folded line opens it (and again closes it).
  c:lua([[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    vim.api.nvim_win_set_cursor(0, { ..., 0 })
  ]], folded[2])
  c:input('<CR>')
  H.wait('the fold opened', 2000, function()
    return c:lua('return vim.fn.foldclosed(...)', folded[2]) == -1
  end)
  c:input('<CR>')
  H.wait('the fold closed', 2000, function()
    return c:lua('return vim.fn.foldclosed(...)', folded[2]) == folded[2]
  end)
  -- `r` away from the block is not an answer; on the block it rejects.
  c:input('gg')
  c:input('r<Esc>')
  vim.wait(200)
  H.eq(1, c:lua('return #require("pi.permission").pending'), 'r away from the block')
  c:lua([[
    local q = require('pi.permission').pending[1]
    vim.api.nvim_win_set_cursor(0, { q.header_row + 1, 0 })
  ]])
  c:input('r')
  H.wait('the run to end', 15000, function()
    local s = c:lua(H.CHAT_STATE)
    return s.state == 'idle' and c:lua(H.CHAT_TEXT):find('Finished.', 1, true)
  end)
  local chat = c:lua(H.CHAT_TEXT)
  -- The allowed call ran (its output may start with the server's note that code.txt has
  -- unsaved changes: the typed text, which stayed in code.txt).
  assert(
    chat:find('↳ bash ✓ (1 line)\n```\none\n```', 1, true)
      or chat:find('↳ bash ✓ (2 lines)\n```\n[warning: 1 open editor buffer(s) differ from disk (unsaved changes; this command sees the disk): code.txt]\none\n```', 1, true),
    'allowed call ran:\n' .. chat
  )
  H.contains(chat, '↳ bash ✗ (1 line)\n```\nThe user rejected this bash call.\n```', 'rejected call')
  H.eq('code 1asr2', c:lua("return table.concat(vim.api.nvim_buf_get_lines(vim.fn.bufnr('code.txt'), 0, -1, false), '\\n')"), 'code buffer')
  local screen = c:screen_text()
  H.contains(screen, '→ allowed once', 'screen')
  H.contains(screen, '→ rejected', 'screen')
  c:stop()
  mock.stop()
end)

H.case('an edit question shows the diff; the buffer changed while asked keeps the user\'s text', function()
  local mock = H.mock({
    { toolCalls = { { id = 'e1', name = 'edit', arguments = { path = 'conf.txt', edits = { { oldText = 'mode = slow', newText = 'mode = fast' } } } } } },
    { text = 'Noted.' },
  })
  local ws = H.workspace({ ['conf.txt'] = 'name = x\nmode = slow\n' })
  local notes = '_G.notes = {}; vim.notify = function(m) table.insert(_G.notes, m) end'
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "ask"}', cols = 160, rows = 40, init = notes })
  c:cmd('edit conf.txt')
  c:cmd('Pi make it fast')
  H.wait('the edit question', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ? Permission: edit conf.txt', 1, true)
  end)
  local text = c:lua(H.CHAT_TEXT)
  H.contains(text, '```diff\n', 'diff fence')
  H.contains(text, '\n-mode = slow\n+mode = fast\n', 'diff lines')
  local hls = c:lua([[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    local out = {}
    for _, m in ipairs(vim.api.nvim_buf_get_extmarks(chat.buf, require('pi.render').ns, 0, -1, { details = true })) do
      local line = vim.api.nvim_buf_get_lines(chat.buf, m[2], m[2] + 1, false)[1]
      if m[4].hl_group and m[4].hl_group ~= 'PiDiffText' and m[4].hl_eol then
        out[#out + 1] = line .. ' ' .. m[4].hl_group
      elseif m[4].hl_group == 'PiDiffText' then
        out[#out + 1] = line .. ' word ' .. line:sub(m[3] + 1, m[4].end_col)
      end
    end
    return out
  ]])
  -- Line colours, and the changed word of the pair marked (word-level diff): in the changed
  -- lines shown first, and in the diff with its context (folded).
  local pair = { '-mode = slow PiDiffDelete', '-mode = slow word slow', '+mode = fast PiDiffAdd', '+mode = fast word fast' }
  H.eq(vim.list_extend(vim.list_extend({}, pair), pair), vim.tbl_filter(function(l)
    return l:find('mode = ', 1, true) ~= nil
  end, hls), 'diff highlights')
  -- The user changes the line while the question is open, then allows.
  c:cmd('2')
  c:input('ccmode = medium<Esc>')
  H.wait('the user edit', 2000, function()
    return buf_text(c) == 'name = x\nmode = medium'
  end)
  -- The question says at once that it went stale (before any answer).
  local STALE = [[
    local q = require('pi.permission').pending[1]
    local chat = q.chat
    for _, m in ipairs(vim.api.nvim_buf_get_extmarks(chat.buf, -1, { q.header_row, 0 }, { q.header_row, -1 }, { details = true })) do
      for _, vl in ipairs(m[4].virt_lines or {}) do
        if vl[1][1]:find('changed since', 1, true) then return vl[1][1] end
      end
    end
    return vim.inspect({ stale = q.stale, au = q.stale_au, notes = _G.notes })
  ]]
  H.wait('the stale mark', 3000, function()
    return c:lua(STALE) == '  ⚠ conf.txt changed since this question: Allow will not apply it (the agent reads it again)'
  end)
  H.contains(table.concat(c:lua('return _G.notes'), '\n'), 'Pi: conf.txt changed while Pi asks to edit it: allowing will not apply the old change', 'stale notification')
  c:lua([[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    vim.api.nvim_set_current_win(chat:window())
  ]])
  c:input('1')
  H.wait('the run to end', 15000, function()
    local s = c:lua(H.CHAT_STATE)
    return s.state == 'idle' and c:lua(H.CHAT_TEXT):find('Noted.', 1, true)
  end)
  local final = c:lua(H.CHAT_TEXT)
  if not final:find('changed while the user was deciding', 1, true) then
    io.stdout:write(final .. '\nBUFFER: ' .. c:lua("return table.concat(vim.api.nvim_buf_get_lines(vim.fn.bufnr('conf.txt'), 0, -1, false), '|')") .. '\nMSGS: ' .. c:lua("return vim.api.nvim_exec2('messages', {output = true}).output") .. '\n')
  end
  H.contains(final, 'changed while the user was deciding', 'tool result')
  -- Allowed, then refused by the server: said in words on the question and as a notification
  -- (lines named, no hashes).
  local refused = 'conf.txt changed while the user was deciding (line 2 differs); nothing was changed.'
  local header = c:lua([[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    local lines = vim.api.nvim_buf_get_lines(chat.buf, 0, -1, false)
    local row = vim.fn.index(lines, '### ? Permission: edit conf.txt')
    local out = {}
    for _, m in ipairs(vim.api.nvim_buf_get_extmarks(chat.buf, -1, { row, 0 }, { row, -1 }, { details = true })) do
      for _, vt in ipairs(m[4].virt_text or {}) do
        out[#out + 1] = vt[1]
      end
      for _, vl in ipairs(m[4].virt_lines or {}) do
        out[#out + 1] = vl[1][1]
      end
    end
    table.sort(out)
    return table.concat(out, '|')
  ]])
  H.eq('  ✗ not done: ' .. refused .. ' What was approved is not what would land: read the file again and redo the change.| → allowed, but not done', header, 'the question header')
  H.contains(table.concat(c:lua('return _G.notes'), '\n'), 'Pi: edit conf.txt was allowed but not done: ' .. refused, 'notification')
  assert(not final:find('xxh3', 1, true), final)
  H.eq('name = x\nmode = medium', c:lua("return table.concat(vim.api.nvim_buf_get_lines(vim.fn.bufnr('conf.txt'), 0, -1, false), '\\n')"), 'the user\'s text kept')
  c:stop()
  mock.stop()
end)

H.case('an edit question shows the changed lines first, the diff with its context folded; at 80x24 the changes, the hint and the first answer are in sight', function()
  local text = {}
  for i = 1, 40 do
    text[i] = ('line %02d of the settings'):format(i)
  end
  local mock = H.mock({
    { toolCalls = { { id = 'e1', name = 'edit', arguments = { path = 'long.txt', edits = { { oldText = 'line 12 of the settings', newText = 'line 12 changed' }, { oldText = 'line 30 of the settings', newText = 'line 30 changed' } } } } } },
    { text = 'Changed.' },
  })
  local ws = H.workspace({ ['long.txt'] = table.concat(text, '\n') .. '\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "ask"}', cols = 80, rows = 24 })
  c:cmd('Pi change two lines')
  H.wait('the edit question', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ? Permission: edit long.txt', 1, true)
  end)
  local BLOCK = [[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    local q = require('pi.permission').pending[1]
    local lines = vim.api.nvim_buf_get_lines(chat.buf, q.header_row, q.last_row + 1, false)
    local win = chat:window()
    local closed = {}
    vim.api.nvim_win_call(win, function()
      for i = q.header_row + 1, q.last_row + 1 do
        local s = vim.fn.foldclosed(i)
        if s ~= -1 then closed[#closed + 1] = (s - 1 - q.header_row) .. '-' .. (vim.fn.foldclosedend(i) - 1 - q.header_row) end
      end
    end)
    return { lines = lines, closed = vim.fn.uniq(closed) }
  ]]
  local b = c:lua(BLOCK)
  local ctx = {}
  for _, i in ipairs({ 8, 9, 10, 11 }) do
    ctx[#ctx + 1] = ' ' .. text[i]
  end
  local context = vim.list_extend({}, ctx)
  vim.list_extend(context, { '-line 12 of the settings', '+line 12 changed', ' ' .. text[13], ' ' .. text[14], ' ' .. text[15], ' ' .. text[16] })
  local reason = b.lines[2]
  H.eq({
    '### ? Permission: edit long.txt',
    reason,
    '```diff',
    '@@ line 12 @@',
    '-line 12 of the settings',
    '+line 12 changed',
    '@@ line 30 @@',
    '-line 30 of the settings',
    '+line 30 changed',
    '```',
    'With context (16 unchanged lines): zo',
  }, { unpack(b.lines, 1, 11) }, 'the changed lines first')
  H.eq('```diff', b.lines[12], 'the diff with its context follows')
  local answers = vim.fn.index(b.lines, '  [1] a Allow once') + 1
  H.eq('```', b.lines[answers - 1], 'then the answers: ' .. vim.inspect(b.lines))
  local full = table.concat(b.lines, '\n')
  H.contains(full, table.concat(context, '\n'), 'the context kept in the folded diff')
  H.eq({ '10-' .. (answers - 2) }, b.closed, 'the diff with its context is one closed fold')
  -- 80x24 (a 15-row chat): the changed lines, the hint (digits answer) and the first answer
  -- are on the screen at once; the context is not.
  local screen = c:screen_text()
  for _, want in ipairs({ '-line 12 of the settings', '+line 12 changed', '-line 30 of the settings', '+line 30 changed', 'With context (16 unchanged lines): zo ▸', 'a digit alone', '[1] a Allow once' }) do
    H.contains(screen, want, 'on the 80x24 screen')
  end
  assert(not screen:find(' line 10 of the settings', 1, true), 'the context is folded:\n' .. screen)
  c:lua([[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    vim.api.nvim_set_current_win(chat:window())
  ]])
  c:input('1')
  H.idle_with(c, 'Changed.')
  H.eq('line 12 changed', H.read(ws .. '/long.txt'):match('line 12[^\n]*'), 'the edit landed')
  -- Answered: the whole question folds under its header (the inner fold taken in).
  local after = c:lua([[
    local chat = require('pi.chat').current(require('pi.client').roots[require('pi.client').root_of(0)])
    local lines = vim.api.nvim_buf_get_lines(chat.buf, 0, -1, false)
    local row = vim.fn.index(lines, '### ? Permission: edit long.txt')
    local out
    vim.api.nvim_win_call(chat:window(), function()
      out = { vim.fn.foldclosed(row + 2), vim.fn.foldclosedend(row + 2), vim.fn.foldclosed(row + 13) }
    end)
    return { row = row, folds = out }
  ]])
  H.eq({ after.row + 2, after.row + 2 }, { after.folds[1], after.folds[3] }, 'one closed fold from the reason down')
  c:stop()
  mock.stop()
end)

H.case('sessions are listed and reopen with their history', function()
  local mock = H.mock({ { text = 'First answer.' }, { text = 'Second answer.' } })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json })
  c:cmd('Pi first question')
  H.wait('the first answer', 15000, function()
    local s = c:lua(H.CHAT_STATE)
    return s ~= vim.NIL and s.state == 'idle' and c:lua(H.CHAT_TEXT):find('First answer.', 1, true)
  end)
  c:cmd('Pi second question')
  H.wait('the second answer', 15000, function()
    local s = c:lua(H.CHAT_STATE)
    return s.state == 'idle' and c:lua(H.CHAT_TEXT):find('Second answer.', 1, true)
  end)
  local live = c:lua(H.CHAT_TEXT)
  c:stop()
  -- A new Neovim: :Pi sessions lists it (vim.ui.select's default list), 1<CR> opens it.
  local c2 = H.child({ ws = ws, models_json = mock.models_json })
  c2:input(':Pi sessions<CR>')
  H.wait('the picker', 10000, function()
    return c2:screen_text():find('first question', 1, true) ~= nil
  end)
  H.contains(c2:screen_text(), 'Pi sessions', 'picker prompt')
  H.contains(c2:screen_text(), '1: first question  · ', 'picker item')
  c2:input('1<CR>')
  H.wait('the history', 10000, function()
    local t = c2:lua(H.CHAT_TEXT)
    return t ~= vim.NIL and t:find('Second answer.', 1, true)
  end)
  H.eq(live, c2:lua(H.CHAT_TEXT), 'reopened chat = the live chat')
  H.wait('the statusline of the reopened session', 5000, function()
    return c2:lua('return require("pi").statusline()'):find('^mock/mock%-1 · 1%% · %$0%.000 · ') ~= nil
  end)
  H.contains(c2:screen_text(), 'Second answer.', 'screen')
  c2:stop()
  mock.stop()
end)

H.case('typing in insert mode while the agent edits other files: mode, window, cursor unchanged', function()
  local steps = {}
  for i = 1, 10 do
    steps[#steps + 1] = { toolCalls = { { id = 'w' .. i, name = 'edit', arguments = { path = 'other.txt', edits = { { oldText = 'n=' .. (i - 1), newText = 'n=' .. i } } } } } }
  end
  steps[#steps + 1] = { text = 'Ten edits done.' }
  local mock = H.mock(steps)
  local ws = H.workspace({ ['code.txt'] = 'code\n', ['other.txt'] = 'n=0\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "auto-edit"}', cols = 140 })
  c:cmd('edit code.txt')
  c:cmd('Pi edit other.txt ten times')
  c:input('A')
  local win = c:lua('return vim.api.nvim_get_current_win()')
  -- Type while the edits land: one character every 30 ms.
  local typed = ''
  local done = false
  local timer = vim.uv.new_timer()
  local i = 0
  timer:start(30, 30, vim.schedule_wrap(function()
    if done then
      return
    end
    i = i + 1
    local ch = string.char(96 + (i % 26) + 1)
    typed = typed .. ch
    c:send({ 2, 'nvim_input', { ch } })
  end))
  local ok_edits = pcall(H.wait, 'the ten edits', 20000, function()
    return (H.read(ws .. '/other.txt') or '') == 'n=10\n'
  end)
  if not ok_edits then
    done = true
    error('the ten edits did not land; disk: ' .. tostring(H.read(ws .. '/other.txt')) .. '\nchat:\n' .. tostring(c:lua(H.CHAT_TEXT)))
  end
  done = true
  timer:stop()
  timer:close()
  vim.wait(200)
  H.eq('i', c:lua('return vim.api.nvim_get_mode().mode'), 'mode')
  H.eq(win, c:lua('return vim.api.nvim_get_current_win()'), 'window')
  H.eq('code' .. typed, c:lua('return vim.api.nvim_get_current_line()'), 'every character in code.txt')
  H.eq({ 1, #('code' .. typed) }, c:lua('return vim.api.nvim_win_get_cursor(0)'), 'cursor')
  H.eq('n=10', c:lua("return vim.api.nvim_buf_get_lines(vim.fn.bufnr('other.txt'), 0, -1, false)[1]"), 'other.txt buffer')
  -- The never-opened file was loaded by the first edit, synced (attached: the server sees every
  -- later edit against it) and written; each edit is an undo step of its own.
  H.eq({ attached = true, modified = false, seq = 10 }, c:lua([[
    local b = vim.fn.bufnr('other.txt')
    local client = vim.lsp.get_clients({ name = 'pi-lsp' })[1]
    return { attached = vim.lsp.buf_is_attached(b, client.id), modified = vim.bo[b].modified, seq = vim.api.nvim_buf_call(b, function() return vim.fn.undotree().seq_last end) }
  ]]), 'other.txt: attached, written, ten undo steps')
  -- Each edit marked only the line it changed.
  H.eq({ 0 }, c:lua("return vim.tbl_map(function(m) return m[2] end, vim.api.nvim_buf_get_extmarks(vim.fn.bufnr('other.txt'), require('pi.hunks').ns, 0, -1, {}))"), 'hunk rows in other.txt')
  c:input('<Esc>')
  c:stop()
  mock.stop()
end)

H.case(':checkhealth pi', function()
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = { providers = vim.empty_dict() } })
  c:cmd('Pi new')
  H.wait('the server', 10000, function()
    return c:lua(H.CHAT_STATE) ~= vim.NIL
  end)
  c:cmd('checkhealth pi')
  local out = buf_text(c)
  local v = c:lua('local v = vim.version() return ("%d.%d.%d"):format(v.major, v.minor, v.patch)')
  local version = vim.trim(vim.fn.system({ H.bin, '--version' }))
  H.contains(out, '- ✅ OK Neovim ' .. v, 'health')
  H.contains(out, ('- ✅ OK %s (%s) from setup({cmd})'):format(H.bin, version), 'health')
  H.contains(out, '- trust: false (setup({trust}))', 'health')
  H.contains(out, '- root: ' .. ws, 'health')
  H.contains(out, '- ✅ OK models.json ~/agent/models.json: no models', 'health')
  H.contains(out, '- model in use in ' .. ws .. ': scripted/demo', 'health')
  H.contains(out, 'experimental.agent.{diagnostics, requestPermission, saveDocument, syncsAllDocuments, ui}', 'health')
  H.contains(out, ws .. ': server agent protocol v1, ', 'health')
  H.contains(out, 'position encoding utf-8, incremental document sync', 'health')
  c:stop()
end)

H.case(':Pi diff shows the text before the agent in diff mode; a deletion undone goes back in its place', function()
  local mock = H.mock({
    { toolCalls = { { id = 'd1', name = 'edit', arguments = { path = 'list.txt', edits = { { oldText = 'b\n', newText = 'B\n' }, { oldText = 'd\n', newText = '' } } } } } },
    { text = 'Changed.' },
  })
  local ws = H.workspace({ ['list.txt'] = 'a\nb\nc\nd\ne\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "auto-edit"}', cols = 160, rows = 40 })
  c:cmd('edit list.txt')
  c:cmd('Pi change the list')
  H.wait('the run', 15000, function()
    local s = c:lua(H.CHAT_STATE)
    return s ~= vim.NIL and s.state == 'idle' and c:lua(H.CHAT_TEXT):find('Changed.', 1, true)
  end)
  H.eq('a\nB\nc\ne', buf_text(c), 'the edit')
  c:cmd('Pi diff')
  local tab = c:lua([[
    local out = {}
    for _, w in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
      local b = vim.api.nvim_win_get_buf(w)
      out[#out + 1] = { name = vim.fn.fnamemodify(vim.api.nvim_buf_get_name(b), ':t'), diff = vim.wo[w].diff, lines = vim.api.nvim_buf_get_lines(b, 0, -1, false) }
    end
    return { tabs = #vim.api.nvim_list_tabpages(), wins = out }
  ]])
  H.eq({ tabs = 2, wins = { { name = 'list.txt', diff = true, lines = { 'a', 'b', 'c', 'd', 'e' } }, { name = 'list.txt', diff = true, lines = { 'a', 'B', 'c', 'e' } } } }, tab, 'the diff tabpage')
  c:cmd('tabclose')
  H.eq(false, c:lua('return vim.wo.diff'), 'diff mode only in the closed tabpage')
  -- The deleted line (its mark on the line after it): undone, it is back before that line.
  c:cmd('4')
  c:input('\\pu')
  H.wait('the deletion undone', 3000, function()
    return buf_text(c) == 'a\nB\nc\nd\ne'
  end)
  c:cmd('2')
  c:input('\\pu')
  H.wait('the change undone', 3000, function()
    return buf_text(c) == 'a\nb\nc\nd\ne'
  end)
  c:stop()
  mock.stop()
end)

H.done()
