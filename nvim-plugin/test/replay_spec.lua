-- Specs against the replay LSP server (bench/replay_server.lua): a 10,000-message session
-- opens with its last page (agent/session/history), older pages come with gO above what is
-- shown; extension UI questions (agent/ui/request) go through vim.ui.select / vim.ui.input.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
local replay = H.plugin_dir .. '/bench/replay_server.lua'

local function child(cols)
  local ws = H.tmpdir('replay-ws')
  vim.fn.mkdir(ws .. '/.git', 'p')
  local setup = ('{cmd = {%q, "--headless", "-u", "NONE", "-l", %q}, cmd_env = {BENCH_DELTAS = "50", BENCH_MESSAGES = "10000"}}'):format(H.nvim, replay)
  return H.child({ ws = ws, setup = setup, cols = cols or 140, rows = 40 })
end

H.case('a 10,000-message session opens at its last page; gO loads older ones above', function()
  local c = child()
  c:input(':Pi sessions<CR>')
  H.wait('the picker', 10000, function()
    return table.concat(c:screen(), '\n'):find('the long session', 1, true) ~= nil
  end)
  c:input('1<CR>')
  H.wait('the history', 10000, function()
    local t = c:lua(H.CHAT_TEXT)
    return t ~= vim.NIL and t:find('fn part_9998', 1, true) ~= nil
  end)
  local text = c:lua(H.CHAT_TEXT)
  local lines = vim.split(text, '\n')
  H.eq('⋯ older history: press gO (or :Pi chat older)', lines[1], 'first line')
  -- The last page only: entries 9951..10000 (50 + their tool results).
  assert(not text:find('Question 9949:', 1, true), 'more than the last page drawn')
  H.contains(text, 'Question 9951:', 'last page')
  H.contains(c:screen_text(), 'fn part_9998() -> u32 {', 'last screenful on screen')
  local n1 = #lines
  -- gO in the chat: the previous page above, the line count grows, the older line stays first.
  c:lua([[
    local client = require('pi.client')
    local chat = require('pi.chat').current(client.roots[client.root_of(0)])
    vim.api.nvim_set_current_win(chat:window())
  ]])
  c:input('gggO')
  H.wait('an older page', 5000, function()
    return c:lua(H.CHAT_TEXT):find('Question 9901:', 1, true) ~= nil
  end)
  local t2 = c:lua(H.CHAT_TEXT)
  H.eq('⋯ older history: press gO (or :Pi chat older)', vim.split(t2, '\n')[1], 'first line after')
  assert(#vim.split(t2, '\n') > n1 + 100, 'older page not added')
  -- The newest part is unchanged below the inserted page.
  H.eq(text:sub(#lines[1] + 2), t2:sub(-(#text - #lines[1] - 1)), 'what was shown stays as it was')
  c:stop()
end)

H.case('extension UI questions go through vim.ui.select and vim.ui.input', function()
  local c = child()
  c:cmd('Pi new')
  H.wait('the session', 10000, function()
    return c:lua(H.CHAT_STATE) ~= vim.NIL
  end)
  c:cmd('Pi ui:select')
  H.wait('the select', 5000, function()
    return table.concat(c:screen(), '\n'):find('Pick one', 1, true) ~= nil
  end)
  H.contains(table.concat(c:screen(), '\n'), '2: beta', 'options')
  c:input('2<CR>')
  H.wait('the answer', 5000, function()
    return c:lua(H.CHAT_TEXT):find('answer: {"value":"beta"}', 1, true) ~= nil
  end)
  c:cmd('Pi ui:input')
  H.wait('the input', 5000, function()
    return vim.tbl_contains(c:screen(), 'Pick one:')
  end)
  c:input('typed text<CR>')
  H.wait('the answer', 5000, function()
    return c:lua(H.CHAT_TEXT):find('answer: {"value":"typed text"}', 1, true) ~= nil
  end)
  c:cmd('Pi ui:confirm')
  H.wait('the confirm', 5000, function()
    return table.concat(c:screen(), '\n'):find('Pick one: Sure?', 1, true) ~= nil
  end)
  c:input('1<CR>')
  H.wait('the answer', 5000, function()
    return c:lua(H.CHAT_TEXT):find('answer: {"confirmed":true}', 1, true) ~= nil
  end)
  c:stop()
end)

local EDITOR_BUF = [[
  for _, w in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    local b = vim.api.nvim_win_get_buf(w)
    if vim.api.nvim_buf_get_name(b):match('^pi://editor/') then
      return { win = w, buf = b, lines = vim.api.nvim_buf_get_lines(b, 0, -1, false), winbar = vim.wo[w].winbar }
    end
  end
  return vim.NIL
]]

H.case('the editor dialog: a scratch buffer with the prefill, :w submits, q cancels, a timeout closes it', function()
  local c = child()
  c:cmd('Pi new')
  H.wait('the session', 10000, function()
    return c:lua(H.CHAT_STATE) ~= vim.NIL
  end)
  -- Asked while the user is in a code buffer: the editor opens without taking the focus.
  c:cmd('wincmd t | enew')
  local code_win = c:lua('return vim.api.nvim_get_current_win()')
  c:cmd('Pi ui:editor')
  H.wait('the editor window', 5000, function()
    return c:lua(EDITOR_BUF) ~= vim.NIL
  end)
  local e = c:lua(EDITOR_BUF)
  H.eq({ 'Fix the parser', '', 'Details:' }, e.lines, 'prefill')
  H.eq(' Commit message — :w or <C-s> submit · q cancel', e.winbar, 'winbar')
  H.eq(code_win, c:lua('return vim.api.nvim_get_current_win()'), 'focus stays in the code window')
  c:lua('vim.api.nvim_set_current_win(...)', e.win)
  c:input('GA the tokens<Esc>:w<CR>')
  H.wait('the answer', 5000, function()
    return c:lua(H.CHAT_TEXT):find('answer: {"value":"Fix the parser\\n\\nDetails: the tokens"}', 1, true) ~= nil
  end)
  H.eq(vim.NIL, c:lua(EDITOR_BUF), 'the editor is closed')
  -- q cancels.
  c:cmd('Pi ui:editor')
  H.wait('the editor window', 5000, function()
    return c:lua(EDITOR_BUF) ~= vim.NIL
  end)
  c:lua('vim.api.nvim_set_current_win(...)', c:lua(EDITOR_BUF).win)
  c:input('q')
  H.wait('the cancel', 5000, function()
    local _, n = c:lua(H.CHAT_TEXT):gsub('answer: {"cancelled":true}', '')
    return n == 1
  end)
  -- A timeout closes it, answered cancelled; the winbar says the time.
  c:cmd('Pi ui:editor:600')
  H.wait('the editor window', 5000, function()
    return c:lua(EDITOR_BUF) ~= vim.NIL
  end)
  H.eq(' Commit message — :w or <C-s> submit · q cancel · answer within 1 s', c:lua(EDITOR_BUF).winbar, 'winbar with the timeout')
  H.wait('the timeout', 5000, function()
    local _, n = c:lua(H.CHAT_TEXT):gsub('answer: {"cancelled":true}', '')
    return n == 2 and c:lua(EDITOR_BUF) == vim.NIL
  end)
  c:stop()
end)

H.done()
