--- The statusline segment: `model · ctx% · $cost · state` (plus `!` when Pi needs you and
--- extension statuses), for lualine / heirline / 'statusline'.
local M = {}

local function root_state()
  local client = require('pi.client')
  local ok, root = pcall(client.root_of, 0)
  local st = ok and client.roots[root] or nil
  if not st then
    local _, any = next(client.roots)
    st = any
  end
  return st
end

--- Redraws statuslines (scheduled, at most once per event-loop turn).
function M.changed()
  if M.pending then
    return
  end
  M.pending = true
  vim.schedule(function()
    M.pending = false
    vim.cmd('redrawstatus!')
  end)
end

--- The segment's text ("" when no server runs for this buffer's workspace).
function M.line()
  local st = root_state()
  if not st then
    return ''
  end
  local s = st.status
  local parts = {}
  if s.model then
    parts[#parts + 1] = s.model .. ((s.thinking and s.thinking ~= 'off') and (' (' .. s.thinking .. ')') or '')
  end
  local u = s.usage
  if u and u.contextWindow and u.contextWindow > 0 and u.contextTokens then
    parts[#parts + 1] = ('%d%%'):format(math.floor(u.contextTokens * 100 / u.contextWindow + 0.5))
  end
  local cost = u and u.session and u.session.cost
  if type(cost) == 'table' then
    cost = cost.total
  end
  if type(cost) == 'number' then
    parts[#parts + 1] = ('$%.3f'):format(cost)
  end
  parts[#parts + 1] = s.state or 'idle'
  local text = table.concat(parts, ' · ')
  if s.attention == 'permission' or s.attention == 'question' then
    text = text .. ' !'
  end
  for _, v in pairs(s.ext or {}) do
    text = text .. ' · ' .. v
  end
  return text
end

return M
