--- The chat's text as something to act on: a file named in it (`path`, `path:12`,
--- `path:12:3`, `path#L12`, a markdown link `[x](path:12)`) opens at its line in the window
--- beside the chat, and the code block under the cursor is yanked whole.
local util = require('pi.util')
local api = vim.api
local M = {}

--- The `{path, line?, col?}` named at byte `col` (0-based) of `line`, or nil.
--- @param line string
--- @param col integer
function M.target_at(line, col)
  -- The run of path characters around the cursor (a markdown link's target when on one).
  local best
  for s, text, e in line:gmatch('()([%w%._%-/~@+]+[:#]?L?%d*:?%d*)()') do
    if col + 1 >= s and col + 1 < e then
      best = text
      break
    end
  end
  if not best then
    local target = line:match('%]%(([^)]+)%)')
    best = target
  end
  if not best then
    return nil
  end
  best = best:gsub('[.,;:]+$', '')
  local path, lnum, cnum = best:match('^(.-):(%d+):(%d+)$')
  if not path then
    path, lnum = best:match('^(.-):(%d+)$')
  end
  if not path then
    path, lnum = best:match('^(.-)#L(%d+)$')
  end
  path = path or best
  return { path = path, line = tonumber(lnum), col = tonumber(cnum) }
end

--- Opens the file named under the cursor of the chat `chat` at its line, in the window the
--- chat sits beside. Returns false (and says so) when the text there names no file.
function M.open_under_cursor(chat)
  local line = api.nvim_get_current_line()
  local col = api.nvim_win_get_cursor(0)[2]
  local t = M.target_at(line, col)
  local root = chat.root and chat.root.root or vim.fn.getcwd()
  local path = t and t.path
  if path and not path:match('^/') and not path:match('^~') then
    path = root .. '/' .. path
  end
  path = path and vim.fs.normalize(path)
  if not path or not vim.uv.fs_stat(path) then
    util.notify('no file named under the cursor')
    return false
  end
  local win = util.host_win()
  api.nvim_set_current_win(win)
  vim.cmd.edit(vim.fn.fnameescape(path))
  if t.line then
    local n = api.nvim_buf_line_count(0)
    pcall(api.nvim_win_set_cursor, 0, { math.min(t.line, n), math.max((t.col or 1) - 1, 0) })
    vim.cmd('normal! zz')
  end
  return true
end

--- The code block (between ``` fences) holding row `row` (1-based) of `buf`:
--- `{first, last, lang, lines}` (rows of the code, without the fences), or nil.
function M.code_block_at(buf, row)
  local lines = api.nvim_buf_get_lines(buf, 0, -1, false)
  local open, fence, lang
  for i, l in ipairs(lines) do
    local f, rest = l:match('^(```+)(.*)$')
    if f then
      if not open then
        open, fence, lang = i, f, vim.trim(rest)
      elseif l == fence or (l:match('^```+%s*$') and #vim.trim(l) >= #fence) then
        if row >= open and row <= i then
          return { first = open + 1, last = i - 1, lang = lang, lines = { unpack(lines, open + 1, i - 1) } }
        end
        open = nil
      end
    end
    if i > row and not open then
      break
    end
  end
end

--- Yanks the code block under the cursor (linewise, into `register` — the unnamed register by
--- default, and `+` as well when a clipboard provider is there). False when the cursor is
--- not in a block.
function M.yank_block(register)
  local row = api.nvim_win_get_cursor(0)[1]
  local b = M.code_block_at(api.nvim_get_current_buf(), row)
  if not b then
    util.notify('no code block under the cursor')
    return false
  end
  vim.fn.setreg(register or '"', b.lines, 'l')
  if (register == nil or register == '"') and vim.fn.has('clipboard') == 1 then
    pcall(vim.fn.setreg, '+', b.lines, 'l')
  end
  util.notify(('yanked %d line%s of %s'):format(#b.lines, #b.lines == 1 and '' or 's', b.lang ~= '' and b.lang or 'code'))
  return true
end

return M
