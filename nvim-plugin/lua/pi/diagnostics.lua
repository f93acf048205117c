--- `agent/diagnostics`: the editor's diagnostics from `vim.diagnostic.get`, positions in the
--- negotiated encoding (LSP `Diagnostic`s).
local api = vim.api
local M = {}

local SEVERITY = { [vim.diagnostic.severity.ERROR] = 1, [vim.diagnostic.severity.WARN] = 2, [vim.diagnostic.severity.INFO] = 3, [vim.diagnostic.severity.HINT] = 4 }

local function col_to(buf, lnum, col, encoding)
  if encoding == 'utf-8' then
    return col
  end
  local line = api.nvim_buf_get_lines(buf, lnum, lnum + 1, false)[1]
  if not line then
    return col
  end
  local ok, idx = pcall(vim.str_utfindex, line, encoding, math.min(col, #line), false)
  return ok and idx or col
end

local function convert(buf, d, encoding)
  local end_lnum = d.end_lnum or d.lnum
  local end_col = d.end_col or d.col
  return {
    range = {
      start = { line = d.lnum, character = col_to(buf, d.lnum, d.col, encoding) },
      ['end'] = { line = end_lnum, character = col_to(buf, end_lnum, end_col, encoding) },
    },
    severity = SEVERITY[d.severity] or 1,
    message = d.message,
    source = d.source,
    code = d.code,
  }
end

--- The answer to `agent/diagnostics` params `{sessionId, uris?}`.
function M.collect(params, encoding)
  local bufs = {}
  if type(params.uris) == 'table' then
    for _, uri in ipairs(params.uris) do
      local b = vim.fn.bufnr(vim.uri_to_fname(uri))
      if b > 0 then
        bufs[#bufs + 1] = { b, uri }
      else
        bufs[#bufs + 1] = { nil, uri }
      end
    end
  else
    local seen = {}
    for _, d in ipairs(vim.diagnostic.get(nil)) do
      if not seen[d.bufnr] and api.nvim_buf_is_valid(d.bufnr) then
        seen[d.bufnr] = true
        local name = api.nvim_buf_get_name(d.bufnr)
        if name ~= '' then
          bufs[#bufs + 1] = { d.bufnr, vim.uri_from_fname(name) }
        end
      end
    end
  end
  local items = {}
  for _, bu in ipairs(bufs) do
    local b, uri = bu[1], bu[2]
    local list = {}
    if b then
      for _, d in ipairs(vim.diagnostic.get(b)) do
        list[#list + 1] = convert(b, d, encoding)
      end
    end
    items[#items + 1] = { uri = uri, diagnostics = list }
  end
  return { items = items }
end

return M
