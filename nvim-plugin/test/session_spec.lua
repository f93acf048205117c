-- Specs of the session commands around the model: :Pi compact (with instructions; the chat
-- shows it, the summary request carries them), :Pi thinking (picker of the model's levels,
-- a direct level, the statusline), :Pi build (cargo in the plugin's repository; success and
-- failure said), and an image file named in the prompt goes as an image block.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

local function messages(c)
  return c:lua("return vim.api.nvim_exec2('messages', {output = true}).output")
end

local STATUS = "return require('pi').statusline()"

H.case(':Pi compact with instructions: shown in the chat, said when done, sent to the model', function()
  local mock = H.mock({ { text = 'First answer.' }, { text = 'Summary: the user greeted.' } })
  -- One turn is all there is: keep less than it raw, so there is something to summarise.
  local c = H.child({
    ws = H.workspace(),
    models_json = mock.models_json,
    agent_files = { ['settings.json'] = '{"compaction": {"keepRecentTokens": 1}}' },
  })
  c:cmd('Pi hello')
  H.idle_with(c, 'First answer.')
  c:cmd('Pi compact keep the greeting')
  H.wait('the compaction', 15000, function()
    return messages(c):find('Pi: compacted', 1, true) ~= nil
  end)
  local text = c:lua(H.CHAT_TEXT)
  assert(text:find('## Pi mock/mock%-1\n\nFirst answer.\n\n⋯ compacting the context %(manual%)\n\n⋯ compacted: %d+ tokens before; the next answer shows the new size\n> summary\nNo prior history%.\n\n%-%-%-\n\n%*%*Turn Context %(split turn%):%*%*\n\nSummary: the user greeted%.\n$'), 'chat:\n' .. text)
  -- The context meter waits for the next answer (its reading was of the context before).
  H.eq('mock/mock-1 · $0.000 · idle', c:lua("return require('pi').statusline()"), 'statusline after the compaction')
  local m = messages(c)
  assert(m:find('Pi: compacted %(%d+ tokens before%)'), 'done message: ' .. m)
  local reqs = mock.requests()
  H.eq(2, #reqs, 'model requests')
  H.contains(vim.json.encode(reqs[2]), 'keep the greeting', 'instructions in the summary request')
  -- Compacting an empty session says why in words.
  local first = c:lua(H.CHAT_STATE).session
  c:cmd('Pi new')
  H.wait('the new session', 10000, function()
    return c:lua(H.CHAT_STATE).session ~= first
  end)
  c:cmd('Pi compact')
  -- (Read from the screen: an RPC-driven child stacks this message under the last one.)
  H.wait('the refusal', 10000, function()
    return table.concat(c:screen(), '\n'):find('Pi: could not compact the context: nothing was compacted (Nothing to compact (session too small))', 1, true) ~= nil
  end)
  c:input('<CR>')
  H.eq('⋯ compacting the context (manual)\n\n✗ compaction failed: Nothing to compact (session too small)\n', c:lua(H.CHAT_TEXT), 'the chat says it')
  c:stop()
  mock.stop()
end)

H.case(':Pi thinking: the model\'s levels in a picker, a level given directly, the statusline', function()
  local mock = H.mock({})
  mock.models_json.providers.mock.models[1].reasoning = true
  local c = H.child({ ws = H.workspace(), models_json = mock.models_json })
  c:cmd('Pi new')
  H.wait('the session', 10000, function()
    return c:lua(H.CHAT_STATE) ~= vim.NIL
  end)
  c:cmd('wincmd t')
  c:input(':Pi thinking<CR>')
  H.wait('the picker', 5000, function()
    return c:screen_text():find('Thinking level', 1, true) ~= nil
  end)
  local screen = c:screen_text()
  -- A new session of a reasoning model starts at Pi 1.6's default level, medium.
  H.contains(screen, 'Thinking level of mock/mock-1 (now medium)\n1: off\n2: minimal\n3: low\n4: medium ✓\n5: high', 'picker')
  c:input('5<CR>')
  H.wait('the level set', 5000, function()
    return messages(c):find('Pi: thinking: high', 1, true) ~= nil
  end)
  -- (The new session's cost, $0, is read from its stats.)
  H.wait('the statusline', 5000, function()
    return c:lua(STATUS) == 'mock/mock-1 (high) · $0.000 · idle'
  end)
  c:cmd('Pi thinking off')
  H.wait('the level off', 5000, function()
    return messages(c):find('Pi: thinking: off', 1, true) ~= nil
  end)
  H.eq('mock/mock-1 · $0.000 · idle', c:lua(STATUS), 'statusline without thinking')
  H.eq({ 'off', 'minimal', 'low', 'medium', 'high' }, c:lua("return vim.fn.getcompletion('Pi thinking ', 'cmdline')"), 'completion')
  c:cmd('Pi thinking loud')
  H.wait('the refusal', 5000, function()
    return messages(c):find('Pi: thinking levels of mock/mock-1: off, minimal, low, medium, high', 1, true) ~= nil
  end)
  c:stop()
  mock.stop()
end)

H.case(':Pi thinking with a model without reasoning says so', function()
  local mock = H.mock({})
  local c = H.child({ ws = H.workspace(), models_json = mock.models_json })
  c:cmd('Pi new')
  H.wait('the session', 10000, function()
    return c:lua(H.CHAT_STATE) ~= vim.NIL
  end)
  c:cmd('Pi thinking')
  H.wait('the message', 5000, function()
    return messages(c):find('Pi: mock/mock-1 has no thinking levels (it does not reason)', 1, true) ~= nil
  end)
  c:stop()
  mock.stop()
end)

H.case(':Pi build runs cargo in the plugin\'s repository and says how it went', function()
  local bin = H.tmpdir('fake-cargo')
  H.write(
    bin .. '/cargo',
    table.concat({
      '#!/bin/sh',
      'echo "$PWD $*" >> "$(dirname "$0")/cargo.log"',
      'if [ -e "$(dirname "$0")/fail" ]; then echo "   Compiling pi-lsp" >&2; echo "error: could not compile pi-lsp" >&2; exit 101; fi',
      'echo "    Finished release" >&2',
    }, '\n') .. '\n'
  )
  vim.fn.setfperm(bin .. '/cargo', 'rwxr-xr-x')
  local c = H.child({ ws = H.workspace(), path_prepend = bin })
  c:cmd('Pi build')
  H.wait('the build', 10000, function()
    return messages(c):find('Pi: pi-lsp is built', 1, true) ~= nil
  end)
  local repo = vim.fn.fnamemodify(H.plugin_dir, ':h')
  H.eq(repo .. ' build --release -p pi-lsp\n', H.read(bin .. '/cargo.log'), 'cargo run')
  H.contains(messages(c), 'Pi: building pi-lsp in ' .. vim.fn.fnamemodify(repo, ':~') .. ' (cargo build --release; minutes the first time)…', 'start message')
  H.write(bin .. '/fail', '')
  c:cmd('Pi build')
  -- The end of cargo's output, in full (a hit-enter prompt: the user asked for it).
  H.wait('the failure', 10000, function()
    return table.concat(c:screen(), '\n'):find('Pi: the build failed', 1, true) ~= nil
  end)
  H.contains(table.concat(c:screen(), '\n'), 'Pi: the build failed (exit 101):\nCompiling pi-lsp\nerror: could not compile pi-lsp\nPress ENTER', 'failure message')
  c:input('<CR>')
  c:stop()
end)

-- A 1x1 PNG.
local PNG = vim.base64.decode('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==')

H.case('an image file named in the prompt, and one attached with :Pi image, go as image blocks', function()
  local mock = H.mock({ { text = 'I see two images.' } })
  mock.models_json.providers.mock.models[1].input = { 'text', 'image' }
  local ws = H.workspace()
  H.write(ws .. '/shots/one.png', PNG)
  H.write(ws .. '/two words.png', PNG)
  local c = H.child({ ws = ws, models_json = mock.models_json })
  c:cmd('Pi new')
  H.wait('the session', 10000, function()
    return c:lua(H.CHAT_STATE) ~= vim.NIL
  end)
  c:cmd('Pi image two\\ words.png')
  H.wait('the attachment', 5000, function()
    return messages(c):find(('Pi: image attached: two words.png (%d B)'):format(#PNG), 1, true) ~= nil
  end)
  -- Shown above the prompt.
  H.contains(c:screen_text(), ('📎 1. two words.png (image/png, %d B)'):format(#PNG), 'attachment shown')
  c:cmd('Pi what is in @shots/one.png?')
  H.idle_with(c, 'I see two images.')
  local req = mock.requests()[1]
  local last = req.messages[#req.messages]
  local kinds = {}
  for _, part in ipairs(last.content) do
    kinds[#kinds + 1] = part.type == 'image_url' and part.image_url.url:sub(1, 22) or part.text
  end
  H.eq({ 'what is in @shots/one.png?', 'data:image/png;base64,', 'data:image/png;base64,' }, kinds, 'the request\'s user content')
  H.contains(c:lua(H.CHAT_TEXT), '## You\nwhat is in @shots/one.png?\n[image image/png]\n[image image/png]\n', 'chat')
  assert(not c:screen_text():find('📎', 1, true), 'the attachment is taken by the prompt')
  c:stop()
  mock.stop()
end)

H.case('an image for a model that takes none is said at once, attached or named in the prompt', function()
  local mock = H.mock({ { text = 'Text only.' } })
  mock.models_json.providers.mock.models[1].input = { 'text' }
  local ws = H.workspace()
  H.write(ws .. '/one.png', PNG)
  local c = H.child({ ws = ws, models_json = mock.models_json, cols = 160 })
  c:cmd('Pi new')
  H.wait('the session', 10000, function()
    return c:lua(H.CHAT_STATE) ~= vim.NIL
  end)
  c:input(':Pi image one.png<CR>')
  H.wait('the warning', 5000, function()
    return messages(c):find('Pi: mock-1 does not take images: one.png would not reach the model (:Pi model picks one that does)', 1, true) ~= nil
  end)
  c:input(':Pi image clear<CR>')
  c:cmd('echo ""')
  c:input(':Pi what is in @one.png?<CR>')
  H.wait('the warning as it goes', 5000, function()
    return messages(c):find('Pi: mock-1 does not take images: the image named in the prompt would not reach the model', 1, true) ~= nil
  end)
  H.idle_with(c, 'Text only.')
  c:stop()
  mock.stop()
end)

H.case(':Pi !cmd runs your command into the chat and the context; :Pi rename; :Pi clone', function()
  local mock = H.mock({ { text = 'Seen.' } })
  local c = H.child({ ws = H.workspace(), models_json = mock.models_json, cols = 160, rows = 40 })
  c:cmd('Pi new')
  H.wait('the session', 10000, function()
    return c:lua(H.CHAT_STATE) ~= vim.NIL
  end)
  c:cmd('Pi !echo hi there')
  H.wait('the command', 10000, function()
    return c:lua(H.CHAT_TEXT):find('↳ $ ✓', 1, true) ~= nil and c:lua(H.CHAT_STATE).state == 'idle'
  end)
  H.eq('### $ echo hi there\n↳ $ ✓ (1 line)\n```\nhi there\n```\n', c:lua(H.CHAT_TEXT), 'chat')
  c:cmd('Pi what did it say?')
  H.idle_with(c, 'Seen.')
  local sent = vim.json.encode(mock.requests()[1].messages)
  H.contains(sent, 'echo hi there', 'the command in the model request')
  H.contains(sent, 'hi there', 'its output in the model request')
  c:cmd('Pi rename my work')
  H.wait('the name', 5000, function()
    return messages(c):find('Pi: session named: my work', 1, true) ~= nil
  end)
  local before = c:lua(H.CHAT_STATE).session
  local text = c:lua(H.CHAT_TEXT)
  c:cmd('Pi clone')
  H.wait('the clone', 10000, function()
    return c:lua(H.CHAT_STATE).session ~= before and messages(c):find('Pi: cloned', 1, true) ~= nil
  end)
  H.eq(text, c:lua(H.CHAT_TEXT), 'the clone shows the same history')
  c:cmd('wincmd t')
  c:input(':Pi sessions<CR>')
  H.wait('the picker', 5000, function()
    return c:screen_text():find('Pi sessions', 1, true) ~= nil
  end)
  H.contains(c:screen_text(), 'my work  · ', 'the named session in the picker')
  c:input('<Esc>')
  c:stop()
  mock.stop()
end)

H.done()
