--- Extension UI (`agent/ui/request`, `agent/ui/notification`) through `vim.ui.select`,
--- `vim.ui.input`, a confirm choice and a scratch buffer for `editor`; `timeout` honoured.
--- Requests run in Neovim's server-request coroutine and yield until answered.
local util = require('pi.util')
local api = vim.api
local M = {}

--- Whether the user is working in one of the plugin's own buffers (normal mode): a dialog may
--- take the focus then; elsewhere it opens beside without taking it (typing never lands in it).
local function in_pi_buffer()
  local ft = vim.bo.filetype
  return (ft == 'pi-chat' or ft == 'pi-prompt' or ft == 'pi-tree') and api.nvim_get_mode().mode == 'n'
end

local editors = 0

--- `editor`: a scratch buffer holding `prefill`; `:w` or `<C-s>` submits its text, `q` (normal
--- mode) or closing the window cancels.
local function editor(p, done)
  editors = editors + 1
  local buf = api.nvim_create_buf(false, true)
  api.nvim_buf_set_name(buf, ('pi://editor/%d'):format(editors))
  vim.bo[buf].buftype = 'acwrite'
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = 'markdown'
  api.nvim_buf_set_lines(buf, 0, -1, false, vim.split(p.prefill or '', '\n', { plain = true }))
  vim.bo[buf].modified = false
  local focus = in_pi_buffer()
  local win = api.nvim_open_win(buf, focus, { split = 'below', win = util.host_win(), height = 12 })
  local title = tostring(p.title or 'Pi')
  local limit = type(p.timeout) == 'number' and p.timeout > 0 and (' · answer within %d s'):format(math.ceil(p.timeout / 1000)) or ''
  api.nvim_set_option_value('winbar', ' ' .. title:gsub('%%', '%%%%') .. ' — :w or <C-s> submit · q cancel' .. limit, { scope = 'local', win = win })
  local finished = false
  local function close()
    finished = true
    if api.nvim_buf_is_valid(buf) then
      pcall(api.nvim_buf_delete, buf, { force = true })
    end
  end
  local function submit()
    if finished then
      return
    end
    local text = table.concat(api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
    if api.nvim_get_mode().mode:sub(1, 1) == 'i' then
      vim.cmd('stopinsert')
    end
    close()
    done({ value = text })
  end
  vim.keymap.set({ 'n', 'i' }, '<C-s>', submit, { buffer = buf, desc = 'Pi: submit the text' })
  vim.keymap.set('n', 'q', function()
    close()
    done({ cancelled = true })
  end, { buffer = buf, nowait = true, desc = 'Pi: cancel' })
  api.nvim_create_autocmd('BufWriteCmd', { buffer = buf, callback = vim.schedule_wrap(submit) })
  api.nvim_create_autocmd('BufWipeout', {
    buffer = buf,
    once = true,
    callback = function()
      if not finished then
        finished = true
        done({ cancelled = true })
      end
    end,
  })
  if not focus then
    util.notify_line(('%s asks for text (%s): the editor window is open below'):format(tostring(p.extension or 'an extension'), title), vim.log.levels.WARN)
  end
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
    util.select(p.options or {}, { prompt = title }, function(choice)
      done(choice and { value = choice } or { cancelled = true })
    end)
  elseif p.method == 'confirm' then
    util.select({ 'Yes', 'No' }, { prompt = title .. (p.message and (': ' .. p.message) or '') }, function(choice)
      done(choice and { confirmed = choice == 'Yes' } or { cancelled = true })
    end)
  elseif p.method == 'input' then
    util.input({ prompt = title .. ': ', default = p.placeholder and '' or nil }, function(text)
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
