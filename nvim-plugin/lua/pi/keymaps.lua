--- Buffer-local keymaps (all configurable under `setup({keymaps = ...})`, `false` disables
--- one). No global mapping is ever made.
local config = require('pi.config')
local api = vim.api
local M = {}

local function map(buf, modes, lhs, rhs, desc, opts)
  if not lhs or lhs == false or lhs == '' then
    return
  end
  local o = vim.tbl_extend('force', { buffer = buf, silent = true, nowait = true, desc = 'Pi: ' .. desc }, opts or {})
  vim.keymap.set(modes, lhs, rhs, o)
end

--- The chat buffer's keymaps.
function M.chat(chat)
  local km = config.values.keymaps.chat or {}
  local buf = chat.buf
  map(buf, 'n', km.abort, function()
    require('pi').abort(chat)
  end, 'abort the run')
  map(buf, 'n', km.close, function()
    chat:close()
  end, 'close the chat')
  M.esc(buf, km.esc, chat)
  map(buf, 'n', km.older, function()
    chat:load_older()
  end, 'load older history')
  map(buf, 'n', km.prompt, function()
    local pw = require('pi.prompt').window(chat)
    if pw then
      api.nvim_set_current_win(pw)
      vim.cmd('startinsert!')
    end
  end, 'go to the prompt')
  map(buf, 'n', km.rewind_turn, function()
    require('pi.commands').rewind_turn(chat)
  end, 'rewind to before this turn (conversation and files)')
  map(buf, 'n', km.edit_turn, function()
    require('pi.commands').edit_turn(chat)
  end, 'edit this message and send it again as a branch')
  map(buf, 'n', km.open_file, function()
    require('pi.links').open_under_cursor(chat)
  end, 'open the file named under the cursor at its line')
  map(buf, 'n', km.yank_code, function()
    require('pi.links').yank_block(vim.v.register)
  end, 'yank the code block under the cursor')
  map(buf, 'n', km.insert_code, function()
    require('pi.links').insert_block()
  end, 'put the code block under the cursor at the cursor of the window beside the chat')
  map(buf, 'n', km.new_file_code, function()
    require('pi.links').new_file_block(chat)
  end, 'open the code block under the cursor as a new file')
  -- <CR>: the answer on its row, else the fold under the cursor opens or closes, else <CR>.
  if km.toggle then
    map(buf, 'n', km.toggle, function()
      local perm = require('pi.permission')
      local row = api.nvim_win_get_cursor(0)[1] - 1
      local q = perm.at_row(chat, row)
      local i = q and q.choices_at and (row - q.header_row - q.choices_at + 1)
      if q and i and i >= 1 and i <= #q.choices then
        vim.schedule(function()
          perm.answer(q, i)
        end)
        return ''
      end
      if vim.fn.foldlevel(row + 1) > 0 then
        return 'za'
      end
      return km.toggle
    end, 'answer on this row, or open / close the fold', { expr = true, replace_keycodes = true, remap = false })
  end
  -- Mnemonic permission keys: answer only with the cursor on an open question; elsewhere the
  -- key does what it always does.
  local pk = config.values.keymaps.permission or {}
  for _, key in ipairs({ 'allow', 'session', 'workspace', 'reject', 'reject_reason' }) do
    local lhs = pk[key]
    if lhs then
      map(buf, 'n', lhs, function()
        local perm = require('pi.permission')
        local row = api.nvim_win_get_cursor(0)[1] - 1
        if perm.at_row(chat, row) then
          -- Taken only when no other key follows within 'timeoutlen'.
          vim.schedule(function()
            perm.deliberate(lhs, function()
              perm.answer_key(chat, key)
            end, false)
          end)
          return ''
        end
        if lhs == 'a' then
          -- Elsewhere in the (read-only) chat `a` types where `i` does: in the prompt.
          vim.schedule(function()
            local pw = require('pi.prompt').window(chat)
            if pw then
              api.nvim_set_current_win(pw)
              vim.cmd('startinsert!')
            end
          end)
          return ''
        end
        return lhs
      end, 'answer the permission question (' .. key .. ')', { expr = true, replace_keycodes = true, remap = false })
    end
  end
end

--- Digits answer the chat's oldest open question from anywhere in the chat while one is
--- open, when typed alone (see `permission.deliberate`); without one they are only counts.
function M.permission_changed(chat)
  local perm = require('pi.permission')
  local q = perm.first(chat)
  local buf = chat.buf
  if not api.nvim_buf_is_valid(buf) then
    return
  end
  for i = 1, 9 do
    pcall(vim.keymap.del, 'n', tostring(i), { buffer = buf })
  end
  if q then
    -- A digit answers only when no other key follows within 'timeoutlen'; else it goes back
    -- to Neovim as a count (`2j` moves two lines and answers nothing).
    for i = 1, #q.choices do
      map(buf, 'n', tostring(i), function()
        perm.deliberate(tostring(i), function()
          perm.answer(q, i)
        end, true)
      end, 'answer: ' .. q.choices[i].label)
    end
  end
end

--- The prompt buffer's keymaps.
function M.prompt(chat, buf)
  local km = config.values.keymaps.prompt or {}
  local prompt = require('pi.prompt')
  map(buf, 'n', km.send, function()
    prompt.send(chat, 'auto')
  end, 'send (steer during a run)')
  map(buf, { 'n', 'i' }, km.send_insert, function()
    prompt.send(chat, 'auto')
  end, 'send (steer during a run)')
  map(buf, { 'n', 'i' }, km.followup, function()
    prompt.send(chat, 'followUp')
  end, 'queue a follow-up')
  -- Earlier prompts of this workspace: <Up> on the first line, <Down> on the last.
  for lhs, step in pairs({ [km.recall_older or false] = -1, [km.recall_newer or false] = 1 }) do
    if lhs then
      map(buf, { 'n', 'i' }, lhs, function()
        if not require('pi.recall').step(chat, step) then
          -- Not on the first / last line: the key moves the cursor as usual.
          api.nvim_feedkeys(api.nvim_replace_termcodes(lhs, true, false, true), 'n', false)
        end
      end, step < 0 and 'recall the earlier prompt' or 'recall the later prompt')
    end
  end
  map(buf, { 'n', 'i' }, km.abort, function()
    require('pi').abort(chat)
  end, 'abort the run')
  map(buf, 'n', km.queue, function()
    prompt.edit_queue(chat)
  end, 'edit or remove a queued message')
  map(buf, { 'n', 'i' }, km.drop_context, function()
    require('pi.context').drop(chat)
  end, 'drop the last editor context chip')
  map(buf, { 'n', 'i' }, km.paste_image, function()
    require('pi.images').attach_clipboard(chat)
  end, 'attach the clipboard image')
  M.esc(buf, km.esc, chat)
end

--- `<Esc>` in normal mode: during a run it stops it (asking once in a long run, see
--- `chat.esc_confirm_after`); otherwise it is the usual key.
function M.esc(buf, lhs, chat)
  if not lhs then
    return
  end
  -- The habit "<Esc><Esc>" that leaves insert mode: the second one within a second of leaving
  -- insert mode in this buffer is only an <Esc>.
  local left = 0
  api.nvim_create_autocmd('InsertLeave', {
    buffer = buf,
    callback = function()
      left = vim.uv.now()
    end,
  })
  map(buf, 'n', lhs, function()
    if (chat.running or chat.state == 'sending') and vim.uv.now() - left > 1000 then
      vim.schedule(function()
        require('pi').esc(chat)
      end)
      return ''
    end
    return lhs
  end, 'stop the run (asks once in a long run)', { expr = true, replace_keycodes = true, remap = false })
end

--- Hunk keymaps of a buffer the agent edited (made once per buffer).
function M.hunks(buf)
  if vim.b[buf].pi_hunk_maps then
    return
  end
  vim.b[buf].pi_hunk_maps = true
  local km = config.values.keymaps.hunks or {}
  local hunks = require('pi.hunks')
  map(buf, 'n', km.next, function()
    hunks.jump(1)
  end, 'next agent change')
  map(buf, 'n', km.prev, function()
    hunks.jump(-1)
  end, 'previous agent change')
  map(buf, 'n', km.keep, hunks.keep, 'keep the agent change')
  map(buf, 'n', km.undo, hunks.undo, 'undo the agent change')
end

--- The session tree buffer's keymaps.
function M.tree(buf, actions)
  local km = config.values.keymaps.tree or {}
  map(buf, 'n', km.branch, actions.branch, 'branch here')
  map(buf, 'n', km.summarize, actions.summarize, 'branch here with a summary')
  map(buf, 'n', km.label, actions.label, 'label this entry')
  map(buf, 'n', km.close, actions.close, 'close the tree')
end

return M
