--- Compact deltas (the server's `initializationOptions.compactDeltas`, docs/protocol.md
--- "Compact deltas"): `agent/delta [ref, seq, contentIndex, delta]` expanded back into the
--- `agent/event` the server would have sent, before any handler sees it. One expander per
--- connection (client id); every `agent/event` of the connection passes through it.
local M = {}

--- client id -> { [ref] = {sessionId, runId, kinds = {[contentIndex] = delta type}} }
local conns = {}

--- `agent/delta` notifications expanded so far (all connections), for :checkhealth and tests.
M.expanded = 0

local START_KIND = {
  text_start = 'text_delta',
  thinking_start = 'thinking_delta',
  toolcall_start = 'toolcall_delta',
}

--- Notes a full `agent/event` (its `ref`: session, run, blocks begun) and removes `ref`, so
--- the params are what a client without compact deltas gets.
--- @param client_id integer
--- @param p table agent/event params
--- @return table p
function M.event(client_id, p)
  if type(p) ~= 'table' or p.ref == nil then
    return p
  end
  local refs = conns[client_id] or {}
  conns[client_id] = refs
  local st = refs[p.ref] or { kinds = {} }
  refs[p.ref] = st
  st.sessionId, st.runId = p.sessionId, p.runId
  p.ref = nil
  local ev = p.event or {}
  if ev.type == 'message_start' then
    st.kinds = {}
  elseif ev.type == 'message_update' and type(ev.assistantMessageEvent) == 'table' then
    local a = ev.assistantMessageEvent
    local kind = START_KIND[a.type]
    if kind and a.contentIndex ~= nil then
      st.kinds[a.contentIndex] = kind
    end
  end
  return p
end

--- The `agent/event` params an `agent/delta` stands for; `nil, why` when its session or
--- block was never announced (the server does not send such a delta).
--- @param client_id integer
--- @param p table `[ref, seq, contentIndex, delta]`
--- @return table|nil, string|nil
function M.expand(client_id, p)
  if type(p) ~= 'table' or #p ~= 4 then
    return nil, 'agent/delta: expected [ref, seq, contentIndex, delta]'
  end
  local st = (conns[client_id] or {})[p[1]]
  local kind = st and st.kinds[p[3]]
  if not kind then
    return nil, ('agent/delta: unknown session ref %s or block %s'):format(tostring(p[1]), tostring(p[3]))
  end
  M.expanded = M.expanded + 1
  return {
    sessionId = st.sessionId,
    runId = st.runId,
    seq = p[2],
    event = {
      type = 'message_update',
      assistantMessageEvent = { type = kind, contentIndex = p[3], delta = p[4] },
    },
  }
end

--- Forgets a connection (its server exited).
function M.forget(client_id)
  conns[client_id] = nil
end

return M
