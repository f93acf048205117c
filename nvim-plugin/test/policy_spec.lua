-- `:Pi policy` does one thing (issue 30 item 8): the policy, then where it goes — this session
-- only (agent/permissions/set), the workspace's .pi/settings.json or the user's Pi settings —
-- each place saying what wins over it; a settings file keeps every other byte.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

local function messages(c)
  return c:lua("return vim.api.nvim_exec2('messages', {output = true}).output")
end

H.case('the pickers: the policy, then its place; "this session only" is in force at the next tool call', function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_b', name = 'bash', arguments = { command = 'echo policy-ran' } } } },
    { text = 'Ran it.' },
  })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 120, rows = 30 })
  c:cmd('Pi new')
  H.wait('the session', 10000, function()
    return c:lua(H.CHAT_STATE) ~= vim.NIL
  end)
  c:input(':Pi policy<CR>')
  H.wait('the policy picker', 5000, function()
    return c:screen_text():find('approve-all: run every tool call without asking', 1, true) ~= nil
  end)
  c:input('3<CR>')
  H.wait('the place picker', 5000, function()
    return c:screen_text():find('this session only (until it closes; wins over every settings file)', 1, true) ~= nil
  end)
  local screen = c:screen_text()
  assert(screen:find('this workspace: .pi/settings.json (new sessions here)', 1, true), screen)
  assert(screen:find('your Pi settings: ~/agent/settings.json (workspaces without their own)', 1, true), screen)
  c:input('1<CR>')
  H.wait('the notice', 5000, function()
    return messages(c):find('Pi: this session runs every tool call without asking', 1, true) ~= nil
  end)
  -- Under the default (auto-edit) bash would ask: it runs at once.
  c:cmd('Pi run the command')
  H.idle_with(c, 'Ran it.')
  assert(c:lua(H.CHAT_TEXT):find('policy-ran', 1, true), c:lua(H.CHAT_TEXT))
  H.eq(nil, H.read(ws .. '/.pi/settings.json'), 'no settings file written for a session choice')
  c:stop()
  mock.stop()
end)

H.case(':Pi policy {policy} workspace / user writes only approvalPolicy; a new session of the workspace asks', function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_e', name = 'edit', arguments = { path = 'code.txt', edits = { { oldText = 'a = 1', newText = 'a = 2' } } } } } },
    { text = 'Edited.' },
  })
  local original = '{\n  "theme": "dark",\n  "packages": {}\n}\n'
  local ws = H.workspace({ ['code.txt'] = 'a = 1\n', ['.pi/settings.json'] = original })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{trust = true}', cols = 120, rows = 30 })
  c:input(':Pi policy ask workspace<CR>')
  H.wait('the workspace notice', 5000, function()
    return messages(c):find('Pi: approvalPolicy "ask" in .pi/settings.json: for new sessions', 1, true) ~= nil
  end)
  H.eq('{\n  "approvalPolicy": "ask",\n  "theme": "dark",\n  "packages": {}\n}\n', H.read(ws .. '/.pi/settings.json'), 'the project settings')
  -- A session started now asks before the edit (auto-edit would not).
  c:cmd('Pi edit it')
  H.wait('the edit question', 15000, function()
    return c:lua('return #require("pi.permission").pending') == 1
  end)
  H.eq('a = 1\n', H.read(ws .. '/code.txt'), 'not edited before the answer')
  c:cmd('Pi reject')
  H.idle_with(c, 'Edited.')
  -- `default` takes the key out again: the file as it was.
  c:cmd('echo ""') -- the last notice read: the next one alone on the message line
  c:input(':Pi policy default workspace<CR>')
  H.wait('the key removed', 5000, function()
    return H.read(ws .. '/.pi/settings.json') == original
  end)
  -- The user's settings: created with the key alone.
  c:cmd('echo ""') -- the last notice read: the next one alone on the message line
  c:input(':Pi policy approve-all user<CR>')
  H.wait('the user settings', 5000, function()
    return H.read(c.home .. '/agent/settings.json') == '{\n  "approvalPolicy": "approve-all"\n}\n'
  end)
  -- A settings file that is not a JSON object is said and left as it is.
  H.write(ws .. '/.pi/settings.json', '[1, 2]\n')
  c:cmd('echo ""')
  c:input(':Pi policy ask workspace<CR>')
  H.wait('the refusal', 5000, function()
    return messages(c):find('does not hold a JSON object: left as it is', 1, true) ~= nil
  end)
  H.eq('[1, 2]\n', H.read(ws .. '/.pi/settings.json'), 'the file not touched')
  -- Completion: the policies, then the places.
  H.eq({ 'ask', 'auto-edit', 'approve-all', 'default' }, c:lua('return require("pi.commands").complete("", "Pi policy ")'), 'policies')
  H.eq({ 'session', 'workspace', 'user' }, c:lua('return require("pi.commands").complete("", "Pi policy ask ")'), 'places')
  H.eq({ 'workspace' }, c:lua('return require("pi.commands").complete("w", "Pi policy ask w")'), 'a place by its start')
  c:stop()
  mock.stop()
end)

-- `:Pi save_user_changes` (issue 30 item 1): the value, then its settings file; the next agent
-- edit follows it (the server reads the file again), with no restart.
local SELECT = [[
  _G.asked = {}
  vim.ui.select = function(items, opts, cb)
    _G.asked[#_G.asked + 1] = { prompt = opts.prompt, items = vim.tbl_map(opts.format_item or tostring, items) }
    _G.answer = function(i) cb(items[i], i) end
  end
]]

H.case(':Pi save_user_changes: the value, then its place; the next agent edit saves the unsaved line with it', function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_e', name = 'edit', arguments = { path = 'notes.md', edits = { { oldText = 'target = 1', newText = 'target = 2' } } } } } },
    { text = 'Edited.' },
  })
  local original = '{\n  "theme": "dark"\n}\n'
  local ws = H.workspace({ ['notes.md'] = 'alpha\ntarget = 1\n', ['.pi/settings.json'] = original })
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{trust = true, approval_policy = "auto-edit"}', init = SELECT, cols = 120, rows = 30 })
  c:input(':Pi save_user_changes<CR>')
  H.wait('the value picker', 5000, function()
    return #c:lua('return _G.asked') == 1
  end)
  H.eq({
    prompt = 'Pi: your unsaved changes when an agent edits the file',
    items = {
      'ask: ask once per file per session before an agent edit writes your unsaved changes',
      'always: an agent edit saves the buffer, your unsaved changes with it',
      "never: only the agent's change reaches the disk; yours stay unsaved",
      'default: no choice of its own here: what the next place says, else ask',
    },
  }, c:lua('return _G.asked[1]'), 'the values')
  c:lua('_G.answer(2)')
  H.wait('the place picker', 5000, function()
    return #c:lua('return _G.asked') == 2
  end)
  H.eq({
    prompt = 'Pi: saveUserChanges "always" for…',
    items = { 'this workspace: .pi/settings.json', 'your Pi settings: ~/agent/settings.json (workspaces without their own)' },
  }, c:lua('return _G.asked[2]'), 'the places')
  c:lua('_G.answer(1)')
  H.wait('the workspace notice', 5000, function()
    return messages(c):find('Pi: saveUserChanges "always" in .pi/settings.json: from the next agent edit', 1, true) ~= nil
  end)
  H.eq('{\n  "saveUserChanges": "always",\n  "theme": "dark"\n}\n', H.read(ws .. '/.pi/settings.json'), 'the project settings')
  -- An unsaved line, then the agent's edit: under "always" the buffer is written, the user's
  -- line with it, and nothing is asked.
  c:cmd('edit notes.md')
  c:input('ggOunsaved line<Esc>')
  H.wait('the unsaved line', 2000, function()
    return c:lua("return vim.api.nvim_buf_get_lines(0, 0, 1, false)[1]") == 'unsaved line'
  end)
  c:cmd('Pi set target to 2')
  H.idle_with(c, 'Edited.')
  H.wait('the buffer written', 5000, function()
    return H.read(ws .. '/notes.md') == 'unsaved line\nalpha\ntarget = 2\n'
  end)
  H.eq(false, c:lua("return vim.bo[vim.fn.bufnr('notes.md')].modified"), 'the buffer saved')
  H.eq(2, #c:lua('return _G.asked'), 'nothing asked about the unsaved line')
  -- The user's settings, by name; `default` takes the workspace's key out again.
  c:cmd('echo ""')
  c:input(':Pi save_user_changes never user<CR>')
  H.wait('the user settings', 5000, function()
    return H.read(c.home .. '/agent/settings.json') == '{\n  "saveUserChanges": "never"\n}\n'
  end)
  c:cmd('echo ""')
  c:input(':Pi save_user_changes default workspace<CR>')
  H.wait('the key removed', 5000, function()
    return H.read(ws .. '/.pi/settings.json') == original
  end)
  c:cmd('echo ""')
  c:input(':Pi save_user_changes sometimes<CR>')
  H.wait('the refusal', 5000, function()
    return messages(c):find('no saveUserChanges value "sometimes": ask, always, never, default', 1, true) ~= nil
  end)
  -- Completion: the values, then the places.
  H.eq({ 'ask', 'always', 'never', 'default' }, c:lua('return require("pi.commands").complete("", "Pi save_user_changes ")'), 'values')
  H.eq({ 'workspace', 'user' }, c:lua('return require("pi.commands").complete("", "Pi save_user_changes never ")'), 'places')
  H.eq({ 'save_user_changes' }, c:lua('return require("pi.commands").complete("sa", "Pi sa")'), 'the subcommand')
  c:stop()
  mock.stop()
end)

H.done()
