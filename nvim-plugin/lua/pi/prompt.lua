--- The prompt buffer under a chat: multi-line markdown; `<CR>` (normal) or `<C-s>` sends,
--- during a run send is a steer and `<M-CR>` a follow-up; `<C-c>` aborts. Queued messages
--- are shown above the text (virtual lines) with their `agent/queueUpdate` state; `/`
--- completes from `agent/commands` and `@` workspace paths (`completefunc` / `omnifunc`).
local config = require('pi.config')
local util = require('pi.util')
local api = vim.api
local M = {}

local ns = api.nvim_create_namespace('pi.prompt')
local ns_hint = api.nvim_create_namespace('pi.prompt.hint')

--- Shows what the empty prompt does (virtual text, gone with the first character).
function M.placeholder(chat)
  local buf = chat.prompt_buf
  if not buf or not api.nvim_buf_is_valid(buf) then
    return
  end
  api.nvim_buf_clear_namespace(buf, ns_hint, 0, -1)
  if api.nvim_buf_line_count(buf) > 1 or (api.nvim_buf_get_lines(buf, 0, 1, false)[1] or '') ~= '' then
    return
  end
  local km = config.values.keymaps.prompt or {}
  local text
  if chat.running then
    text = ('steer Pi (%s), or queue a follow-up (%s)'):format(km.send_insert or km.send or '', km.followup or '')
  else
    text = ('Ask Pi… (%s sends; / commands, @ files)'):format(km.send_insert or km.send or '')
  end
  api.nvim_buf_set_extmark(buf, ns_hint, 0, 0, { virt_text = { { text, 'Comment' } }, virt_text_pos = 'overlay', hl_mode = 'combine' })
end

local function ensure_buf(chat)
  if chat.prompt_buf and api.nvim_buf_is_valid(chat.prompt_buf) then
    return chat.prompt_buf
  end
  local buf = api.nvim_create_buf(false, true)
  api.nvim_buf_set_name(buf, 'pi://prompt/' .. chat.session_id)
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'hide'
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = 'pi-prompt'
  require('pi.highlight').markdown(buf, config.values.chat.treesitter)
  vim.bo[buf].completefunc = "v:lua.require'pi.prompt'.complete"
  vim.bo[buf].omnifunc = "v:lua.require'pi.prompt'.complete"
  vim.b[buf].pi_session = chat.session_id
  vim.b[buf].pi_root = chat.root.root
  chat.prompt_buf = buf
  require('pi.keymaps').prompt(chat, buf)
  api.nvim_create_autocmd({ 'TextChanged', 'TextChangedI' }, {
    buffer = buf,
    callback = function()
      M.placeholder(chat)
    end,
  })
  -- The editor context's chips are read again when you come to the prompt.
  api.nvim_create_autocmd('BufEnter', {
    buffer = buf,
    callback = function()
      M.show_queue(chat)
    end,
  })
  require('pi.context').track()
  M.placeholder(chat)
  M.show_queue(chat)
  M.load_commands(chat)
  return buf
end

M.ensure_buf = ensure_buf

--- The prompt's window in this tabpage, if shown.
function M.window(chat)
  if not chat.prompt_buf then
    return nil
  end
  for _, win in ipairs(api.nvim_tabpage_list_wins(0)) do
    if api.nvim_win_get_buf(win) == chat.prompt_buf then
      return win
    end
  end
end

--- Sets the prompt window's local options (its statusline says the keys); never a global one.
function M.setup_window(win)
  local function set(name, value)
    api.nvim_set_option_value(name, value, { scope = 'local', win = win })
  end
  set('winfixheight', true)
  if vim.fn.exists('+winfixbuf') == 1 then
    set('winfixbuf', true)
  end
  set('number', false)
  set('relativenumber', false)
  set('signcolumn', 'no')
  set('wrap', true)
  set('fillchars', 'eob: ')
  local km = config.values.keymaps.prompt or {}
  local keys = {}
  for _, k in ipairs({ { km.send, 'send' }, { km.followup, 'follow-up' }, { km.abort, 'stop' } }) do
    if k[1] then
      keys[#keys + 1] = k[1] .. ' ' .. k[2]
    end
  end
  set('statusline', '%#Title# Pi prompt %* ' .. table.concat(keys, ' · '):gsub('%%', '%%%%') .. '%<')
end

--- Opens the prompt under the chat window `chat_win` (focus unchanged).
function M.open(chat, chat_win)
  local buf = ensure_buf(chat)
  if M.window(chat) then
    return
  end
  local win = api.nvim_open_win(buf, false, { split = 'below', win = chat_win, height = config.values.chat.prompt_height })
  M.setup_window(win)
  M.keep_height()
end

local keeping = false

--- A window closing elsewhere (`:cclose`, a help window) gives its rows to its neighbours, and
--- Neovim hands them to the prompt despite 'winfixheight' when it is the last window of its
--- column (and a window opened below may have squeezed it): every prompt window gets its
--- configured height back, the chat above it takes the rest.
function M.keep_height()
  if keeping then
    return
  end
  keeping = true
  api.nvim_create_autocmd('WinClosed', {
    group = api.nvim_create_augroup('pi.prompt.height', { clear = true }),
    callback = function(a)
      local closed = tonumber(a.match)
      local wins = {}
      for _, w in ipairs(api.nvim_tabpage_list_wins(0)) do
        if w ~= closed and vim.bo[api.nvim_win_get_buf(w)].filetype == 'pi-prompt' then
          wins[#wins + 1] = w
        end
      end
      if #wins > 0 then
        vim.schedule(function()
          for _, w in ipairs(wins) do
            -- Its height: the configured one (a window opened below may have squeezed it).
            if api.nvim_win_is_valid(w) and api.nvim_win_get_height(w) ~= config.values.chat.prompt_height then
              pcall(api.nvim_win_set_height, w, config.values.chat.prompt_height)
            end
          end
        end)
      end
    end,
  })
end

--- The prompt's text.
function M.text(chat)
  local buf = ensure_buf(chat)
  return table.concat(api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
end

--- Puts `text` into the prompt (fork, branch, restore after an abort).
function M.set_text(chat, text)
  local buf = ensure_buf(chat)
  api.nvim_buf_set_lines(buf, 0, -1, false, vim.split(text or '', '\n', { plain = true }))
end

--- Sends the prompt: a prompt when idle; during a run a steer (`how` "auto"/"steer") or a
--- follow-up ("followUp").
--- Pi's own `/` commands typed in the prompt, as `:Pi` subcommands (Pi's names and the
--- plugin's): `/compact focus on x` is `:Pi compact focus on x`. A prompt template, skill or
--- extension command of the same name goes first (it is the server's).
M.builtin = {
  compact = 'compact',
  model = 'model',
  thinking = 'thinking',
  tree = 'tree',
  fork = 'fork',
  clone = 'clone',
  new = 'new',
  resume = 'sessions',
  sessions = 'sessions',
  name = 'rename',
  rename = 'rename',
  session = 'stats',
  stats = 'stats',
  export = 'export',
  label = 'label',
  changes = 'changes',
  rewind = 'rewind',
  diff = 'diff',
  image = 'image',
}

--- The `:Pi` subcommand and its arguments when `text` is one of Pi's own `/` commands.
local function builtin_of(chat, text)
  local name, args = text:match('^/([%w%-]+)%s*(.-)%s*$')
  if not name or not M.builtin[name] then
    return nil
  end
  for _, c in ipairs(chat.commands or {}) do
    if c.name == name then
      return nil
    end
  end
  return M.builtin[name], args
end

function M.send(chat, how)
  local text = vim.trim(M.text(chat))
  if text == '' then
    return
  end
  local sub, args = builtin_of(chat, text)
  if sub then
    M.set_text(chat, '')
    return require('pi.commands').subcommands[sub](args, { range = 0 })
  end
  M.set_text(chat, '')
  require('pi.recall').reset(chat)
  local pi = require('pi')
  if chat.running then
    pi.queue(chat, how == 'followUp' and 'followUp' or 'steer', text)
  elseif how == 'followUp' then
    pi.queue(chat, 'followUp', text)
  else
    pi.prompt_chat(chat, text)
  end
end

--- Shows the attached images and the queued messages above the prompt's first line.
function M.show_queue(chat)
  local buf = chat.prompt_buf
  if not buf or not api.nvim_buf_is_valid(buf) then
    return
  end
  api.nvim_buf_clear_namespace(buf, ns, 0, -1)
  local items = chat:queued()
  local vl = require('pi.images').lines(chat)
  vim.list_extend(vl, require('pi.context').lines(chat))
  if #items == 0 and #vl == 0 then
    -- The view's filler rows above the first line go with the lines (else Neovim draws them
    -- as a row of '-').
    local win = M.window(chat)
    if win then
      pcall(api.nvim_win_call, win, function()
        vim.fn.winrestview({ topfill = 0 })
      end)
    end
    return
  end
  for _, q in ipairs(items) do
    local text = tostring(q.text):gsub('\n.*', ' …')
    vl[#vl + 1] = { { ('  ⧗ %s (%s): '):format(q.delivery, q.state), 'Comment' }, { text, 'Normal' } }
  end
  api.nvim_buf_set_extmark(buf, ns, 0, 0, { virt_lines = vl, virt_lines_above = true })
  local win = M.window(chat)
  if win then
    pcall(api.nvim_win_call, win, function()
      vim.fn.winrestview({ topfill = #vl })
    end)
  end
end

--- Lets the user remove or edit one queued message (or clear all).
function M.edit_queue(chat)
  local items = chat:queued()
  if #items == 0 then
    return util.notify('nothing is queued')
  end
  local client = require('pi.client')
  util.select(items, {
    prompt = 'Queued message',
    format_item = function(q)
      return ('%s (%s): %s'):format(q.delivery, q.state, q.text)
    end,
  }, function(q)
    if not q then
      return
    end
    util.select({ 'Remove', 'Edit', 'Clear all' }, { prompt = 'Queued: ' .. q.text }, function(action)
      if action == 'Remove' then
        client.request(chat.root, 'agent/queue/remove', { sessionId = chat.session_id, queueId = q.queueId }, 'remove the queued message')
      elseif action == 'Edit' then
        util.input({ prompt = 'Text: ', default = q.text }, function(text)
          if text and text ~= '' then
            client.request(chat.root, 'agent/queue/edit', { sessionId = chat.session_id, queueId = q.queueId, text = text }, 'edit the queued message')
          end
        end)
      elseif action == 'Clear all' then
        client.request(chat.root, 'agent/queue/clear', { sessionId = chat.session_id }, 'clear the queue', function(r)
          local texts = {}
          for _, d in ipairs(r.dropped or {}) do
            texts[#texts + 1] = d.text
          end
          if #texts > 0 then
            M.set_text(chat, table.concat(texts, '\n\n'))
          end
        end)
      end
    end)
  end)
end

--- Fetches the `/` commands of the session (prompt templates, skills, extension commands).
function M.load_commands(chat)
  local client = require('pi.client')
  chat.commands = chat.commands or {}
  client.request(chat.root, 'agent/commands', { sessionId = chat.session_id }, 'list the / commands', function(r)
    chat.commands = r.commands or {}
    client.request(chat.root, 'agent/extension/commands', { sessionId = chat.session_id }, 'list the extension commands', function(e)
      vim.list_extend(chat.commands, e.commands or {})
    end, function()
      return true
    end)
  end, function()
    return true
  end)
end

--- `completefunc` / `omnifunc` of the prompt: `/name` from `agent/commands`, `@path` from the
--- workspace's files and folders.
function M.complete(findstart, base)
  local line = api.nvim_get_current_line()
  local col = api.nvim_win_get_cursor(0)[2]
  if findstart == 1 then
    local before = line:sub(1, col)
    local s = before:find('@[^%s]*$') or before:find('/[%w:_%-%.]*$')
    return s and (s - 1) or -3
  end
  local chat = require('pi.chat').chats[vim.b.pi_session or '']
  local out = {}
  if base:sub(1, 1) == '@' then
    local root = vim.b.pi_root or vim.fn.getcwd()
    local prefix = base:sub(2)
    local found = vim.fn.globpath(root, prefix .. '*', false, true)
    for _, path in ipairs(found) do
      local rel = path:sub(#root + 2)
      if vim.fn.isdirectory(path) == 1 then
        rel = rel .. '/'
      end
      out[#out + 1] = { word = '@' .. rel, menu = 'file' }
    end
    return out
  end
  local seen = {}
  for _, c in ipairs(chat and chat.commands or {}) do
    local word = '/' .. c.name
    seen[c.name] = true
    if word:sub(1, #base) == base then
      out[#out + 1] = { word = word, menu = c.source, info = c.description or '', abbr = word .. (c.argumentHint and (' ' .. c.argumentHint) or '') }
    end
  end
  local names = vim.tbl_keys(M.builtin)
  table.sort(names)
  for _, name in ipairs(names) do
    local word = '/' .. name
    if not seen[name] and word:sub(1, #base) == base then
      out[#out + 1] = { word = word, menu = 'Pi', info = ':Pi ' .. M.builtin[name] }
    end
  end
  return out
end

return M
