-- Small screens (issue 30 item 15), at 80×24: the chat takes at most half the width and its
-- hint rows fit in it; the prompt window keeps its height after `:cclose`; `:Pi new` leaves
-- the focus where it is; the sessions picker marks a session another Neovim has open and says
-- so before it opens here as a fork.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

local WINS = [[
  local out = {}
  for _, w in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    local b = vim.api.nvim_win_get_buf(w)
    out[#out + 1] = { ft = vim.bo[b].filetype, name = vim.fn.fnamemodify(vim.api.nvim_buf_get_name(b), ':t'), width = vim.api.nvim_win_get_width(w), height = vim.api.nvim_win_get_height(w), current = w == vim.api.nvim_get_current_win() }
  end
  return out
]]

local function win(c, ft)
  for _, w in ipairs(c:lua(WINS)) do
    if w.ft == ft or w.name == ft then
      return w
    end
  end
end

H.case('at 80×24 the chat is half the width, :Pi new keeps the focus, :cclose does not grow the prompt', function()
  local mock = H.mock({ { text = 'Hello.' } })
  local ws = H.workspace({ ['code.txt'] = 'one\ntwo\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 80, rows = 24 })
  c:cmd('edit code.txt')
  c:cmd('Pi new')
  H.wait('the chat', 15000, function()
    return win(c, 'pi-chat') ~= nil and win(c, 'pi-prompt') ~= nil
  end)
  H.eq(40, win(c, 'pi-chat').width, 'the chat is half of 80 columns')
  H.eq(39, win(c, 'code.txt').width, 'the code window keeps the other half (less the separator)')
  H.eq('code.txt', c:lua('return vim.fn.expand("%:t")'), ':Pi new left the focus in the code window')
  -- The screen: the code at the left, the chat's statusline at column 41.
  local rows = vim.split(c:screen_text(), '\n', { plain = true })
  H.eq('one', rows[1]:sub(1, 3), 'the code on the first row')
  H.eq('│', vim.fn.strcharpart(rows[1], 39, 1), 'the separator at column 40')
  local prompt_h = win(c, 'pi-prompt').height
  H.eq(6, prompt_h, 'the prompt window height')
  c:cmd('Pi hello')
  H.idle_with(c, 'Hello.')
  c:cmd('botright copen')
  c:cmd('cclose')
  H.eq(prompt_h, win(c, 'pi-prompt').height, 'the prompt after :cclose')
  c:cmd('Pi new')
  H.wait('the second session', 10000, function()
    return c:lua(H.CHAT_TEXT) == ''
  end)
  H.eq({ 40, 6, 'code.txt' }, { win(c, 'pi-chat').width, win(c, 'pi-prompt').height, c:lua('return vim.fn.expand("%:t")') }, 'the second :Pi new')
  c:stop()
  mock.stop()
end)

H.case('at 80×24 a question\'s hint rows fit in the chat', function()
  local mock = H.mock({
    { toolCalls = { { id = 'call_1', name = 'bash', arguments = { command = 'echo hi' } } } },
    { text = 'Done.' },
  })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "auto-edit"}', cols = 80, rows = 24 })
  c:cmd('Pi run it')
  H.wait('the question', 15000, function()
    return c:lua(H.CHAT_TEXT):find('### ? Permission: run `echo hi`', 1, true) ~= nil
  end)
  vim.wait(200)
  local hint = c:lua([[
    local perm = require('pi.permission')
    local q = perm.pending[1]
    local m = vim.api.nvim_buf_get_extmark_by_id(q.chat.buf, require('pi.render').ns, q.hint, { details = true })
    local out = {}
    for _, vl in ipairs(m[3].virt_lines) do
      out[#out + 1] = vl[1][1]
    end
    return out
  ]])
  H.eq({
    '  a digit alone (no key after it)',
    '  answers anywhere in this chat · <CR>',
    '  on an answer · :Pi allow / :Pi reject',
    '  from any window',
  }, hint, 'the hint in rows of the chat\'s width')
  local screen = c:screen_text()
  H.contains(screen, '│  from any window\n', 'the hint\'s last row on the screen, whole')
  c:cmd('Pi allow')
  H.idle_with(c, 'Done.')
  c:stop()
  mock.stop()
end)

H.case('the sessions picker marks a session open in another Neovim and asks before forking it', function()
  local mock = H.mock({ { text = 'First.' }, { text = 'Second.' } })
  local ws = H.workspace()
  local a = H.child({ ws = ws, models_json = mock.models_json, cols = 80, rows = 24 })
  a:cmd('Pi the other editor')
  H.idle_with(a, 'First.')
  local PICK = [[
    _G.asked = {}
    vim.ui.select = function(items, opts, cb)
      local shown = {}
      for _, it in ipairs(items) do
        shown[#shown + 1] = opts.format_item and opts.format_item(it) or tostring(it)
      end
      table.insert(_G.asked, { prompt = opts.prompt, items = shown })
      cb(items[1], 1)
    end
  ]]
  local b = H.child({ ws = ws, models_json = mock.models_json, init = PICK, cols = 80, rows = 24 })
  b:cmd('Pi sessions')
  H.wait('the picker and the question', 15000, function()
    return #b:lua('return _G.asked') >= 2
  end)
  local asked = b:lua('return _G.asked')
  H.eq(1, #asked[1].items, 'one session')
  assert(asked[1].items[1]:match('^⚠ the other editor  · %d+ entries · .* · open in another editor$'), asked[1].items[1])
  H.eq({
    prompt = 'This session is open in another editor, which writes to its file: here it continues in a fork (a new session with its history).',
    items = { 'Open a fork of it here', 'Cancel' },
  }, asked[2], 'said before it opens')
  H.wait('the fork open', 15000, function()
    local t = b:lua(H.CHAT_TEXT)
    return t ~= vim.NIL and t:find('the other editor', 1, true) ~= nil
  end)
  local sid_a = a:lua(H.CHAT_STATE).session
  local sid_b = b:lua(H.CHAT_STATE).session
  assert(sid_a ~= sid_b, 'B continues in a fork, not in A\'s session')
  a:stop()
  b:stop()
  mock.stop()
end)

H.done()
