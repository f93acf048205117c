-- Compact deltas: the plugin asks the server for them (initializationOptions.compactDeltas)
-- and expands each `agent/delta` into the `agent/event` it stands for before the chat sees
-- it: thinking and text streamed in 8-character deltas show in the chat exactly.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

local THINKING = 'First I read the question. Then I weigh "quotes", é and \\ back-slashes.'
local ANSWER = 'Compact deltas arrive in small pieces.\n\nA second paragraph: "quoted", ünïcode ✓, a tab\there.\n\n```lua\nlocal x = 1\n```'

local EXPECTED = '## You\nSay hello\n\n## Pi mock/mock-1\n\n> 💭 thinking\n' .. THINKING .. '\n\n' .. ANSWER .. '\n'

H.case('streamed thinking and text arrive as agent/delta and show in the chat exactly', function()
  local mock = H.mock({ { thinking = THINKING, text = ANSWER, chunk = 8, chunkDelayMs = 2 } })
  mock.models_json.providers.mock.models[1].reasoning = true
  local ws = H.workspace({ ['notes.txt'] = 'hello\n' })
  local c = H.child({ ws = ws, models_json = mock.models_json })
  c:cmd('edit notes.txt')
  c:lua([[
    local chat = require('pi.chat')
    local on_event = chat.on_event
    _G.deltas_seen = 0
    chat.on_event = function(ch, p)
      local a = p.event and p.event.assistantMessageEvent
      if a and type(a.type) == 'string' and a.type:match('_delta$') then
        _G.deltas_seen = _G.deltas_seen + 1
      end
      return on_event(ch, p)
    end
  ]])
  c:cmd('Pi Say hello')
  H.idle_with(c, 'local x = 1')
  local text = c:lua(H.CHAT_TEXT)
  H.eq(EXPECTED, text, 'chat text')
  -- Every delta the chat got came compact (deltas within 16 ms are joined by the server).
  local expanded = c:lua("return require('pi.delta').expanded")
  assert(expanded > 0, 'no agent/delta received')
  H.eq(c:lua('return _G.deltas_seen'), expanded, 'agent/delta notifications expanded')
  c:stop()
  mock.stop()
end)

H.done()
