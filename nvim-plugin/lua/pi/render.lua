--- The chat buffer's writer: every write is an append at the tail of the buffer, coalesced
--- to at most one `nvim_buf_set_text` per `flush_ms` (16–33 ms) while text streams; older
--- history is the only thing ever inserted above (and never while a run streams).
---
--- Structure without rewriting text: fold regions (thinking, tool results) are kept as row
--- ranges read by `foldexpr`; statuses are extmarks (virtual text over real-text headers, so
--- yank works). Windows whose cursor is on the last line stay pinned to the end; any other
--- window keeps its view (nothing above the tail moves).
local M = {}

M.ns = vim.api.nvim_create_namespace('pi.chat')

local api = vim.api
local uv = vim.uv or vim.loop

local writers = {} -- bufnr -> writer

local W = {}
W.__index = W

--- A writer for `buf` (an empty scratch buffer the plugin owns). `top` lines at the start of
--- the buffer belong to a block replaced in place (the plan, `set_top`); everything else is
--- appended below it.
--- @param buf integer
--- @param flush_ms integer
function M.new(buf, flush_ms)
  local w = setmetatable({
    buf = buf,
    flush_ms = math.max(1, flush_ms or 16),
    pending = {}, -- strings, or ops {op = 'fold_start'|'fold_end'|'mark', fn?}
    tail2 = '\n\n', -- last two characters written (the empty buffer counts as after a blank line)
    folds = {}, -- {s = row0, e = row0|nil}, in order, not overlapping
    timer = nil,
    writes = 0,
    top = 0, -- lines of the top block (set_top)
    shifted = {}, -- fn(delta) called when the top block changes height (stored rows follow)
  }, W)
  writers[buf] = w
  api.nvim_create_autocmd('BufWipeout', {
    buffer = buf,
    once = true,
    callback = function()
      w:close()
    end,
  })
  return w
end

--- The writer of `buf`, if any.
function M.get(buf)
  return writers[buf]
end

function W:close()
  if self.timer then
    self.timer:stop()
    self.timer:close()
    self.timer = nil
  end
  writers[self.buf] = nil
end

local function track(self, text)
  if text == '' then
    return
  end
  if #text >= 2 then
    self.tail2 = text:sub(-2)
  else
    self.tail2 = self.tail2:sub(-1) .. text
  end
end

function W:schedule()
  if self.scheduled then
    return
  end
  self.scheduled = true
  if not self.timer then
    self.timer = uv.new_timer()
  end
  self.timer:start(
    self.flush_ms,
    0,
    vim.schedule_wrap(function()
      self.scheduled = false
      self:flush()
    end)
  )
end

--- Appends `text` (may hold newlines) at the tail.
function W:append(text)
  if text == nil or text == '' then
    return
  end
  self.pending[#self.pending + 1] = text
  track(self, text)
  self:schedule()
end

--- Ends the current line if it has text.
function W:newline()
  if self.tail2:sub(-1) ~= '\n' then
    self:append('\n')
  end
end

--- Ensures a blank line before what comes next (a new block).
function W:blank()
  self:newline()
  if self.tail2 ~= '\n\n' then
    self:append('\n')
  end
end

--- Starts a fold region at the line the next text lands on.
function W:fold_start()
  self.pending[#self.pending + 1] = { op = 'fold_start' }
end

--- Ends the open fold region at the last line written so far (call after `newline()`).
function W:fold_end()
  self.pending[#self.pending + 1] = { op = 'fold_end' }
end

--- Calls `fn(row)` once the text so far is in the buffer, `row` (0-based) being the line the
--- next text lands on; used to put extmarks on headers.
function W:mark(fn)
  self.pending[#self.pending + 1] = { op = 'mark', fn = fn }
  self:schedule()
end

local function pinned_windows(buf, line_count)
  local pinned = {}
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    local ok, cur = pcall(api.nvim_win_get_cursor, win)
    if ok and cur[1] >= line_count then
      pinned[#pinned + 1] = win
    end
  end
  return pinned
end

--- At the next write, every window of the buffer goes to the end and follows it (after the
--- user sent a message: what comes is the answer to it).
function W:pin_all()
  self.repin = true
end

--- Writes everything pending now, as one `nvim_buf_set_text` at the end of the buffer.
function W:flush()
  if #self.pending == 0 or not api.nvim_buf_is_valid(self.buf) then
    self.pending = {}
    return
  end
  local buf = self.buf
  local pending = self.pending
  self.pending = {}
  local n = api.nvim_buf_line_count(buf)
  local last = api.nvim_buf_get_lines(buf, n - 1, n, true)[1]
  local row, at_bol = n - 1, last == ''
  local texts, marks = {}, {}
  for _, p in ipairs(pending) do
    if type(p) == 'string' then
      texts[#texts + 1] = p
      local _, nl = p:gsub('\n', '')
      row = row + nl
      at_bol = p:sub(-1) == '\n' or (at_bol and p == '')
    elseif p.op == 'fold_start' then
      local f = self.folds[#self.folds]
      if f and f.e == nil then
        f.e = row - 1
      end
      self.folds[#self.folds + 1] = { s = row }
    elseif p.op == 'fold_end' then
      local f = self.folds[#self.folds]
      if f and f.e == nil then
        f.e = math.max(f.s, at_bol and row - 1 or row)
      end
    else
      marks[#marks + 1] = { fn = p.fn, row = row }
    end
  end
  if #texts > 0 then
    local text = table.concat(texts)
    local lines = vim.split(text, '\n', { plain = true })
    local pinned = self.repin and vim.fn.win_findbuf(buf) or pinned_windows(buf, n)
    self.repin = false
    vim.bo[buf].modifiable = true
    api.nvim_buf_set_text(buf, n - 1, #last, n - 1, #last, lines)
    vim.bo[buf].modifiable = false
    self.writes = self.writes + 1
    local count = api.nvim_buf_line_count(buf)
    for _, win in ipairs(pinned) do
      pcall(api.nvim_win_set_cursor, win, { count, 0 })
    end
    if self.note then
      self:place_note()
    end
  end
  for _, m in ipairs(marks) do
    local ok, err = pcall(m.fn, m.row)
    if not ok then
      vim.schedule(function()
        error(err)
      end)
    end
  end
end

--- Shows `text` as a virtual line under the last line, kept there as text streams in (a state
--- said at once while what the server sent before it is still arriving, such as "stopping…");
--- `nil` removes it. Never text of the buffer.
--- @param text string|nil
--- @param hl string|nil
function W:set_note(text, hl)
  self.note = text and { text = text, hl = hl or 'Comment' } or nil
  self:place_note()
end

function W:place_note()
  if not api.nvim_buf_is_valid(self.buf) then
    return
  end
  if not self.note then
    if self.note_id then
      pcall(api.nvim_buf_del_extmark, self.buf, M.ns, self.note_id)
      self.note_id = nil
    end
    return
  end
  local n = api.nvim_buf_line_count(self.buf)
  local ok, id = pcall(api.nvim_buf_set_extmark, self.buf, M.ns, n - 1, 0, {
    id = self.note_id,
    virt_lines = { { { self.note.text, self.note.hl } } },
  })
  self.note_id = ok and id or nil
end

--- Inserts whole lines above everything (older history), shifting the fold regions; `lines`
--- come with their own regions (`folds`, rows relative to the first inserted line). Only
--- called while no run streams into this buffer.
--- @param lines string[]
--- @param folds table[]
--- @param replace integer lines at the top to replace (the "older history" line)
function W:prepend(lines, folds, replace)
  self:flush()
  local buf = self.buf
  local top = self.top
  local shift = #lines - replace
  local new, keep = {}, {}
  for _, f in ipairs(self.folds) do
    if f.s < top then
      -- The top block's regions stay where they are (it is above the history).
      new[#new + 1] = f
    elseif f.s >= top + replace then
      -- (Regions of the replaced lines are gone.)
      keep[#keep + 1] = { s = f.s + shift, e = f.e and (f.e + shift) }
    end
  end
  for _, f in ipairs(folds) do
    new[#new + 1] = { s = f.s + top, e = (f.e or (#lines - 1)) + top }
  end
  vim.list_extend(new, keep)
  self.folds = new
  vim.bo[buf].modifiable = true
  api.nvim_buf_set_lines(buf, top, top + replace, false, lines)
  vim.bo[buf].modifiable = false
end

--- Clears the buffer (a new view of the session: branch, rewind).
function W:reset()
  self.pending = {}
  self.folds = {}
  self.top = 0
  self.tail2 = '\n\n'
  vim.bo[self.buf].modifiable = true
  api.nvim_buf_set_lines(self.buf, 0, -1, false, {})
  vim.bo[self.buf].modifiable = false
  api.nvim_buf_clear_namespace(self.buf, M.ns, 0, -1)
  self.note_id = nil
  self:place_note()
end

--- Makes rows `s`..`e` (0-based, inclusive) a fold region after they were written (an
--- answered question collapses), and closes it in the windows showing the buffer. No text
--- changes; regions inside it become part of it (folds have one level); it must not overlap
--- another one partly.
function W:add_fold(s, e)
  for i = #self.folds, 1, -1 do
    local f = self.folds[i]
    if f.s >= s and f.e ~= nil and f.e <= e then
      table.remove(self.folds, i)
    end
  end
  local at = #self.folds + 1
  for i, f in ipairs(self.folds) do
    if f.s > s then
      at = i
      break
    end
    if f.e == nil or f.e >= s then
      return false -- overlaps an open or earlier region
    end
  end
  table.insert(self.folds, at, { s = s, e = e })
  for _, win in ipairs(vim.fn.win_findbuf(self.buf)) do
    if vim.wo[win].foldmethod == 'expr' then
      pcall(vim._foldupdate, win, s, e + 1)
      pcall(api.nvim_win_call, win, function()
        vim.cmd(('silent! %d,%dfoldclose'):format(s + 1, e + 1))
      end)
    end
  end
  return true
end

--- Replaces the block at the top of the buffer with `lines` (none: no block), folded as one
--- region from its first line to `fold_rows` lines down (nil: no region). Text, regions and
--- the rows others hold (the `shifted` callbacks) below it move by the change of height; the
--- windows keep what they show, and a closed block stays closed.
--- @param lines string[]
--- @param fold_rows integer|nil
function W:set_top(lines, fold_rows)
  self:flush()
  local buf = self.buf
  if not api.nvim_buf_is_valid(buf) then
    return
  end
  local old = self.top
  local delta = #lines - old
  -- Which windows have the block closed (it stays so), and their views.
  local views = {}
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    api.nvim_win_call(win, function()
      views[win] = { view = vim.fn.winsaveview(), closed = old > 0 and vim.fn.foldclosed(1) == 1, at_end = vim.fn.line('.') == vim.fn.line('$') }
    end)
  end
  local folds = {}
  for _, f in ipairs(self.folds) do
    if f.s >= old then
      folds[#folds + 1] = { s = f.s + delta, e = f.e and (f.e + delta) }
    end
  end
  if fold_rows and #lines > 0 then
    table.insert(folds, 1, { s = 0, e = math.min(fold_rows, #lines - 1) })
  end
  self.folds = folds
  vim.bo[buf].modifiable = true
  api.nvim_buf_set_lines(buf, 0, old, false, lines)
  vim.bo[buf].modifiable = false
  self.top = #lines
  if delta ~= 0 then
    for _, fn in ipairs(self.shifted) do
      pcall(fn, delta)
    end
  end
  for win, v in pairs(views) do
    api.nvim_win_call(win, function()
      pcall(vim._foldupdate, win, 0, api.nvim_buf_line_count(buf))
      if v.at_end then
        pcall(api.nvim_win_set_cursor, win, { api.nvim_buf_line_count(buf), 0 })
      else
        local view = v.view
        view.lnum = math.max(1, view.lnum + delta)
        view.topline = math.max(1, view.topline + (view.topline > old and delta or 0))
        vim.fn.winrestview(view)
      end
      if #lines > 0 and fold_rows then
        local closed = vim.fn.foldclosed(1) == 1
        if v.closed and not closed then
          vim.cmd('silent! 1foldclose')
        elseif old == 0 and not closed then
          vim.cmd('silent! 1foldclose')
        end
      end
    end)
  end
  if self.note then
    self:place_note()
  end
end

--- `foldexpr` of chat windows: level 1 inside a region (`>1` on its first line).
function M.foldexpr(lnum)
  local w = writers[api.nvim_get_current_buf()]
  if not w then
    return '0'
  end
  local row = (lnum or vim.v.lnum) - 1
  local folds = w.folds
  local lo, hi = 1, #folds
  local found
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    if folds[mid].s <= row then
      found = folds[mid]
      lo = mid + 1
    else
      hi = mid - 1
    end
  end
  if found and (found.e == nil or row <= found.e) then
    return row == found.s and '>1' or '1'
  end
  return '0'
end

--- `foldtext` of chat windows: the region's first line (which says what it holds) and ▸.
function M.foldtext()
  return vim.fn.getline(vim.v.foldstart) .. ' ▸'
end

return M
