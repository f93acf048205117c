--- `:checkhealth pi`: binary and its version, Neovim version, capabilities negotiated, trust,
--- provider key or models.json.
local M = {}

local KEYS = {
  'ANTHROPIC_API_KEY',
  'ANTHROPIC_OAUTH_TOKEN',
  'OPENAI_API_KEY',
  'DEEPSEEK_API_KEY',
  'GROQ_API_KEY',
  'CEREBRAS_API_KEY',
  'XAI_API_KEY',
  'OPENROUTER_API_KEY',
  'ZAI_API_KEY',
  'MISTRAL_API_KEY',
  'FIREWORKS_API_KEY',
  'HF_TOKEN',
}

--- What confines the commands the agent runs on this OS (docs/platforms.md), as
--- `{ {'ok'|'info'|'warn', text}, … }`.
function M.sandbox_report()
  local util = require('pi.util')
  if util.is_windows() then
    return {
      { 'warn', 'no OS sandbox on Windows: commands the agent runs have your permissions (the first result says so)' },
      { 'info', 'set "sandbox": {"mode": "workspace-write"} in settings.json to be asked before every command instead' },
    }
  end
  if vim.fn.has('mac') == 1 then
    if util.executable('/usr/bin/sandbox-exec') then
      return { { 'ok', 'Seatbelt through /usr/bin/sandbox-exec (settings "sandbox": mode, network)' } }
    end
    return { { 'warn', '/usr/bin/sandbox-exec is missing: commands run unsandboxed' } }
  end
  return { { 'ok', 'Landlock + seccomp where the kernel has them (the first result says when it does not)' } }
end

function M.check()
  local h = vim.health
  local client = require('pi.client')
  local util = require('pi.util')

  h.start('Neovim')
  local v = vim.version()
  local vs = ('%d.%d.%d'):format(v.major, v.minor, v.patch)
  if vim.fn.has('nvim-0.11') == 1 then
    h.ok('Neovim ' .. vs)
  else
    h.error('Neovim ' .. vs .. ': Pi needs 0.11 or later')
  end

  h.start('pi-lsp binary')
  local cmd, where = client.resolve_cmd()
  if not cmd then
    h.error(where, {
      'Build it with :Pi build (cargo build --release -p pi-lsp in ' .. util.repo_dir() .. ')',
      ('or set require("pi").setup({cmd = {%q}})'):format(util.is_windows() and 'C:\\path\\to\\pi-lsp.exe' or '/path/to/pi-lsp'),
    })
  else
    local r = vim.system({ cmd[1], '--version' }, { text = true }):wait(5000)
    local version = vim.trim((r.stdout or '') .. '')
    if r.code == 0 and version ~= '' then
      h.ok(('%s (%s) from %s'):format(cmd[1], version, where))
    else
      h.warn(('%s from %s did not answer --version (exit %s): %s'):format(cmd[1], where, tostring(r.code), vim.trim(r.stderr or '')))
    end
  end

  h.start('Sandbox')
  for _, line in ipairs(M.sandbox_report()) do
    h[line[1]](line[2])
  end

  h.start('Workspace')
  local root = client.root_of(0)
  h.info('root: ' .. root)
  local t = require('pi.config').values.trust
  if t == true or t == false then
    h.info('trust: ' .. tostring(t) .. ' (setup({trust}))')
  else
    h.info('trust: ' .. (client.trusted(root) and 'trusted' or 'not trusted') .. ' (asked once per project that has .pi configuration)')
  end

  h.start('Model')
  local found = {}
  for _, k in ipairs(KEYS) do
    local val = os.getenv(k)
    if val and val ~= '' then
      found[#found + 1] = k
    end
  end
  local agent = os.getenv('PI_CODING_AGENT_DIR')
  if not agent or agent == '' then
    agent = (os.getenv('HOME') or '') .. '/.pi/agent'
  end
  local models = {}
  for _, p in ipairs({ agent .. '/models.json', root .. '/.pi/models.json' }) do
    if vim.uv.fs_stat(p) then
      models[#models + 1] = p
    end
  end
  if #found > 0 then
    h.ok('provider key in the environment: ' .. table.concat(found, ', '))
  end
  for _, path in ipairs(models) do
    -- What the file offers, read as the server reads it (a broken file is said here).
    local f = io.open(path, 'r')
    local ok, data = pcall(vim.json.decode, f and f:read('*a') or '', { luanil = { object = true, array = true } })
    if f then
      f:close()
    end
    if not ok or type(data) ~= 'table' then
      h.error(('models.json %s is not valid JSON: %s'):format(util.short(path), tostring(data)))
    else
      local ids = {}
      for name, prov in pairs(type(data.providers) == 'table' and data.providers or {}) do
        for _, m in ipairs(type(prov) == 'table' and type(prov.models) == 'table' and prov.models or {}) do
          ids[#ids + 1] = name .. '/' .. tostring(type(m) == 'table' and m.id or m)
        end
      end
      table.sort(ids)
      h.ok(('models.json %s: %s'):format(util.short(path), #ids > 0 and table.concat(ids, ', ') or 'no models'))
    end
  end
  for r, st in pairs(client.roots) do
    if st.status and st.status.model then
      h.info(('model in use in %s: %s'):format(util.short(r), st.status.model))
    end
  end
  if #found == 0 and #models == 0 then
    h.warn('no provider key and no models.json: the server runs its offline scripted demo model', { 'export ANTHROPIC_API_KEY=… (or OPENAI_API_KEY, …)', 'or write ' .. agent .. '/models.json' })
  end

  h.start('Capabilities')
  local caps = client.capabilities()
  local adv = {}
  for k, on in pairs(caps.experimental.agent) do
    if on then
      adv[#adv + 1] = k
    end
  end
  table.sort(adv)
  h.info('advertised: documentChanges, resourceOperations, changeAnnotations, workDoneProgress, experimental.agent.{' .. table.concat(adv, ', ') .. '}')
  local any = false
  for r, st in pairs(client.roots) do
    local c = client.client(st)
    if c then
      any = true
      local agent_caps = vim.tbl_get(c.server_capabilities or {}, 'experimental', 'agent') or {}
      local methods = agent_caps.methods or {}
      local sync = vim.tbl_get(c.server_capabilities or {}, 'textDocumentSync')
      local change = type(sync) == 'table' and sync.change or sync
      h.ok(('%s: server agent protocol v%s, %d methods, position encoding %s, %s document sync'):format(
        util.short(r),
        tostring(agent_caps.version),
        #methods,
        tostring(c.offset_encoding),
        change == 2 and 'incremental' or change == 1 and 'full' or 'no'
      ))
      local without = {
        ['agent/session/history'] = 'a session opens with its whole history',
        ['agent/queue/remove'] = 'queued messages can only be cleared together',
        ['agent/session/changes'] = ':Pi changes lists only the changes still marked in buffers',
        ['agent/session/rewind'] = ':Pi rewind is not available',
        ['agent/plan/set'] = ':Pi plan is not available',
        ['agent/mcp/list'] = ':Pi mcp is not available',
        ['agent/continue'] = ':Pi retry is not available',
      }
      for _, m in ipairs({ 'agent/session/history', 'agent/queue/remove', 'agent/session/changes', 'agent/session/rewind', 'agent/plan/set', 'agent/mcp/list', 'agent/continue' }) do
        if not vim.tbl_contains(methods, m) then
          h.info(('this server has no %s: %s (a newer pi-lsp: :Pi build)'):format(m, without[m]))
        end
      end
    end
  end
  if not any then
    h.info('no server running yet (it starts with the first :Pi command)')
  end
end

return M
