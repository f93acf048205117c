-- A running command's output in the chat (issue 30 item 12): shown live under its header while
-- it runs, as a terminal leaves it — ANSI escape codes stripped, a `\r` progress line shown
-- once (its last state) — and the same in the folded result at the end.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

-- The command moves on only when the test opens its next gate (a file appears), so every check
-- waits on a state (the live rows, the screen, the run's end), never on how long a step took.
-- The server sends a running command's output at most every UPDATE_MS, from its start, and
-- keeps output that comes sooner for the next update: the test opens a gate only once that
-- interval has passed since the state it saw was sent (a lower bound, not a race). Each step
-- is one write: output written within UPDATE_MS of an update waits for the next one.
local UPDATE_MS = 100
local function command(dir)
  local gate = function(name)
    return ("until [ -e '%s/%s' ]; do sleep 0.02; done"):format(dir, name)
  end
  return table.concat({
    (": > '%s/started'"):format(dir),
    gate('g0'), [[printf '\033[1;32mgreen\033[0m text\n']],
    gate('g1'), [[printf 'step 1/3\r']],
    gate('g2'), [[printf 'step 2/3\r']],
    gate('g3'), [[printf 'step 3/3\r']],
    -- One write: bash's stdout is line-buffered, so `printf '\nend\n'` writes twice, and the
    -- server holds back the second write's output until the command writes again or ends.
    gate('g4'), ("cat '%s/end.txt'"):format(dir),
    gate('g5'),
  }, '; ')
end

local LIVE = [[
  local client = require('pi.client')
  local chat = require('pi.chat').current(client.roots[client.root_of(0)])
  local out = {}
  if not chat then return out end
  for _, t in pairs(chat.tools) do
    if t.live then
      local m = vim.api.nvim_buf_get_extmark_by_id(chat.buf, require('pi.render').ns, t.live, { details = true })
      for _, vl in ipairs(m[3] and m[3].virt_lines or {}) do
        out[#out + 1] = vl[1][1]
      end
    end
  end
  return out
]]

H.case('live output under the running command, escape codes stripped and progress collapsed', function()
  local ws = H.workspace()
  local mock = H.mock({
    { toolCalls = { { id = 'call_b', name = 'bash', arguments = { command = command(ws) } } } },
    { text = 'Ran it.' },
  })
  H.write(ws .. '/end.txt', '\nend\n')
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "approve-all"}', cols = 120, rows = 30 })
  c:cmd('Pi run the command')
  H.wait('the command to start', 30000, function()
    return vim.uv.fs_stat(ws .. '/started') ~= nil
  end)
  local green = '  ┊ green text'
  local states = {
    [0] = { green },
    { green, '  ┊ step 1/3' },
    { green, '  ┊ step 2/3' },
    { green, '  ┊ step 3/3' },
    { green, '  ┊ step 3/3', '  ┊ end' },
  }
  for i = 0, #states do
    local want = states[i]
    vim.wait(UPDATE_MS + 50)
    H.write(ws .. '/g' .. i, '')
    local last
    local ok = pcall(H.wait, 'live rows ' .. vim.inspect(want), 30000, function()
      last = c:lua(LIVE)
      for _, l in ipairs(last) do
        assert(not l:find('[\27\r]'), 'an escape or \\r on the screen: ' .. vim.inspect(l))
      end
      return vim.deep_equal(want, last)
    end)
    assert(ok, 'not the live rows ' .. vim.inspect(want) .. ' but ' .. vim.inspect(last) .. '\nchat:\n' .. tostring(c:lua(H.CHAT_TEXT)) .. '\nmessages: ' .. c:lua("return vim.api.nvim_exec2('messages', {output = true}).output"))
  end
  local screen
  local shown = pcall(H.wait, 'the last progress state on the screen', 15000, function()
    screen = c:screen_text()
    return screen:find('│  ┊ green text *\n[^\n]*│  ┊ step 3/3 *\n[^\n]*│  ┊ end *\n') ~= nil
  end)
  assert(shown, 'not on the screen:\n' .. tostring(screen))
  H.eq(states[4], c:lua(LIVE), 'the live rows while the command still runs')
  vim.wait(UPDATE_MS + 50)
  H.write(ws .. '/g5', '')
  H.idle_with(c, 'Ran it.')
  local text = c:lua(H.CHAT_TEXT)
  H.contains(text, '↳ bash ✓ (3 lines)\n```\ngreen text\nstep 3/3\nend\n```', 'the result as a terminal leaves it')
  H.eq({}, c:lua(LIVE), 'the live rows gone at the end')
  c:stop()
  mock.stop()
end)

H.done()
