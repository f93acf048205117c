-- MCP failure notices (issue 28): the server's `window/showMessage` `MCP server "<name>": <error>`
-- (docs/protocol.md, "MCP servers"; sent once per failure) said in one line through
-- vim.notify, and the open `:Pi mcp` view read again with the whole error (the server's
-- stderr tail). Needs a server that sends the notices (the mcp work of this round).
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

local VIEW = [[
  local v = require('pi.mcp').views[require('pi.client').root_of(0)]
  if not v then return vim.NIL end
  return table.concat(vim.api.nvim_buf_get_lines(v.buf, 0, -1, false), '\n')
]]

local NOTES = [[
  _G.notes = {}
  local notify = vim.notify
  vim.notify = function(msg, level, opts)
    table.insert(_G.notes, tostring(msg))
    return notify(msg, level, opts)
  end
]]

-- The server's notice of a failing server (docs/protocol.md, "MCP servers": window/showMessage
-- `MCP server "<name>": <error>`, once per failure) is said in one line with vim.notify.
H.case('a failing MCP server is said once through vim.notify', function()
  local ws = H.workspace()
  local mcp = {
    mcpServers = {
      broken = { command = 'python3', args = { '-c', 'import sys; sys.stderr.write("boom: no database here\\n"); sys.exit(3)' } },
    },
  }
  local c = H.child({ ws = ws, agent_files = { ['mcp.json'] = vim.json.encode(mcp) }, init = NOTES, cols = 80, rows = 24 })
  c:cmd('Pi mcp')
  H.wait('the notice', 15000, function()
    for _, n in ipairs(c:lua('return _G.notes')) do
      if n:find('MCP server "broken"', 1, true) then
        return true
      end
    end
  end)
  vim.wait(1000)
  local notes = vim.tbl_filter(function(n)
    return n:find('broken', 1, true) ~= nil
  end, c:lua('return _G.notes'))
  H.eq(1, #notes, 'one notice: ' .. vim.inspect(notes))
  assert(notes[1]:match('^Pi: MCP server "broken": .* %(:Pi mcp%)$') or notes[1]:match('^Pi: MCP server "broken": .*…$'), notes[1])
  -- The open view was read again: the failure with its stderr.
  H.contains(c:lua(VIEW), 'boom: no database here', 'the whole error in the view')
  c:stop()
end)

H.done()
