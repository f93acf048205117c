-- A replay LSP server for the plugin's benchmarks, run as `nvim -l bench/replay_server.lua`.
-- Speaks LSP framing on stdio and answers what the plugin asks; `agent/prompt` replays a
-- stream of BENCH_DELTAS `text_delta` events at BENCH_RATE per second; the session "long"
-- has BENCH_MESSAGES messages served by `agent/session/history` pages.
local uv = vim.uv
local DELTAS = tonumber(os.getenv('BENCH_DELTAS') or '2500')
local RATE = tonumber(os.getenv('BENCH_RATE') or '500')
local MESSAGES = tonumber(os.getenv('BENCH_MESSAGES') or '10000')

local stdin = uv.new_pipe()
stdin:open(0)
local stdout = uv.new_pipe()
stdout:open(1)

local function send(msg)
  local body = vim.json.encode(msg)
  stdout:write(('Content-Length: %d\r\n\r\n%s'):format(#body, body))
end

local function notify(method, params)
  send({ jsonrpc = '2.0', method = method, params = params })
end

local function state(id)
  return {
    sessionId = id,
    sessionFile = '/dev/null',
    model = { provider = 'replay', id = 'r1', name = 'Replay', contextWindow = 200000, thinkingLevels = { 'off' } },
    thinkingLevel = 'off',
    isStreaming = false,
  }
end

-- Entry i of the long session: users ask, the assistant answers with markdown and code, every
-- 10th answer calls a tool whose result is ~2 KB.
local function entry(i)
  local id = 'e' .. i
  local parent = i > 1 and ('e' .. (i - 1)) or vim.NIL
  local m
  if i % 2 == 1 then
    m = { role = 'user', content = 'Question ' .. i .. ': how does part ' .. i .. ' work?', timestamp = i }
  elseif i % 10 == 0 then
    m = {
      role = 'assistant',
      provider = 'replay',
      model = 'r1',
      content = { { type = 'text', text = 'Let me look.' }, { type = 'toolCall', id = 'c' .. i, name = 'read', arguments = { path = 'src/part' .. i .. '.rs' } } },
      stopReason = 'toolUse',
      timestamp = i,
    }
  else
    m = {
      role = 'assistant',
      provider = 'replay',
      model = 'r1',
      content = {
        { type = 'thinking', thinking = 'Thinking about part ' .. i .. '.' },
        { type = 'text', text = ('Part %d works like this:\n\n- first\n- second\n\n```rust\nfn part_%d() -> u32 {\n    %d\n}\n```\n'):format(i, i, i) },
      },
      stopReason = 'stop',
      timestamp = i,
    }
  end
  return { type = 'message', id = id, parentId = parent, timestamp = tostring(i), message = m }
end

local function tool_result(i)
  return {
    type = 'message',
    id = 'r' .. i,
    parentId = 'e' .. i,
    message = { role = 'toolResult', toolCallId = 'c' .. i, toolName = 'read', content = { { type = 'text', text = string.rep('line of the file\n', 120) } }, isError = false },
  }
end

local function history(params)
  local before = params.beforeEntryId
  local last = MESSAGES
  if type(before) == 'string' then
    last = tonumber(before:match('%d+')) - 1
  end
  local limit = math.min(params.limit or 50, 500)
  local first = math.max(1, last - limit + 1)
  local entries = {}
  for i = first, last do
    entries[#entries + 1] = entry(i)
    if i % 10 == 0 then
      entries[#entries + 1] = tool_result(i)
    end
  end
  return { sessionId = params.sessionId, leafId = 'e' .. MESSAGES, entries = entries, hasMore = first > 1 }
end

local function stream(sid)
  local run = 'run1'
  local function ev(e)
    notify('agent/event', { sessionId = sid, runId = run, event = e })
  end
  ev({ type = 'agent_start' })
  ev({ type = 'turn_start' })
  ev({ type = 'message_start', message = { role = 'user', content = 'bench' } })
  ev({ type = 'message_start', message = { role = 'assistant', provider = 'replay', model = 'r1', content = {} } })
  local sent = 0
  local t0 = uv.hrtime()
  local timer = uv.new_timer()
  timer:start(1, 1, function()
    -- Paced by the clock: as many deltas as are due at RATE per second.
    local due = math.min(DELTAS, math.floor((uv.hrtime() - t0) / 1e9 * RATE))
    while sent < due do
      sent = sent + 1
      local text = (sent % 40 == 0) and 'word.\n' or 'word '
      ev({ type = 'message_update', assistantMessageEvent = { type = 'text_delta', contentIndex = 0, delta = text } })
    end
    if sent >= DELTAS then
      timer:stop()
      timer:close()
      ev({ type = 'message_end', message = { role = 'assistant', content = {}, stopReason = 'stop' } })
      ev({ type = 'turn_end' })
      ev({ type = 'agent_end', messages = {} })
    end
  end)
end

-- Server → client requests (extension UI) and their answers.
local next_id, waiting = 1, {}
local function request(method, params, cb)
  local id = 'srv' .. next_id
  next_id = next_id + 1
  waiting[id] = cb
  send({ jsonrpc = '2.0', id = id, method = method, params = params })
end

-- `agent/prompt` with text "ui:<method>[:<timeout ms>]" asks that extension UI question, then
-- streams the answer as the assistant's text.
local function ask_ui(sid, method, timeout)
  local params = { sessionId = sid, extension = 'replay', method = method, title = 'Pick one', timeout = timeout }
  if method == 'select' then
    params.options = { 'alpha', 'beta' }
  elseif method == 'confirm' then
    params.message = 'Sure?'
  elseif method == 'editor' then
    params.title = 'Commit message'
    params.prefill = 'Fix the parser\n\nDetails:'
  end
  local function ev(e)
    notify('agent/event', { sessionId = sid, runId = 'run-ui', event = e })
  end
  ev({ type = 'agent_start' })
  ev({ type = 'message_start', message = { role = 'user', content = 'ui:' .. method } })
  request('agent/ui/request', params, function(result)
    ev({ type = 'message_start', message = { role = 'assistant', content = {} } })
    ev({ type = 'message_update', assistantMessageEvent = { type = 'text_delta', delta = 'answer: ' .. vim.json.encode(result) } })
    ev({ type = 'message_end', message = { role = 'assistant', content = {}, stopReason = 'stop' } })
    ev({ type = 'agent_end', messages = {} })
  end)
end

local methods = {
  'agent/session/list',
  'agent/prompt',
  'agent/session/new',
  'agent/session/open',
  'agent/session/history',
  'agent/commands',
}

local function handle(msg)
  if msg.method == nil and msg.id ~= nil then
    local cb = waiting[msg.id]
    waiting[msg.id] = nil
    if cb then
      cb(msg.result or { error = msg.error })
    end
    return
  end
  local m, p = msg.method, msg.params or {}
  local result = vim.NIL
  if m == 'initialize' then
    result = { capabilities = { textDocumentSync = 2, positionEncoding = 'utf-8', experimental = { agent = { version = 1, methods = methods } } } }
  elseif m == 'agent/session/new' then
    result = state('bench')
  elseif m == 'agent/session/open' then
    result = state(p.sessionId or 'long')
  elseif m == 'agent/session/history' then
    result = history(p)
  elseif m == 'agent/commands' or m == 'agent/extension/commands' then
    result = { commands = {} }
  elseif m == 'agent/session/list' then
    result = { sessions = { { sessionId = 'long', sessionFile = '/dev/null', firstPrompt = 'the long session', entryCount = MESSAGES, lastActivity = 0, open = true } } }
  elseif m == 'agent/prompt' then
    result = { sessionId = p.sessionId, runId = 'run1', queued = false }
    local ui = type(p.text) == 'string' and p.text:match('^ui:(%a+)')
    local timeout = type(p.text) == 'string' and tonumber(p.text:match('^ui:%a+:(%d+)')) or nil
    vim.schedule(function()
      if ui then
        ask_ui(p.sessionId, ui, timeout)
      else
        stream(p.sessionId)
      end
    end)
  elseif m == 'exit' then
    os.exit(0)
  end
  if msg.id ~= nil then
    send({ jsonrpc = '2.0', id = msg.id, result = result })
  end
end

local buf = ''
stdin:read_start(function(err, data)
  if err or not data then
    os.exit(0)
  end
  buf = buf .. data
  while true do
    local hend = buf:find('\r\n\r\n', 1, true)
    if not hend then
      break
    end
    local len = tonumber(buf:sub(1, hend):match('Content%-Length: *(%d+)'))
    if not len or #buf < hend + 3 + len then
      break
    end
    local body = buf:sub(hend + 4, hend + 3 + len)
    buf = buf:sub(hend + 4 + len)
    local ok, msg = pcall(vim.json.decode, body, { luanil = { object = true } })
    if ok then
      vim.schedule(function()
        handle(msg)
      end)
    end
  end
end)

while true do
  vim.wait(1000)
end
