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
    h.error(where, { 'Build it with :Pi build (cargo build --release -p pi-lsp in ' .. util.repo_dir() .. ')', 'or set require("pi").setup({cmd = {"/path/to/pi-lsp"}})' })
  else
    local r = vim.system({ cmd[1], '--version' }, { text = true }):wait(5000)
    local version = vim.trim((r.stdout or '') .. '')
    if r.code == 0 and version ~= '' then
      h.ok(('%s (%s) from %s'):format(cmd[1], version, where))
    else
      h.warn(('%s from %s did not answer --version (exit %s): %s'):format(cmd[1], where, tostring(r.code), vim.trim(r.stderr or '')))
    end
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
  if #models > 0 then
    h.ok('models.json: ' .. table.concat(models, ', '))
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
      h.ok(('%s: server agent protocol v%s, %d methods, position encoding %s, sync %s'):format(
        r,
        tostring(agent_caps.version),
        #methods,
        tostring(c.offset_encoding),
        vim.inspect(vim.tbl_get(c.server_capabilities or {}, 'textDocumentSync'))
      ))
      local missing = {}
      for _, m in ipairs({ 'agent/session/history', 'agent/queue/remove', 'agent/session/changes' }) do
        if not vim.tbl_contains(methods, m) then
          missing[#missing + 1] = m
        end
      end
      if #missing > 0 then
        h.info('server lacks ' .. table.concat(missing, ', ') .. ' (older server: history loads whole, queued items can only be cleared)')
      end
    end
  end
  if not any then
    h.info('no server running yet (it starts with the first :Pi command)')
  end
end

return M
