-- Neovim spec for pi-lsp's `diagnostics` tool, driven by tests/nvim.rs:
--   nvim --headless -u NONE -l nvim-plugin/test/lsp/diagnostics_spec.lua
-- Env: PI_LSP_BIN (server binary), PI_WS (workspace dir), PI_FILE (absolute path of a file in
-- it), PI_OUT (where the JSON result goes).
--
-- Opens PI_FILE, sets diagnostics on its buffer with `vim.diagnostic.set` (as another language
-- server would), starts pi-lsp advertising `experimental.agent.diagnostics`, answers
-- `agent/diagnostics` from `vim.diagnostic.get` (columns converted from Neovim's byte columns to
-- the client's offset encoding), sends one `agent/prompt` and waits for `agent_end`. Writes the
-- requests it answered and the tool results it saw to PI_OUT; a failure writes `error`.

local function env(name)
  local v = os.getenv(name)
  if v == nil or v == '' then
    io.stderr:write('diagnostics_spec.lua: missing env ' .. name .. '\n')
    os.exit(2)
  end
  return v
end

local bin, ws, file, out_path = env('PI_LSP_BIN'), env('PI_WS'), env('PI_FILE'), env('PI_OUT')
vim.lsp.log.set_level('warn')

local out = { nvim_version = tostring(vim.version()), asked = {}, tool_results = {} }

local function write_out()
  local f = assert(io.open(out_path, 'w'))
  f:write(vim.json.encode(out))
  f:close()
end

local function fail(msg)
  out.error = msg
  write_out()
  io.stderr:write('diagnostics_spec.lua: ' .. msg .. '\n')
  os.exit(1)
end

local function wait_for(what, ms, cond)
  if not vim.wait(ms, cond, 10) then
    fail('timed out after ' .. ms .. ' ms waiting for ' .. what)
  end
end

local client_id

-- vim.Diagnostic (0-based lines, byte columns) → lsp.Diagnostic in the client's encoding.
local function to_lsp(bufnr, d, encoding)
  local function col(lnum, byte)
    local line = vim.api.nvim_buf_get_lines(bufnr, lnum, lnum + 1, false)[1] or ''
    return vim.str_utfindex(line, encoding, math.min(byte, #line), false)
  end
  return {
    range = {
      start = { line = d.lnum, character = col(d.lnum, d.col) },
      ['end'] = { line = d.end_lnum or d.lnum, character = col(d.end_lnum or d.lnum, d.end_col or d.col) },
    },
    severity = d.severity,
    source = d.source,
    code = d.code,
    message = d.message,
  }
end

local function answer_diagnostics(params)
  out.asked[#out.asked + 1] = params
  local client = assert(vim.lsp.get_client_by_id(client_id))
  local bufs = {}
  if params.uris then
    for _, uri in ipairs(params.uris) do
      bufs[#bufs + 1] = vim.uri_to_bufnr(uri)
    end
  else
    local seen = {}
    for _, d in ipairs(vim.diagnostic.get()) do
      if not seen[d.bufnr] then
        seen[d.bufnr] = true
        bufs[#bufs + 1] = d.bufnr
      end
    end
  end
  local items = {}
  for _, b in ipairs(bufs) do
    local diags = {}
    for _, d in ipairs(vim.diagnostic.get(b)) do
      diags[#diags + 1] = to_lsp(b, d, client.offset_encoding)
    end
    items[#items + 1] = { uri = vim.uri_from_bufnr(b), diagnostics = diags }
  end
  return { items = items }
end

local ok, err = xpcall(function()
  vim.cmd.edit(vim.fn.fnameescape(file))
  local bufnr = vim.api.nvim_get_current_buf()
  local lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  -- `cnt` on the line with the emoji: byte column (Neovim's) differs from UTF-16 and characters.
  local lnum, byte
  for i, l in ipairs(lines) do
    local s = l:find('cnt', 1, true)
    if s then
      lnum, byte = i - 1, s - 1
      break
    end
  end
  if not lnum then
    fail('no `cnt` in ' .. file)
  end
  local ns = vim.api.nvim_create_namespace('fake-rustc')
  vim.diagnostic.set(ns, bufnr, {
    {
      lnum = lnum,
      col = byte,
      end_col = byte + 3,
      severity = vim.diagnostic.severity.ERROR,
      source = 'rustc',
      code = 'E0425',
      message = 'cannot find value `cnt` in this scope',
    },
    {
      lnum = 0,
      col = 3,
      end_col = 7,
      severity = vim.diagnostic.severity.WARN,
      source = 'clippy',
      message = 'function `main` is too simple',
    },
  })

  local caps = vim.lsp.protocol.make_client_capabilities()
  caps.experimental = { agent = { diagnostics = true } }
  local exited = nil
  client_id = vim.lsp.start({
    name = 'pi-lsp',
    cmd = { bin },
    root_dir = ws,
    capabilities = caps,
    handlers = {
      ['agent/diagnostics'] = function(_, params)
        return answer_diagnostics(params)
      end,
      ['agent/event'] = function(_, params)
        local ev = params.event
        if ev.type == 'tool_execution_end' then
          local content = ev.result and ev.result.content or {}
          out.tool_results[#out.tool_results + 1] = {
            toolName = ev.toolName,
            text = content[1] and content[1].text or vim.NIL,
            isError = ev.isError,
          }
        elseif ev.type == 'agent_end' then
          out.ended = true
        end
      end,
    },
    on_exit = function(code, signal)
      exited = { code = code, signal = signal }
    end,
  }, { bufnr = bufnr })
  if not client_id then
    fail('vim.lsp.start returned nil')
  end
  wait_for('the client to initialize', 10000, function()
    local c = vim.lsp.get_client_by_id(client_id)
    return exited ~= nil or (c ~= nil and c.initialized)
  end)
  if exited then
    fail('server exited during startup: code ' .. tostring(exited.code))
  end
  local client = assert(vim.lsp.get_client_by_id(client_id))
  out.offset_encoding = client.offset_encoding

  local response = nil
  client:request('agent/prompt', { text = 'What does the compiler say?' }, function(e, result)
    response = { err = e, result = result }
  end, bufnr)
  wait_for('the agent/prompt response', 10000, function()
    return response ~= nil or exited ~= nil
  end)
  if response == nil or response.err then
    fail('agent/prompt failed: ' .. vim.inspect(response and response.err or exited))
  end
  out.prompt_result = response.result
  wait_for('agent_end', 20000, function()
    return out.ended or exited ~= nil
  end)
  vim.lsp.stop_client(client_id)
  wait_for('the server to exit', 5000, function()
    return exited ~= nil
  end)
end, debug.traceback)

if not ok then
  fail('error: ' .. tostring(err))
end
write_out()
vim.cmd('qa!')
