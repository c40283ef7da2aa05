-- The `rmq` command line.  main(args) runs as a task (see src/cli.c), so
-- every command may wait on the network.  Commands grow with the client
-- issue; each is {help=, run=function(args) -> exit code}.
local core = require("rmq.core")

local M = {}

local commands = {}

commands.version = {
    help = "print the version",
    run = function()
        print("rmq " .. core.version)
        return 0
    end,
}

local function usage(out)
    out:write("usage: rmq COMMAND [ARGS...]\n\ncommands:\n")
    local names = {}
    for name in pairs(commands) do
        names[#names + 1] = name
    end
    table.sort(names)
    for _, name in ipairs(names) do
        out:write(("  %-12s %s\n"):format(name, commands[name].help))
    end
end

commands.help = {
    help = "list the commands",
    run = function()
        usage(io.stdout)
        return 0
    end,
}

function M.main(args)
    local name = args[1]
    if name == nil or name == "--help" or name == "-h" then
        usage(name and io.stdout or io.stderr)
        return name and 0 or 1
    end
    if name == "--version" then
        name = "version"
    end
    local cmd = commands[name]
    if cmd == nil then
        io.stderr:write(("rmq: unknown command '%s' (rmq help lists them)\n"):format(name))
        return 1
    end
    return cmd.run({ table.unpack(args, 2) })
end

M.commands = commands

return M
