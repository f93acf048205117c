--- Extension UI (`agent/ui/request`, `agent/ui/notification`) through `vim.ui.select`,
--- `vim.ui.input`, a confirm choice and a scratch buffer for `editor`; `timeout` honoured.
--- Requests run in Neovim's server-request coroutine and yield until answered.
local util = require('pi.util')
local api = vim.api
local M = {}

local function editor(p, done)
  local buf = api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].filetype = 'markdown'
  api.nvim_buf_set_lines(buf, 0, -1, false, vim.split(p.prefill or '', '\n', { plain = true }))
  local win = api.nvim_open_win(buf, true, { split = 'below', win = -1, height = 12 })
  api.nvim_set_option_value('winbar', ' ' .. tostring(p.title) .. ' — <C-s> submit · q cancel', { scope = 'local', win = win })
  local function close()
    if api.nvim_win_is_valid(win) then
      api.nvim_win_close(win, true)
    end
  end
  vim.keymap.set({ 'n', 'i' }, '<C-s>', function()
    local text = table.concat(api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
    vim.cmd('stopinsert')
    close()
    done({ value = text })
  end, { buffer = buf })
  vim.keymap.set('n', 'q', function()
    close()
    done({ cancelled = true })
  end, { buffer = buf })
  return close
end

--- Answers one `agent/ui/request` (yields until the user answers or the timeout).
function M.request(p, st)
  local co = coroutine.running()
  local answered = false
  local closer
  local function done(result)
    if answered then
      return
    end
    answered = true
    vim.schedule(function()
      if st then
        require('pi.client').flush_changes(st)
      end
      coroutine.resume(co, result)
    end)
  end
  local title = tostring(p.title or p.extension or 'Pi')
  if p.method == 'select' then
    vim.ui.select(p.options or {}, { prompt = title }, function(choice)
      done(choice and { value = choice } or { cancelled = true })
    end)
  elseif p.method == 'confirm' then
    vim.ui.select({ 'Yes', 'No' }, { prompt = title .. (p.message and (': ' .. p.message) or '') }, function(choice)
      done(choice and { confirmed = choice == 'Yes' } or { cancelled = true })
    end)
  elseif p.method == 'input' then
    vim.ui.input({ prompt = title .. ': ', default = p.placeholder and '' or nil }, function(text)
      done(text and { value = text } or { cancelled = true })
    end)
  elseif p.method == 'editor' then
    closer = editor(p, done)
  else
    return { cancelled = true }
  end
  if type(p.timeout) == 'number' and p.timeout > 0 then
    vim.defer_fn(function()
      if not answered then
        if closer then
          closer()
        end
        done({ cancelled = true })
      end
    end, p.timeout)
  end
  if not co then
    return { cancelled = true }
  end
  return coroutine.yield()
end

--- `agent/ui/notification`: notify → `vim.notify`; setStatus → a statusline segment.
function M.notification(p, st)
  if p.method == 'notify' then
    local levels = { info = vim.log.levels.INFO, warning = vim.log.levels.WARN, error = vim.log.levels.ERROR }
    util.notify(tostring(p.message), levels[p.notifyType] or vim.log.levels.INFO)
  elseif p.method == 'setStatus' and st then
    st.status.ext = st.status.ext or {}
    st.status.ext[p.statusKey or '?'] = p.statusText
    require('pi.status').changed()
  end
end

return M
