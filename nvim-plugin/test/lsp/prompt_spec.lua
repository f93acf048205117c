-- Neovim end-to-end spec for pi-lsp, driven by tests/nvim.rs:
--   nvim --headless -u NONE -l nvim-plugin/test/lsp/prompt_spec.lua
-- Env: PI_LSP_BIN (server binary), PI_WS (workspace dir), PI_FILE (absolute path of a file in
-- it), PI_OUT (where the JSON result goes). Optional: PI_NVIM_LSP_LOG (Neovim LSP log level,
-- e.g. "debug" to log every message).
--
-- Opens PI_FILE, makes an unsaved change on the line holding "🍋 中", starts pi-lsp with
-- Neovim's own client (and its own workspace/applyEdit handler), sends one `agent/prompt`,
-- collects `agent/event` notifications until `agent_end`, and writes what it saw to PI_OUT.
-- Any failure or timeout writes an `error` field and exits 1.

local function env(name)
  local v = os.getenv(name)
  if v == nil or v == '' then
    io.stderr:write('prompt_spec.lua: missing env ' .. name .. '\n')
    os.exit(2)
  end
  return v
end

local bin, ws, file, out_path = env('PI_LSP_BIN'), env('PI_WS'), env('PI_FILE'), env('PI_OUT')

vim.lsp.log.set_level(os.getenv('PI_NVIM_LSP_LOG') or 'warn')

local out = {
  nvim_version = tostring(vim.version()),
  lsp_log = vim.lsp.log.get_filename(),
}
local params_seen = {} -- every agent/event params, in arrival order

local function write_out()
  local f = assert(io.open(out_path, 'w'))
  f:write(vim.json.encode(out))
  f:close()
end

local function buffer_text(bufnr)
  return table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false), '\n') .. '\n'
end

local function event_types()
  local t = {}
  for _, p in ipairs(params_seen) do
    t[#t + 1] = p.event and p.event.type or vim.NIL
  end
  return t
end

local function fail(msg)
  out.error = msg
  out.events = event_types()
  pcall(function()
    out.buffer = buffer_text(0)
  end)
  write_out()
  io.stderr:write('prompt_spec.lua: ' .. msg .. '\n')
  os.exit(1)
end

local function wait_for(what, ms, cond)
  if not vim.wait(ms, cond, 10) then
    fail('timed out after ' .. ms .. ' ms waiting for ' .. what)
  end
end

local ok, err = xpcall(function()
  vim.cmd.edit(vim.fn.fnameescape(file))
  local bufnr = vim.api.nvim_get_current_buf()

  -- An unsaved change on the emoji/CJK line: only the buffer has it, not the disk.
  local lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  local target
  for i, l in ipairs(lines) do
    if l:find('🍋', 1, true) and l:find('中', 1, true) then
      target = i
      break
    end
  end
  if not target then
    fail('no line with 🍋 and 中 in ' .. file)
  end
  vim.api.nvim_buf_set_lines(bufnr, target - 1, target, true, { 'lemon 🍋 中 value=2 (unsaved)' })
  out.buffer_before = buffer_text(bufnr)

  local caps = vim.lsp.protocol.make_client_capabilities()
  caps.workspace = caps.workspace or {}
  caps.workspace.workspaceEdit = caps.workspace.workspaceEdit or {}
  caps.workspace.workspaceEdit.documentChanges = true
  caps.window = caps.window or {}
  caps.window.workDoneProgress = true
  -- This spec is the plain client's plumbing: the agent's edit touches the line with the
  -- user's unsaved change, and Neovim's own client is told to save both (saveUserChanges
  -- "always"; the plugin asks, see docs/protocol.md "The user's unsaved changes").
  caps.experimental = { agent = { saveUserChanges = 'always' } }
  out.offered_encodings = caps.general and caps.general.positionEncodings or {}

  local exited = nil
  local client_id = vim.lsp.start({
    name = 'pi-lsp',
    cmd = { bin },
    root_dir = ws,
    capabilities = caps,
    -- This spec runs a bash call without a permission UI: the user chose approve-all.
    init_options = { approvalPolicy = 'approve-all' },
    handlers = {
      ['agent/event'] = function(_, params)
        params_seen[#params_seen + 1] = params
      end,
    },
    on_exit = function(code, signal)
      exited = { code = code, signal = signal }
    end,
  }, { bufnr = bufnr })
  if not client_id then
    fail('vim.lsp.start returned nil')
  end

  wait_for('the client to initialize and attach', 10000, function()
    local c = vim.lsp.get_client_by_id(client_id)
    return exited ~= nil or (c ~= nil and c.initialized and vim.lsp.buf_is_attached(bufnr, client_id))
  end)
  if exited then
    fail('server exited during startup: code ' .. tostring(exited.code))
  end
  local client = assert(vim.lsp.get_client_by_id(client_id))
  out.offset_encoding = client.offset_encoding

  local response = nil
  local prompt = { text = 'Bump value=2 to value=3 in notes.txt.' }
  local function on_response(e, result)
    response = { err = e, result = result }
  end
  if vim.fn.has('nvim-0.11') == 1 then
    client:request('agent/prompt', prompt, on_response, bufnr)
  else -- 0.10: request is a plain function field
    client.request('agent/prompt', prompt, on_response, bufnr)
  end
  wait_for('the agent/prompt response', 10000, function()
    return response ~= nil or exited ~= nil
  end)
  if response == nil or response.err then
    fail('agent/prompt failed: ' .. vim.inspect(response and response.err or exited))
  end
  out.prompt_result = response.result

  -- The run's last event: Pi 1.6's `agent_settled`, after `agent_end`.
  wait_for('agent_settled', 20000, function()
    local last = params_seen[#params_seen]
    return exited ~= nil or (last ~= nil and last.event and last.event.type == 'agent_settled')
  end)
  if exited then
    fail('server exited during the run: code ' .. tostring(exited.code))
  end

  out.events = event_types()
  out.labels = {} -- type, plus the role or tool name where there is one: "message_end:user"
  out.event_ids = {}
  out.tool_results = {}
  for _, p in ipairs(params_seen) do
    out.event_ids[#out.event_ids + 1] = { sessionId = p.sessionId, runId = p.runId }
    local ev = p.event
    local detail = (ev.type == 'message_start' or ev.type == 'message_end') and ev.message and ev.message.role
      or (ev.type == 'tool_execution_start' or ev.type == 'tool_execution_end') and ev.toolName
      or nil
    out.labels[#out.labels + 1] = detail and (ev.type .. ':' .. detail) or ev.type
    if ev.type == 'tool_execution_end' then
      local content = ev.result and ev.result.content or {}
      out.tool_results[#out.tool_results + 1] = {
        toolName = ev.toolName,
        text = content[1] and content[1].text or vim.NIL,
        isError = ev.isError,
      }
    end
  end
  out.buffer = buffer_text(bufnr)
  out.modified = vim.bo[bufnr].modified
  out.changedtick = vim.b[bufnr].changedtick

  -- shutdown + exit; record how the server ended.
  vim.lsp.stop_client(client_id)
  wait_for('the server to exit', 5000, function()
    return exited ~= nil
  end)
  out.server_exit = exited
end, debug.traceback)

if not ok then
  fail('error: ' .. tostring(err))
end
write_out()
vim.cmd('qa!')
