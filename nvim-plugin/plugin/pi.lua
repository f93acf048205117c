-- Pi: the pi-lsp coding agent in Neovim. Defines :Pi only; nothing starts until it is used.
if vim.g.loaded_pi then
  return
end
vim.g.loaded_pi = true

if vim.fn.has('nvim-0.11') ~= 1 then
  vim.api.nvim_echo({ { 'Pi needs Neovim 0.11 or later', 'ErrorMsg' } }, true, {})
  return
end

vim.api.nvim_create_user_command('Pi', function(o)
  require('pi').command(o)
end, {
  nargs = '*',
  range = true,
  desc = 'Pi coding agent (:help pi)',
  complete = function(arg_lead, cmdline)
    return require('pi').complete(arg_lead, cmdline)
  end,
})
