--- `:Pi save_user_changes`: what an agent edit does with the user's unsaved changes in the
--- buffer it edits (`saveUserChanges`, issue 30 item 1), set as `:Pi policy` sets the approval
--- policy: the value, then the settings file it goes in, each place saying what wins over it.
--- Precedence, first to last (docs/protocol.md "The user's unsaved changes"): the session's answer
--- for the file (asked once per file under `ask`), the plugin's `save_user_changes` (sent as
--- `experimental.agent.saveUserChanges` when the server starts), the project's
--- `.pi/settings.json` (trusted workspaces only), the user's Pi settings. The server reads the
--- settings files again when they change: the next agent edit follows the new value.
local config = require('pi.config')
local policy = require('pi.policy')

local M = {}

--- The values as the user reads them, then `default` (the key removed from the file).
M.values = {
  { name = 'ask', text = 'ask once per file per session before an agent edit writes your unsaved changes' },
  { name = 'always', text = 'an agent edit saves the buffer, your unsaved changes with it' },
  { name = 'never', text = "only the agent's change reaches the disk; yours stay unsaved" },
  { name = 'default', text = 'no choice of its own here: what the next place says, else ask' },
}

--- The places a value goes, by name (no session-wide one: the session's answers are per file).
M.scope_names = { 'workspace', 'user' }

--- The scope picker's items `{scope, label}`: each says what it changes and what wins over it.
function M.scope_items(root)
  local editor = config.values.save_user_changes
  local wins = editor and (' — your setup\'s save_user_changes "%s" wins'):format(editor) or ''
  return {
    { scope = 'workspace', label = ('this workspace: %s%s'):format(vim.fn.fnamemodify(policy.project_file(root), ':~:.'), wins) },
    { scope = 'user', label = ('your Pi settings: %s (workspaces without their own)%s'):format(vim.fn.fnamemodify(policy.user_file(), ':~'), wins) },
  }
end

--- Puts `value` (a name of `M.values`) in `scope` (`workspace` / `user`) for the workspace
--- state `st`, and says in one line where it went and whether it is in force.
function M.set(st, value, scope)
  local v = value ~= 'default' and value or nil
  policy.write_and_tell(st, scope, 'saveUserChanges', v, 'save_user_changes', 'from the next agent edit')
end

--- `:Pi save_user_changes [value] [place]`: what is not given is picked.
function M.command(args)
  policy.setting_command(args, {
    values = M.values,
    scope_names = M.scope_names,
    scope_items = function(st)
      return M.scope_items(st.root)
    end,
    set = M.set,
    bad_value = 'no saveUserChanges value "%s": %s',
    bad_scope = 'no place "%s" for saveUserChanges: %s',
    value_prompt = 'Pi: your unsaved changes when an agent edits the file',
    scope_prompt = 'Pi: saveUserChanges "%s" for…',
  })
end

return M
