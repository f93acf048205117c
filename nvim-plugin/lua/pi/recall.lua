--- Earlier prompts of a workspace, recalled in the prompt buffer with <Up> / <Down> (on its
--- first / last line, so moving inside a multi-line prompt keeps working). Kept per workspace
--- root in `stdpath('state')/pi/prompts/<root hash>.json`, newest last, at most 200.
local api = vim.api
local M = {}

local MAX = 200

local function file_of(root)
  return vim.fn.stdpath('state') .. '/pi/prompts/' .. vim.fn.sha256(root):sub(1, 16) .. '.json'
end

--- The prompts sent in workspace `root`, oldest first.
function M.list(root)
  local f = io.open(file_of(root), 'r')
  if not f then
    return {}
  end
  local ok, v = pcall(vim.json.decode, f:read('*a'))
  f:close()
  return ok and type(v) == 'table' and v or {}
end

--- Remembers `text` as the newest prompt of `root` (a repeat of the newest is kept once).
function M.add(root, text)
  if not root or text == '' then
    return
  end
  local l = M.list(root)
  if l[#l] ~= text then
    l[#l + 1] = text
  end
  while #l > MAX do
    table.remove(l, 1)
  end
  local path = file_of(root)
  vim.fn.mkdir(vim.fn.fnamemodify(path, ':h'), 'p')
  local f = io.open(path, 'w')
  if f then
    f:write(vim.json.encode(l))
    f:close()
  end
end

--- <Up> (`step` -1) or <Down> (+1) in the prompt buffer of `chat`: the earlier / later prompt
--- of its workspace replaces the text (what was typed is kept as the newest step). Returns
--- false when the key should move the cursor instead (not on the first / last line).
function M.step(chat, step)
  local buf = chat.prompt_buf
  local row = api.nvim_win_get_cursor(0)[1]
  local last = api.nvim_buf_line_count(buf)
  if (step < 0 and row ~= 1) or (step > 0 and row ~= last) then
    return false
  end
  local list = M.list(chat.root.root)
  local prompt = require('pi.prompt')
  if not chat.recall_at then
    if step > 0 then
      return false
    end
    chat.recall_typed = prompt.text(chat)
    chat.recall_at = #list + 1
  end
  local at = chat.recall_at + step
  if at < 1 or at > #list + 1 then
    return true
  end
  chat.recall_at = at
  local text = at == #list + 1 and chat.recall_typed or list[at]
  if at == #list + 1 then
    chat.recall_at, chat.recall_typed = nil, nil
  end
  prompt.set_text(chat, text or '')
  local lines = api.nvim_buf_line_count(buf)
  local row_to = step < 0 and 1 or lines
  pcall(api.nvim_win_set_cursor, 0, { row_to, #(api.nvim_buf_get_lines(buf, row_to - 1, row_to, false)[1] or '') })
  return true
end

--- The prompt was sent: recalling starts again from the newest.
function M.reset(chat)
  chat.recall_at, chat.recall_typed = nil, nil
end

return M
