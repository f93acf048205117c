-- Test helpers for the plugin's specs (run by test/run with `nvim --headless -u NONE -l`).
-- A spec drives a child `nvim --embed` over msgpack-RPC on pipes, with a UI attached
-- (`nvim_ui_attach`, ext_linegrid) so the screen grid can be asserted, against the real
-- pi-lsp binary ($PI_LSP_BIN) and the loopback model (the `mock-model` binary, H.mock).
local uv = vim.uv
local H = {}

H.plugin_dir = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h:h')
H.nvim = os.getenv('NVIM_BIN') ~= '' and os.getenv('NVIM_BIN') or vim.v.progpath
H.bin = os.getenv('PI_LSP_BIN') or ''

-- Every wait of the specs ends at its deadline. Neovim's wait loop (LOOP_PROCESS_EVENTS_UNTIL)
-- takes the elapsed time off a `vim.wait` timeout in whole milliseconds per event, so while
-- the child's messages come faster than one a millisecond nothing is taken off; a condition
-- that asks the child (its answer is the next event) kept that going for minutes, and a spec
-- file could pass its time limit on a fast machine. Here the condition ends the wait at the
-- deadline read from the monotonic clock; returns whether `cond` was met (the plugin's
-- `pi.util.wait` does the same for its own wait).
local raw_wait = vim.wait
vim.wait = function(ms, cond, interval, fast_only)
  local deadline = uv.hrtime() + ms * 1e6
  local met = false
  raw_wait(ms, function()
    if cond and cond() then
      met = true
      return true
    end
    return uv.hrtime() >= deadline
  end, interval, fast_only)
  return met
end

local failures, passed = {}, 0
local current = '?'

--- A fresh temporary folder.
function H.tmpdir(name)
  local d = vim.fn.tempname() .. '-' .. name
  vim.fn.mkdir(d, 'p')
  return vim.fs.normalize(vim.uv.fs_realpath(d) or d)
end

function H.write(path, text)
  vim.fn.mkdir(vim.fn.fnamemodify(path, ':h'), 'p')
  local f = assert(io.open(path, 'w'))
  f:write(text)
  f:close()
end

function H.read(path)
  local f = io.open(path, 'r')
  if not f then
    return nil
  end
  local s = f:read('*a')
  f:close()
  return s
end

------------------------------------------------------------------------------------------
-- The loopback model

--- The `mock-model` binary (tests/bin/mock_model.rs, the one loopback model of every suite):
--- $PI_MOCK_MODEL_BIN (test/run sets it), else found or built by tests/mock-model-path.
local mock_bin
local function mock_model_bin()
  if mock_bin then
    return mock_bin
  end
  local env = os.getenv('PI_MOCK_MODEL_BIN')
  if env and env ~= '' then
    assert(vim.fn.executable(env) == 1, 'PI_MOCK_MODEL_BIN=' .. env .. ' is not an executable')
    mock_bin = env
    return env
  end
  local out = vim.fn.system({ H.plugin_dir .. '/../tests/mock-model-path' })
  assert(vim.v.shell_error == 0, 'no mock-model binary: ' .. out)
  mock_bin = vim.trim(out)
  return mock_bin
end

--- Starts the mock model answering requests in order with `steps` (each
--- {thinking?, text?, toolCalls? = {{id?, name, arguments?}}, chunk?, chunkDelayMs?, delayMs?,
--- status?, error?, …}: the steps of tests/support/mock_script.rs); `extra` adds other keys of
--- the script (rules, default, usage). Returns {port, models_json, log, requests(), stop()}.
function H.mock(steps, extra)
  local dir = H.tmpdir('mock')
  local script = dir .. '/script.json'
  local s = vim.tbl_extend('force', { usage = { input = 1000, output = 20 }, responseModel = 'mock-1' }, extra or {})
  if #steps > 0 then
    s.steps = steps
  end
  H.write(script, vim.json.encode(s))
  local log = dir .. '/requests.jsonl'
  local port
  local err = {}
  local job = vim.fn.jobstart({ mock_model_bin(), script, log }, {
    on_stdout = function(_, data)
      if not port and data[1] and data[1]:match('^%d+$') then
        port = tonumber(data[1])
      end
    end,
    on_stderr = function(_, data)
      vim.list_extend(err, data)
    end,
  })
  assert(job > 0, 'could not start ' .. mock_model_bin())
  assert(vim.wait(5000, function()
    return port ~= nil
  end, 10), 'mock model did not start: ' .. table.concat(err, '\n'))
  local m = { port = port, log = log, job = job }
  m.models_json = {
    providers = {
      mock = {
        baseUrl = ('http://127.0.0.1:%d/v1'):format(port),
        api = 'openai-completions',
        apiKey = 'test-key',
        compat = { supportsDeveloperRole = false },
        models = { { id = 'mock-1', contextWindow = 128000, maxTokens = 4096 } },
      },
    },
  }
  function m.requests()
    local out = {}
    for line in (H.read(log) or ''):gmatch('[^\n]+') do
      out[#out + 1] = vim.json.decode(line)
    end
    return out
  end
  function m.stop()
    vim.fn.jobstop(job)
  end
  return m
end

------------------------------------------------------------------------------------------
-- The child Neovim over msgpack-RPC

local Child = {}
Child.__index = Child

--- Starts a child Neovim with the plugin on 'runtimepath', `setup_lua` run after it, the
--- workspace `ws` as its current folder and `models_json` as the agent's models.json.
--- opts: {ws, models_json?, agent_files? ({name = text} in the agent dir), setup = "lua code",
--- init = "lua code"?, path_prepend?, cols?, rows?}
function H.child(opts)
  local home = H.tmpdir('home')
  local agent = home .. '/agent'
  vim.fn.mkdir(agent, 'p')
  if opts.models_json then
    H.write(agent .. '/models.json', vim.json.encode(opts.models_json))
  end
  for name, text in pairs(opts.agent_files or {}) do
    H.write(agent .. '/' .. name, text)
  end
  local init = home .. '/init.lua'
  H.write(
    init,
    table.concat({
      'vim.opt.runtimepath:prepend(' .. vim.inspect(H.plugin_dir) .. ')',
      'vim.opt.shortmess:append("I")',
      -- No Python/Ruby/Perl/Node providers: `has('python3')` (python's ftplugin) would start
      -- an interpreter to probe for pynvim, seconds on a loaded machine.
      'vim.g.loaded_python3_provider = 0; vim.g.loaded_ruby_provider = 0; vim.g.loaded_perl_provider = 0; vim.g.loaded_node_provider = 0',
      'vim.cmd("runtime plugin/pi.lua")',
      'require("pi").setup(vim.tbl_deep_extend("force", {cmd = {' .. vim.inspect(H.bin) .. '}, trust = false}, ' .. (opts.setup or '{}') .. '))',
      opts.init or '',
    }, '\n')
  )
  local env = {
    'HOME=' .. home,
    'PATH=' .. (opts.path_prepend and (opts.path_prepend .. ':') or '') .. (os.getenv('PATH') or ''),
    'XDG_CONFIG_HOME=' .. home .. '/config',
    'XDG_DATA_HOME=' .. home .. '/data',
    'XDG_STATE_HOME=' .. home .. '/state',
    'XDG_CACHE_HOME=' .. home .. '/cache',
    'PI_CODING_AGENT_DIR=' .. agent,
    'ANTHROPIC_API_KEY=',
    'OPENAI_API_KEY=',
    'PI_LSP_LOG=warn',
    'LANG=C.UTF-8',
  }
  local stdin, stdout, stderr = uv.new_pipe(), uv.new_pipe(), uv.new_pipe()
  local c = setmetatable({ next_id = 1, responses = {}, buf = '', screen = nil, errors = {}, home = home, ws = opts.ws }, Child)
  c.handle = uv.spawn(H.nvim, {
    args = { '--embed', '-u', init, '-i', 'NONE', '-n' },
    stdio = { stdin, stdout, stderr },
    env = env,
    cwd = opts.ws,
  }, function(code)
    c.exited = code
  end)
  assert(c.handle, 'could not start the child nvim')
  c.stdin, c.stdout = stdin, stdout
  c.unpacker = vim.mpack.Unpacker()
  stdout:read_start(function(err, data)
    if err or not data then
      return
    end
    -- The unpacker keeps a partial message itself: each chunk is fed exactly once.
    local pos = 1
    while pos <= #data do
      local ok, obj, npos = pcall(c.unpacker, data, pos)
      if not ok then
        c.errors[#c.errors + 1] = 'msgpack: ' .. tostring(obj)
        break
      end
      pos = npos
      if obj == nil then
        break
      end
      c:on_message(obj)
    end
  end)
  stderr:read_start(function(_, data)
    if data then
      c.errors[#c.errors + 1] = data
    end
  end)
  c:ui_attach(opts.cols or 100, opts.rows or 30)
  return c
end

function Child:on_message(m)
  if m[1] == 1 then
    self.responses[m[2]] = { err = m[3], result = m[4] }
  elseif m[1] == 2 and m[2] == 'redraw' then
    self:on_redraw(m[3])
  end
end

function Child:send(msg)
  self.stdin:write(vim.mpack.encode(msg))
end

--- A blocking request to the child (the test's loop keeps running meanwhile).
function Child:request(method, ...)
  local id = self.next_id
  self.next_id = id + 1
  self:send({ 0, id, method, { ... } })
  local ok = vim.wait(20000, function()
    return self.responses[id] ~= nil or self.exited ~= nil
  end, 2)
  local r = self.responses[id]
  self.responses[id] = nil
  if not ok or not r then
    error(('child request %s: no answer (exited: %s) %s\nscreen:\n%s'):format(method, tostring(self.exited), table.concat(self.errors), table.concat(self:screen(), '\n')), 2)
  end
  if r.err ~= nil and r.err ~= vim.NIL then
    error(('child request %s failed: %s'):format(method, vim.inspect(r.err)), 2)
  end
  return r.result
end

--- Runs Lua `code` in the child with `...` as its arguments; returns its value.
function Child:lua(code, ...)
  return self:request('nvim_exec_lua', code, { ... })
end

function Child:cmd(c)
  return self:request('nvim_command', c)
end

--- Types keys as a user would (`nvim_input`).
function Child:input(keys)
  return self:request('nvim_input', keys)
end

--- Waits until `fn()` (test side) is true; fails the case with `what` after `ms`.
function H.wait(what, ms, fn)
  local last_err
  -- `fn` asks the child at most every 10 ms (every event of the loop calls the condition:
  -- asking at each, the child's answer being the next event, spins both processes).
  local next_at = 0
  local ok = vim.wait(ms, function()
    local now = uv.hrtime()
    if now < next_at then
      return false
    end
    next_at = now + 10e6
    local okc, v = pcall(fn)
    if not okc then
      last_err = v
      return false
    end
    return v
  end, 10)
  if not ok then
    error('timed out after ' .. ms .. ' ms waiting for ' .. what .. (last_err and (' (' .. tostring(last_err) .. ')') or ''), 2)
  end
end

function Child:stop()
  pcall(function()
    self:send({ 2, 'nvim_command', { 'qa!' } })
  end)
  vim.wait(3000, function()
    return self.exited ~= nil
  end, 10)
  if not self.exited then
    pcall(self.handle.kill, self.handle, 'sigkill')
  end
end

------------------------------------------------------------------------------------------
-- Screen (ext_linegrid, grid 1)

function Child:ui_attach(cols, rows)
  self.cols, self.rows = cols, rows
  self.grid = {}
  self:request('nvim_ui_attach', cols, rows, { ext_linegrid = true, rgb = true })
end

function Child:on_redraw(batch)
  for _, ev in ipairs(batch) do
    local name = ev[1]
    for i = 2, #ev do
      local a = ev[i]
      if name == 'grid_resize' then
        self.cols, self.rows = a[2], a[3]
        self.grid = {}
        for r = 0, self.rows - 1 do
          local row = {}
          for col = 0, self.cols - 1 do
            row[col] = ' '
          end
          self.grid[r] = row
        end
      elseif name == 'grid_clear' then
        for r = 0, self.rows - 1 do
          for col = 0, self.cols - 1 do
            self.grid[r][col] = ' '
          end
        end
      elseif name == 'grid_line' then
        local row, col = a[2], a[3]
        local line = self.grid[row]
        if line then
          for _, cell in ipairs(a[4]) do
            local text, rep = cell[1], cell[3] or 1
            for _ = 1, rep do
              line[col] = text
              col = col + 1
            end
          end
        end
      elseif name == 'grid_scroll' then
        local top, bot, left, right, rows = a[2], a[3], a[4], a[5], a[6]
        if rows > 0 then
          for r = top, bot - rows - 1 do
            for col = left, right - 1 do
              self.grid[r][col] = self.grid[r + rows][col]
            end
          end
        else
          for r = bot - 1, top - rows, -1 do
            for col = left, right - 1 do
              self.grid[r][col] = self.grid[r + rows][col]
            end
          end
        end
      elseif name == 'flush' then
        self.flushes = (self.flushes or 0) + 1
      end
    end
  end
end

--- The screen as text lines (trailing spaces kept out).
function Child:screen()
  local out = {}
  for r = 0, (self.rows or 0) - 1 do
    local row = self.grid[r] or {}
    local cells = {}
    for col = 0, self.cols - 1 do
      cells[#cells + 1] = row[col] or ' '
    end
    out[#out + 1] = (table.concat(cells):gsub('%s+$', ''))
  end
  return out
end

function Child:screen_text()
  self:request('nvim_command', 'redraw')
  vim.wait(50, function()
    return false
  end)
  return table.concat(self:screen(), '\n')
end

------------------------------------------------------------------------------------------
-- Cases

--- Compares whole values; fails with both shown.
function H.eq(expected, actual, what)
  if not vim.deep_equal(expected, actual) then
    error(('%s:\nexpected: %s\nactual:   %s'):format(what or 'values differ', vim.inspect(expected), vim.inspect(actual)), 2)
  end
end

function H.contains(haystack, needle, what)
  if not tostring(haystack):find(needle, 1, true) then
    error(('%s: %q not found in:\n%s'):format(what or 'text missing', needle, tostring(haystack)), 2)
  end
end

--- Runs one case; a failure is recorded with its traceback and the run goes on.
function H.case(name, fn)
  -- PI_SPEC_ONLY=<text>: run only the cases whose name holds it (while working on one).
  local only = os.getenv('PI_SPEC_ONLY')
  if only and only ~= '' and not name:find(only, 1, true) then
    return
  end
  current = name
  local t0 = uv.hrtime()
  local ok, err = xpcall(fn, debug.traceback)
  local ms = (uv.hrtime() - t0) / 1e6
  if ok then
    passed = passed + 1
    io.stdout:write(('ok   %s (%.0f ms)\n'):format(name, ms))
  else
    failures[#failures + 1] = name
    io.stdout:write(('FAIL %s (%.0f ms)\n%s\n'):format(name, ms, tostring(err)))
  end
  io.stdout:flush()
end

--- Ends the spec: exit code 1 when a case failed.
function H.done()
  io.stdout:write(('%d passed, %d failed%s\n'):format(passed, #failures, #failures > 0 and (': ' .. table.concat(failures, ', ')) or ''))
  io.stdout:flush()
  vim.cmd(#failures > 0 and 'cquit 1' or 'qa!')
end

--- Requires the tools; under CI a missing one fails.
function H.require_tools()
  if H.bin == '' or vim.fn.executable(H.bin) ~= 1 then
    io.stdout:write('FAIL: PI_LSP_BIN is not set to an executable pi-lsp\n')
    vim.cmd('cquit 1')
  end
end

-- Lua run in the child: chat buffer text of the current session, state, etc.
H.CHAT_TEXT = [[
  local client = require('pi.client')
  local st = client.roots[client.root_of(0)]
  local chat = st and require('pi.chat').current(st)
  if not chat then return vim.NIL end
  return table.concat(vim.api.nvim_buf_get_lines(chat.buf, 0, -1, false), '\n')
]]

H.CHAT_STATE = [[
  local client = require('pi.client')
  local st = client.roots[client.root_of(0)]
  local chat = st and require('pi.chat').current(st)
  if not chat then return vim.NIL end
  return { state = chat.state or vim.NIL, running = chat.running, session = chat.session_id }
]]

--- A workspace folder (a `.git` marks its root) holding `files` ({name = text}).
function H.workspace(files)
  local ws = H.tmpdir('ws')
  vim.fn.mkdir(ws .. '/.git', 'p')
  for name, text in pairs(files or {}) do
    H.write(ws .. '/' .. name, text)
  end
  return ws
end

--- Waits (15 s) until the child's chat is idle and its text holds `text`.
function H.idle_with(c, text)
  H.wait('the run to end with ' .. text, 15000, function()
    local s = c:lua(H.CHAT_STATE)
    return s ~= vim.NIL and s.state == 'idle' and c:lua(H.CHAT_TEXT):find(text, 1, true)
  end)
end

return H
