--- The chat's text as something to act on: a file named in it (`path`, `path:12`,
--- `path:12:3`, `path#L12`, a markdown link `[x](path:12)`) opens at its line in the window
--- beside the chat, and the code block under the cursor is yanked whole, put at the cursor of
--- the window beside the chat, or opened as a new (unsaved) file.
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

--- The window the chat sits beside: the previous window when it is an ordinary one showing
--- an ordinary buffer, else the first such window of the tabpage (`util.host_win`); nil when
--- there is none.
local function beside()
  local function ok(w)
    if not w or w <= 0 or not api.nvim_win_is_valid(w) or api.nvim_win_get_config(w).relative ~= '' then
      return false
    end
    local b = api.nvim_win_get_buf(w)
    local ft = vim.bo[b].filetype
    return ft ~= 'pi-chat' and ft ~= 'pi-prompt' and vim.bo[b].buftype == ''
  end
  local prev = vim.fn.win_getid(vim.fn.winnr('#'))
  if ok(prev) then
    return prev
  end
  local w = util.host_win()
  return ok(w) and w or nil
end

--- Puts the code block under the cursor below the cursor line of the window beside the chat
--- (one undo step there; nothing is saved) and goes to it. False when there is no block or no
--- such window, or its buffer cannot be changed.
function M.insert_block()
  local b = M.code_block_at(api.nvim_get_current_buf(), api.nvim_win_get_cursor(0)[1])
  if not b then
    util.notify('no code block under the cursor')
    return false
  end
  local win = beside()
  if not win then
    util.notify('no file window beside the chat to put the code in')
    return false
  end
  local buf = api.nvim_win_get_buf(win)
  if not vim.bo[buf].modifiable or vim.bo[buf].readonly then
    util.notify(('%s cannot be changed: the code is not put there'):format(vim.fn.fnamemodify(api.nvim_buf_get_name(buf), ':~:.')))
    return false
  end
  local row = api.nvim_win_get_cursor(win)[1]
  api.nvim_buf_set_lines(buf, row, row, false, b.lines)
  api.nvim_set_current_win(win)
  api.nvim_win_set_cursor(win, { row + 1, 0 })
  return true
end

--- Opens the code block under the cursor as a new file in the window beside the chat: the
--- path is asked (relative to the workspace); the buffer holds the code, unsaved (`:w` writes
--- it). An existing file is not touched. False when there is no block.
function M.new_file_block(chat)
  local b = M.code_block_at(api.nvim_get_current_buf(), api.nvim_win_get_cursor(0)[1])
  if not b then
    util.notify('no code block under the cursor')
    return false
  end
  local root = chat and chat.root and chat.root.root or vim.fn.getcwd()
  util.input({ prompt = 'Pi: new file for the code block: ', completion = 'file' }, function(name)
    if not name or vim.trim(name) == '' then
      return
    end
    local path = vim.trim(name)
    if not path:match('^/') and not path:match('^~') then
      path = root .. '/' .. path
    end
    path = vim.fs.normalize(path)
    if vim.uv.fs_stat(path) or vim.fn.bufnr(path) > 0 then
      return util.notify(('%s exists: not replaced (yc yanks the code)'):format(vim.fn.fnamemodify(path, ':~:.')), vim.log.levels.WARN)
    end
    local win = beside()
    if win then
      api.nvim_set_current_win(win)
    else
      vim.cmd('leftabove vsplit')
    end
    vim.cmd.edit(vim.fn.fnameescape(path))
    api.nvim_buf_set_lines(0, 0, -1, false, b.lines)
  end)
  return true
end

return M
