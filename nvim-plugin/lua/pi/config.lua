--- Configuration of the Pi plugin: the defaults and the merge done by `require("pi").setup()`.
--- Every key is documented in `:help pi-config`.
local M = {}

--- The defaults: the plugin works with no `setup()` call at all.
M.defaults = {
  --- Command starting the server (list of strings). `nil`: `pi-lsp` on `$PATH`, else the
  --- plugin's own repository build (`<repo>/target/release/pi-lsp`).
  cmd = nil,
  --- Extra environment for the server process (table of strings).
  cmd_env = nil,
  --- Default model `"provider/id"` (initializationOptions.model); `nil`: the server chooses.
  model = nil,
  --- `"ask"`, `"auto-edit"` or `"approve-all"`; `nil`: settings.json, else the server default.
  approval_policy = nil,
  --- What an agent edit does with your unsaved changes in the buffer it edits: `"ask"` (once
  --- per file per session), `"always"` (save them with the agent's change) or `"never"` (the
  --- disk gets only the agent's change; yours stay unsaved); `nil`: Pi's settings.json
  --- (`saveUserChanges`, project over user), else `"ask"`.
  save_user_changes = nil,
  --- Whether the project's own `.pi/` configuration loads: `true`, `false`, or `"ask"` (asked
  --- once per root when the project has such files; the answer is remembered).
  trust = 'ask',
  --- Files or folders marking a workspace root (searched upwards from the buffer).
  root_markers = { '.pi', '.git' },
  --- Command printing the clipboard's image (PNG, JPEG, GIF or WebP) on stdout, for
  --- `:Pi image` and the prompt's paste-image key; `nil`: wl-paste, xclip or pngpaste.
  clipboard_image_cmd = nil,
  --- Delay between buffer changes and `didChange` (ms).
  debounce_text_changes = 50,
  chat = {
    --- `"right"`, `"left"`, `"below"`, `"above"` or `"tab"`.
    position = 'right',
    --- Width of a side chat (columns, or a fraction of the editor width when < 1).
    width = 0.4,
    --- Height of a chat below/above (lines, or a fraction when < 1).
    height = 0.4,
    --- Height of the prompt window under the chat.
    prompt_height = 6,
    --- Milliseconds between two writes into the chat buffer while text streams (16–33).
    flush_ms = 16,
    --- Lines of a tool result shown (the rest is summarised in one line).
    max_tool_lines = 60,
    --- Lines of an edit question's diff shown (the rest is summarised in one line).
    max_diff_lines = 400,
    --- Entries of a session's history drawn when it opens; older ones load on demand.
    history_page = 50,
    --- Open the chat (without focusing it) when a prompt is sent.
    open_on_prompt = true,
    --- Highlight the chat and the prompt with tree-sitter (Neovim's markdown parser; code
    --- fences by their language's parser when installed); `false`: the regex markdown syntax.
    treesitter = true,
    --- A chat of at least this many lines is highlighted by the regex syntax while a run
    --- streams into it (tree-sitter re-parses a long markdown buffer for every write) and by
    --- tree-sitter again when the run ends; `false`: tree-sitter always.
    treesitter_max_live_lines = 300,
    --- `<Esc>` (normal mode, chat or prompt) during a run stops it at once while the run is
    --- younger than this many seconds, and asks once after that; `0` always asks, `false`
    --- never asks.
    esc_confirm_after = 20,
    --- The editor as context of each prompt, shown as chips above the prompt (`<M-x>` drops
    --- one): `true` for the file buffer you were in and your last visual selection there,
    --- or `{buffer = bool, selection = bool}`; `false`: none. (`@path` in a prompt always
    --- attaches that file's text.)
    editor_context = false,
  },
  --- Buffer-local keymaps; `false` disables one.
  keymaps = {
    prompt = {
      send = '<CR>', -- normal mode; during a run: steer
      send_insert = '<C-s>', -- normal and insert mode
      followup = '<M-CR>', -- normal and insert mode: queue a follow-up
      abort = '<C-c>',
      esc = '<Esc>', -- normal mode, during a run: stop it (asks once in a long run)
      queue = 'gq', -- edit or remove a queued message
      paste_image = '<M-v>', -- normal and insert mode: attach the clipboard's image
      drop_context = '<M-x>', -- normal and insert mode: drop the last editor context chip
      recall_older = '<Up>', -- normal and insert mode, on the first line: the earlier prompt
      recall_newer = '<Down>', -- normal and insert mode, on the last line: the later prompt
    },
    chat = {
      abort = '<C-c>',
      esc = '<Esc>', -- during a run: stop it (asks once in a long run)
      close = 'q',
      older = 'gO', -- load older history
      prompt = 'i', -- jump to the prompt
      toggle = '<CR>', -- on an answer row: that answer; on a fold: open / close it
      open_file = 'gf', -- the file named under the cursor (path:line), at its line
      yank_code = 'yc', -- the code block under the cursor
      insert_code = 'gp', -- the code block under the cursor, put below the cursor of the window beside the chat
      new_file_code = 'gn', -- the code block under the cursor as a new file (its path asked; unsaved)
      rewind_turn = 'gr', -- on one of your messages: rewind to before it (and its file changes)
      edit_turn = 'cc', -- on one of your messages: edit it and send it again as a branch
    },
    permission = {
      allow = 'a',
      session = 's',
      workspace = 'w',
      reject = 'r',
      reject_reason = 'R',
    },
    hunks = {
      next = ']h',
      prev = '[h',
      keep = '<leader>pk',
      undo = '<leader>pu',
    },
    mcp = {
      enable = 'e',
      disable = 'd',
      reconnect = 'r',
      refresh = 'R',
      close = 'q',
    },
    tree = {
      branch = '<CR>',
      summarize = 'S',
      label = 'L',
      close = 'q',
    },
  },
}

--- The configuration in force.
M.values = vim.deepcopy(M.defaults)

--- Merges `opts` over the defaults (tables merged key by key).
--- @param opts table|nil
function M.set(opts)
  M.values = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
  return M.values
end

return M
