-- Specs of the plugin's OS-dependent paths (docs/platforms.md), with the OS faked: on Windows
-- the server is pi-lsp.exe, found on PATH or in <repo>\target\release, `:Pi build` reports that
-- path, and `:checkhealth pi` says there is no sandbox. Runs in the headless Neovim itself (no
-- server, no child), so it needs no tools.
package.path = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/?.lua;' .. package.path
local H = require('helpers')
vim.opt.runtimepath:prepend(H.plugin_dir)

local util = require('pi.util')
local client = require('pi.client')
local health = require('pi.health')

--- Runs `fn` with the OS faked as `os`, the repository at `repo`, `executables` the only
--- executables, nothing on PATH, and notifications collected.
local function faked(os, repo, executables, fn)
  local saved = { os = util.os, repo = util.repo_dir, exe = util.executable, exepath = vim.fn.exepath, notify = util.notify, runner = client.build_runner }
  local notes, ran = {}, {}
  util.os = os
  util.repo_dir = function()
    return repo
  end
  util.executable = function(p)
    return vim.tbl_contains(executables, p)
  end
  vim.fn.exepath = function()
    return ''
  end
  util.notify = function(msg, level)
    notes[#notes + 1] = { msg, level }
  end
  client.build_runner = function(cmd, opts, on_exit)
    ran[#ran + 1] = { cmd = cmd, cwd = opts.cwd }
    on_exit({ code = 0, stdout = '', stderr = '' })
  end
  local ok, err = pcall(fn, notes, ran)
  util.os, util.repo_dir, util.executable, vim.fn.exepath, util.notify, client.build_runner =
    saved.os, saved.repo, saved.exe, saved.exepath, saved.notify, saved.runner
  if not ok then
    error(err, 0)
  end
end

H.case('windows: pi-lsp.exe in the repository build, backslash paths', function()
  local repo = 'C:\\Users\\me\\pi-lsp\\'
  local built = 'C:\\Users\\me\\pi-lsp\\target\\release\\pi-lsp.exe'
  faked('windows', repo, { built, 'cargo' }, function(notes, ran)
    H.eq('pi-lsp.exe', util.server_name(), 'name')
    H.eq(built, util.built_server(), 'built path')
    local cmd, where = client.resolve_cmd()
    H.eq({ { built }, 'the plugin repository build' }, { cmd, where }, 'resolved')
    client.build()
    vim.wait(1000, function()
      return #notes >= 2
    end)
    H.eq({ { cmd = { 'cargo', 'build', '--release', '-p', 'pi-lsp' }, cwd = repo } }, ran, 'build command')
    H.contains(notes[2][1], 'pi-lsp is built (' .. built .. ')', 'build message')
  end)
  -- Not built: the message names the Windows folder and file.
  faked('windows', repo, {}, function()
    local cmd, why = client.resolve_cmd()
    H.eq(nil, cmd, 'no command')
    H.eq('pi-lsp.exe is not built: run :Pi build (it is not on $PATH nor in C:\\Users\\me\\pi-lsp\\target\\release)', why, 'why')
  end)
  -- The Unix name is not the Windows binary.
  faked('windows', repo, { 'C:\\Users\\me\\pi-lsp\\target\\release\\pi-lsp' }, function()
    H.eq(nil, (client.resolve_cmd()), 'pi-lsp without .exe')
  end)
end)

H.case('unix: pi-lsp with slash paths, whatever the host', function()
  faked('unix', '/home/me/pi-lsp', { '/home/me/pi-lsp/target/release/pi-lsp' }, function()
    H.eq('/home/me/pi-lsp/target/release/pi-lsp', util.built_server(), 'built path')
    H.eq({ { '/home/me/pi-lsp/target/release/pi-lsp' }, 'the plugin repository build' }, { client.resolve_cmd() }, 'resolved')
  end)
end)

H.case(':checkhealth pi says Windows has no sandbox', function()
  faked('windows', 'C:\\pi', {}, function()
    H.eq({
      { 'warn', 'no OS sandbox on Windows: commands the agent runs have your permissions (the first result says so)' },
      { 'info', 'set "sandbox": {"mode": "workspace-write"} in settings.json to be asked before every command instead' },
    }, health.sandbox_report(), 'windows')
  end)
  faked('unix', '/pi', {}, function()
    local r = health.sandbox_report()
    H.eq(1, #r, 'one line')
    H.eq(vim.fn.has('mac') == 1 and 'warn' or 'ok', r[1][1], 'unix level')
  end)
end)

H.done()
