-- `:Pi mcp` (issue 28): the workspace's MCP servers with state, tool count and errors, the
-- buffer-local keys disable / enable / reconnect through `agent/mcp/*`, and a failing server's
-- notice said through vim.notify. The servers are real stdio processes: a small MCP server in
-- plain Python (JSON-RPC lines) and one that exits at once with a message on stderr.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
H.require_tools()

local SERVER = [[
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    meth = m["method"]
    if meth == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
             "serverInfo": {"name": "tiny", "version": "1"}}
    elif meth == "tools/list":
        t = {"type": "object", "properties": {"text": {"type": "string"}}}
        r = {"tools": [{"name": "echo", "description": "Echo", "inputSchema": t},
                       {"name": "shout", "description": "Shout", "inputSchema": t}]}
    elif meth == "tools/call":
        r = {"content": [{"type": "text", "text": m["params"]["arguments"].get("text", "")}]}
    else:
        r = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}) + "\n")
    sys.stdout.flush()
]]

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

H.case(':Pi mcp shows the servers; d / e / r act on the one under the cursor', function()
  local ws = H.workspace()
  local dir = H.tmpdir('mcp')
  H.write(dir .. '/tiny.py', SERVER)
  local mcp = {
    mcpServers = {
      tiny = { command = 'python3', args = { dir .. '/tiny.py' }, exposure = 'direct' },
      broken = { command = 'python3', args = { '-c', 'import sys; sys.stderr.write("boom: no database here\\n"); sys.exit(3)' } },
    },
  }
  local c = H.child({ ws = ws, agent_files = { ['mcp.json'] = vim.json.encode(mcp) }, init = NOTES, cols = 80, rows = 24 })
  c:cmd('Pi mcp')
  H.wait('both servers settled', 15000, function()
    local t = c:lua(VIEW)
    return t ~= vim.NIL and t:find('✓ tiny', 1, true) and t:find('✗ broken', 1, true)
  end)
  local lines = vim.split(c:lua(VIEW), '\n', { plain = true })
  H.eq('MCP servers — e enable · d disable · r reconnect · R refresh · q close', lines[1], 'the keys')
  local tiny, broken
  for i, l in ipairs(lines) do
    if l:match('^%S+ tiny ') then
      tiny = i
    elseif l:match('^%S+ broken ') then
      broken = i
    end
  end
  H.eq('✓ tiny    connected    2 tools · stdio · global', lines[tiny], 'the connected server')
  H.eq('✗ broken  failed       0 tools · stdio · global', lines[broken], 'the failed server')
  assert(lines[broken + 1]:match('^    %S'), 'the failed server\'s error under it: ' .. tostring(lines[broken + 1]))
  -- The view is focused at 80×24 and shows both lines.
  H.eq('pi-mcp', c:lua('return vim.bo.filetype'), 'the view is focused')
  local screen = c:screen_text()
  H.contains(screen, '✓ tiny    connected    2 tools · stdio · global', 'on the screen')
  -- d on tiny: disabled, saved to the agent dir's mcp.json.
  c:input(tiny .. 'G')
  c:input('d')
  H.wait('tiny disabled', 10000, function()
    return c:lua(VIEW):find('○ tiny    disabled', 1, true) ~= nil
  end)
  local saved = vim.json.decode(H.read(c.home .. '/agent/mcp.json'))
  H.eq(false, saved.mcpServers.tiny.enabled, 'saved to the file that defines it')
  -- e: enabled and connected again.
  c:input('e')
  H.wait('tiny connected again', 10000, function()
    return c:lua(VIEW):find('✓ tiny    connected    2 tools', 1, true) ~= nil
  end)
  -- r on broken: it fails again (said in the view).
  c:input(broken .. 'G')
  c:input('r')
  H.wait('the reconnect answered', 10000, function()
    for _, n in ipairs(c:lua('return _G.notes')) do
      if n:find('MCP server broken: failed', 1, true) then
        return true
      end
    end
  end)
  H.contains(c:lua(VIEW), '✗ broken  failed', 'still failed')
  -- The keys are the view's own: the chat and other buffers keep theirs.
  c:input('<C-w>p')
  H.eq('', c:lua('return vim.fn.maparg("d", "n")'), 'no d mapping outside the view')
  c:stop()
end)

H.done()
