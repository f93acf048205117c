--- `:Pi policy`: the approval policy, one choice in one place. The user picks the policy, then
--- where it goes, each place saying what it changes and what wins over it. Precedence, first to
--- last (docs/protocol.md "Permission requests"): the session's own choice
--- (`agent/permissions/set`), the plugin's `approval_policy` (sent as the server's
--- `initializationOptions.approvalPolicy`), the project's `.pi/settings.json`, the user's Pi
--- settings (`$PI_CODING_AGENT_DIR/settings.json`, else `~/.pi/agent/settings.json`). A
--- session's own choice is not inherited by other or new sessions.
local config = require('pi.config')
local util = require('pi.util')

local M = {}

--- The policies as the user reads them, then `default` (back to what the settings say).
M.policies = {
  { name = 'ask', text = 'ask before every tool call (edits with their diff)' },
  { name = 'auto-edit', text = 'file edits land in the buffer; commands ask' },
  { name = 'approve-all', text = 'run every tool call without asking' },
  { name = 'default', text = 'no choice of its own here: what the next place says, else auto-edit' },
}

--- The places a policy goes, by name.
M.scope_names = { 'session', 'workspace', 'user' }

--- The user's Pi settings file.
function M.user_file()
  local dir = os.getenv('PI_CODING_AGENT_DIR')
  if not dir or dir == '' then
    dir = vim.fs.joinpath(vim.uv.os_homedir() or '~', '.pi', 'agent')
  end
  return vim.fs.joinpath(dir, 'settings.json')
end

--- The project's Pi settings file of the workspace `root` (a folder).
function M.project_file(root)
  return vim.fs.joinpath(root, '.pi', 'settings.json')
end

--- The sentence said once `policy` is in force for the session (the server's answer).
function M.notice(policy)
  if policy == 'ask' then
    return 'this session asks before every tool call (edits with their diff)'
  elseif policy == 'auto-edit' then
    return "this session's file edits land in the buffer; commands ask"
  elseif policy == 'approve-all' then
    return 'this session runs every tool call without asking'
  end
  return ('approval policy "%s" is in force for this session'):format(tostring(policy))
end

--- The scope picker's items `{scope, label}`: each says what it changes and what wins over it.
--- `has_session`: a session is open (its own choice is offered first).
function M.scope_items(has_session, root)
  local editor = config.values.approval_policy
  local wins = editor and (' — your setup\'s approval_policy "%s" wins'):format(editor) or ''
  local items = {}
  if has_session then
    items[#items + 1] = { scope = 'session', label = 'this session only (until it closes; wins over every settings file)' }
  end
  items[#items + 1] = {
    scope = 'workspace',
    label = ('this workspace: %s (new sessions here)%s'):format(vim.fn.fnamemodify(M.project_file(root), ':~:.'), wins),
  }
  items[#items + 1] = {
    scope = 'user',
    label = ('your Pi settings: %s (workspaces without their own)%s'):format(vim.fn.fnamemodify(M.user_file(), ':~'), wins),
  }
  return items
end

local function json_string(s)
  return vim.json.encode(s)
end

--- Sets (`value` a string) or removes (`value` nil) the top-level `key` in the JSON object held
--- by `file`, keeping every other byte of the file; creates the file (and its folder) when
--- missing. Returns true, or nil and why (a file that is not a JSON object is left as it is).
function M.write_setting(file, key, value)
  local text = ''
  local f = io.open(file, 'rb')
  if f then
    text = f:read('*a') or ''
    f:close()
  end
  if vim.trim(text) == '' then
    text = '{}\n'
  end
  local ok, obj = pcall(vim.json.decode, text)
  if not ok or type(obj) ~= 'table' or not text:match('^%s*{') then
    return nil, vim.fn.fnamemodify(file, ':~:.') .. ' does not hold a JSON object: left as it is'
  end
  local qkey = vim.pesc(json_string(key))
  -- The key's pair as written: `"key": "value"` or `"key": null`.
  local pair = qkey .. '%s*:%s*"[^"\\]*"'
  local pair_null = qkey .. '%s*:%s*null'
  local found = text:find(pair) and pair or (text:find(pair_null) and pair_null or nil)
  local out
  if found and value ~= nil then
    out = text:gsub(found, function()
      return json_string(key) .. ': ' .. json_string(value)
    end, 1)
  elseif found then
    -- Removed with the comma that joined it to the next pair, else to the one before.
    local n
    out, n = text:gsub(found .. '%s*,%s*', '', 1)
    if n == 0 then
      out, n = text:gsub(',%s*' .. found, '', 1)
    end
    if n == 0 then
      out = text:gsub(found, '', 1)
    end
  elseif value ~= nil then
    local empty = text:match('^%s*{%s*}') ~= nil
    out = text:gsub('{', function()
      return '{\n  ' .. json_string(key) .. ': ' .. json_string(value) .. (empty and '\n' or ',')
    end, 1)
  else
    return true
  end
  -- What is written must read back as the object with the key as asked.
  local ok2, back = pcall(vim.json.decode, out)
  if not ok2 or type(back) ~= 'table' or (back[key] ~= value and not (value == nil and back[key] == vim.NIL)) then
    return nil, ('could not set %s in %s without changing the rest: edit it by hand'):format(key, file)
  end
  vim.fn.mkdir(vim.fn.fnamemodify(file, ':h'), 'p')
  local w, err = io.open(file, 'wb')
  if not w then
    return nil, ('could not write %s: %s'):format(file, tostring(err))
  end
  w:write(out)
  w:close()
  return true
end

--- Writes `key` = `value` (`nil` removes the key) into the settings file of `scope`
--- (`workspace`: the project's `.pi/settings.json`; `user`: the user's Pi settings) and says in
--- one line (a longer one raises "Press ENTER") where it went and whether it is in force: not
--- in an untrusted workspace, not while the plugin option `editor_opt` of the same meaning is
--- set (it wins), else `effect`.
function M.write_and_tell(st, scope, key, value, editor_opt, effect)
  local file = scope == 'workspace' and M.project_file(st.root) or M.user_file()
  local ok, why = M.write_setting(file, key, value)
  if not ok then
    return util.notify(why, vim.log.levels.ERROR)
  end
  local editor = config.values[editor_opt]
  local untrusted = scope == 'workspace' and not require('pi.client').trusted(st.root)
  util.notify(('%s %s in %s: %s'):format(
    key,
    value and ('"' .. value .. '"') or 'removed',
    vim.fn.fnamemodify(file, ':~:.'),
    untrusted and 'not loaded, this workspace is not trusted'
      or (editor and ('your setup\'s %s "%s" wins'):format(editor_opt, editor))
      or effect
  ))
end

--- Puts `policy` (a name of `M.policies`) in `scope` (`session` / `workspace` / `user`) for
--- the workspace state `st` (its chat's session for `session`).
function M.set(st, policy, scope)
  local value = policy ~= 'default' and policy or nil
  if scope == 'session' then
    local chat = require('pi.chat').current(st)
    if not chat then
      return util.notify('no session is open here: :Pi policy ' .. policy .. ' workspace (or user) puts it in a settings file', vim.log.levels.WARN)
    end
    require('pi.client').request(st, 'agent/permissions/set', { sessionId = chat.session_id, approvalPolicy = value or vim.NIL }, 'set the approval policy', function(r)
      util.notify(M.notice(type(r) == 'table' and r.approvalPolicy or value))
    end)
    return
  end
  M.write_and_tell(st, scope, 'approvalPolicy', value, 'approval_policy', 'for new sessions')
end

--- A `:Pi` command that sets one setting from `[value] [scope]` words: a word not given is
--- picked with `vim.ui.select`, a wrong one is refused naming the right ones. `spec`:
--- `values` (`{name, text}` list), `scope_names`, `scope_items(st)` (`{scope, label}` list),
--- `set(st, value, scope)`, `bad_value` / `bad_scope` (formats of the refusals: the word, then
--- the names), `value_prompt`, `scope_prompt` (a format taking the value).
function M.setting_command(args, spec)
  local words = vim.split(vim.trim(args or ''), '%s+', { trimempty = true })
  local value, scope = words[1], words[2]
  local names = vim.tbl_map(function(p)
    return p.name
  end, spec.values)
  if value and not vim.tbl_contains(names, value) then
    return util.notify(spec.bad_value:format(value, table.concat(names, ', ')), vim.log.levels.ERROR)
  end
  if scope and not vim.tbl_contains(spec.scope_names, scope) then
    return util.notify(spec.bad_scope:format(scope, table.concat(spec.scope_names, ', ')), vim.log.levels.ERROR)
  end
  local client = require('pi.client')
  client.ensure(client.root_of(0), function(st)
    local function where(v)
      if scope then
        return spec.set(st, v, scope)
      end
      util.select(spec.scope_items(st), {
        prompt = spec.scope_prompt:format(v),
        format_item = function(i)
          return i.label
        end,
      }, function(choice)
        if choice then
          spec.set(st, v, choice.scope)
        end
      end)
    end
    if value then
      return where(value)
    end
    util.select(spec.values, {
      prompt = spec.value_prompt,
      format_item = function(p)
        return ('%s: %s'):format(p.name, p.text)
      end,
    }, function(choice)
      if choice then
        where(choice.name)
      end
    end)
  end)
end

--- `:Pi policy [policy] [scope]`: what is not given is picked.
function M.command(args)
  M.setting_command(args, {
    values = M.policies,
    scope_names = M.scope_names,
    scope_items = function(st)
      return M.scope_items(require('pi.chat').current(st) ~= nil, st.root)
    end,
    set = M.set,
    bad_value = 'no approval policy "%s": %s',
    bad_scope = 'no place "%s" for the approval policy: %s',
    value_prompt = 'Pi: approval policy — which one',
    scope_prompt = 'Pi: set approval policy "%s" for…',
  })
end

return M
