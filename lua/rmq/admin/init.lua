-- `rmq admin`: mqadmin's commands, same names and options (RocketMQ
-- 4.9.8's SubCommand buildCommandlineOptions), speaking remoting to any
-- 4.x NameServer and broker.
--
-- A family module (lua/rmq/admin/<family>.lua) returns a table of plain
-- functions, fn(ctx, o) -> result (a Lua table), raising an admin error
-- (below) on failure, and a list of the commands built on them:
--
--   M.commands = {
--     { name = "topicRoute", desc = "Examine topic route info",
--       options = { { "t", "topic", arg = true, required = true, desc = "topic name" },
--                   { "l", "list", desc = "Use list format to print data" } },
--       check = function(o) ... end,          -- optional: admin.usage() on bad input
--       run = function(ctx, o, args) return result end,
--       format = function(result, o) return "text" end },   -- optional
--   }
--
-- o holds the option values by long name (strings, trimmed as mqadmin
-- does; true for an option without a value).  Every command also takes
-- mqadmin's -n/--namesrvAddr and -h/--help, and --json (the result as
-- JSON on stdout instead of the table).
--
--   local admin = require("rmq.admin")
--   local r, err = admin.run("topicRoute", { topic = "T" }, { namesrvAddr = "127.0.0.1:9876" })
--   -- err: an admin error, err.exit (1 refused, 2 usage, 3 unreachable), tostring(err) one line
--   admin.main(argv) -> exit code           (the CLI: rmq admin CMD ...)
--
-- Exit codes: 0 ok, 1 a server refused (its response code is in the
-- message), 2 usage, 3 no server answered.
local json = require("rmq.console.json")
local fastjson = require("rmq.fastjson")
local remote = require("rmq.admin.remote")

local M = {}

M.EXIT_OK, M.EXIT_REFUSED, M.EXIT_USAGE, M.EXIT_UNREACHABLE = 0, 1, 2, 3

-- The plug-in point: one line per family module, in `rmq admin` order.
M.families = {
    "rmq.admin.cluster",
    "rmq.admin.topic",
    "rmq.admin.broker",
    "rmq.admin.namesrv",
    "rmq.admin.perm",
    "rmq.admin.group",
    "rmq.admin.consumer",
    "rmq.admin.offset",
    "rmq.admin.producer",
    "rmq.admin.message",
    "rmq.admin.controller",     -- RocketMQ 5's controller commands (docs/controller.md)
}

M.error, M.usage, M.refused, M.unreachable = remote.error, remote.usage, remote.refused, remote.unreachable
M.is_error = remote.is_error

-- Options every command takes (ServerUtil.buildCommandlineOptions, and ours).
local COMMON = {
    { "h", "help", desc = "Print help" },
    { "n", "namesrvAddr", arg = true, desc = "Name server address list, eg: 192.168.0.1:9876;192.168.0.2:9876" },
    { nil, "json", desc = "print the result as JSON" },
}

local registry   -- name -> command (with .family), built once
local order      -- command names in family order

local function load()
    if registry then
        return registry, order
    end
    registry, order = {}, {}
    for _, modname in ipairs(M.families) do
        local fam = require(modname)
        local family = modname:match("([^.]+)$")
        for _, cmd in ipairs(fam.commands or {}) do
            assert(registry[cmd.name] == nil, "rmq.admin: command defined twice: " .. cmd.name)
            cmd.family = family
            registry[cmd.name] = cmd
            order[#order + 1] = cmd.name
            for _, alias in ipairs(cmd.aliases or {}) do
                registry[alias] = cmd
            end
        end
    end
    return registry, order
end

--- name -> command (the table above, with .family); and the names in order.
function M.commands()
    return load()
end

local function all_options(cmd)
    local list = {}
    for _, o in ipairs(cmd.options or {}) do
        list[#list + 1] = o
    end
    for _, o in ipairs(COMMON) do
        list[#list + 1] = o
    end
    return list
end

--- Parses argv (after the command name) as commons-cli does for mqadmin:
--- -t V, -tV, --topic V, --topic=V; a flag without value is true.
--- @return o, args  or nil, usage error
function M.parse(cmd, argv)
    local short, long = {}, {}
    for _, spec in ipairs(all_options(cmd)) do
        if spec[1] then
            short[spec[1]] = spec
        end
        long[spec[2]] = spec
    end
    local o, args = {}, {}
    local i = 1
    while i <= #argv do
        local a = argv[i]
        local spec, inline
        if a:sub(1, 2) == "--" and #a > 2 then
            local name, v = a:match("^%-%-([^=]+)=(.*)$")
            spec, inline = long[name or a:sub(3)], v
        elseif a:sub(1, 1) == "-" and #a > 1 then
            -- As commons-cli: a short name, then a long name after one
            -- dash (-topic T), then a short name with its value (-tT).
            spec = short[a:sub(2)] or long[a:sub(2)]
            if spec == nil and short[a:sub(2, 2)] and short[a:sub(2, 2)].arg then
                spec, inline = short[a:sub(2, 2)], a:sub(3)
            end
        else
            args[#args + 1] = a
            goto next
        end
        if spec == nil then
            return nil, M.usage(("Unrecognized option: %s"):format(a))
        end
        if spec.arg then
            local v = inline
            if v == nil then
                i = i + 1
                v = argv[i]
            end
            if v == nil or (inline == nil and (long[v:match("^%-%-([^=]+)") or ""] or short[v:match("^%-(.)") or ""])) then
                return nil, M.usage(("Missing argument for option: %s"):format(spec[1] or spec[2]))
            end
            o[spec[2]] = v:match("^%s*(.-)%s*$")
        elseif inline ~= nil then
            return nil, M.usage(("option --%s takes no value"):format(spec[2]))
        else
            o[spec[2]] = true
        end
        ::next::
        i = i + 1
    end
    if not o.help then
        local missing = {}
        for _, spec in ipairs(cmd.options or {}) do
            if spec.required and o[spec[2]] == nil then
                missing[#missing + 1] = spec[1] or spec[2]
            end
        end
        if #missing > 0 then
            return nil, M.usage(("Missing required option%s: %s"):format(#missing > 1 and "s" or "",
                table.concat(missing, ", ")))
        end
    end
    return o, args
end

--- The context commands run in: { namesrv = {addr, ...}, timeout = ms,
--- credentials = }.  opts: namesrvAddr ("a:9876;b:9876"; default
--- $NAMESRV_ADDR, then 127.0.0.1:9876), timeout (ms, default 5000 as
--- DefaultMQAdminExt), accessKey / secretKey / securityToken (ACL, as
--- mqadmin's AclClientRPCHook: every request signed; without them the
--- state's default, net.credentials, if any).
function M.context(opts)
    opts = opts or {}
    return remote.context(opts.namesrvAddr or os.getenv("NAMESRV_ADDR") or "127.0.0.1:9876", opts.timeout,
                          require("rmq.client.credentials").option(opts))
end

--- Runs command `name` with option values o (by long name) and returns
--- its result, or nil and an admin error.  ctx_opts: see M.context (or a
--- context already made).
function M.run(name, o, ctx_opts, args)
    local cmd = load()[name]
    if cmd == nil then
        return nil, M.usage(("unknown command '%s'"):format(tostring(name)))
    end
    o = o or {}
    local ctx = ctx_opts and ctx_opts.namesrv and ctx_opts or M.context(ctx_opts)
    local ok, res = pcall(function()
        for _, spec in ipairs(cmd.options or {}) do
            if spec.required and o[spec[2]] == nil then
                error(M.usage(("Missing required option: %s"):format(spec[1] or spec[2])))
            end
        end
        if cmd.check then
            cmd.check(o)
        end
        return cmd.run(ctx, o, args or {})
    end)
    if ok then
        return res
    end
    if remote.is_error(res) then
        return nil, res
    end
    -- A bug of ours, not the server's: one line, no traceback.
    return nil, M.error(M.EXIT_REFUSED, "internal error: " .. tostring(res))
end

-- {{{ output

--- An aligned table: headings (a list) and rows (lists of cells), columns
--- left-aligned two spaces apart, as mqadmin's printf formats read.
function M.table(headings, rows)
    local widths = {}
    local all = { headings }
    for _, r in ipairs(rows) do
        all[#all + 1] = r
    end
    for _, r in ipairs(all) do
        for c = 1, #headings do
            local s = tostring(r[c] == nil and "" or r[c])
            widths[c] = math.max(widths[c] or 0, #s)
        end
    end
    local out = {}
    for _, r in ipairs(all) do
        local cells = {}
        for c = 1, #headings do
            local s = tostring(r[c] == nil and "" or r[c])
            cells[c] = c < #headings and s .. (" "):rep(widths[c] - #s) or s
        end
        out[#out + 1] = (table.concat(cells, "  "):gsub("%s+$", ""))
    end
    return table.concat(out, "\n")
end

--- Key/value lines "key = value" sorted by key, keys padded (getBrokerConfig).
function M.kv_lines(t, indent)
    local keys, w = {}, 0
    for k in pairs(t) do
        keys[#keys + 1] = k
        w = math.max(w, #tostring(k))
    end
    table.sort(keys)
    local out = {}
    for _, k in ipairs(keys) do
        out[#out + 1] = ("%s%-" .. w .. "s = %s"):format(indent or "", k, tostring(t[k]))
    end
    return table.concat(out, "\n")
end

--- JSON indented with tabs, object keys sorted (fastjson's PrettyFormat
--- reads so); a table is a list when it has t[1] or the array mark
--- (admin.array).
function M.pretty_json(v)
    return json.encode(v, true)
end

--- The same on one line (--json).
function M.json(v)
    return json.encode(v)
end

--- Marks t (possibly empty) as a JSON array.
function M.array(t)
    return setmetatable(t or {}, fastjson.array_mt)
end

local function help_text(cmd)
    local lines = { ("usage: rmq admin %s [OPTIONS]"):format(cmd.name), cmd.desc or "", "" }
    local cells = {}
    for _, spec in ipairs(all_options(cmd)) do
        local flag = (spec[1] and ("-" .. spec[1] .. ",") or "   ") .. "--" .. spec[2]
            .. (spec.arg and (" <" .. spec[2] .. ">") or "")
        cells[#cells + 1] = { " " .. flag, (spec.desc or "") .. (spec.required and " (required)" or "") }
    end
    lines[#lines + 1] = M.table({ " options:", "" }, cells)
    return table.concat(lines, "\n")
end

M.help_text = function(name)
    local cmd = load()[name]
    return cmd and help_text(cmd)
end

local function list_text()
    local reg, names = load()
    local rows = {}
    for _, name in ipairs(names) do
        rows[#rows + 1] = { "  " .. name, reg[name].desc or "" }
    end
    return "usage: rmq admin COMMAND [OPTIONS] (-n NAMESRV, --json on every command)\n\n"
        .. M.table({ "commands:", "" }, rows)
        .. "\n\n'rmq admin COMMAND -h' shows a command's options.\n"
        .. "exit codes: 0 ok, 1 server refused, 2 usage, 3 unreachable"
end

local function json_safe(v)
    local ok, s = pcall(M.json, v)
    if ok then
        return s
    end
    return M.json({ error = "result not encodable as JSON: " .. tostring(s) })
end

--- `rmq admin ARGV...` -> exit code.
function M.main(argv, out, errout)
    out, errout = out or io.stdout, errout or io.stderr
    local name = argv[1]
    if name == nil or name == "-h" or name == "--help" or name == "help" then
        local sub = argv[2] and load()[argv[2]]
        if sub then
            out:write(help_text(sub), "\n")
            return 0
        end
        local ok, text = pcall(list_text)
        if not ok then
            errout:write("rmq admin: ", tostring(text), "\n")
            return M.EXIT_USAGE
        end
        (name and out or errout):write(text, "\n")
        return name and 0 or M.EXIT_USAGE
    end
    local cmd = load()[name]
    if cmd == nil then
        errout:write(("rmq admin: unknown command '%s' ('rmq admin' lists them)\n"):format(name))
        return M.EXIT_USAGE
    end
    local o, args = M.parse(cmd, { table.unpack(argv, 2) })
    if not o then
        errout:write(("rmq admin %s: %s\n"):format(cmd.name, tostring(args)))
        errout:write(("'rmq admin %s -h' shows its options\n"):format(cmd.name))
        return M.EXIT_USAGE
    end
    if o.help then
        out:write(help_text(cmd), "\n")
        return 0
    end
    local every = cmd.every and cmd.every(o)
    local ctx = M.context({ namesrvAddr = o.namesrvAddr })
    while true do
        local code = M.once(cmd, o, args, ctx, out, errout)
        if not every then
            return code
        end
        require("rmq.net").sleep(every)
    end
end

-- One run of cmd and its output -> exit code.
function M.once(cmd, o, args, ctx, out, errout)
    local as_json = o.json
    local res, err = M.run(cmd.name, o, ctx, args)
    if res == nil then
        if as_json then
            out:write(json_safe({ error = tostring(err), exit = err.exit, code = err.code, server = err.addr }), "\n")
        end
        errout:write(("rmq admin %s: %s\n"):format(cmd.name, tostring(err)))
        return err.exit or M.EXIT_REFUSED
    end
    if as_json then
        out:write(json_safe(res), "\n")
    elseif cmd.format then
        local text = cmd.format(res, o)
        if text and text ~= "" then
            out:write(text, "\n")
        end
    else
        out:write(json_safe(res), "\n")
    end
    out:flush()
    return (type(res) == "table" and res.exit) or 0
end

-- }}}

return M
