--- The editor as context of a prompt (`chat.editor_context`): the file buffer you were in and
--- the lines you last selected there, offered with each prompt as chips shown above the
--- prompt (`<M-x>` drops the last one); and `@path` in a prompt attaching that file's text.
local config = require('pi.config')
local util = require('pi.util')
local api = vim.api
local M = {}

--- The file buffer last entered, and the last visual selection in it: {buf, l1, l2}.
M.last_buf = nil
M.selection = nil
--- What the user dropped: {[buf] = changedtick} (a new tick offers it again).
M.dropped = {}

--- The most a file's text may be to go with a prompt (bytes); longer: its path only.
M.max_bytes = 100 * 1024

local function file_buf(b)
  return api.nvim_buf_is_valid(b) and vim.bo[b].buftype == '' and api.nvim_buf_get_name(b) ~= ''
end

local tracking = false

--- Starts following the file buffer the user is in and their visual selections.
function M.track()
  if tracking then
    return
  end
  tracking = true
  local group = api.nvim_create_augroup('pi.context', { clear = true })
  api.nvim_create_autocmd('BufEnter', {
    group = group,
    callback = function(a)
      if file_buf(a.buf) then
        if M.last_buf ~= a.buf then
          M.selection = nil
        end
        M.last_buf = a.buf
      end
    end,
  })
  api.nvim_create_autocmd('ModeChanged', {
    group = group,
    pattern = { 'v:*', 'V:*', '\22:*' },
    callback = function(a)
      local b = a.buf
      if file_buf(b) then
        -- The marks of the selection are set once visual mode has ended.
        vim.schedule(function()
          if not api.nvim_buf_is_valid(b) then
            return
          end
          local l1, l2 = api.nvim_buf_get_mark(b, '<')[1], api.nvim_buf_get_mark(b, '>')[1]
          if l1 > 0 and l2 > 0 then
            M.last_buf = b
            M.selection = { buf = b, l1 = math.min(l1, l2), l2 = math.max(l1, l2) }
          end
        end)
      end
    end,
  })
  local cur = api.nvim_get_current_buf()
  if file_buf(cur) then
    M.last_buf = cur
  end
end

local function rel(chat, b)
  local name = vim.fs.normalize(api.nvim_buf_get_name(b))
  local root = chat.root and chat.root.root
  if root and name:sub(1, #root + 1) == root .. '/' then
    return name:sub(#root + 2)
  end
  return vim.fn.fnamemodify(name, ':~')
end

--- The chips offered with the next prompt of `chat`: `{kind, buf, label, l1?, l2?}`.
function M.chips(chat)
  local opt = config.values.chat.editor_context
  if not opt or not M.last_buf or not api.nvim_buf_is_valid(M.last_buf) then
    return {}
  end
  local b = M.last_buf
  if M.dropped[b] == vim.b[b].changedtick then
    return {}
  end
  local out = {}
  local s = M.selection
  if s and s.buf == b and (opt == true or opt.selection ~= false) and M.dropped['sel' .. b] ~= s.l1 .. ':' .. s.l2 then
    out[#out + 1] = { kind = 'selection', buf = b, l1 = s.l1, l2 = s.l2, label = ('%s:%d-%d (selection)'):format(rel(chat, b), s.l1, s.l2) }
  end
  if opt == true or opt.buffer ~= false then
    out[#out + 1] = { kind = 'buffer', buf = b, label = rel(chat, b) .. ' (buffer)' }
  end
  return out
end

--- The chips as virtual lines above the prompt, one each (the last says how to drop it).
function M.lines(chat)
  local chips = M.chips(chat)
  local km = config.values.keymaps.prompt or {}
  local out = {}
  for i, c in ipairs(chips) do
    local line = { { '  ⧉ ' .. c.label, 'Comment' } }
    if i == #chips and km.drop_context then
      line[#line + 1] = { ' · ' .. km.drop_context .. ' drops', 'NonText' }
    end
    out[#out + 1] = line
  end
  return out
end

--- Drops the last chip of `chat` (the buffer, then the selection).
function M.drop(chat)
  local chips = M.chips(chat)
  local c = chips[#chips]
  if not c then
    return util.notify('no editor context to drop')
  end
  if c.kind == 'buffer' then
    M.dropped[c.buf] = vim.b[c.buf].changedtick
  else
    M.dropped['sel' .. c.buf] = c.l1 .. ':' .. c.l2
  end
  require('pi.prompt').show_queue(chat)
end

local function fenced(label, lines, ft)
  local text = table.concat(lines, '\n')
  local fence = '```'
  while text:find(fence, 1, true) do
    fence = fence .. '`'
  end
  return ('\n\n%s:\n%s%s\n%s\n%s'):format(label, fence, ft or '', text, fence)
end

--- What goes after the prompt `text` of `chat`: the chips' text (the buffer as it is in the
--- editor, unsaved changes included) and each `@path` file's text.
function M.attachments(chat, text)
  local parts = {}
  local seen = {}
  for _, c in ipairs(M.chips(chat)) do
    local ft = vim.bo[c.buf].filetype
    local name = rel(chat, c.buf)
    if c.kind == 'selection' then
      parts[#parts + 1] = fenced(('`%s` lines %d-%d'):format(name, c.l1, c.l2), api.nvim_buf_get_lines(c.buf, c.l1 - 1, c.l2, false), ft)
    else
      seen[name] = true
      local lines = api.nvim_buf_get_lines(c.buf, 0, -1, false)
      if #table.concat(lines, '\n') <= M.max_bytes then
        parts[#parts + 1] = fenced(('`%s` (the current buffer)'):format(name), lines, ft)
      end
    end
  end
  local root = chat.root and chat.root.root or vim.fn.getcwd()
  for path in (' ' .. text):gmatch('%s@([^%s`]+)') do
    path = path:gsub('[.,;:)]+$', '')
    local full = path:match('^/') and path or (root .. '/' .. path)
    local st = vim.uv.fs_stat(full)
    if not seen[path] and st and st.type == 'file' and st.size <= M.max_bytes then
      seen[path] = true
      local b = vim.fn.bufnr(full)
      local lines = (b > 0 and api.nvim_buf_is_loaded(b)) and api.nvim_buf_get_lines(b, 0, -1, false) or vim.fn.readfile(full)
      parts[#parts + 1] = fenced(('`%s`'):format(path), lines, vim.filetype.match({ filename = full }))
    end
  end
  return table.concat(parts)
end

return M
