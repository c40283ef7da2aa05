-- `rmq repl`: a Lua 5.4 prompt where every admin command is a function
-- (rmq.repl.commands), with line editing, history and Tab completion of
-- functions and topic/group names (rmq.lineedit, over libedit), results
-- pretty-printed (rmq.repl.pretty), chunks continued over lines as lua.c
-- does, and errors shown without leaving the prompt.
--
--   repl.main(opts) -> exit code
--     opts.namesrv     "a:9876;b:9876"
--     opts.code        -e CODE: run it, then exit (unless opts.interactive)
--     opts.file        FILE.lua: run it (arg = opts.args), then exit
--     opts.interactive -i: the prompt after -e/FILE
--     opts.history     history file ("" none); default $RMQ_REPL_HISTORY,
--                      else $HOME/.rmq_history
--     opts.historySize lines kept (default $RMQ_REPL_HISTORY_SIZE or 1000)
--
-- Exit codes of -e and FILE, as `rmq admin`'s: 0 ok; 1 a server refused
-- (or a Lua error); 2 usage (a syntax error, a missing file, a function
-- called wrongly); 3 no server answered.  At the prompt, end of input
-- (Ctrl-D) or exit() leaves with 0.
local commands = require("rmq.repl.commands")
local complete = require("rmq.repl.complete")
local names_mod = require("rmq.repl.names")
local pretty = require("rmq.repl.pretty")

local M = {}

local EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
local PROMPT, PROMPT2 = "rmq> ", ">> "
local DEFAULT_HISTORY_SIZE = 1000
-- A chunk continued over more lines than this is dropped: input is bounded.
local MAX_CHUNK_BYTES = 1024 * 1024

local function history_path(opts)
    if opts.history ~= nil then
        return opts.history ~= "" and opts.history or nil
    end
    local env = os.getenv("RMQ_REPL_HISTORY")
    if env ~= nil then
        return env ~= "" and env or nil
    end
    local home = os.getenv("HOME")
    return home and home ~= "" and (home .. "/.rmq_history") or nil
end

-- A message for people: one line for a command's error, Lua's message
-- (with the position in the chunk) for others.
local function message_of(e)
    if type(e) == "table" and getmetatable(e) and getmetatable(e).__tostring then
        return tostring(e)
    end
    if type(e) == "string" then
        return e
    end
    return "error: " .. tostring(e)
end

local function exit_of(e)
    return commands.exit_of(e) or EXIT_FAILED
end

local Repl = {}
Repl.__index = Repl

function Repl:show(...)
    local n = select("#", ...)
    for i = 1, n do
        local v = select(i, ...)
        local fmt = type(v) == "table" and self.session.formatter[v]
        local text
        if fmt then
            local ok, s = pcall(fmt, v)
            text = ok and type(s) == "string" and s or nil
        end
        self.out:write((text or pretty.format(v)), "\n")
    end
    self.out:flush()
end

-- Runs a loaded chunk; shows what it returns, or its error.
-- -> true | false, exit code
function Repl:run(f)
    if self.le then
        self.le.catch_interrupt(true)
    end
    local res = table.pack(xpcall(f, function(e)
        return e
    end))
    if self.le then
        self.le.catch_interrupt(false)
    end
    if self.exit_code then
        return true
    end
    if not res[1] then
        self.err:write(message_of(res[2]), "\n")
        self.err:flush()
        return false, exit_of(res[2])
    end
    if res.n > 1 then
        self:show(table.unpack(res, 2, res.n))
    end
    return true
end

-- lua.c's test for a chunk that needs more lines.
local function incomplete(err)
    return type(err) == "string" and err:sub(-5) == "<eof>"
end

--- Reads one chunk (a line, or more while incomplete) with read(prompt)
--- -> function, source | nil (end of input) | false, source, error
function Repl:read_chunk(read)
    local line = read(PROMPT)
    if line == nil then
        return nil
    end
    if line:sub(1, 1) == "=" then   -- Lua 5.1's "=expr"
        line = "return " .. line:sub(2)
    end
    -- An expression first, so its value is shown ("1 + 1" -> 2).
    local f = load("return " .. line, "=stdin", "t", self.env)
    if f then
        return f, line
    end
    local buf = line
    while true do
        local g, err = load(buf, "=stdin", "t", self.env)
        if g then
            return g, buf
        end
        if not incomplete(err) or #buf > MAX_CHUNK_BYTES then
            return false, buf, err
        end
        local more = read(PROMPT2)
        if more == nil then
            return false, buf, err
        end
        buf = buf .. "\n" .. more
    end
end

function Repl:save_history(chunk)
    if not self.le or chunk:match("^%s*$") then
        return
    end
    self.le.add_history(chunk)
    if self.history then
        local ok, err = self.le.write_history(self.history)
        if not ok and not self.history_warned then
            self.history_warned = true
            self.err:write("rmq repl: history not saved: ", tostring(err), "\n")
        end
    end
end

--- The prompt: until end of input or exit().  -> exit code
function Repl:loop(read)
    local code = EXIT_OK
    while not self.exit_code do
        local f, chunk, err = self:read_chunk(read)
        if f == nil then
            break
        end
        self:save_history(chunk)
        if f == false then
            self.err:write(err, "\n")
            self.err:flush()
            code = EXIT_USAGE
        else
            local ok, c = self:run(f)
            code = ok and EXIT_OK or c
        end
    end
    if self.exit_code then
        return self.exit_code
    end
    return self.tty and EXIT_OK or code
end

function Repl:help(what)
    local docs = self.session.docs
    if what ~= nil then
        local name = what
        if type(what) == "function" then
            for k, v in pairs(self.session.env) do
                if v == what then
                    name = k
                end
            end
        end
        local d = docs[name]
        if not d then
            return ("no function %s (help() lists them)"):format(tostring(name))
        end
        local lines = { d.usage, "  " .. d.desc }
        if d.admin then
            lines[#lines + 1] = ("  (rmq admin %s)"):format(d.admin)
        end
        for _, o in ipairs(d.options or {}) do
            lines[#lines + 1] = ("  %-24s %s%s"):format((o.short and (o.short .. ", ") or "") .. o.long,
                o.desc or "", o.required and " (required)" or "")
        end
        return table.concat(lines, "\n")
    end
    local list = {}
    for name in pairs(docs) do
        list[#list + 1] = name
    end
    table.sort(list)
    local width = 0
    for _, name in ipairs(list) do
        width = math.max(width, #docs[name].usage)
    end
    width = math.min(width, 48)
    local lines = { "Every function returns a Lua table (shown as a table) or raises an error.",
                    "Options by mqadmin's long or short name: update_topic{topic = \"T\", c = \"DefaultCluster\"}.",
                    "help(NAME) for one function; exit() or Ctrl-D to leave; Tab completes.", "" }
    for _, name in ipairs(list) do
        lines[#lines + 1] = ("  %-" .. width .. "s  %s"):format(docs[name].usage, docs[name].desc)
    end
    return table.concat(lines, "\n")
end

local function new(opts)
    local self = setmetatable({ out = io.stdout, err = io.stderr }, Repl)
    local names
    names = names_mod.new({ namesrv = function() return self.session.namesrv end, timeout = opts.timeout })
    self.session = commands.new({ namesrv = opts.namesrv, names = names, timeout = opts.timeout })
    local env = self.session.env
    env.help = function(what)
        local text = self:help(what)
        self.out:write(text, "\n")
        self.out:flush()
    end
    self.session.docs.help = { usage = "help([NAME])", desc = "this list, or one function's options" }
    env.exit = function(code)
        self.exit_code = math.tointeger(code) or EXIT_OK
        error(setmetatable({ exit = self.exit_code, message = "" }, { __tostring = function() return "" end }), 0)
    end
    self.session.docs.exit = { usage = "exit([CODE])", desc = "leave the REPL" }
    env.connect = require("rmq.repl.console").bind(self)
    if env.connect then
        self.session.docs.connect = { usage = "connect(ADDR [, PASSWORD])",
                                      desc = "attach to a running server's live console (Ctrl-D comes back)" }
    end
    env.arg = opts.args
    self.env = setmetatable(env, { __index = _G })
    return self
end

local function run_source(self, source, name)
    local f, err = load(source, name, "t", self.env)
    if not f then
        self.err:write(err, "\n")
        return EXIT_USAGE
    end
    local res = table.pack(xpcall(f, function(e) return e end))
    if self.exit_code then
        return self.exit_code
    end
    if not res[1] then
        self.err:write(message_of(res[2]), "\n")
        return exit_of(res[2])
    end
    -- -e shows what the code returns, as the prompt does.
    if name == "=(command line)" and res.n > 1 then
        self:show(table.unpack(res, 2, res.n))
    end
    return EXIT_OK
end

function M.main(opts)
    local self = new(opts)
    if opts.code then
        -- An expression's value is shown: rmq repl -e 'topic_route("T")'.
        local source = opts.code
        if load("return " .. source, "=(command line)") then
            source = "return " .. source
        end
        local code = run_source(self, source, "=(command line)")
        if code ~= EXIT_OK or (not opts.file and not opts.interactive) then
            return code
        end
    end
    if opts.file then
        local f = io.open(opts.file, "rb")
        if not f then
            io.stderr:write(("rmq repl: cannot open %s\n"):format(opts.file))
            return EXIT_USAGE
        end
        local source = f:read("a")
        f:close()
        source = source:gsub("^#![^\n]*", "")   -- a script may start with #!
        local code = run_source(self, source, "@" .. opts.file)
        if code ~= EXIT_OK or not opts.interactive then
            return code
        end
    end
    local le = require("rmq.lineedit")
    if not le.isatty(0) then
        -- Lines from a pipe: the prompt's evaluation without the prompt;
        -- the exit code is the last chunk's.
        return self:loop(function()
            return io.stdin:read("l")
        end)
    end
    self.le, self.tty = le, true
    self.history = history_path(opts)
    local size = math.tointeger(tonumber(opts.historySize or os.getenv("RMQ_REPL_HISTORY_SIZE") or ""))
        or DEFAULT_HISTORY_SIZE
    if size < 1 or size > 1000000 then
        io.stderr:write("rmq repl: the history size must be 1..1000000\n")
        return EXIT_USAGE
    end
    le.stifle_history(size)
    if self.history then
        le.read_history(self.history)   -- none yet is fine
    end
    le.set_completer(function(word, before)
        return complete.candidates(word, before, self.env, self.session.names, self.session.docs)
    end)
    self.out:write(("rmq repl: NameServer %s; help() lists the functions, Ctrl-D leaves\n"):format(
        tostring(self.session.namesrv)))
    local code = self:loop(le.readline)
    le.set_completer(nil)
    self.out:write("\n")
    return code
end

return M
