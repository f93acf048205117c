--- The user's unsaved changes when an agent edit lands in their buffer (`saveUserChanges`).
---
--- Under `never` (or `ask`, not answered yet) the server writes only the agent's change to
--- disk, merged onto the disk's text, and says so with `agent/didMergeToDisk`; the buffer keeps
--- the user's changes unsaved. The file changed under Neovim, which would then warn (W11/W12 on
--- `:checktime`, "changed since reading it" on `:w`). This module keeps both quiet for that
--- buffer, and only for it: a buffer-local `FileChangedShell` does nothing for a changed file,
--- and the user's own save (`BufWritePre`; the agent's saves run no autocommands) first sets the
--- file's modification time back to the one Neovim read, then writes the whole buffer (all of it
--- is theirs to save then).
local api = vim.api
local M = {}

--- buffer → the file's modification time before the server's first merge ({sec, nsec}, or
--- false when unknown).
M.known = {}

local group = api.nvim_create_augroup('pi_unsaved', { clear = true })

local ffi_ok, ffi = pcall(require, 'ffi')
local utimensat
if ffi_ok and (jit.os == 'Linux' or jit.os == 'OSX') then
  pcall(ffi.cdef, [[
    struct pi_timespec { long tv_sec; long tv_nsec; };
    int utimensat(int dirfd, const char *path, const struct pi_timespec times[2], int flags);
  ]])
  local at_fdcwd = jit.os == 'Linux' and -100 or -2
  local utime_omit = jit.os == 'Linux' and ((2 ^ 30) - 2) or -2
  utimensat = function(path, t)
    local ts = ffi.new('struct pi_timespec[2]')
    ts[0].tv_sec = 0
    ts[0].tv_nsec = utime_omit
    ts[1].tv_sec = t.sec
    ts[1].tv_nsec = t.nsec
    return ffi.C.utimensat(at_fdcwd, path, ts, 0) == 0
  end
end

--- Sets `path`'s modification time to `t` ({sec, nsec}) to the nanosecond where the system
--- allows (Neovim compares nanoseconds), else to the microsecond.
function M.set_mtime(path, t)
  if utimensat and pcall(utimensat, path, t) then
    return
  end
  local st = vim.uv.fs_stat(path)
  pcall(vim.uv.fs_utime, path, st and (st.atime.sec + st.atime.nsec / 1e9) or nil, t.sec + t.nsec / 1e9)
end

--- Forgets buffer `b`'s merge: the disk holds its text again (saved by the user or the agent).
function M.saved(b)
  if M.known[b] ~= nil then
    M.known[b] = nil
    pcall(api.nvim_clear_autocmds, { group = group, buffer = b })
  end
end

--- `agent/didMergeToDisk` for buffer `b`: `previous` is the file's time before the server wrote.
function M.merged(b, previous)
  if M.known[b] ~= nil then
    return -- the time Neovim read is the first one
  end
  M.known[b] = type(previous) == 'table' and previous or false
  api.nvim_create_autocmd('FileChangedShell', {
    group = group,
    buffer = b,
    desc = 'pi: the agent changed the file on disk; the buffer keeps your unsaved changes',
    callback = function()
      -- A deleted file is still worth the usual question; a changed one is ours.
      vim.v.fcs_choice = vim.v.fcs_reason == 'deleted' and 'ask' or ''
    end,
  })
  api.nvim_create_autocmd('BufWritePre', {
    group = group,
    buffer = b,
    desc = "pi: your save writes your changes and the agent's; no 'changed since reading' question",
    callback = function(ev)
      local t = M.known[ev.buf]
      local path = api.nvim_buf_get_name(ev.buf)
      if t and path ~= '' and vim.fn.fnamemodify(ev.match, ':p') == vim.fn.fnamemodify(path, ':p') then
        M.set_mtime(path, t)
      end
      M.saved(ev.buf)
    end,
  })
end

api.nvim_create_autocmd({ 'BufWipeout', 'BufDelete' }, {
  group = api.nvim_create_augroup('pi_unsaved_gone', { clear = true }),
  callback = function(ev)
    M.known[ev.buf] = nil
  end,
})

return M
