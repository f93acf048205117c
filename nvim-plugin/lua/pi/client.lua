--- The transport: finds the server binary, starts one `vim.lsp.start` client per workspace
--- root, attaches every file buffer under the root, asks workspace trust, and sends requests
--- (`M.request`). What the server sends is routed to the UI by `pi.dispatch`.
local config = require('pi.config')
local util = require('pi.util')

local api = vim.api
local M = {}

--- root path -> root state {root, client_id, session_id, status = {...}}
M.roots = {}

local NAME = 'pi-lsp'

--- The server command: `config.cmd`, else `pi-lsp` on `$PATH`, else the repository build.
--- Returns `cmd, where` or `nil, why`.
function M.resolve_cmd()
  local cmd = config.values.cmd
  if cmd then
    if type(cmd) == 'string' then
      cmd = { cmd }
    end
    if util.executable(cmd[1]) then
      return cmd, 'setup({cmd})'
    end
    return nil, ('setup({cmd}): %q is not an executable (:help pi-config)'):format(cmd[1])
  end
  local path = vim.fn.exepath(util.server_name())
  if path ~= '' then
    return { path }, '$PATH'
  end
  local built = util.built_server()
  if util.executable(built) then
    return { built }, 'the plugin repository build'
  end
  return nil,
    ('%s is not built: run :Pi build (it is not on $PATH nor in %s)'):format(
      util.server_name(),
      util.short(util.join(util.repo_dir(), 'target', 'release'))
    )
end

--- Capabilities the plugin implements (advertised in `initialize`).
function M.capabilities()
  local caps = vim.lsp.protocol.make_client_capabilities()
  caps.workspace = caps.workspace or {}
  caps.workspace.workspaceEdit = vim.tbl_deep_extend('force', caps.workspace.workspaceEdit or {}, {
    documentChanges = true,
    resourceOperations = { 'create', 'rename', 'delete' },
    failureHandling = 'abort',
    changeAnnotationSupport = { groupsOnLabel = true },
  })
  caps.window = caps.window or {}
  caps.window.workDoneProgress = true
  caps.general = caps.general or {}
  caps.general.positionEncodings = { 'utf-8', 'utf-16' }
  caps.experimental = caps.experimental or {}
  caps.experimental.agent = {
    requestPermission = true,
    saveDocument = true,
    ui = true,
    diagnostics = true,
    syncsAllDocuments = true,
    saveUserChanges = config.values.save_user_changes,
  }
  return caps
end

--- The workspace root of `buf` (or of the current folder).
function M.root_of(buf)
  buf = buf or 0
  local name = api.nvim_buf_get_name(buf)
  local bt = vim.bo[buf].buftype
  local found
  if name ~= '' and bt == '' and not name:match('^%a+://') then
    found = vim.fs.root(buf, config.values.root_markers)
  end
  if not found and vim.b[buf].pi_root then
    return vim.b[buf].pi_root
  end
  found = found or vim.fs.root(vim.fn.getcwd(), config.values.root_markers) or vim.fn.getcwd()
  return vim.fs.normalize(found)
end

------------------------------------------------------------------------------------------
-- Trust

local function trust_file()
  return vim.fn.stdpath('state') .. '/pi/trust.json'
end

local function read_trust()
  local f = io.open(trust_file(), 'r')
  if not f then
    return {}
  end
  local ok, t = pcall(vim.json.decode, f:read('*a'))
  f:close()
  return ok and type(t) == 'table' and t or {}
end

local function write_trust(t)
  vim.fn.mkdir(vim.fn.fnamemodify(trust_file(), ':h'), 'p')
  local f = io.open(trust_file(), 'w')
  if f then
    f:write(vim.json.encode(t))
    f:close()
  end
end

local PROJECT_FILES = {
  '.pi/settings.json',
  '.pi/models.json',
  '.pi/prompts',
  '.pi/skills',
  '.pi/SYSTEM.md',
  '.pi/APPEND_SYSTEM.md',
  '.agents/skills',
}

--- Whether `root`'s own configuration may load; asks once when it has some and trust is "ask".
--- Calls `done(trusted)`.
function M.trust(root, done)
  local t = config.values.trust
  if t == true or t == false then
    return done(t)
  end
  local has = false
  for _, p in ipairs(PROJECT_FILES) do
    if vim.uv.fs_stat(root .. '/' .. p) then
      has = true
      break
    end
  end
  if not has then
    return done(false)
  end
  local saved = read_trust()
  if saved[root] ~= nil then
    return done(saved[root] == true)
  end
  util.select({ 'Trust it', 'Do not trust it' }, {
    prompt = 'Pi: load this project’s .pi configuration (settings, models, prompts, skills)? ' .. root,
  }, function(choice)
    local ok = choice == 'Trust it'
    if choice then
      saved[root] = ok
      write_trust(saved)
    end
    done(ok)
  end)
end

--- Records a trust decision for `root` (used by `:checkhealth pi` and tests).
function M.trusted(root)
  local t = config.values.trust
  if t == true or t == false then
    return t
  end
  return read_trust()[root] == true
end

------------------------------------------------------------------------------------------
-- Requests

--- The client of `root`, if running.
function M.client(root)
  return root and root.client_id and vim.lsp.get_client_by_id(root.client_id) or nil
end

--- Whether the server lists `method` in `experimental.agent.methods`.
function M.has_method(root, method)
  local c = M.client(root)
  local methods = c and vim.tbl_get(c.server_capabilities or {}, 'experimental', 'agent', 'methods')
  if type(methods) ~= 'table' then
    return false
  end
  return vim.tbl_contains(methods, method)
end

--- Sends the buffers' pending `didChange` now (before an answer the server acts on: a
--- permission is checked against the buffer as the user left it). Uses Neovim's own change
--- tracking; a no-op when it is not there.
function M.flush_changes(root)
  local c = M.client(root)
  if not c then
    return
  end
  local ok, ct = pcall(require, 'vim.lsp._changetracking')
  if ok and type(ct.flush) == 'function' then
    pcall(ct.flush, c)
  end
end

--- Sends `method` with a callback; an error is said with `vim.notify` in the user's words
--- ("could not <what>: ...") unless `on_err` handles it (returning true).
--- @param root table
--- @param method string
--- @param params table|nil
--- @param what string what the request does, for the error message
--- @param on_ok fun(result: any)|nil
--- @param on_err fun(err: table): boolean|nil
function M.request(root, method, params, what, on_ok, on_err)
  local c = M.client(root)
  if not c then
    util.notify(('could not %s: the Pi server is not running'):format(what), vim.log.levels.ERROR)
    if on_err then
      on_err({ code = -1, message = 'not running' })
    end
    return
  end
  local ok = c:request(method, util.obj(params), function(err, result)
    if err then
      if not (on_err and on_err(err)) then
        util.notify(util.error_text(what, err), vim.log.levels.ERROR)
      end
      return
    end
    if on_ok then
      -- A failure in the plugin's own handling is said in one line, never a stack trace
      -- that stops the editor at a "Press ENTER" prompt.
      local ok2, e = pcall(on_ok, result)
      if not ok2 then
        util.notify_line(('could not %s: %s'):format(what, tostring(e)), vim.log.levels.ERROR)
      end
    end
  end)
  if not ok then
    util.notify(('could not %s: the Pi server has stopped'):format(what), vim.log.levels.ERROR)
    if on_err then
      on_err({ code = -1, message = 'stopped' })
    end
  end
end

------------------------------------------------------------------------------------------
-- Buffers

local function under(root, name)
  return name:sub(1, #root + 1) == root .. '/'
end

--- Attaches `buf` to the client of the root it lies under (every file buffer is synced).
function M.attach(buf)
  if not api.nvim_buf_is_valid(buf) or not api.nvim_buf_is_loaded(buf) then
    return
  end
  if vim.bo[buf].buftype ~= '' then
    return
  end
  local name = api.nvim_buf_get_name(buf)
  if name == '' or name:match('^%a[%w+.-]*://') then
    return
  end
  name = vim.fs.normalize(vim.fn.fnamemodify(name, ':p'))
  for root, st in pairs(M.roots) do
    if st.client_id and under(root, name) and not vim.lsp.buf_is_attached(buf, st.client_id) then
      vim.lsp.buf_attach_client(buf, st.client_id)
    end
  end
end

local augroup
local function ensure_autocmds()
  if augroup then
    return
  end
  augroup = api.nvim_create_augroup('pi.attach', { clear = true })
  api.nvim_create_autocmd({ 'BufReadPost', 'BufNewFile', 'BufEnter', 'BufFilePost' }, {
    group = augroup,
    callback = function(a)
      M.attach(a.buf)
    end,
  })
  api.nvim_create_autocmd('LspProgress', {
    group = augroup,
    callback = function()
      require('pi.status').changed()
    end,
  })
end

------------------------------------------------------------------------------------------
-- Start

local function init_options(trusted)
  -- compactDeltas: streamed deltas as `agent/delta` (expanded in pi.delta), ~3x fewer bytes.
  local o = { workspaceTrusted = trusted, compactDeltas = true }
  if config.values.model then
    o.model = config.values.model
  end
  if config.values.approval_policy then
    o.approvalPolicy = config.values.approval_policy
  end
  return o
end

--- The state of `root`, starting its server when needed; `done(st)` is called once the
--- client is initialized (never when it cannot start: that is said once).
--- @param root string
--- @param done fun(st: table)|nil
function M.ensure(root, done)
  local st = M.roots[root]
  if st and st.client_id and vim.lsp.get_client_by_id(st.client_id) then
    local c = vim.lsp.get_client_by_id(st.client_id)
    if c and c.initialized then
      if done then
        done(st)
      end
    else
      st.waiting = st.waiting or {}
      st.waiting[#st.waiting + 1] = done
    end
    return st
  end
  local cmd, why = M.resolve_cmd()
  if not cmd then
    util.notify_once(
      'missing-binary',
      why,
      vim.log.levels.ERROR
    )
    return nil
  end
  st = st or { root = root, status = { state = 'starting', ext = {} } }
  M.roots[root] = st
  st.waiting = st.waiting or {}
  st.waiting[#st.waiting + 1] = done
  if st.starting then
    return st
  end
  st.starting = true
  M.trust(root, function(trusted)
    st.trusted = trusted
    ensure_autocmds()
    local id = vim.lsp.start({
      name = NAME,
      cmd = cmd,
      cmd_env = config.values.cmd_env,
      root_dir = root,
      workspace_folders = { { uri = vim.uri_from_fname(root), name = vim.fs.basename(root) } },
      capabilities = M.capabilities(),
      init_options = init_options(trusted),
      handlers = require('pi.dispatch').handlers,
      flags = { debounce_text_changes = config.values.debounce_text_changes },
      on_init = function(client)
        st.starting = false
        st.status.state = 'idle'
        for _, b in ipairs(api.nvim_list_bufs()) do
          M.attach(b)
        end
        local waiting = st.waiting or {}
        st.waiting = {}
        for _, fn in ipairs(waiting) do
          if fn then
            fn(st)
          end
        end
        require('pi.status').changed()
        return client
      end,
      on_exit = function(code, signal)
        if st.client_id then
          require('pi.delta').forget(st.client_id)
        end
        st.client_id = nil
        st.starting = false
        st.status.state = 'stopped'
        require('pi.status').changed()
        signal = signal or 0
        local how = signal ~= 0 and ('signal ' .. signal) or ('exit code ' .. code)
        -- Neovim itself says when a client quits with an error or a signal other than TERM.
        local crashed = code == 0 and signal == 15 and not st.stopping
        require('pi.dispatch').server_stopped(st, how, crashed)
      end,
    }, { attach = false, reuse_client = function(c, conf)
      return c.name == NAME and conf.root_dir == root and c.root_dir == root
    end })
    if not id then
      st.starting = false
      util.notify('could not start ' .. table.concat(cmd, ' '), vim.log.levels.ERROR)
      return
    end
    st.client_id = id
  end)
  return st
end

--- Stops every client (used by tests and `:Pi` restart paths).
function M.stop_all()
  for _, st in pairs(M.roots) do
    st.stopping = true
    if st.client_id then
      vim.lsp.stop_client(st.client_id)
    end
  end
end

--- The command `:Pi build` runs (in the plugin's repository).
function M.build_command()
  return { 'cargo', 'build', '--release', '-p', 'pi-lsp' }
end

--- Runs the build (`vim.system`; specs replace it).
M.build_runner = function(cmd, opts, on_exit)
  return vim.system(cmd, opts, on_exit)
end

--- `:Pi build`: builds the server in the plugin's repository, reporting the outcome.
function M.build()
  local repo = util.repo_dir()
  if M.building then
    return util.notify('pi-lsp is already being built')
  end
  if not util.executable('cargo') then
    util.notify('cargo is not installed; install Rust (https://rustup.rs) and run :Pi build again', vim.log.levels.ERROR)
    return
  end
  util.notify(('building pi-lsp in %s (cargo build --release; minutes the first time)…'):format(util.short(repo)))
  M.building = true
  M.build_runner(M.build_command(), { cwd = repo, text = true }, function(r)
    vim.schedule(function()
      M.building = false
      if r.code == 0 then
        util.notify('pi-lsp is built (' .. util.short(util.built_server()) .. '); :Pi {text} starts it')
      else
        local tail = vim.split(vim.trim(r.stderr or ''), '\n')
        util.notify(('the build failed (exit %d):\n'):format(r.code) .. table.concat({ unpack(tail, math.max(1, #tail - 8)) }, '\n'), vim.log.levels.ERROR)
      end
    end)
  end)
end

return M
