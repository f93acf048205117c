--- Agent edits in the user's buffers: `workspace/applyEdit` goes through Neovim's own handler,
--- each edit is its own undo step (`u` reverts exactly it), and the changed hunks get signs;
--- `]h` / `[h` move between them, keep forgets one, undo puts its old text back as an
--- ordinary (undoable) change that leaves the user's own edits alone.
local config = require('pi.config')
local api = vim.api
local M = {}

M.ns = vim.api.nvim_create_namespace('pi.hunks')

--- bufnr -> { [extmark id] = {old = string[]} }
M.by_buf = {}

--- The text of each buffer with marks as the last `refresh` (or edit) left it, and its undo
--- state (`cur`: `changenr()`, `max`: the newest change number seen): what an undo or redo
--- changed.
M.snap = {}
M.seq = {}

--- Records `b`'s undo state; true when it moved by an undo or a redo since the last record: the
--- current change number moved but not past the newest one (a new change is always newer).
--- `exact` reads the newest change number from `undotree()` (done at an agent edit; each
--- text change after it reads only `changenr()`, cheap in a long undo history).
local function undo_or_redo(b, exact)
  local ok, cur, last = pcall(api.nvim_buf_call, b, function()
    return vim.fn.changenr(), exact and vim.fn.undotree().seq_last or nil
  end)
  if not ok or type(cur) ~= 'number' then
    return false
  end
  local prev = M.seq[b]
  local max = math.max(prev and prev.max or 0, last or 0, cur)
  M.seq[b] = { cur = cur, max = max }
  return prev ~= nil and cur ~= prev.cur and cur <= prev.max
end

local function targets(edit)
  local out = {}
  if type(edit) ~= 'table' then
    return out
  end
  for _, change in ipairs(edit.documentChanges or {}) do
    if change.textDocument and change.textDocument.uri then
      out[#out + 1] = change.textDocument.uri
    end
  end
  for uri in pairs(edit.changes or {}) do
    out[#out + 1] = uri
  end
  return out
end

local function loaded(uri)
  local b = vim.fn.bufnr(vim.uri_to_fname(uri))
  if b > 0 and api.nvim_buf_is_loaded(b) then
    return b
  end
end

--- Ends the buffer's current undo block, so the next change is an undo step of its own.
local function break_undo(b)
  api.nvim_buf_call(b, function()
    local ul = vim.bo[b].undolevels
    -- Setting 'undolevels' closes the current undo block (`:help undo-break`); the value is
    -- set back unchanged, buffer-locally.
    vim.bo[b].undolevels = ul
  end)
end

local hunk_list

--- Whether `label` names a rewind's file change (`Pi: rewind <file>` / `Pi: reapply <file>`):
--- it puts back text the marks already know, so it makes no marks of its own.
local function rewind_label(label)
  return type(label) == 'string' and (label:match('^Pi: rewind ') or label:match('^Pi: reapply ')) ~= nil
end

--- A loaded buffer of `uri` that the client `client_id` does not sync and that holds unsaved
--- changes: an edit computed from the disk must not land there.
local function unsynced_modified(uri, client_id)
  local b = loaded(uri)
  return b and vim.bo[b].modified and not vim.lsp.buf_is_attached(b, client_id) and b or nil
end

--- The `workspace/applyEdit` handler: Neovim's, around a snapshot for the hunk signs.
function M.apply(err, params, ctx)
  for _, change in ipairs(params and params.edit and params.edit.documentChanges or {}) do
    local uri = change.textDocument and change.textDocument.uri
    if uri and (change.textDocument.version == vim.NIL or change.textDocument.version == nil) then
      local b = unsynced_modified(uri, ctx.client_id)
      if b then
        return {
          applied = false,
          failureReason = vim.fn.fnamemodify(api.nvim_buf_get_name(b), ':~:.') .. ' has unsaved changes in Neovim that the server has not seen',
        }
      end
    end
  end
  local rewind = rewind_label(params and params.label)
  local before = {}
  for _, uri in ipairs(targets(params and params.edit)) do
    local b = loaded(uri)
    if b then
      before[uri] = api.nvim_buf_get_lines(b, 0, -1, false)
      break_undo(b)
    else
      -- Not loaded yet: Neovim's handler loads it from disk, so the disk is the "before".
      local ok, lines = pcall(vim.fn.readfile, vim.uri_to_fname(uri))
      before[uri] = ok and lines or {}
    end
  end
  -- Neovim's handler, without its `print` of the label (a message at the command line while
  -- the user types).
  local p = vim.deepcopy(params)
  p.label = nil
  local result = vim.lsp.handlers['workspace/applyEdit'](err, p, ctx)
  -- A file created by this edit starts as Neovim's one empty line; the text inserted into it
  -- ends with its own newline, which left an extra empty last line ("text\n\n" on disk).
  -- Neovim drops that line for edits reaching the end of a buffer, not for this insert.
  if type(result) == 'table' and result.applied ~= false then
    for _, change in ipairs(params and params.edit and params.edit.documentChanges or {}) do
      if change.kind == 'create' and change.uri then
        local b = loaded(change.uri)
        local n = b and api.nvim_buf_line_count(b) or 0
        if n >= 2 and api.nvim_buf_get_lines(b, n - 1, n, false)[1] == '' and (vim.bo[b].eol or vim.bo[b].fixeol) then
          api.nvim_buf_set_lines(b, n - 1, n, false, {})
        end
      end
    end
  end
  -- The server waits for the edit's didChange: send it now, before the answer, instead of
  -- after the debounce (a buffer loaded by the edit itself was otherwise not synced).
  local client = vim.lsp.get_client_by_id(ctx.client_id)
  local okct, ct = pcall(require, 'vim.lsp._changetracking')
  if client and okct and type(ct.flush) == 'function' then
    pcall(ct.flush, client)
  end
  for _, uri in ipairs(targets(params and params.edit)) do
    local b = loaded(uri)
    if b then
      break_undo(b)
      if rewind then
        M.refresh(b)
      else
        M.mark(b, before[uri] or {}, api.nvim_buf_get_lines(b, 0, -1, false))
      end
    end
  end
  return result
end

--- Marks the hunks between `old` and `new` lines of `b`.
function M.mark(b, old, new)
  local a = table.concat(old, '\n') .. '\n'
  local c = table.concat(new, '\n') .. '\n'
  if a == c then
    return
  end
  local hunks = vim.diff(a, c, { result_type = 'indices' }) or {}
  local store = M.by_buf[b] or {}
  M.by_buf[b] = store
  for _, h in ipairs(hunks) do
    local sa, ca, sb, cb = h[1], h[2], h[3], h[4]
    local old_lines = ca > 0 and { unpack(old, sa, sa + ca - 1) } or {}
    local row, end_row, opts
    if cb > 0 then
      -- The range covers the hunk's lines, its end on the last one (inclusive), so the sign
      -- is on exactly those lines.
      row, end_row = sb - 1, sb - 2 + cb
      opts = {
        end_row = end_row,
        end_col = #(new[sb - 1 + cb] or ''),
        sign_text = ca > 0 and '~' or '+',
        sign_hl_group = ca > 0 and 'DiffChange' or 'DiffAdd',
        right_gravity = false,
        end_right_gravity = true,
      }
    else
      -- Pure deletion: the mark sits on the line after it (or the last line), the deleted
      -- text as virtual lines above.
      local n = api.nvim_buf_line_count(b)
      row = math.min(sb, n - 1)
      local vl = {}
      for _, l in ipairs(old_lines) do
        vl[#vl + 1] = { { '- ' .. l, 'DiffDelete' } }
      end
      opts = {
        sign_text = '-',
        sign_hl_group = 'DiffDelete',
        virt_lines = vl,
        virt_lines_above = sb < n,
      }
    end
    -- A hunk over lines the agent changed before keeps that first mark (its old text is what
    -- the user had); marks do not pile up.
    local covered = false
    for _, m in ipairs(api.nvim_buf_get_extmarks(b, M.ns, { row, 0 }, { end_row or row, -1 }, { details = true, overlap = true })) do
      if store[m[1]] and not store[m[1]].deletion then
        covered = true
      end
    end
    local ok, id = false, nil
    if not covered then
      ok, id = pcall(api.nvim_buf_set_extmark, b, M.ns, row, 0, opts)
    end
    if ok then
      -- `above`: a deletion's text goes before its mark's line (else after it: it ran to the end).
      store[id] = {
        old = old_lines,
        new = cb > 0 and { unpack(new, sb, sb + cb - 1) } or {},
        deletion = cb == 0,
        above = cb == 0 and opts.virt_lines_above or nil,
        sign = opts.sign_text,
        sign_hl = opts.sign_hl_group,
      }
    end
  end
  require('pi.keymaps').hunks(b)
  M.watch(b)
  M.snap[b] = api.nvim_buf_get_lines(b, 0, -1, false)
  undo_or_redo(b, true)
end

--- Puts hunk `id`'s mark over `n` lines from `row`, its sign shown unless `hidden`.
local function place(b, id, info, row, n, hidden)
  info.hidden = hidden
  local last = row + math.max(n, 1) - 1
  local line = api.nvim_buf_get_lines(b, last, last + 1, false)[1] or ''
  pcall(api.nvim_buf_set_extmark, b, M.ns, row, 0, {
    id = id,
    end_row = last,
    end_col = n > 0 and #line or 0,
    sign_text = not hidden and info.sign or nil,
    sign_hl_group = not hidden and info.sign_hl or nil,
    right_gravity = false,
    end_right_gravity = true,
  })
end

--- Shows (or hides, `hidden`) deletion hunk `id`'s mark at `row`: its sign and the deleted
--- lines as virtual lines; hidden, the mark stays on its line, so `u` after the undo key (the
--- deletion back) shows it again.
local function place_deletion(b, id, info, row, hidden)
  info.hidden = hidden
  local vl = {}
  for _, l in ipairs(info.old) do
    vl[#vl + 1] = { { '- ' .. l, 'DiffDelete' } }
  end
  pcall(api.nvim_buf_set_extmark, b, M.ns, row, 0, {
    id = id,
    sign_text = not hidden and info.sign or nil,
    sign_hl_group = not hidden and info.sign_hl or nil,
    virt_lines = not hidden and vl or nil,
    virt_lines_above = info.above,
  })
end

--- Whether deletion hunk `info`, its mark at `row`, has its deleted lines back in the buffer
--- (put back by the undo key, or typed back): just above the mark's line, or below it when
--- the deletion ran to the end.
local function deletion_restored(b, info, row)
  local n = #info.old
  if n == 0 then
    return false
  end
  local from = info.above and row - n or row + 1
  if from < 0 then
    return false
  end
  return vim.deep_equal(api.nvim_buf_get_lines(b, from, from + n, false), info.old)
end

local sync_disk

--- Hides the sign of each hunk of `b` whose text is back to what it was (undone with `u`,
--- with the undo key, by hand or by a rewind) and shows it again when the agent's text comes
--- back (redo, `u` after the undo key, a rewind undone). A hidden hunk is found again by its
--- start row and the agent's lines, so its mark follows whatever undo did to its range.
--- With `sync` (the buffer's own text changes), an undo or redo that took agent lines back or
--- brought them back reaches the disk too (`sync_disk`), so the agent's next `bash` sees what
--- the buffer shows; a change typed by hand stays the user's, unsaved.
function M.refresh(b, sync)
  local store = M.by_buf[b]
  if not store or next(store) == nil then
    return
  end
  -- Whether a hunk's text went or came back (its mark hidden or shown) with this change, and
  -- whether the change is an undo or a redo (`u`, `<C-r>`, `:undo N`).
  local flipped = false
  local undone_redone = undo_or_redo(b)
  for _, m in ipairs(api.nvim_buf_get_extmarks(b, M.ns, 0, -1, { details = true })) do
    local id, row, d = m[1], m[2], m[4]
    local info = store[id]
    if info and info.deletion then
      -- Only a deletion the undo key put back is followed (a shown one whose lines merely
      -- look like its old text elsewhere stays shown).
      if info.undone or undone_redone then
        local back = deletion_restored(b, info, row)
        if info.hidden and not back then
          flipped = true
          place_deletion(b, id, info, row, false)
        elseif not info.hidden and back then
          flipped = true
          info.undone = true
          place_deletion(b, id, info, row, true)
        end
      end
    elseif info then
      if info.hidden then
        local now = api.nvim_buf_get_lines(b, row, row + #info.new, false)
        if #info.new > 0 and vim.deep_equal(now, info.new) then
          flipped = true
          place(b, id, info, row, #info.new, false)
        end
      else
        local now = api.nvim_buf_get_lines(b, row, (d.end_row or row) + 1, false)
        local at_old = api.nvim_buf_get_lines(b, row, row + #info.old, false)
        if vim.deep_equal(now, info.old) or (not vim.deep_equal(now, info.new) and vim.deep_equal(at_old, info.old) and #info.old > 0) then
          flipped = true
          place(b, id, info, row, #info.old, true)
        end
      end
    end
  end
  local before = M.snap[b]
  local now = api.nvim_buf_get_lines(b, 0, -1, false)
  M.snap[b] = now
  if sync and flipped and before and undone_redone then
    sync_disk(b, before, now)
  end
end

--- The buffer was read again from the disk (`:e!` after `:!git checkout`): a mark whose
--- agent text is no longer there (nor its old text, to come back by undo) is dropped.
function M.reloaded(b)
  local store = M.by_buf[b]
  if not store then
    return
  end
  for _, m in ipairs(api.nvim_buf_get_extmarks(b, M.ns, 0, -1, { details = true })) do
    local id, row = m[1], m[2]
    local info = store[id]
    if info then
      local keep = false
      if not info.deletion then
        local now = api.nvim_buf_get_lines(b, row, row + #info.new, false)
        keep = #info.new > 0 and vim.deep_equal(now, info.new)
      end
      if not keep then
        pcall(api.nvim_buf_del_extmark, b, M.ns, id)
        store[id] = nil
      end
    end
  end
  M.snap[b] = api.nvim_buf_get_lines(b, 0, -1, false)
  undo_or_redo(b, true)
  -- (Marks of lines the reload removed are gone with them.)
  for id in pairs(store) do
    if not api.nvim_buf_get_extmark_by_id(b, M.ns, id, {})[1] then
      store[id] = nil
    end
  end
end

--- Keeps the signs of `b` true as its text changes (see `refresh`).
function M.watch(b)
  if vim.b[b].pi_hunk_watch then
    return
  end
  vim.b[b].pi_hunk_watch = true
  api.nvim_create_autocmd({ 'TextChanged', 'InsertLeave' }, {
    buffer = b,
    callback = function()
      M.refresh(b, true)
    end,
  })
  api.nvim_create_autocmd('BufReadPost', {
    buffer = b,
    callback = function()
      M.reloaded(b)
    end,
  })
end

function hunk_list(b)
  local marks = api.nvim_buf_get_extmarks(b, M.ns, 0, -1, { details = true })
  local out = {}
  local store = M.by_buf[b] or {}
  for _, m in ipairs(marks) do
    local id, row, d = m[1], m[2], m[4]
    if store[id] and not d.invalid and not store[id].hidden then
      local end_row = store[id].deletion and row or ((d.end_row or row) + 1)
      out[#out + 1] = { id = id, row = row, end_row = end_row, info = store[id] }
    end
  end
  table.sort(out, function(x, y)
    return x.row < y.row
  end)
  return out
end

--- The agent hunks of `b`: `{id, row, end_row, info}` sorted by row (0-based, end exclusive).
M.list = hunk_list

--- Moves the cursor to the next (`dir` 1) or previous (-1) agent hunk.
function M.jump(dir)
  local b = api.nvim_get_current_buf()
  local row = api.nvim_win_get_cursor(0)[1] - 1
  local list = hunk_list(b)
  local target
  if dir > 0 then
    for _, h in ipairs(list) do
      if h.row > row then
        target = h
        break
      end
    end
  else
    for i = #list, 1, -1 do
      if list[i].row < row then
        target = list[i]
        break
      end
    end
  end
  if target then
    vim.cmd("normal! m'")
    api.nvim_win_set_cursor(0, { target.row + 1, 0 })
  end
end

local function at_cursor(b)
  local row = api.nvim_win_get_cursor(0)[1] - 1
  for _, h in ipairs(hunk_list(b)) do
    local last = math.max(h.row, h.end_row - 1)
    if row >= h.row and row <= last then
      return h
    end
  end
end

--- Keeps the agent hunk under the cursor (forgets its mark).
function M.keep()
  local b = api.nvim_get_current_buf()
  local h = at_cursor(b)
  if not h then
    return require('pi.util').notify('no agent change under the cursor')
  end
  api.nvim_buf_del_extmark(b, M.ns, h.id)
  M.by_buf[b][h.id] = nil
end

--- The file's lines on disk (nil when unreadable) and how they were written: `eol` (a last
--- newline) and `crlf` (the buffer's 'fileformat' is dos).
local function read_disk(path, crlf)
  local f = io.open(path, 'rb')
  if not f then
    return nil
  end
  local text = f:read('*a')
  f:close()
  local eol = text:sub(-1) == '\n'
  if eol then
    text = text:sub(1, -2)
  end
  local lines = text == '' and not eol and {} or vim.split(text, '\n', { plain = true })
  if crlf then
    for i, l in ipairs(lines) do
      lines[i] = l:gsub('\r$', '')
    end
  end
  return lines, eol
end

--- The disk's lines with the buffer edit "rows [s, e) of `buf` become `new`" carried over,
--- or nil when those rows are not on disk as in the buffer. The server's rule for the user's
--- unsaved changes (`saveUserChanges`, core `unsaved.rs` `merge_onto_disk`): the lines the
--- buffer and the disk share (a line diff) carry the edit; an edit touching a line only the
--- buffer has (the user's unsaved line, or an agent change kept in the buffer only) is not
--- merged. An insertion (s == e) goes before buffer row s when that row is shared, or after
--- the last row when that one is.
function M.merge_onto_disk(buf, disk, s, e, new)
  -- map[i] = the disk row (1-based) of buffer row i (1-based) when shared.
  local map = {}
  local a, bb = 1, 1
  local function same(upto_a, upto_b)
    while a < upto_a and bb < upto_b do
      map[bb] = a
      a, bb = a + 1, bb + 1
    end
  end
  local function joined(l)
    return #l == 0 and '' or table.concat(l, '\n') .. '\n'
  end
  local hunks = vim.diff(joined(disk), joined(buf), { result_type = 'indices' })
  for _, d in ipairs(hunks) do
    local sa = d[2] == 0 and d[1] + 1 or d[1]
    local sb = d[4] == 0 and d[3] + 1 or d[3]
    same(sa, sb)
    a, bb = sa + d[2], sb + d[4]
  end
  same(#disk + 1, #buf + 1)
  local at
  if s < e then
    for r = s + 1, e do
      if not map[r] or (r > s + 1 and map[r] ~= map[r - 1] + 1) then
        return nil
      end
    end
    at = map[s + 1]
  elseif map[s + 1] then
    at = map[s + 1]
  elseif s == #buf and (s == 0 or map[s]) then
    at = s == 0 and 1 or map[s] + 1
  else
    return nil
  end
  local out = vim.list_slice(disk, 1, at - 1)
  vim.list_extend(out, new)
  return vim.list_extend(out, vim.list_slice(disk, at + (e - s)))
end

--- Writes `lines` to `path` as the file was written (`eol`: a last newline, `crlf`) under
--- buffer `b`, which keeps its unsaved changes: Neovim is kept quiet about it (unsaved.lua).
local function write_merged(b, path, lines, eol, crlf)
  local st = vim.uv.fs_stat(path)
  local nl = crlf and '\r\n' or '\n'
  local text = table.concat(lines, nl) .. ((eol and #lines > 0) and nl or '')
  local f, err = io.open(path, 'wb')
  if not f then
    return require('pi.util').notify('could not write ' .. vim.fn.fnamemodify(path, ':~:.') .. ': ' .. tostring(err), vim.log.levels.WARN)
  end
  f:write(text)
  f:close()
  require('pi.unsaved').merged(b, st and { sec = st.mtime.sec, nsec = st.mtime.nsec } or nil)
end

--- After the undo key took agent lines back (rows [s, e) of the buffer's text `before` became
--- `new`): the disk agrees with the session, so the agent's next `bash` sees the lines taken
--- back. A buffer that held no unsaved changes is written (as the agent's own saves: no
--- autocommands, so no formatter); one holding the user's unsaved changes keeps them unsaved:
--- only the undo is carried onto the disk's text and written, and the file's time Neovim read
--- is kept (unsaved.lua), so neither W12 nor "changed since reading" follows.
local function undo_on_disk(b, was_modified, before, s, e, new)
  local path = api.nvim_buf_get_name(b)
  if path == '' or vim.bo[b].buftype ~= '' or not vim.uv.fs_stat(path) then
    return
  end
  local unsaved = require('pi.unsaved')
  if not was_modified then
    local ok = pcall(api.nvim_buf_call, b, function()
      vim.cmd('silent noautocmd keepalt keepjumps lockmarks write!')
    end)
    if ok then
      unsaved.saved(b)
    end
    return
  end
  local crlf = vim.bo[b].fileformat == 'dos'
  local disk, eol = read_disk(path, crlf)
  local merged = disk and M.merge_onto_disk(before, disk, s, e, new)
  if not merged then
    return require('pi.util').notify('the agent change is not on disk as in this buffer: the disk is left as it is')
  end
  if vim.deep_equal(merged, disk) then
    return
  end
  write_merged(b, path, merged, eol, crlf)
end

--- After an undo or redo moved agent lines (`refresh`): the buffer's text went from `before`
--- to `now`. With no unsaved changes of the user's besides (`before` is the disk's text) the
--- buffer is written as the agent's saves are (no autocommands); else each changed range is
--- carried onto the disk's text (`merge_onto_disk`) and the user's lines stay unsaved.
function sync_disk(b, before, now)
  local path = api.nvim_buf_get_name(b)
  if path == '' or vim.bo[b].buftype ~= '' or not vim.uv.fs_stat(path) then
    return
  end
  local crlf = vim.bo[b].fileformat == 'dos'
  local disk, eol = read_disk(path, crlf)
  if not disk then
    return
  end
  if vim.deep_equal(before, disk) then
    local ok = pcall(api.nvim_buf_call, b, function()
      vim.cmd('silent noautocmd keepalt keepjumps lockmarks write!')
    end)
    if ok then
      require('pi.unsaved').saved(b)
    end
    return
  end
  local function joined(l)
    return #l == 0 and '' or table.concat(l, '\n') .. '\n'
  end
  local cur, out = vim.deepcopy(before), disk
  local ranges = vim.diff(joined(before), joined(now), { result_type = 'indices' }) or {}
  -- Bottom up: a range carried does not move the rows of the ones above it.
  for i = #ranges, 1, -1 do
    local sa, ca, sb, cb = unpack(ranges[i])
    local s = ca == 0 and sa or sa - 1
    local new = cb > 0 and { unpack(now, sb, sb + cb - 1) } or {}
    local merged = M.merge_onto_disk(cur, out, s, s + ca, new)
    if not merged then
      return require('pi.util').notify('the undone agent change is not on disk as in this buffer: the disk is left as it is')
    end
    out = merged
    local nxt = vim.list_slice(cur, 1, s)
    vim.list_extend(nxt, new)
    cur = vim.list_extend(nxt, vim.list_slice(cur, s + ca + 1))
  end
  if not vim.deep_equal(out, disk) then
    write_merged(b, path, out, eol, crlf)
  end
end

--- Undoes the agent hunk under the cursor: its old text back, as one ordinary change; the
--- disk follows (`undo_on_disk`).
function M.undo()
  local b = api.nvim_get_current_buf()
  local h = at_cursor(b)
  if not h then
    return require('pi.util').notify('no agent change under the cursor')
  end
  local old = h.info.old
  local was_modified = vim.bo[b].modified
  local before = api.nvim_buf_get_lines(b, 0, -1, false)
  local s, e
  if h.info.deletion then
    -- The mark stays, hidden, on its line: `u` takes the lines out again and shows it.
    local at = h.info.above and h.row or (h.row + 1)
    api.nvim_buf_set_lines(b, at, at, false, old)
    local mark = api.nvim_buf_get_extmark_by_id(b, M.ns, h.id, {})
    h.info.undone = true
    place_deletion(b, h.id, h.info, mark[1] or h.row, true)
    s, e = at, at
  else
    -- The mark stays, hidden, over the old text: `u` brings the agent's text and its sign back.
    api.nvim_buf_set_lines(b, h.row, h.end_row, false, old)
    place(b, h.id, h.info, h.row, #old, true)
    s, e = h.row, h.end_row
  end
  undo_on_disk(b, was_modified, before, s, e, old)
end

--- The text of `b` with every agent hunk's old text back: what the buffer held before the
--- agent's marked changes (the user's own changes stay in).
function M.base_lines(b)
  local lines = api.nvim_buf_get_lines(b, 0, -1, false)
  local list = hunk_list(b)
  for i = #list, 1, -1 do
    local h = list[i]
    local old = h.info.old
    local out = {}
    if h.info.deletion then
      -- A deletion's mark sits on the line after it (or on the last line when it ran to the end).
      local at = math.min(h.info.above and h.row or (h.row + 1), #lines)
      vim.list_extend(out, { unpack(lines, 1, at) })
      vim.list_extend(out, old)
      vim.list_extend(out, { unpack(lines, at + 1) })
    else
      vim.list_extend(out, { unpack(lines, 1, h.row) })
      vim.list_extend(out, old)
      vim.list_extend(out, { unpack(lines, h.end_row + 1) })
    end
    lines = out
  end
  return lines
end

--- `:Pi diff`: the buffer against its text before the agent's changes, in Neovim's own diff
--- mode, in a new tabpage (close it with `:tabclose`). Returns false when nothing is marked.
function M.diff(b)
  b = b or api.nvim_get_current_buf()
  if #hunk_list(b) == 0 then
    require('pi.util').notify('no agent change is marked in this buffer')
    return false
  end
  local base = M.base_lines(b)
  local ft = vim.bo[b].filetype
  local name = api.nvim_buf_get_name(b)
  vim.cmd('tab split')
  local right = api.nvim_get_current_win()
  api.nvim_win_set_buf(right, b)
  local scratch = api.nvim_create_buf(false, true)
  vim.bo[scratch].bufhidden = 'wipe'
  api.nvim_buf_set_lines(scratch, 0, -1, false, base)
  vim.bo[scratch].modifiable = false
  pcall(api.nvim_buf_set_name, scratch, 'pi://before/' .. vim.fn.fnamemodify(name, ':t'))
  vim.bo[scratch].filetype = ft
  local left = api.nvim_open_win(scratch, false, { split = 'left', win = right })
  api.nvim_win_call(left, function()
    vim.cmd('diffthis')
  end)
  vim.cmd('diffthis')
  api.nvim_set_option_value('winbar', ' before the agent (read-only)', { scope = 'local', win = left })
  api.nvim_set_option_value('winbar', ' now — :tabclose ends the diff', { scope = 'local', win = right })
  return true
end

--- Every buffer's agent hunks as quickfix items.
function M.qflist()
  local items = {}
  for b in pairs(M.by_buf) do
    if api.nvim_buf_is_valid(b) then
      for _, h in ipairs(hunk_list(b)) do
        local first = api.nvim_buf_get_lines(b, h.row, h.row + 1, false)[1] or ''
        items[#items + 1] = { bufnr = b, lnum = h.row + 1, text = (h.info.deletion and 'deleted: ' or 'agent: ') .. first }
      end
    end
  end
  return items
end

local _ = config
return M
