--- Routes what the server sends (notifications and requests, server → client) to the parts of
--- the UI that show or answer it: the chat (`agent/event`, `agent/delta`, `agent/queueUpdate`),
--- the statusline (`agent/usage`, `agent/attention`), the hunks (`workspace/applyEdit`), the
--- permission question (`agent/requestPermission`), extension dialogs (`agent/ui/*`), the
--- buffers (`agent/saveDocument`, …). `pi.client` is the transport only; this module holds no
--- transport and no drawing.
local util = require('pi.util')

local api = vim.api
local M = {}

local function roots()
  return require('pi.client').roots
end

local function root_of_client(ctx)
  for _, st in pairs(roots()) do
    if st.client_id == ctx.client_id then
      return st
    end
  end
end

local function chat_for(ctx, session_id)
  local st = root_of_client(ctx)
  if not st or type(session_id) ~= 'string' then
    return nil
  end
  return require('pi.chat').get(st, session_id), st
end

local function buf_of_uri(uri)
  local name = vim.uri_to_fname(uri)
  local b = vim.fn.bufnr(name)
  if b > 0 and api.nvim_buf_is_loaded(b) then
    return b
  end
end

local handlers = {}

handlers['agent/event'] = function(_, p, ctx)
  p = require('pi.delta').event(ctx.client_id, p)
  local c = chat_for(ctx, p and p.sessionId)
  if c then
    require('pi.chat').on_event(c, p)
  end
end

-- Compact deltas (asked for in init_options): the same event as `agent/event` would carry.
handlers['agent/delta'] = function(_, p, ctx)
  local e, why = require('pi.delta').expand(ctx.client_id, p)
  if not e then
    vim.lsp.log.warn('pi-lsp', why)
    return
  end
  local c = chat_for(ctx, e.sessionId)
  if c then
    require('pi.chat').on_event(c, e)
  end
end

handlers['agent/queueUpdate'] = function(_, p, ctx)
  local c = chat_for(ctx, p and p.sessionId)
  if c then
    c:on_queue(p)
  end
end

handlers['agent/usage'] = function(_, p, ctx)
  local st = root_of_client(ctx)
  if st and p then
    -- A response that used nothing (stopped or failed before the model answered) says nothing
    -- about the context: the meter keeps its last reading.
    local prev = st.status.usage
    local turn = type(p.turn) == 'table' and p.turn or {}
    local used = (turn.input or 0) + (turn.output or 0) + (turn.cacheRead or 0) + (turn.cacheWrite or 0)
    -- (Not read yet, as after a compaction: the meter stays unknown rather than "0%".)
    if used == 0 and (p.contextTokens or 0) == 0 then
      p = vim.deepcopy(p)
      p.contextTokens = prev and prev.contextTokens or nil
      p.contextWindow = p.contextWindow or (prev and prev.contextWindow)
    end
    st.status.usage = p
    require('pi.status').changed()
  end
end

handlers['agent/attention'] = function(_, p, ctx)
  local st = root_of_client(ctx)
  if not st or not p then
    return
  end
  st.status.attention = (p.reason == 'permission' or p.reason == 'question') and p.reason or nil
  require('pi.status').changed()
  -- What the chat on screen already shows is not said again: a finished answer in a shown
  -- chat, a question while the user is in that chat.
  local chat = p.sessionId and require('pi.chat').chats[p.sessionId]
  local win = chat and chat:window()
  if win and (p.reason == 'finished' or (p.reason == 'permission' and api.nvim_get_current_win() == win)) then
    return
  end

  local level = p.reason == 'failed' and vim.log.levels.ERROR
    or (p.reason == 'permission' or p.reason == 'question') and vim.log.levels.WARN
    or vim.log.levels.INFO
  local words = {
    finished = 'answer ready: ',
    failed = 'the run failed: ',
    permission = 'waiting for your answer: ',
    question = 'a question: ',
  }
  if p.reason == 'permission' then
    -- "pi wants to run `x`. Reason: …" → what it wants, then how to answer (the reason is
    -- in the question itself).
    -- Worded as the chat's question ("run `make`", "read notes.md"), not as the server's
    -- sentence ("pi wants to run read with {"path":…}"), which may come before the question.
    local want = require('pi.permission').asking(p.sessionId)
    if not want then
      local msg = tostring(p.message or ''):gsub('^[Pp]i wants to ', ''):gsub('%. Reason: .*$', '')
      local tool, json = msg:match('^run ([%w_.-]+) with (%b{})$')
      local ok, args = pcall(vim.json.decode, json or '')
      want = (tool and ok and type(args) == 'table') and vim.trim(tool .. ' ' .. util.tool_summary(tool, args)) or msg
    end
    return util.notify_line(('wants to %s — answer: %s, :Pi allow or :Pi reject'):format(want, win and 'a digit in the chat' or 'a digit in the float'), level)
  end
  local said = p.reason == 'failed' and util.model_error(p.message or '') or tostring(p.message or '')
  util.notify_line((words[p.reason] or (tostring(p.reason) .. ': ')) .. said, level)
end

handlers['window/showMessage'] = function(_, p, ctx)
  local levels = { vim.log.levels.ERROR, vim.log.levels.WARN, vim.log.levels.INFO, vim.log.levels.DEBUG }
  local msg = tostring(p.message or ''):gsub('^pi%-lsp: ', '')
  if msg:match('^MCP server ') or msg:match('^MCP configuration: ') then
    -- An MCP server failed (once per failure): said whole, with its stderr's tail.
    require('pi.mcp').notice(root_of_client(ctx), msg, levels[p.type] or vim.log.levels.WARN)
    return vim.NIL
  end
  util.notify_line(msg, levels[p.type] or vim.log.levels.INFO)
  return vim.NIL
end

handlers['window/logMessage'] = function(_, p)
  -- The server's own log lines go to Neovim's LSP log (:lua vim.cmd.edit(vim.lsp.log.get_filename())).
  vim.lsp.log.info('pi-lsp', p and p.message)
  return vim.NIL
end

handlers['workspace/applyEdit'] = function(err, p, ctx)
  return require('pi.hunks').apply(err, p, ctx)
end

handlers['agent/saveDocument'] = function(_, p)
  local b = p and p.uri and buf_of_uri(p.uri)
  if not b then
    return { saved = false }
  end
  -- The agent's save runs none of the user's BufWritePre formatters (or any autocommand):
  -- the file gets exactly the buffer the agent's edit made.
  local ok, e = pcall(api.nvim_buf_call, b, function()
    vim.cmd('silent noautocmd keepalt keepjumps lockmarks write!')
  end)
  if ok then
    require('pi.unsaved').saved(b)
  end
  if not ok then
    util.notify('could not save ' .. vim.fn.fnamemodify(api.nvim_buf_get_name(b), ':~:.') .. ': ' .. tostring(e), vim.log.levels.WARN)
  end
  return { saved = ok }
end

handlers['agent/didWriteDocument'] = function(_, p)
  -- The server wrote the buffer's text at `version` to disk itself (a save it asked for
  -- failed). When the buffer is still at that version, write it through Neovim too: the
  -- same text, and Neovim knows the file again, so no "file changed" question follows.
  local b = p and p.uri and buf_of_uri(p.uri)
  if b and vim.lsp.util.buf_versions[b] == p.version then
    pcall(api.nvim_buf_call, b, function()
      vim.cmd('silent noautocmd keepalt keepjumps lockmarks write!')
    end)
    require('pi.unsaved').saved(b)
  end
end

handlers['agent/didMergeToDisk'] = function(_, p)
  -- The disk got the agent's change only; the buffer keeps the user's unsaved changes.
  local b = p and p.uri and buf_of_uri(p.uri)
  if b then
    require('pi.unsaved').merged(b, p.previousMtime)
  end
end

handlers['window/showMessageRequest'] = function(_, p)
  -- A question from the server (e.g. "save your changes too?"), answered through
  -- vim.ui.select in the request's coroutine: nothing typed elsewhere answers it.
  local co, is_main = coroutine.running()
  local actions = p and p.actions or {}
  if not co or is_main or #actions == 0 then
    util.notify_line(tostring(p and p.message or ''), vim.log.levels.WARN)
    return vim.NIL
  end
  util.select(actions, {
    prompt = 'Pi: ' .. tostring(p.message),
    kind = 'pi_question',
    format_item = function(a)
      return a.title
    end,
  }, function(choice)
    vim.schedule(function()
      coroutine.resume(co, choice or vim.NIL)
    end)
  end)
  return coroutine.yield()
end

handlers['agent/requestPermission'] = function(_, p, ctx)
  local c, st = chat_for(ctx, p and p.sessionId)
  if not c then
    return { decision = 'reject', reason = 'no chat for this session' }
  end
  return require('pi.permission').ask(c, st, p)
end

handlers['$/cancelRequest'] = function()
  require('pi.permission').cancelled()
end

handlers['agent/diagnostics'] = function(_, p, ctx)
  local client = vim.lsp.get_client_by_id(ctx.client_id)
  return require('pi.diagnostics').collect(p or {}, client and client.offset_encoding or 'utf-16')
end

handlers['agent/ui/request'] = function(_, p, ctx)
  p = p or {}
  local st = root_of_client(ctx)
  -- Plan mode's "what next?" is asked inline in its chat, answered on purpose as a permission.
  if p.extension == 'plan-mode' and p.method == 'select' then
    local c = chat_for(ctx, p.sessionId)
    if c then
      return require('pi.permission').ask_select(c, st, p)
    end
  end
  return require('pi.ui').request(p, st)
end

-- The session's plan/todo state: the block at the top of its chat, replaced in place.
handlers['agent/plan'] = function(_, p, ctx)
  local c = chat_for(ctx, p and p.sessionId)
  if c then
    c:set_plan(p)
  end
end

handlers['agent/ui/notification'] = function(_, p, ctx)
  local st = root_of_client(ctx)
  require('pi.ui').notification(p or {}, st)
end

--- The handlers given to `vim.lsp.start` (method -> `function(err, params, ctx)`).
M.handlers = handlers

--- The server of `st` exited (`how`: "exit code N" / "signal N"; `crashed` when it was not
--- asked to stop): a run it took with it ends in its chat, and the user is told once.
function M.server_stopped(st, how, crashed)
  vim.schedule(function()
    -- A run the server took with it: its chat says so and stops waiting.
    for _, chat in pairs(require('pi.chat').chats) do
      if chat.root == st and (chat.running or chat.state == 'sending' or chat.state == 'stopping') then
        chat.running = false
        chat.aborting = false
        chat.writer:set_note(nil)
        if chat.hl_paused then
          chat.hl_paused = false
          require('pi.highlight').resume(chat.buf)
        end
        require('pi.permission').withdraw_session(chat.session_id, true)
        chat:line(('✗ the server stopped during the run (%s); the next :Pi starts it again'):format(how))
        chat.writer:flush()
        chat:set_state('stopped')
      end
    end
  end)
  if crashed then
    vim.schedule(function()
      util.notify_line(('the server stopped (%s); the next :Pi starts it again'):format(how), vim.log.levels.ERROR)
    end)
  end
end

return M
