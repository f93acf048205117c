--- Pi inside Neovim: the pi-lsp coding agent through Neovim's own LSP client.
--- `require("pi").setup(opts)` is optional (see `:help pi-config`); `:Pi` drives everything.
local config = require('pi.config')
local util = require('pi.util')

local api = vim.api
local M = {}

--- Sets the configuration (merged over the defaults). Calling it is optional.
--- @param opts table|nil
function M.setup(opts)
  config.set(opts)
  M.did_setup = true
  if config.values.chat.editor_context then
    -- The buffer and selection you work in, followed from now (a few autocommands).
    require('pi.context').track()
  end
end

--- The statusline segment `model · ctx% · $cost · state`.
function M.statusline()
  local ok, text = pcall(require('pi.status').line)
  return ok and text or ''
end

--- Records a session state (agent/state, session/new|open) as the root's current session.
function M.use_state(st, state)
  if type(state) ~= 'table' or not state.sessionId then
    return
  end
  if st.session_id ~= state.sessionId then
    -- Another session: the context meter and cost are its own (read from its stats), not the
    -- last session's.
    st.status.usage = nil
    M.read_usage(st, state.sessionId)
  end
  st.session_id = state.sessionId
  st.state = state
  if type(state.model) == 'table' then
    st.status.model = tostring(state.model.provider) .. '/' .. tostring(state.model.id)
  end
  if type(state.thinkingLevel) == 'string' then
    st.status.thinking = state.thinkingLevel
  end
  require('pi.status').changed()
end

--- Sets the statusline's context meter and cost from `agent/session/stats` of `session_id`
--- (until its next response reports usage).
function M.read_usage(st, session_id)
  require('pi.client').request(st, 'agent/session/stats', { sessionId = session_id }, 'read the session stats', function(stats)
    if type(stats) ~= 'table' or st.session_id ~= session_id or st.status.usage then
      return
    end
    -- JSON null arrives as vim.NIL: only numbers are figures (the context's tokens are
    -- unknown after a compaction until the next response).
    local function num(v)
      return type(v) == 'number' and v or nil
    end
    local cu = type(stats.contextUsage) == 'table' and stats.contextUsage or nil
    st.status.usage = {
      -- 0 tokens: nothing measured yet (a new session); the meter says nothing rather than 0%.
      contextTokens = cu and num(cu.tokens) ~= 0 and num(cu.tokens) or nil,
      contextWindow = cu and num(cu.contextWindow) or nil,
      -- The money spent in the whole file (`cost` is the model's context's, as Pi's).
      session = { cost = num(stats.sessionCost) or num(stats.cost) },
    }
    require('pi.status').changed()
  end, function()
    return true
  end)
end

--- Calls `fn(chat)` with the current workspace's chat, starting the server and creating a
--- session when needed.
function M.with_chat(fn, buf)
  local client = require('pi.client')
  local root = client.root_of(buf or 0)
  client.ensure(root, function(st)
    local chats = require('pi.chat')
    local c = chats.current(st)
    if c then
      return fn(c)
    end
    -- Commands given while the first session is being made wait for it (one session, one
    -- chat, however many `:Pi` came before the server answered).
    if st.creating then
      st.creating[#st.creating + 1] = fn
      return
    end
    st.creating = { fn }
    client.request(st, 'agent/session/new', {}, 'start a session', function(state)
      local waiting = st.creating or {}
      st.creating = nil
      M.use_state(st, state)
      local chat = chats.get(st, state.sessionId)
      for _, f in ipairs(waiting) do
        f(chat)
      end
    end, function()
      st.creating = nil
      return false
    end)
  end)
end

--- Sends `text` as a prompt of `chat` (a steer when a run is active), with the chat's attached
--- images and the image files the text names.
function M.prompt_chat(chat, text)
  -- Recalled later with <Up> in the prompt (per workspace).
  require('pi.recall').add(chat.root and chat.root.root, text)
  if chat.running then
    return M.queue(chat, 'steer', text)
  end
  if chat.state == 'sending' then
    -- The last prompt is on its way: this steers its run once the server has started it.
    chat.pending_steers = chat.pending_steers or {}
    table.insert(chat.pending_steers, text)
    return
  end
  if config.values.chat.open_on_prompt then
    chat:open(false)
  end
  local images, taken = require('pi.images').take(chat, text)
  chat.last_prompt = text
  chat.streamed = false
  chat.run_started = vim.uv.hrtime()
  chat:set_state('sending')
  -- The editor's context (chips) and the text of the files named with `@path`.
  local sent = text .. require('pi.context').attachments(chat, text)
  local params = { sessionId = chat.session_id, text = sent, images = images }
  require('pi.client').request(chat.root, 'agent/prompt', params, 'send the prompt', function(r)
    if r and r.command then
      chat:set_state('idle')
    end
    local steers = chat.pending_steers or {}
    chat.pending_steers = nil
    for _, t in ipairs(steers) do
      M.queue(chat, 'steer', t)
    end
  end, function(err)
    chat:set_state('idle')
    util.notify(util.error_text('send the prompt', err), vim.log.levels.ERROR)
    local back = { text }
    vim.list_extend(back, chat.pending_steers or {})
    chat.pending_steers = nil
    require('pi.prompt').set_text(chat, table.concat(back, '\n\n'))
    require('pi.images').give_back(chat, taken)
    return true
  end)
end

--- `:Pi retry`: runs the failed (or stopped) last turn again without a new user message
--- (`agent/continue`): the message is sent once more and stays once in the session. The
--- failed prompt put back into the prompt buffer leaves it when it is still as it was.
function M.retry(chat)
  local client = require('pi.client')
  if chat.running or chat.state == 'sending' then
    return util.notify('a run is active: :Pi abort first, or wait for its end')
  end
  if not client.has_method(chat.root, 'agent/continue') then
    return util.notify('this pi-lsp cannot retry without sending your message again (agent/continue; a newer one: :Pi build)', vim.log.levels.WARN)
  end
  local prompt = require('pi.prompt')
  local back = chat.retry_text
  if back and prompt.text(chat) == back then
    prompt.set_text(chat, '')
  end
  chat.retry_text = nil
  chat.streamed = false
  chat.run_started = vim.uv.hrtime()
  chat:set_state('sending')
  client.request(chat.root, 'agent/continue', { sessionId = chat.session_id }, 'retry', nil, function(err)
    chat:set_state('idle')
    if back and vim.trim(prompt.text(chat)) == '' then
      prompt.set_text(chat, back)
      chat.retry_text = back
    end
    -- "nothing to continue: …" is the server's sentence; the rest in the user's words.
    local msg = type(err) == 'table' and tostring(err.message or '') or ''
    local why = msg:match('nothing to continue.*$')
    util.notify(why and ('could not retry: ' .. why) or util.error_text('retry', err), vim.log.levels.ERROR)
    return true
  end)
end

--- Queues a steering message or a follow-up (`kind` "steer" / "followUp"), with images as a
--- prompt has them.
function M.queue(chat, kind, text)
  require('pi.recall').add(chat.root and chat.root.root, text)
  local method = kind == 'followUp' and 'agent/followUp' or 'agent/steer'
  local what = kind == 'followUp' and 'queue the follow-up' or 'steer'
  local images, taken = require('pi.images').take(chat, text)
  local idle = not chat.running and chat.state ~= 'sending'
  if config.values.chat.open_on_prompt then
    chat:open(false) -- the queue is shown above the prompt
  end
  require('pi.client').request(chat.root, method, { sessionId = chat.session_id, text = text, images = images }, what, function()
    if idle then
      util.notify(('%s queued: no run now, it goes first with your next prompt (gq in the prompt edits it)'):format(kind == 'followUp' and 'follow-up' or 'steer'))
    end
  end, function(err)
    util.notify(util.error_text(what, err), vim.log.levels.ERROR)
    require('pi.prompt').set_text(chat, text)
    require('pi.images').give_back(chat, taken)
    return true
  end)
end

--- Aborts the chat's run: "stopping…" at once, then the server's report at the chat's end; the
--- prompt text comes back when nothing streamed yet.
function M.abort(chat)
  if chat.bash_running and not chat.running then
    -- The user's own shell command (`:Pi !cmd`).
    return require('pi.client').request(chat.root, 'agent/bash/abort', { sessionId = chat.session_id }, 'stop the command')
  end
  if not chat.running and chat.state ~= 'sending' then
    util.notify('nothing is running')
    return
  end
  chat.aborting = true
  chat:set_state('stopping')
  -- Said at once under the last line, as a virtual line: what the server streamed before the
  -- abort may still be arriving, and lands above it; the outcome is written after it all.
  chat.writer:set_note('■ stopping…', 'DiagnosticWarn')
  require('pi.client').request(chat.root, 'agent/abort', { sessionId = chat.session_id }, 'abort the run', function(r)
    chat.aborting = false
    chat:abort_report(r or {})
    chat:set_state('idle')
    if not chat.streamed and chat.last_prompt and vim.trim(require('pi.prompt').text(chat)) == '' then
      require('pi.prompt').set_text(chat, chat.last_prompt)
    end
  end, function()
    chat.aborting = false
    chat.writer:set_note(nil)
    chat:set_state(chat.running and 'running' or 'idle')
    return false
  end)
end

--- `<Esc>` during a run: stops it at once while the run is young; in a long run (older than
--- `chat.esc_confirm_after` seconds) asks once, "keep it running" being the default answer
--- (a second `<Esc>` keeps it).
function M.esc(chat)
  if chat.asking_stop or chat.aborting then
    return
  end
  local after = config.values.chat.esc_confirm_after
  local age = chat.run_started and (vim.uv.hrtime() - chat.run_started) / 1e9 or 0
  if after == false or after == nil or age < after then
    return M.abort(chat)
  end
  local run = chat.run_started
  chat.asking_stop = true
  local secs = math.floor(age)
  local took = secs >= 60 and ('%d min %d s'):format(math.floor(secs / 60), secs % 60) or (secs .. ' s')
  util.select({ 'Keep it running', 'Stop the run' }, { prompt = ('Pi has been running for %s. Stop it?'):format(took), kind = 'pi.confirm' }, function(choice)
    chat.asking_stop = false
    if choice == 'Stop the run' and chat.run_started == run and (chat.running or chat.state == 'sending') then
      M.abort(chat)
    end
  end)
end

------------------------------------------------------------------------------------------
-- :Pi (the command table is `pi.commands`)

--- `:Pi [subcommand] [text]`.
function M.command(o)
  return require('pi.commands').command(o)
end

--- Completion of `:Pi`.
function M.complete(arg_lead, cmdline)
  return require('pi.commands').complete(arg_lead, cmdline)
end

--- `:Pi !{command}`: the user's own shell command in the chat (see `pi.commands`).
function M.bash(chat, command, exclude)
  return require('pi.commands').bash(chat, command, exclude)
end

-- The subcommands' handlers and names, read through `pi.commands` (for `:help pi-commands`,
-- the prompt's `/` commands and the specs).
setmetatable(M, {
  __index = function(_, k)
    if k == 'subcommands' or k == 'subcommand_names' then
      return require('pi.commands')[k]
    end
  end,
})

return M
