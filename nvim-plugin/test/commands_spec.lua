-- Specs of the :Pi subcommands around a session: a visual selection goes with its file and
-- lines, label, tree (branch puts the message back in the prompt), fork, export, stats, model,
-- the diagnostics tool from vim.diagnostic, a permission float when the chat is hidden, the
-- view of a scrolled-up chat kept while text streams, and a missing binary said once.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

local CHAT = [[
  local client = require('pi.client')
  return require('pi.chat').current(client.roots[client.root_of(0)])
]]

-- The Pi windows of the tabpage (filetypes, sorted), every one at least 20 columns wide.
local PI_WINDOWS = [[
  local out = {}
  for _, w in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    local ft = vim.bo[vim.api.nvim_win_get_buf(w)].filetype
    if ft:match('^pi%-') then
      assert(vim.api.nvim_win_get_width(w) >= 20, ft .. ' window only ' .. vim.api.nvim_win_get_width(w) .. ' columns')
      out[#out + 1] = ft
    end
  end
  table.sort(out)
  return out
]]

local function messages(c)
  return c:lua("return vim.api.nvim_exec2('messages', {output = true}).output")
end

H.case('selection, label, tree branch, fork, export, stats, model', function()
  local mock = H.mock({ { text = 'It adds two numbers.' }, { text = 'Second answer.' } })
  local ws = H.workspace({ ['src/add.py'] = 'import sys\n\ndef add(a, b):\n    return a + b\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 160, rows = 40 })
  c:cmd('edit src/add.py')
  c:input('3GVj:Pi explain<CR>')
  H.idle_with(c, 'It adds two numbers.')
  H.contains(c:lua(H.CHAT_TEXT), '## You\nexplain\n\n`src/add.py` lines 3-4:\n```python\ndef add(a, b):\n    return a + b\n```\n', 'prompt with the selection')
  -- The model request carried it too.
  local req = mock.requests()[1]
  local last = req.messages[#req.messages]
  H.contains(vim.json.encode(last.content), 'src/add.py` lines 3-4', 'request')
  c:cmd('Pi second')
  H.idle_with(c, 'Second answer.')

  -- label the leaf, then the tree shows it
  c:cmd('Pi label checkpoint')
  H.wait('the label', 5000, function()
    return messages(c):find('labelled: checkpoint', 1, true) ~= nil
  end)
  c:cmd('Pi tree')
  H.wait('the tree', 5000, function()
    return c:lua('return vim.bo.filetype') == 'pi-tree' and c:lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)[1] or ''") ~= ''
  end)
  local tree = c:lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)")
  H.contains(table.concat(tree, '\n'), '● assistant: Second answer.  [checkpoint]', 'tree (the leaf after the label is its entry)')
  -- <CR> on the second user message: the leaf goes before it, its text back in the prompt.
  local row
  for i, l in ipairs(tree) do
    if l:find('user: second', 1, true) then
      row = i
    end
  end
  assert(row, 'no second user message in the tree: ' .. table.concat(tree, '\n'))
  c:cmd(tostring(row))
  c:input('<CR>')
  H.wait('the branch', 5000, function()
    local chat_text = c:lua(H.CHAT_TEXT)
    return not chat_text:find('Second answer.', 1, true)
      and c:lua("local ch = (function() " .. CHAT .. " end)() return require('pi.prompt').text(ch)") == 'second'
  end)
  H.eq('## You\nexplain\n\n`src/add.py` lines 3-4:\n```python\ndef add(a, b):\n    return a + b\n```\n\n## Pi mock/mock-1\n\nIt adds two numbers.\n', c:lua(H.CHAT_TEXT), 'chat after the branch')
  c:input('q')

  -- fork from the first message: a new session whose prompt holds its text
  local before = c:lua(H.CHAT_STATE).session
  c:input(':Pi fork<CR>')
  H.wait('the fork picker', 5000, function()
    return c:screen_text():find('Fork from', 1, true) ~= nil
  end)
  c:input('1<CR>')
  H.wait('the fork', 5000, function()
    local s = c:lua(H.CHAT_STATE)
    return s.session ~= before
  end)
  H.wait('the fork text in the prompt', 5000, function()
    return c:lua("local ch = (function() " .. CHAT .. " end)() return require('pi.prompt').text(ch)"):find('^explain') ~= nil
  end)
  -- The fork's chat took the old chat's place: one chat and one prompt window.
  H.eq({ 'pi-chat', 'pi-prompt' }, c:lua(PI_WINDOWS), 'Pi windows after the fork')

  -- export and stats of the original session: reopen it first
  c:lua('require("pi.client").roots[require("pi.client").root_of(0)].session_id = ...', before)
  c:cmd('Pi export out.md')
  H.wait('the export', 5000, function()
    return (H.read(ws .. '/out.md') or ''):find('It adds two numbers.', 1, true) ~= nil
  end)
  c:cmd('Pi stats')
  -- In a float by the cursor that the next move closes (no hit-enter prompt).
  local FLOAT = [[
    for _, w in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
      if vim.api.nvim_win_get_config(w).relative ~= '' then
        return vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf(w), 0, -1, false)
      end
    end
    return vim.NIL
  ]]
  H.wait('the stats', 5000, function()
    return c:lua(FLOAT) ~= vim.NIL
  end)
  local stats = c:lua(FLOAT)
  -- Pi 1.6's scope: every message entry of the file (both branches, the stored system message
  -- included) and every response's tokens.
  H.eq({ 'messages    5 (2 user, 2 assistant), tool calls 0', 'tokens      2000 in, 40 out, 0 cache read, 0 cache write', 'cost        $0.0000 in context, $0.0000 in the session' }, { unpack(stats, 1, 3) }, 'stats')
  assert(not table.concat(c:screen(), '\n'):find('Press ENTER', 1, true), 'a hit-enter prompt')
  c:lua("vim.api.nvim_exec_autocmds('CursorMoved', { buffer = vim.api.nvim_get_current_buf() })")
  H.wait('the float closed by a move', 3000, function()
    return c:lua(FLOAT) == vim.NIL
  end)
  -- model: the picker lists models.json's model; picking it switches
  c:input(':Pi model<CR>')
  H.wait('the model picker', 5000, function()
    return c:screen_text():find('mock/mock-1', 1, true) ~= nil
  end)
  c:input('1<CR>')
  H.wait('the model set', 5000, function()
    return messages(c):find('model: mock/mock-1', 1, true) ~= nil
  end)
  c:stop()
  mock.stop()
end)

H.case('the diagnostics tool answers from vim.diagnostic; a permission float when the chat is hidden', function()
  local mock = H.mock({
    { toolCalls = { { id = 'd1', name = 'diagnostics', arguments = vim.empty_dict() } } },
    { toolCalls = { { id = 'b1', name = 'bash', arguments = { command = 'echo hidden' } } } },
    { text = 'Done.' },
  })
  local ws = H.workspace({ ['main.c'] = 'int main() {\n  return x;\n}\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 160, rows = 40, setup = '{approval_policy = "auto-edit", chat = {open_on_prompt = false}}' })
  c:cmd('edit main.c')
  c:lua([[
    local ns = vim.api.nvim_create_namespace('test')
    vim.diagnostic.set(ns, 0, { { lnum = 1, col = 9, end_col = 10, severity = vim.diagnostic.severity.ERROR, message = "'x' undeclared", source = 'cc' } })
  ]])
  c:cmd('Pi check the diagnostics')
  H.wait('the permission float', 15000, function()
    return c:lua([[
      for _, w in ipairs(vim.api.nvim_list_wins()) do
        if vim.api.nvim_win_get_config(w).relative ~= '' then
          return table.concat(vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf(w), 0, -1, false), '\n')
        end
      end
      return ''
    ]]):find('run `echo hidden`', 1, true) ~= nil
  end)
  -- The chat is not shown; the float has the question, focus stayed in main.c.
  H.eq('main.c', c:lua('return vim.fn.expand("%:t")'), 'current buffer')
  H.contains(c:screen_text(), 'Pi permission', 'float title')
  c:input('<C-w>w')
  H.wait('the float focused', 2000, function()
    return c:lua('return vim.api.nvim_win_get_config(0).relative') ~= ''
  end)
  c:input('1')
  H.idle_with(c, 'Done.')
  local chat = c:lua(H.CHAT_TEXT)
  H.contains(chat, "main.c:2:10 error cc: 'x' undeclared", 'diagnostics tool result')
  H.contains(chat, '↳ bash ✓ (1 line)\n```\nhidden\n```', 'allowed from the float')
  c:stop()
  mock.stop()
end)

H.case('a scrolled-up chat keeps its view while text streams; at the end it stays pinned', function()
  local long = {}
  for i = 1, 80 do
    long[#long + 1] = 'Line ' .. i .. ' of a long answer.'
  end
  local mock = H.mock({ { text = 'Short first.' }, { text = table.concat(long, '\n'), chunk = 20, chunkDelayMs = 15 } })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 120, rows = 30 })
  c:cmd('Pi one')
  H.idle_with(c, 'Short first.')
  c:cmd('Pi two')
  H.wait('streaming', 10000, function()
    return c:lua(H.CHAT_TEXT):find('Line 40 of', 1, true) ~= nil
  end)
  -- Scroll the chat window up (cursor to line 2) and record its view.
  local view = c:lua([[
    local chat = (function() ]] .. CHAT .. [[ end)()
    local win = chat:window()
    vim.api.nvim_win_set_cursor(win, { 2, 0 })
    return vim.api.nvim_win_call(win, vim.fn.winsaveview)
  ]])
  c:cmd('redraw')
  vim.wait(50)
  local screen_before = { unpack(c:screen(), 1, 15) }
  H.idle_with(c, 'Line 80 of a long answer.')
  c:cmd('redraw')
  vim.wait(50)
  -- The screen above the tail did not move (the top 15 rows: the chat's first lines).
  H.eq(screen_before, { unpack(c:screen(), 1, 15) }, 'screen rows of the scrolled-up chat')
  local after = c:lua([[
    local chat = (function() ]] .. CHAT .. [[ end)()
    return vim.api.nvim_win_call(chat:window(), vim.fn.winsaveview)
  ]])
  H.eq(view, after, 'winsaveview of the scrolled-up chat')
  -- A new prompt of the user brings the scrolled-up window back to the end, and it follows.
  c:cmd('Pi three')
  H.idle_with(c, '(script end)')
  local pinned = c:lua([[
    local chat = (function() ]] .. CHAT .. [[ end)()
    return { vim.api.nvim_win_get_cursor(chat:window())[1], vim.api.nvim_buf_line_count(chat.buf) }
  ]])
  H.eq(pinned[2], pinned[1], 'cursor on the last line')
  H.contains(c:screen_text(), '(script end)', 'screen shows the end')
  c:stop()
  mock.stop()
end)

H.case('trust is asked once for a project with .pi configuration and sent as workspaceTrusted', function()
  local ws = H.workspace({ ['.pi/settings.json'] = '{}' })
  local c = H.child({ ws = ws, setup = '{trust = "ask"}', cols = 140 })
  c:input(':Pi new<CR>')
  H.wait('the trust question', 5000, function()
    return table.concat(c:screen(), '\n'):find('load this project’s .pi configuration', 1, true) ~= nil
  end)
  c:input('1<CR>')
  H.wait('the server', 10000, function()
    return c:lua(H.CHAT_STATE) ~= vim.NIL
  end)
  H.eq(true, c:lua([[
    local client = require('pi.client')
    local st = client.roots[client.root_of(0)]
    return client.client(st).config.init_options.workspaceTrusted
  ]]), 'workspaceTrusted sent')
  local saved = vim.json.decode(H.read(c.home .. '/state/nvim/pi/trust.json'))
  H.eq({ [ws] = true }, saved, 'remembered')
  c:stop()
end)

H.case('a missing binary is said once, with :Pi build; :Pi completes its subcommands', function()
  local ws = H.workspace()
  local c = H.child({ ws = ws, setup = '{cmd = {"/nonexistent/pi-lsp"}}' })
  H.eq({ 'save_user_changes', 'sessions', 'stats', 'steer' }, c:lua("return vim.fn.getcompletion('Pi s', 'cmdline')"), 'completion')
  H.eq({ 'older' }, c:lua("return vim.fn.getcompletion('Pi chat ', 'cmdline')"), 'completion of chat')
  -- Every completed subcommand has its handler (none falls through to a prompt).
  H.eq({}, c:lua([[
    local pi = require('pi')
    return vim.tbl_filter(function(n) return type(pi.subcommands[n]) ~= 'function' end, pi.subcommand_names)
  ]]), 'subcommands without a handler')
  c:input(':Pi hello<CR>')
  c:input('<CR>:Pi hello again<CR><CR>')
  vim.wait(300)
  local m = messages(c)
  local _, n = m:gsub('is not an executable', '')
  H.eq(1, n, 'times said')
  H.contains(m, 'Pi: setup({cmd}): "/nonexistent/pi-lsp" is not an executable (:help pi-config)', 'message')
  c:stop()
  -- Without cmd and without a build: one line naming :Pi build (no "Press ENTER").
  local c2 = H.child({ ws = ws, setup = '{cmd = false}', init = 'require("pi.util").repo_dir = function() return "/nonexistent/repo" end' })
  c2:input(':Pi hello<CR>')
  vim.wait(300)
  H.contains(c2:lua("return vim.api.nvim_exec2('messages', {output = true}).output"), 'Pi: pi-lsp is not built: run :Pi build (it is not on $PATH nor in /nonexistent/repo/tar', 'message without cmd')
  assert(not c2:screen_text():find('Press ENTER', 1, true), 'a Press ENTER prompt:\n' .. c2:screen_text())
  c2:stop()
end)

H.case('switching sessions twice shows the picked session in the same chat window', function()
  local mock = H.mock({ { text = 'Answer one.' }, { text = 'Answer two.' } })
  local c = H.child({ ws = H.workspace(), models_json = mock.models_json, cols = 160, rows = 40 })
  c:cmd('Pi first session')
  H.idle_with(c, 'Answer one.')
  local first = c:lua(H.CHAT_STATE).session
  c:cmd('Pi new')
  H.wait('the new session', 5000, function()
    return c:lua(H.CHAT_STATE).session ~= first
  end)
  c:cmd('wincmd t')
  c:cmd('Pi second session')
  H.idle_with(c, 'Answer two.')
  local second = c:lua(H.CHAT_STATE).session
  H.eq({ 'pi-chat', 'pi-prompt' }, c:lua(PI_WINDOWS), 'Pi windows after :Pi new')
  local function pick(text)
    c:input(':Pi sessions<CR>')
    H.wait('the picker', 5000, function()
      return c:screen_text():find('Pi sessions', 1, true) ~= nil
    end)
    local n
    for _, l in ipairs(c:screen()) do
      local i = l:match('^(%d+): ' .. text)
      if i then
        n = i
      end
    end
    assert(n, 'no ' .. text .. ' in the picker:\n' .. c:screen_text())
    c:input(n .. '<CR>')
  end
  pick('first session')
  H.wait('the first session shown', 5000, function()
    return c:lua(H.CHAT_STATE).session == first and c:screen_text():find('Answer one.', 1, true) ~= nil
  end)
  H.eq({ 'pi-chat', 'pi-prompt' }, c:lua(PI_WINDOWS), 'Pi windows after the first switch')
  pick('second session')
  H.wait('the second session shown', 5000, function()
    return c:lua(H.CHAT_STATE).session == second and c:screen_text():find('Answer two.', 1, true) ~= nil
  end)
  H.eq({ 'pi-chat', 'pi-prompt' }, c:lua(PI_WINDOWS), 'Pi windows after the second switch')
  assert(not c:screen_text():find('Answer one.', 1, true), 'the first session still on the screen')
  c:stop()
  mock.stop()
end)

H.done()
