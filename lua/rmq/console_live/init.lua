-- The live console: a Lua prompt into the running server (conf
-- `console`; `rmq console ADDR` attaches).  It runs on the server's main
-- thread, in its own Lua state's tasks, never on a worker's loop.  Not
-- the web console (rmq.console, the HTTP /api): that one is read-only
-- JSON for browsers; this one changes the server.
--
-- Wire (rmq.console_io carries the bytes): the client sends lines; the
-- server answers each with one frame "KIND LEN\n" followed by LEN bytes:
--   hello  on connect (the server's role and name), or
--   auth   on connect when consolePassword is set: the first line is the
--          password (compared in constant time); wrong: err, then closed
--   ok     the snippet ran: what it printed and its results
--   err    a syntax or run-time error (its message, no traceback, no
--          server path), or a refusal
--   more   the snippet is not complete yet (an open block): send more
--          lines; the next frame answers the whole
-- Bounds: consoleMaxSessions, consoleMaxLineBytes (a line, and a
-- multi-line snippet), consoleMaxOutputBytes (per snippet; cut past it),
-- consoleMaxInstructions (a count hook; the snippet fails past it).
--
-- In a snippet (help() lists them): conf(), topics(), groups(), clients(),
-- offsets(), store(), ha(), route([topic]), requests(): the server's state
-- as tables; set(key, value): a live config key (UPDATE_BROKER_CONFIG's
-- allow-list, rmq.broker.admin LIVE); reload(module), replace(module,
-- source), handler(code, source [, role]): code swapped on every worker,
-- all or none (rmq.console_live.swap).  SIGHUP reloads the conf's
-- policies the same way.
local cjson = require("cjson")
local log = require("rmq.log")
local codes = require("rmq.codes")
local show = require("rmq.console_live.show").show
local state = require("rmq.console_live.state")
local swap = require("rmq.console_live.swap")

local M = {}

-- sources: module -> hash of the code running now; boot: at start.
local S = { conf = nil, overrides = nil, listener = nil, sig = nil, sessions = {}, sources = {}, boot = {} }

M.MAX_QUEUED_LINES = 64   -- lines a session may send ahead of the answers

--- The console's address once listening ("unix:/path" or "HOST:PORT").
function M.address()
    return S.listener and S.listener:address() or nil
end

--- Where conf's console listens: {path=} or {host=, port=}, or nil.
function M.endpoint(conf)
    local c = conf.console
    if c == nil then
        return nil
    end
    if c == "unix" then
        return { path = conf.storePathRootDir .. "/console.sock" }
    elseif c:match("^unix:") then
        return { path = c:sub(6) }
    elseif c:sub(1, 1) == "/" then
        return { path = c }
    end
    local host, port = c:match("^%[?([^%]]*)%]?:(%d+)$")
    if host == "localhost" then
        host = "127.0.0.1"
    end
    return { host = host, port = tonumber(port) }
end

--- The address a client connects to for conf (port 0 unknowable: nil).
function M.client_address(conf)
    local e = M.endpoint(conf)
    if e == nil then
        return nil
    end
    if e.path then
        return "unix:" .. e.path
    end
    return e.host .. ":" .. e.port
end

-- {{{ Sources: what code runs, for --diff

local function hash(s)
    -- FNV-1a, 64-bit (wraps): enough to tell two sources apart.
    local h = -3750763034362895579
    for i = 1, #s do
        h = (h ~ s:byte(i)) * 1099511628211
    end
    return ("%016x"):format(h)
end

local function policy_keys(conf)
    local conf_mod = require("rmq.conf")
    local out = {}
    for _, k in ipairs(conf_mod.keys_for_role((conf.role == "namesrv" or conf.role == "controller") and conf.role or "broker")) do
        local e = conf_mod.describe(k)
        if e and e.type == "policy" and type(conf[k]) == "string" then
            out[#out + 1] = k
        end
    end
    return out
end

local function note_source(name, src)
    S.sources[name] = src and hash(src) or nil
end

-- }}}

-- {{{ Swaps

local function workers()
    return S.conf.workers
end

-- Tells the broker's tables which modules no longer run the code the
-- server started with (the C pull path's built-in rule is then off).
local function after_swap(names)
    if S.conf.role == "broker" or S.conf.role == "standalone" then
        local tables = require("rmq.broker.tables")
        tables.sync_conf(S.conf)
        for _, n in ipairs(names) do
            if S.sources[n] ~= nil and S.sources[n] == S.boot[n] then
                tables.unmark_replaced(n, S.conf.slaveReadPolicy)
            else
                tables.mark_replaced(n, S.conf.slaveReadPolicy)
            end
        end
    end
end

--- Reloads modules from their files on every worker; report | nil, err.
function M.reload(names, from)
    local items = {}
    for i, n in ipairs(names) do
        local src, err = swap.module_source(n)
        if src == nil then
            return nil, err
        end
        items[i] = { name = n, source = src }
    end
    local report, err = swap.modules(items, workers(), S.conf.consoleSwapTimeoutMillis, from or "file")
    if report == nil then
        return nil, err
    end
    for _, it in ipairs(items) do
        note_source(it.name, it.source)
    end
    after_swap(names)
    return report
end

function M.replace(name, source)
    local report, err = swap.modules({ { name = name, source = source } }, workers(),
        S.conf.consoleSwapTimeoutMillis, "console")
    if report == nil then
        return nil, err
    end
    note_source(name, source)
    after_swap({ name })
    return report
end

-- }}}

-- {{{ set(key, value)

function M.set(key, value)
    local conf = S.conf
    if conf.role == "namesrv" then
        return nil, "set() changes a broker's run-time keys; this is a NameServer"
    end
    if conf.role == "controller" then
        return nil, "set() changes a broker's run-time keys; a controller's change in its conf"
            .. " (SIGHUP reloads its electPolicy module's code)"
    end
    local admin = require("rmq.broker.admin")
    local tables = require("rmq.broker.tables")
    tables.sync_conf(conf)
    if admin.BLACK_LIST[key] then
        return nil, ("key '%s' is in configBlackList: it cannot be changed"):format(key)
    end
    local v, err = admin.config_value(conf, key, tostring(value))
    if v == nil then
        return nil, err
    end
    local old = conf[key]
    if v ~= old then
        log.info("console: %s = %s (was %s)", key, tostring(v), tostring(old))
        tables.set_setting(key, v)
        conf[key] = v
        local e = require("rmq.conf").describe(key)
        if e and e.type == "policy" and type(v) == "string" and S.sources[v] == nil then
            -- Workers load it from its file when they first need it.
            note_source(v, swap.module_source(v))
        end
        tables.new("broker.config"):bump()
        if key == "brokerPermission" then
            require("rmq.broker.topics").table:bump()
            require("rmq.broker.register").now()
        end
    end
    return { key = key, old = old, new = v }
end

-- }}}

-- {{{ SIGHUP

--- Reads the conf file again and reloads the policies it names (and
--- applies a changed policy key), on every worker or none; logs the
--- outcome.  Returns report | nil, err.
function M.sighup()
    local conf_mod = require("rmq.conf")
    local fresh, err = conf_mod.load(S.conf._path, S.overrides)
    if fresh == nil then
        log.error("SIGHUP: the conf does not load (%s); nothing reloaded", swap.scrub(err))
        return nil, err
    end
    local names, seen, keys = {}, {}, policy_keys(fresh)
    for _, k in ipairs(keys) do
        local n = fresh[k]
        if not seen[n] then
            seen[n] = true
            names[#names + 1] = n
        end
    end
    if #names == 0 then
        log.info("SIGHUP: the conf names no policy module; nothing to reload")
        return { names = {}, workers = workers() }
    end
    local report
    report, err = M.reload(names, "sighup")
    if report == nil then
        log.error("SIGHUP: policy reload refused, the running policies stay: %s", swap.scrub(err))
        return nil, err
    end
    for _, k in ipairs(keys) do
        if S.conf[k] ~= fresh[k] then
            local ok, serr = M.set(k, fresh[k])
            if not ok then
                log.warn("SIGHUP: %s not applied: %s", k, tostring(serr))
            end
        end
    end
    log.info("SIGHUP: reloaded %s on %d workers", table.concat(names, ", "), report.workers)
    return report
end

-- }}}

-- {{{ Sessions

local function frame(sid, kind, text)
    if S.listener then
        S.listener:write(sid, ("%s %d\n"):format(kind, #text) .. text)
    end
end

-- Compares in time that depends on the lengths only.
local function same_secret(a, b)
    local diff = #a ~ #b
    for i = 1, #a do
        diff = diff | (a:byte(i) ~ (b:byte((i - 1) % math.max(#b, 1) + 1) or 0))
    end
    return diff == 0
end

local function hello()
    local c = S.conf
    return ("rmq-console role=%s name=%s workers=%d\n"):format(c.role,
        c.role == "namesrv" and "namesrv" or tostring(c.brokerName), c.workers)
end

local HELP = [[
state:   conf()  topics()  groups()  clients()  offsets()  store()  ha()
         route([topic])  requests()  policies()  log()
change:  set(key, value)                 a live config key (UPDATE_BROKER_CONFIG's allow-list)
         reload("rmq.policy.slave_read") a module from its file, on every worker (all or none)
         replace(module, source)         a module's code from a string
         handler(code, source [, role])  a processor handler: source returns function(ctx, cmd [, h])
print(...) and a snippet's results are shown; "=" is not needed (1 + 1 shows 2).
]]

local function api_for(session)
    local api = {}
    local function check(v, err)
        if v == nil then
            error(err, 0)
        end
        return v
    end
    function api.help()
        session.out(HELP)
    end
    function api.conf() return check(state.conf(S.conf)) end
    function api.topics() return check(state.topics(S.conf)) end
    function api.groups() return check(state.groups(S.conf)) end
    function api.clients() return check(state.clients(S.conf)) end
    function api.offsets() return check(state.offsets(S.conf)) end
    function api.store() return check(state.store(S.conf)) end
    function api.ha() return check(state.ha(S.conf)) end
    -- The log's ring (core/log.h): bytes queued and written, lines dropped.
    function api.log() return require("rmq.core").log_stats() end
    function api.route(topic) return check(state.route(S.conf, topic)) end
    function api.requests() return check(state.requests()) end
    function api.policies()
        local out = { swapped = {} }
        for _, k in ipairs(policy_keys(S.conf)) do
            out[k] = S.conf[k]
        end
        for n, from in pairs(swap.loaded_from) do
            out.swapped[n] = from
        end
        return out
    end
    function api.set(key, value)
        if type(key) ~= "string" then
            error("set(key, value): key must be a string", 0)
        end
        local r = check(M.set(key, value))
        return ("%s = %s (was %s)"):format(r.key, tostring(r.new), tostring(r.old))
    end
    local function module_name(name)
        if type(name) ~= "string" or not name:match("^[%w_]+[%w_%.]*$") then
            error("a module name such as \"rmq.policy.slave_read\" is needed", 0)
        end
        return name
    end
    function api.reload(...)
        local names = { ... }
        for i, n in ipairs(names) do
            names[i] = module_name(n)
        end
        if #names == 0 then
            error("reload(module, ...): name at least one module", 0)
        end
        local r = check(M.reload(names))
        return ("reloaded %s on %d workers"):format(table.concat(names, ", "), r.workers)
    end
    function api.replace(name, source)
        module_name(name)
        if type(source) ~= "string" then
            error("replace(module, source): source must be a string of Lua", 0)
        end
        local r = check(M.replace(name, source))
        return ("replaced %s on %d workers"):format(name, r.workers)
    end
    function api.handler(code, source, role)
        if type(code) == "string" then
            code = codes.request[code] or tonumber(code)
        end
        if math.type(code) ~= "integer" then
            error("handler(code, source [, role]): code is a request code or its name", 0)
        end
        if type(source) ~= "string" then
            error("handler(code, source): source must be Lua returning function(ctx, cmd [, h])", 0)
        end
        role = role or (S.conf.role == "namesrv" and "namesrv" or "broker")
        local r = check(swap.handler(role, code, source, workers(), S.conf.consoleSwapTimeoutMillis))
        log.info("console: handler of request code %d (%s) replaced on %d workers", code, role, r.workers)
        return ("handler %d (%s) replaced on %d workers"):format(code, role, r.workers)
    end
    -- For `rmq-server --diff/--apply`: the keys in force, which of them
    -- may change live, and the policies' running and on-disk sources.
    function api.__diff_facts()
        local live = {}
        if S.conf.role == "broker" or S.conf.role == "standalone" then
            for k in pairs(require("rmq.broker.admin").LIVE) do
                live[k] = true
            end
        end
        local policies = {}
        for _, k in ipairs(policy_keys(S.conf)) do
            local n = S.conf[k]
            local src = swap.module_source(n)
            policies[k] = { module = n, running = S.sources[n], file = src and hash(src) or nil }
        end
        return cjson.encode({ conf = state.conf(S.conf), live = live, policies = policies })
    end
    return api
end

local function new_session(sid)
    local s = { sid = sid, authed = S.conf.consolePassword == nil, queue = {}, running = false }
    local env = {}
    s.api = api_for(s)
    setmetatable(s.api, { __index = _G })
    s.env = setmetatable(env, { __index = s.api })
    return s
end

local function eval(s, line)
    local conf = S.conf
    local chunk = s.buf and (s.buf .. "\n" .. line) or line
    if #chunk > conf.consoleMaxLineBytes then
        s.buf = nil
        frame(s.sid, "err", ("snippet longer than consoleMaxLineBytes (%d)\n"):format(conf.consoleMaxLineBytes))
        return
    end
    local fn, err = load("return " .. chunk, "=console", "t", s.env)
    if fn == nil then
        fn, err = load(chunk, "=console", "t", s.env)
    end
    if fn == nil then
        if err:match("<eof>$") then
            s.buf = chunk
            frame(s.sid, "more", "")
            return
        end
        s.buf = nil
        frame(s.sid, "err", err .. "\n")
        return
    end
    s.buf = nil
    local max, size, parts, cut = conf.consoleMaxOutputBytes, 0, {}, false
    local function out(text)
        if cut then
            return
        end
        if size + #text > max then
            parts[#parts + 1] = text:sub(1, max - size)
            parts[#parts + 1] = ("\n... (output cut at %d bytes: consoleMaxOutputBytes)\n"):format(max)
            cut = true
            return
        end
        size = size + #text
        parts[#parts + 1] = text
    end
    s.out = out
    rawset(s.env, "print", function(...)
        local t = table.pack(...)
        for i = 1, t.n do
            t[i] = tostring(t[i])
        end
        out(table.concat(t, "\t", 1, t.n) .. "\n")
    end)
    -- A count hook, on the snippet's coroutines too: a bound against a
    -- runaway loop typed by mistake (the console is an operator's full
    -- Lua, not a sandbox).
    local limit = conf.consoleMaxInstructions
    local function hook()
        error(("stopped: the snippet ran past consoleMaxInstructions (%d)"):format(limit), 0)
    end
    rawset(s.env, "coroutine", setmetatable({
        create = function(f)
            local co = coroutine.create(f)
            debug.sethook(co, hook, "", limit)
            return co
        end,
        wrap = function(f)
            local co = coroutine.create(f)
            debug.sethook(co, hook, "", limit)
            return function(...)
                local r = table.pack(coroutine.resume(co, ...))
                if not r[1] then
                    error(r[2], 0)
                end
                return table.unpack(r, 2, r.n)
            end
        end,
    }, { __index = coroutine }))
    debug.sethook(hook, "", limit)
    local r = table.pack(pcall(fn))
    debug.sethook()
    if not r[1] then
        frame(s.sid, "err", table.concat(parts) .. swap.scrub(r[2]) .. "\n")
        return
    end
    for i = 2, r.n do
        local v = r[i]
        out((type(v) == "string" and v or show(v)) .. "\n")
    end
    frame(s.sid, "ok", table.concat(parts))
end

local function handle(s, line)
    if not s.authed then
        if same_secret(line, S.conf.consolePassword) then
            s.authed = true
            frame(s.sid, "hello", hello())
        else
            log.warn("console: session %d: wrong password; closed", s.sid)
            -- Guesses cost time, and sessions are few (consoleMaxSessions).
            require("rmq.net").sleep(S.conf.consoleAuthFailDelayMillis)
            frame(s.sid, "err", "wrong password\n")
            S.listener:end_session(s.sid)
            S.sessions[s.sid] = nil
        end
        return
    end
    local ok, err = pcall(eval, s, line)
    debug.sethook()
    if not ok then
        frame(s.sid, "err", swap.scrub(err) .. "\n")
    end
end

local function on_open(sid)
    local s = new_session(sid)
    S.sessions[sid] = s
    if s.authed then
        frame(sid, "hello", hello())
    else
        frame(sid, "auth", "password:\n")
    end
end

local function on_line(sid, line)
    local s = S.sessions[sid]
    if s == nil then
        return
    end
    if line == false then
        frame(sid, "err", ("line longer than consoleMaxLineBytes (%d); closing\n"):format(S.conf.consoleMaxLineBytes))
        S.listener:end_session(sid)
        S.sessions[sid] = nil
        return
    end
    if #s.queue >= M.MAX_QUEUED_LINES then
        frame(sid, "err", "too many lines sent ahead of the answers; closing\n")
        S.listener:end_session(sid)
        S.sessions[sid] = nil
        return
    end
    s.queue[#s.queue + 1] = line
    if s.running then
        return   -- the task already running this session takes it in order
    end
    s.running = true
    while #s.queue > 0 and S.sessions[sid] == s do
        handle(s, table.remove(s.queue, 1))
    end
    s.running = false
end

local function on_close(sid)
    S.sessions[sid] = nil
end

-- }}}

--- Main thread, after the roles started: SIGHUP, and the console when
--- conf `console` is set.  Raises when the endpoint cannot be opened.
function M.main_start(conf, overrides)
    S.conf, S.overrides = conf, overrides
    for _, k in ipairs(policy_keys(conf)) do
        note_source(conf[k], swap.module_source(conf[k]))
        S.boot[conf[k]] = S.sources[conf[k]]
    end
    S.sig = require("rmq.console_io").on_signal("HUP", function()
        M.sighup()
    end)
    local e = M.endpoint(conf)
    if e == nil then
        return
    end
    local l, err = require("rmq.console_io").listen({
        path = e.path, host = e.host, port = e.port,
        maxSessions = conf.consoleMaxSessions, maxLineBytes = conf.consoleMaxLineBytes,
        maxPendingBytes = 4 * conf.consoleMaxOutputBytes + 65536,
        on_open = on_open, on_line = on_line, on_close = on_close,
    })
    if l == nil then
        error(err, 0)
    end
    S.listener = l
    log.info("live console on %s%s", l:address(), conf.consolePassword and " (password)" or "")
end

function M.main_stop()
    if S.listener then
        S.listener:close()
        S.listener = nil
    end
    if S.sig then
        S.sig:stop()
        S.sig = nil
    end
    swap.stop()
end

return M
