-- dsh: one `:Dsh` command; everything else loads on first use (see `:h dsh`).
if vim.g.loaded_dsh then
  return
end
vim.g.loaded_dsh = true

vim.api.nvim_create_user_command("Dsh", function(opts)
  require("dsh.commands").run(opts)
end, {
  nargs = "*",
  desc = "dsh agent: open, prompt, steer, cancel, fork, saw, diff, sessions, compact, ...",
  complete = function(lead, line)
    return require("dsh.commands").complete(lead, line)
  end,
})
