--- Highlighting of the plugin's buffers: the chat and prompt as markdown through tree-sitter
--- (Neovim's bundled markdown parser registered for the `pi-chat` / `pi-prompt` filetypes, so
--- code fences are highlighted by their injected language when its parser is installed), with
--- the regex `markdown` syntax as the fallback; diffs with line colours and word-level marks.
--- Nothing global changes: the language registration and the default-linked highlight groups
--- (`PiDiffAdd`, `PiDiffDelete`, `PiDiffChange`, `PiDiffText`) are what plugins define.
local api = vim.api
local M = {}

local groups_done = false

--- Defines the plugin's highlight groups (links, `default`: a colour scheme's own win).
function M.groups()
  if groups_done then
    return
  end
  groups_done = true
  local links = {
    PiDiffAdd = 'DiffAdd',
    PiDiffDelete = 'DiffDelete',
    PiDiffChange = 'DiffChange',
    PiDiffText = 'DiffText',
    PiPlanHeader = 'Title',
    PiPlanCurrent = 'CursorLine',
    PiPlanDone = 'Comment',
    PiMcpConnected = 'DiagnosticOk',
    PiMcpFailed = 'DiagnosticError',
    PiMcpPending = 'DiagnosticWarn',
    PiMcpDisabled = 'Comment',
  }
  for name, target in pairs(links) do
    api.nvim_set_hl(0, name, { link = target, default = true })
  end
end

local registered = false

--- Highlights `buf` as markdown: tree-sitter when the markdown parser loads (`opts.treesitter`
--- not false), else the regex syntax. Returns "treesitter" or "syntax".
--- @param buf integer
--- @param use_ts boolean|nil
function M.markdown(buf, use_ts)
  if use_ts ~= false then
    if not registered then
      registered = true
      pcall(vim.treesitter.language.register, 'markdown', { 'pi-chat', 'pi-prompt' })
    end
    local ok = pcall(vim.treesitter.start, buf, 'markdown')
    if ok then
      -- The inline grammar's query is compiled now, with the buffer (tens of ms, once), not at
      -- the first streamed word.
      pcall(vim.treesitter.query.get, 'markdown_inline', 'highlights')
      return 'treesitter'
    end
  end
  vim.bo[buf].syntax = 'markdown'
  return 'syntax'
end

--- While a run streams into a long chat (at least `max_lines` lines), tree-sitter's markdown
--- parser would re-parse the whole buffer for every coalesced write (tens of ms of CPU each on
--- a 10,000-line chat, in Neovim 0.11's background slices): the chat is highlighted by the
--- regex markdown syntax until the run ends, then by tree-sitter again (one parse). Returns
--- true when it paused.
--- @param buf integer
--- @param max_lines integer|false
function M.pause(buf, max_lines)
  if not max_lines or not vim.treesitter.highlighter.active[buf] then
    return false
  end
  if api.nvim_buf_line_count(buf) < max_lines then
    return false
  end
  vim.treesitter.stop(buf)
  vim.bo[buf].syntax = 'markdown'
  return true
end

--- Ends a `pause`: tree-sitter highlights the buffer again.
function M.resume(buf)
  if not api.nvim_buf_is_valid(buf) or vim.treesitter.highlighter.active[buf] then
    return
  end
  if not pcall(vim.treesitter.start, buf, 'markdown') then
    vim.bo[buf].syntax = 'markdown'
  end
end

------------------------------------------------------------------------------------------
-- Diffs

--- Splits `s` into tokens: words (letters, digits, `_`), runs of spaces, single other bytes
--- (a UTF-8 sequence stays whole). Returns the tokens and their byte starts (0-based).
local function tokens(s)
  local out, starts = {}, {}
  local i, n = 1, #s
  while i <= n do
    local j
    local c = s:byte(i)
    if s:find('^[%w_]', i) then
      j = select(2, s:find('^[%w_]+', i))
    elseif c == 32 or c == 9 then
      j = select(2, s:find('^[ \t]+', i))
    elseif c >= 0xC0 then
      j = i
      while j + 1 <= n and s:byte(j + 1) >= 0x80 and s:byte(j + 1) < 0xC0 do
        j = j + 1
      end
    else
      j = i
    end
    out[#out + 1] = s:sub(i, j)
    starts[#starts + 1] = i - 1
    i = j + 1
  end
  return out, starts
end

--- The changed byte ranges of `old` and `new` (two versions of one line) at word level:
--- `{ {s, e}, ... }` for each (0-based, end exclusive), or nil when the lines have too little
--- in common for word marks to help (then the whole line's colour says it).
--- @param old string
--- @param new string
function M.word_ranges(old, new)
  if #old > 2000 or #new > 2000 then
    return nil
  end
  local ta, sa = tokens(old)
  local tb, sb = tokens(new)
  if #ta == 0 or #tb == 0 then
    return nil
  end
  -- vim.diff compares lines: one token per line (tokens hold no newline).
  local hunks = vim.diff(table.concat(ta, '\n') .. '\n', table.concat(tb, '\n') .. '\n', { result_type = 'indices', algorithm = 'histogram' }) or {}
  local ra, rb = {}, {}
  local changed_a, changed_b = 0, 0
  local function add(ranges, toks, starts, from, count)
    if count <= 0 then
      return 0
    end
    local s = starts[from]
    local last = from + count - 1
    local e = starts[last] + #toks[last]
    ranges[#ranges + 1] = { s, e }
    return e - s
  end
  for _, h in ipairs(hunks) do
    changed_a = changed_a + add(ra, ta, sa, h[1], h[2])
    changed_b = changed_b + add(rb, tb, sb, h[3], h[4])
  end
  -- Mostly rewritten: no word marks.
  local common = math.max(#old - changed_a, 0)
  if common < 0.3 * math.max(#old, #new) then
    return nil
  end
  return ra, rb
end

local function is_removed(l)
  return l:sub(1, 1) == '-' and not l:match('^%-%-%- ')
end

local function is_added(l)
  return l:sub(1, 1) == '+' and not l:match('^%+%+%+ ')
end

--- Colours the unified diff `lines` drawn in `buf` from row `row` (0-based) in namespace
--- `ns`: added / removed / hunk-header lines, and inside a block of removed lines followed by
--- added ones the changed words of each pair (the i-th removed with the i-th added line).
--- @param buf integer
--- @param ns integer
--- @param row integer
--- @param lines string[]
function M.diff(buf, ns, row, lines)
  M.groups()
  -- The line colour is a range highlight to the end of the window line (`hl_eol`), not a
  -- `line_hl_group`: a line highlight would cover the word marks drawn over it.
  local function line_hl(i, hl)
    pcall(api.nvim_buf_set_extmark, buf, ns, row + i - 1, 0, { end_row = row + i, end_col = 0, hl_group = hl, hl_eol = true, priority = 100 })
  end
  local function word_hl(i, s, e)
    -- +1: the diff's own `+` / `-` column comes first.
    pcall(api.nvim_buf_set_extmark, buf, ns, row + i - 1, s + 1, { end_col = e + 1, hl_group = 'PiDiffText', priority = 110 })
  end
  local i = 1
  while i <= #lines do
    local l = lines[i]
    if is_removed(l) then
      local rs = i
      while i <= #lines and is_removed(lines[i]) do
        line_hl(i, 'PiDiffDelete')
        i = i + 1
      end
      local as = i
      while i <= #lines and is_added(lines[i]) do
        line_hl(i, 'PiDiffAdd')
        i = i + 1
      end
      local pairs_n = math.min(as - rs, i - as)
      for k = 0, pairs_n - 1 do
        local ra, rb = M.word_ranges(lines[rs + k]:sub(2), lines[as + k]:sub(2))
        if ra then
          for _, r in ipairs(ra) do
            word_hl(rs + k, r[1], r[2])
          end
          for _, r in ipairs(rb) do
            word_hl(as + k, r[1], r[2])
          end
        end
      end
    else
      if is_added(l) then
        line_hl(i, 'PiDiffAdd')
      elseif l:match('^@@') then
        line_hl(i, 'PiDiffChange')
      end
      i = i + 1
    end
  end
end

return M
