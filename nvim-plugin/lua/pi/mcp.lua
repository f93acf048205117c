--- `:Pi mcp`: the workspace's MCP servers (`agent/mcp/list`) in a buffer, one line each with
--- its state, tool count and transport, a failed server's error under it, and the
--- configuration errors at the end. Buffer-local keys enable, disable or reconnect the server
--- under the cursor (`agent/mcp/enable|disable|reconnect`, saved by the server to the file that
--- defines it) and refresh the list; the view also refreshes on the server's MCP notices.
local config = require('pi.config')
local util = require('pi.util')

local api = vim.api
local M = {}

--- root path -> {buf, st, servers, rows = {row -> server name}, timer}
M.views = {}

local ICON = { connected = '✓', failed = '✗', ['needs-auth'] = '✗', connecting = '…', disabled = '○', disconnected = '○', closed = '○' }
local HL = {
  connected = 'PiMcpConnected',
  failed = 'PiMcpFailed',
  ['needs-auth'] = 'PiMcpFailed',
  connecting = 'PiMcpPending',
  disabled = 'PiMcpDisabled',
  disconnected = 'PiMcpDisabled',
  closed = 'PiMcpDisabled',
}

local ns = api.nvim_create_namespace('pi.mcp')

--- The keys' help line (the configured keys).
local function help()
  local km = config.values.keymaps.mcp or {}
  local parts = {}
  for _, k in ipairs({ { 'enable', 'enable' }, { 'disable', 'disable' }, { 'reconnect', 'reconnect' }, { 'refresh', 'refresh' }, { 'close', 'close' } }) do
    if km[k[1]] then
      parts[#parts + 1] = km[k[1]] .. ' ' .. k[2]
    end
  end
  return table.concat(parts, ' · ')
end

--- The view's lines for the list `r` (`{servers, errors}`), and the server of each row.
function M.lines(r)
  local lines, rows, hls = { 'MCP servers — ' .. help(), '' }, {}, {}
  local servers = type(r.servers) == 'table' and r.servers or {}
  if #servers == 0 then
    lines[#lines + 1] = 'No MCP server is configured (mcp.json: :help pi-mcp).'
  end
  local width = 0
  for _, s in ipairs(servers) do
    width = math.max(width, vim.fn.strdisplaywidth(tostring(s.name)))
  end
  for _, s in ipairs(servers) do
    local state = tostring(s.state)
    local n = type(s.toolCount) == 'number' and s.toolCount or 0
    local name = tostring(s.name)
    local line = ('%s %s%s  %-12s %d tool%s · %s · %s'):format(
      ICON[state] or '?',
      name,
      (' '):rep(width - vim.fn.strdisplaywidth(name)),
      state,
      n,
      n == 1 and '' or 's',
      tostring(s.transport or '?'),
      tostring(s.scope or '?')
    )
    lines[#lines + 1] = line
    rows[#lines - 1] = name
    hls[#hls + 1] = { row = #lines - 1, hl = HL[state] or 'Normal', len = #(ICON[state] or '?') }
    if type(s.error) == 'string' and s.error ~= '' then
      for _, e in ipairs(vim.split(vim.trim(s.error), '\n', { plain = true })) do
        lines[#lines + 1] = '    ' .. e
        rows[#lines - 1] = name
        hls[#hls + 1] = { row = #lines - 1, hl = 'PiMcpFailed', len = #lines[#lines] }
      end
    end
  end
  local errors = type(r.errors) == 'table' and r.errors or {}
  if #errors > 0 then
    lines[#lines + 1] = ''
    lines[#lines + 1] = 'Configuration errors:'
    for _, e in ipairs(errors) do
      lines[#lines + 1] = '  ' .. tostring(e)
      hls[#hls + 1] = { row = #lines - 1, hl = 'PiMcpFailed', len = #lines[#lines] }
    end
  end
  return lines, rows, hls
end

local function draw(v, r)
  if not api.nvim_buf_is_valid(v.buf) then
    return
  end
  v.list = r
  local lines, rows, hls = M.lines(r)
  v.rows = rows
  vim.bo[v.buf].modifiable = true
  api.nvim_buf_set_lines(v.buf, 0, -1, false, lines)
  vim.bo[v.buf].modifiable = false
  vim.bo[v.buf].modified = false
  api.nvim_buf_clear_namespace(v.buf, ns, 0, -1)
  pcall(api.nvim_buf_set_extmark, v.buf, ns, 0, 0, { end_col = #lines[1], hl_group = 'Title' })
  for _, h in ipairs(hls) do
    pcall(api.nvim_buf_set_extmark, v.buf, ns, h.row, 0, { end_col = h.len, hl_group = h.hl })
  end
  -- Servers still connecting: read again shortly (the list changes in the background).
  local connecting = false
  for _, s in ipairs(type(r.servers) == 'table' and r.servers or {}) do
    connecting = connecting or s.state == 'connecting'
  end
  if connecting and not v.polling then
    v.polling = true
    vim.defer_fn(function()
      v.polling = false
      if api.nvim_buf_is_valid(v.buf) then
        M.refresh(v.st)
      end
    end, 300)
  end
end

--- Reads the list again into the view of `st` (if one is open).
function M.refresh(st)
  local v = st and M.views[st.root]
  if not v or not api.nvim_buf_is_valid(v.buf) then
    return
  end
  require('pi.client').request(st, 'agent/mcp/list', {}, 'list the MCP servers', function(r)
    draw(v, r)
  end)
end

--- The server under the cursor of the view, or nil (said).
local function server_at(v)
  local row = api.nvim_win_get_cursor(0)[1] - 1
  local name = v.rows and v.rows[row]
  if not name then
    util.notify('put the cursor on a server line')
  end
  return name
end

local WORDS = { enable = 'enable', disable = 'disable', reconnect = 'reconnect' }

--- Sends `agent/mcp/<action> {server}` for the server under the cursor; the answer (the new
--- list) is drawn.
local function act(v, action)
  local name = server_at(v)
  if not name then
    return
  end
  require('pi.client').request(v.st, 'agent/mcp/' .. action, { server = name }, ('%s the MCP server %s'):format(WORDS[action], name), function(r)
    draw(v, r)
    local now
    for _, s in ipairs(r.servers or {}) do
      if s.name == name then
        now = s.state
      end
    end
    util.notify(('MCP server %s: %s'):format(name, tostring(now or 'gone')))
  end)
end

--- Opens (or refreshes) the MCP view of root `st` in a window below the current one.
function M.open(st)
  local v = M.views[st.root]
  if not v or not api.nvim_buf_is_valid(v.buf) then
    local buf = api.nvim_create_buf(false, true)
    api.nvim_buf_set_name(buf, 'pi://mcp/' .. vim.fs.basename(st.root))
    vim.bo[buf].buftype = 'nofile'
    vim.bo[buf].bufhidden = 'hide'
    vim.bo[buf].swapfile = false
    vim.bo[buf].filetype = 'pi-mcp'
    vim.bo[buf].modifiable = false
    v = { buf = buf, st = st }
    M.views[st.root] = v
    require('pi.highlight').groups()
    local km = config.values.keymaps.mcp or {}
    local function map(lhs, fn, desc)
      if lhs then
        vim.keymap.set('n', lhs, fn, { buffer = buf, nowait = true, silent = true, desc = 'Pi: ' .. desc })
      end
    end
    map(km.enable, function()
      act(v, 'enable')
    end, 'enable the MCP server')
    map(km.disable, function()
      act(v, 'disable')
    end, 'disable the MCP server')
    map(km.reconnect, function()
      act(v, 'reconnect')
    end, 'reconnect the MCP server')
    map(km.refresh, function()
      M.refresh(st)
    end, 'read the MCP servers again')
    map(km.close, function()
      local w = vim.fn.bufwinid(buf)
      if w ~= -1 and #api.nvim_tabpage_list_wins(0) > 1 then
        api.nvim_win_close(w, false)
      end
    end, 'close the MCP view')
  end
  local win = vim.fn.bufwinid(v.buf)
  if win == -1 then
    win = api.nvim_open_win(v.buf, true, { split = 'below', win = util.host_win(), height = 10 })
    vim.wo[win].number = false
    vim.wo[win].relativenumber = false
    vim.wo[win].signcolumn = 'no'
    vim.wo[win].wrap = false
  else
    api.nvim_set_current_win(win)
  end
  require('pi.client').request(st, 'agent/mcp/list', {}, 'list the MCP servers', function(r)
    draw(v, r)
    pcall(api.nvim_win_set_cursor, win, { math.min(3, api.nvim_buf_line_count(v.buf)), 0 })
  end)
end

--- A server notice (`window/showMessage` "MCP server …" / "MCP configuration: …"): its first
--- line through `vim.notify` (one screen line: no "Press ENTER" while the user types), the
--- whole error with the server's stderr in `:Pi mcp`, whose open view is read again.
function M.notice(st, message, level)
  local first = vim.split(vim.trim(message), '\n', { plain = true })[1] or ''
  util.notify_line(first .. ' (:Pi mcp)', level)
  if st then
    M.refresh(st)
  end
end

return M
