-- A running command's output in the chat (issue 30 item 12): shown live under its header while
-- it runs, as a terminal leaves it — ANSI escape codes stripped, a `\r` progress line shown
-- once (its last state) — and the same in the folded result at the end.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

local CMD = [[printf '\033[1;32mgreen\033[0m text\n'; for i in 1 2 3; do printf 'step %s/3\r' $i; sleep 0.5; done; printf '\nend\n'; sleep 1.5]]

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
  local mock = H.mock({
    { toolCalls = { { id = 'call_b', name = 'bash', arguments = { command = CMD } } } },
    { text = 'Ran it.' },
  })
  local ws = H.workspace()
  local c = H.child({ ws = ws, models_json = mock.models_json, setup = '{approval_policy = "approve-all"}', cols = 120, rows = 30 })
  c:cmd('Pi run the command')
  local seen = {}
  local ok = pcall(H.wait, 'live progress', 30000, function()
    local live = c:lua(LIVE)
    for _, l in ipairs(live) do
      seen[l] = true
    end
    return seen['  ┊ end'] == true
  end)
  assert(ok, 'no live "end" row; seen: ' .. vim.inspect(seen) .. '\nchat:\n' .. tostring(c:lua(H.CHAT_TEXT)) .. '\nmessages: ' .. c:lua("return vim.api.nvim_exec2('messages', {output = true}).output"))
  H.eq(true, seen['  ┊ green text'], 'the coloured line, without its escape codes: ' .. vim.inspect(seen))
  for l in pairs(seen) do
    assert(not l:find('[\27\r]'), 'an escape or \\r on the screen: ' .. vim.inspect(l))
  end
  local live = c:lua(LIVE)
  H.eq({ '  ┊ green text', '  ┊ step 3/3', '  ┊ end' }, live, 'the live rows before the end')
  H.contains(c:screen_text(), '┊ step 3/3', 'on the screen')
  H.idle_with(c, 'Ran it.')
  local text = c:lua(H.CHAT_TEXT)
  H.contains(text, '↳ bash ✓ (3 lines)\n```\ngreen text\nstep 3/3\nend\n```', 'the result as a terminal leaves it')
  H.eq({}, c:lua(LIVE), 'the live rows gone at the end')
  c:stop()
  mock.stop()
end)

H.done()
